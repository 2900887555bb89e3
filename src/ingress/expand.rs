//! Matrix expansion: each slice spec × sparsity × precision becomes one [`Slice`], in pack
//! order (spec, then sparsity, then precision).

pub(crate) use super::ids::{slice_id, slice_seed};
use super::pack::MlpSpec;
use super::pack::{OpSpec, PackFile, Precision, PrecisionPolicy};
use super::semantic::Checked;
use super::{GemmOp, LoadPlan, ModelTask, PruningPlan, Slice, SliceBackend, Sparsity};

/// The default worker count when the pack does not lock one.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The two linear layers of an MLP, run on the whole test split: `fc1` (features →
/// hidden) and `fc2` (hidden → classes).
pub(crate) fn mlp_ops(mlp: &MlpSpec) -> Vec<GemmOp> {
    let info = mlp.dataset.info();
    let (_, _, test) = info.split_sizes();
    let hidden = mlp.hidden as usize;
    vec![
        GemmOp {
            name: "fc1".into(),
            m: test,
            n: hidden,
            k: info.features,
        },
        GemmOp {
            name: "fc2".into(),
            m: test,
            n: info.classes,
            k: hidden,
        },
    ]
}

/// The worker threads a pack's slices run on: its `lock.threads`, else the machine's
/// available parallelism. Every slice of the pack gets this count, so it also stands for
/// a pack whose slices all went to other shards.
pub fn pack_threads(pack: &PackFile) -> usize {
    pack.lock
        .threads
        .map_or_else(default_threads, |t| t.max(1) as usize)
}

/// Expand a checked pack into its slices.
pub(crate) fn expand(pack: &PackFile, checked: &Checked) -> Vec<Slice> {
    let threads = pack_threads(pack);
    let mut slices = Vec::new();
    for (i, spec) in pack.slices.iter().enumerate() {
        let model = spec
            .workload
            .as_ref()
            .and_then(|w| w.mlp.as_ref())
            .map(|mlp| ModelTask {
                seed: slice_seed(pack.seed, &format!("{}/model", spec.id)),
                mlp: mlp.clone(),
                pruning: PruningPlan::from_spec(spec.pruning.as_ref()),
                precision: None,
            });
        let mut ops: Vec<GemmOp> = spec
            .workload
            .iter()
            .flat_map(|w| &w.ops)
            .map(|op| {
                let OpSpec::Gemm(g) = op;
                GemmOp {
                    name: g.name.clone(),
                    m: usize::try_from(g.m).unwrap_or(usize::MAX),
                    n: usize::try_from(g.n).unwrap_or(usize::MAX),
                    k: usize::try_from(g.k).unwrap_or(usize::MAX),
                }
            })
            .collect();
        let mut weights = super::WeightDistribution::Uniform;
        if let Some(named) = spec.workload.as_ref().and_then(|w| w.model.as_ref()) {
            ops = named.ops();
            weights = super::WeightDistribution::from_spec(named.weights.as_ref());
        }
        if let Some(task) = &model {
            ops = mlp_ops(&task.mlp);
        }
        let checkpoint = checked.checkpoints.get(i).cloned().flatten();
        if let Some(w) = &checkpoint {
            ops = w.ops();
        }
        let mut guardrails = checked.pack_guardrails.clone();
        guardrails.extend(checked.slice_guardrails.get(i).into_iter().flatten().cloned());
        let resolved = checked.backends.get(i).cloned().flatten();
        // One cell per load matrix entry (issue 24), else one without load.
        let loads: Vec<Option<LoadPlan>> = match checked.loads.get(i) {
            Some(plans) if !plans.is_empty() => plans.iter().copied().map(Some).collect(),
            _ => vec![None],
        };
        let suffix = |load: &Option<LoadPlan>| load.as_ref().map(LoadPlan::id_suffix).unwrap_or_default();
        if !spec.backend.runs_workload() {
            // Someone else's benchmark: one slice (per load cell), named by its spec id.
            for load in &loads {
                let id = format!("{}{}", spec.id, suffix(load));
                slices.push(Slice {
                    pack: pack.name.clone(),
                    seed: slice_seed(pack.seed, &id),
                    id,
                    ops: ops.clone(),
                    sparsity: Sparsity::Dense,
                    precision: Precision::Fp32,
                    // Semantic checks refuse a command or import slice without its block.
                    backend: resolved.clone().unwrap_or_else(|| {
                        unreachable!("checked at ingress: `{}` has its backend block", spec.id)
                    }),
                    guardrails: guardrails.clone(),
                    not_applicable: vec![],
                    samples: pack.samples.clone(),
                    threads,
                    checkpoint: None,
                    load: *load,
                });
            }
            continue;
        }
        // A model slice with precision policies expands over its policies (evaluated on the
        // fp32 model) instead of over `precision`.
        let variants: Vec<(Precision, Option<&PrecisionPolicy>)> = if spec.precision_policies.is_empty() {
            spec.precision.iter().map(|&p| (p, None)).collect()
        } else {
            spec.precision_policies
                .iter()
                .map(|policy| (Precision::Fp32, Some(policy)))
                .collect()
        };
        let cells = checked
            .sparsities
            .get(i)
            .into_iter()
            .flatten()
            .flat_map(|sp| variants.iter().map(move |v| (sp, v)))
            .flat_map(|c| loads.iter().map(move |l| (c, l)));
        for ((sparsity, &(precision, policy)), load) in cells {
            {
                let id = match policy {
                    Some(policy) => format!("{}-{}-{}", spec.id, sparsity.tag(), policy.name),
                    None => slice_id(&spec.id, sparsity, precision),
                } + &suffix(load);
                let model = model.clone().map(|task| ModelTask {
                    precision: policy.cloned(),
                    ..task
                });
                let load = *load;
                // Issue 24: a guardrail that means nothing on this cell (a speedup on the
                // dense cell) is left off it with a note, instead of failing by construction.
                let (guardrails, not_applicable) =
                    super::applicability::split(&pack.name, &id, *sparsity, true, guardrails.clone());
                slices.push(Slice {
                    pack: pack.name.clone(),
                    seed: slice_seed(pack.seed, &id),
                    id,
                    ops: ops.clone(),
                    sparsity: *sparsity,
                    precision,
                    // Resolved once per spec (the simulator's preset), else the CPU's settings
                    // for this cell.
                    backend: match (resolved.clone(), load, model) {
                        (Some(backend), _, _) => backend,
                        (None, Some(_), _) => SliceBackend::Serving { weights },
                        (None, None, Some(task)) => SliceBackend::Model(Box::new(task)),
                        (None, None, None) => SliceBackend::Kernels { weights },
                    },
                    guardrails,
                    not_applicable,
                    samples: pack.samples.clone(),
                    threads,
                    checkpoint: checkpoint.clone(),
                    load,
                });
            }
        }
    }
    slices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_7_precision_policies_parse_and_expand_one_slice_per_policy() {
        let text = "
schema_version: 1
name: p
owners: [{name: A, email: a@example.com, role: owner}]
rollback: {trigger: t}
guardrails: [{metric: accuracy, at_least: 0.5}]
slices:
  - id: m
    workload: {mlp: {dataset: digits, hidden: 16}}
    sparsity: [dense, \"2:4\"]
    precision_policies:
      - {name: mixed, default: int8, keep: {fc2: fp32}}
      - {name: all-int8, default: int8}
";
        let loaded = crate::ingress::parse_pack(std::path::Path::new("p.yaml"), text.into()).unwrap();
        let ids: Vec<&str> = loaded.slices.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "m-dense-mixed",
                "m-dense-all-int8",
                "m-2of4-mixed",
                "m-2of4-all-int8"
            ]
        );
        let policy = |i: usize| {
            let task = loaded.slices[i].backend.model().expect("a model slice");
            task.precision.clone().expect("a precision policy")
        };
        let mixed = policy(0);
        assert_eq!(mixed.precision_of("fc1"), Precision::Int8);
        assert_eq!(mixed.precision_of("fc2"), Precision::Fp32);
        assert_eq!(mixed.describe(), "int8, fc2 fp32");
        let all = policy(1);
        assert_eq!(all.precision_of("fc2"), Precision::Int8);
        // Every policy evaluates the same trained model: one model seed per spec.
        let seeds: Vec<u64> = loaded
            .slices
            .iter()
            .map(|s| s.backend.model().unwrap().seed)
            .collect();
        assert!(seeds.iter().all(|&s| s == seeds[0]));
        assert!(loaded.slices.iter().all(|s| s.precision == Precision::Fp32));
    }

    // Issue 24: a pack-level speedup bound failed on the dense cell by construction.
    #[test]
    fn a_speedup_bound_is_left_off_the_dense_cell_with_a_located_note() {
        let text = "schema_version: 1
name: p
owners: [{name: A, email: a@example.com, role: owner}]
rollback: {trigger: t}
guardrails: [{metric: effective_speedup, at_least: 1.1}, {metric: latency, at_most: 1}]
slices:
  - {id: q, workload: {ops: [{gemm: {name: g, m: 8, n: 8, k: 8}}]}, sparsity: [dense, \"2:4\"]}
";
        let loaded = crate::ingress::parse_pack(std::path::Path::new("p.yaml"), text.into()).unwrap();
        let (dense, sparse) = (&loaded.slices[0], &loaded.slices[1]);
        assert_eq!(dense.id, "q-dense-fp32");
        let metrics = |s: &Slice| s.guardrails.iter().map(|g| g.metric.name()).collect::<Vec<_>>();
        assert_eq!(metrics(dense), ["latency"]);
        assert_eq!(metrics(sparse), ["effective_speedup", "latency"]);
        assert!(sparse.not_applicable.is_empty());
        let note = &dense.not_applicable[0];
        assert_eq!(note.metric.name(), "effective_speedup");
        assert_eq!(note.location.as_ref().unwrap().to_string(), "p.yaml:5:15");
        assert!(
            note.reason.contains("speedup is 1 by construction"),
            "{}",
            note.reason
        );
    }

    #[test]
    fn ids() {
        assert_eq!(
            slice_id("bert-qkv", &Sparsity::NOfM { n: 2, m: 4 }, Precision::Fp32),
            "bert-qkv-2of4-fp32"
        );
        assert_eq!(slice_id("x", &Sparsity::Dense, Precision::Fp16), "x-dense-fp16");
        assert_eq!(
            slice_id(
                "x",
                &Sparsity::Block {
                    rows: 16,
                    cols: 16,
                    density: 0.25
                },
                Precision::Fp32
            ),
            "x-b16x16-0.25-fp32"
        );
    }

    #[test]
    fn seeds_are_stable_and_distinct() {
        // Pinned: a change here silently changes every baseline's input data.
        assert_eq!(
            slice_seed(0x5eed, "bert-qkv-2of4-fp32"),
            slice_seed(0x5eed, "bert-qkv-2of4-fp32")
        );
        assert_ne!(
            slice_seed(0x5eed, "a-dense-fp32"),
            slice_seed(0x5eed, "b-dense-fp32")
        );
        assert_ne!(slice_seed(1, "a-dense-fp32"), slice_seed(2, "a-dense-fp32"));
        assert_eq!(slice_seed(0x5eed, "bert-qkv-2of4-fp32"), PINNED_SEED);
    }

    // Computed independently: python3 hashlib.sha256(b"sparsegate/slice-seed/v1\0" + pack("<Q", 0x5eed) + id).
    const PINNED_SEED: u64 = 0x803d_4445_215a_08a8;
}
