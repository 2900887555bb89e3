//! Semantic checks: what the JSON Schema cannot say. Every check is located at the offending
//! value and carries a hint; all problems are collected, not just the first.

use super::ids::slice_id;
use super::pack::{Backend, Guardrail, OpSpec, PACK_SCHEMA_VERSION, PackFile, Precision};
use super::span::{Locator, escape_segment};
use super::{GuardrailSpec, MEMORY_BUDGET_BYTES, PackDiagnostic, Rule, SliceBackend, Sparsity};
use crate::domain::metric::Metric;
use std::collections::{HashMap, HashSet};

/// Why a `regress_at_most` value is not a percentage the gate can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PercentageError {
    /// Not a number followed by `%` (the text as written).
    #[error("expected a percentage such as `5%`, found \"{0}\"")]
    NotAPercentage(String),
    /// A percentage outside (0%, 100%) (the trimmed text).
    #[error("{0} is outside the range (0%, 100%)")]
    OutOfRange(String),
}

/// Parse a percentage string such as `5%` or `2.5%` in (0, 100) into a fraction (`0.05`).
pub(crate) fn parse_percentage(s: &str) -> Result<f64, PercentageError> {
    let t = s.trim();
    let not_a_percentage = || PercentageError::NotAPercentage(s.to_owned());
    let number = t.strip_suffix('%').ok_or_else(not_a_percentage)?;
    let v: f64 = number.trim().parse().map_err(|_| not_a_percentage())?;
    if !(v.is_finite() && v > 0.0 && v < 100.0) {
        return Err(PercentageError::OutOfRange(t.to_owned()));
    }
    Ok(v / 100.0)
}

/// What the semantic pass parsed, ready for expansion.
#[derive(Debug)]
pub(crate) struct Checked {
    /// Parsed sparsities per slice spec, in pack order.
    pub sparsities: Vec<Vec<Sparsity>>,
    /// The pack-level guardrails.
    pub pack_guardrails: Vec<GuardrailSpec>,
    /// Each slice spec's own guardrails.
    pub slice_guardrails: Vec<Vec<GuardrailSpec>>,
    /// Each slice spec's backend settings where its backend resolves them once per spec
    /// (see `pack::backends::Rules::resolve`).
    pub backends: Vec<Option<super::SliceBackend>>,
    /// Each slice spec's checkpoint, opened and its layers selected (`workload.checkpoint`).
    pub checkpoints: Vec<Option<std::sync::Arc<super::checkpoint::CheckpointWorkload>>>,
    /// Each slice spec's serving loops (`load`), one per load matrix cell; empty without.
    pub loads: Vec<Vec<super::LoadPlan>>,
    /// `rollback.when`, parsed.
    pub trigger: Option<super::TriggerExpr>,
    /// Problems that do not stop the pack (a guardrail the prior says is unlikely to
    /// decide, a slice that gates nothing), located like errors.
    pub warnings: Vec<PackDiagnostic>,
}

/// Check a slice's `load` block (one entry, or a list that expands into one slice per
/// arrival pattern: issue 24): a backend that can serve requests, a sane rate and queue, a
/// burst size only for bursts, each pattern at most once, `drop_rate` only under load.
/// Whether its requests can bound the percentiles its guardrails judge is checked with
/// every other sample budget (`decidable::check_budgets`). Empty: no load.
fn check_load(
    pack: &PackFile,
    spec: &super::pack::SliceSpec,
    base: &str,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Vec<super::LoadPlan> {
    // Every guardrail that applies to the slice, with its metric's pointer.
    let guards: Vec<(String, &Guardrail)> = [
        (&pack.guardrails, "/guardrails".to_owned()),
        (&spec.guardrails, format!("{base}/guardrails")),
    ]
    .into_iter()
    .flat_map(|(list, prefix)| {
        list.iter()
            .enumerate()
            .map(move |(j, g)| (format!("{prefix}/{j}/metric"), g))
    })
    .collect();
    let Some(loads) = spec.load.as_ref() else {
        for (pointer, g) in &guards {
            let percentile = ["latency_p50", "latency_p95", "latency_p99"].contains(&g.metric.as_str());
            if spec.backend == Backend::Sim && percentile {
                diags.push(loc.at_value(
                    pointer,
                    format!(
                        "the simulator gives slice `{}` one exact latency per iteration, so `{}` has no \
                         distribution to take a percentile of",
                        spec.id, g.metric
                    ),
                    Some(
                        "judge `latency`, or serve the slice under `load: {arrivals: bursts, rate_hz: 200, \
                         queue: 8}` to get request latencies with queueing"
                            .into(),
                    ),
                ));
            }
            if g.metric == Metric::DropRate.name() {
                diags.push(loc.at_value(
                    pointer,
                    format!(
                        "`drop_rate` is measured under `load`, and slice `{}` has none",
                        spec.id
                    ),
                    Some(
                        "add `load: {arrivals: bursts, rate_hz: 200, queue: 8}` to the slice, or put the \
                         guardrail on the load slices only"
                            .into(),
                    ),
                ));
            }
        }
        return Vec::new();
    };
    let (entries, matrix) = loads.entries();
    let before = diags.len();
    if spec.backend == Backend::Import {
        diags.push(
            loc.at_key(
                &format!("{base}/load"),
                format!(
                    "`load` drives a system under test, but slice `{}` imports results another tool \
                 already measured",
                    spec.id
                ),
                Some(
                    "serve the benchmark with `backend: command` and `load`, or import latencies it \
                 measured under load itself (docs/load.md)"
                        .into(),
                ),
            ),
        );
    }
    if let Some(c) = spec.command.as_ref().filter(|_| spec.backend == Backend::Command) {
        for (key, present) in [
            ("comparator", c.comparator.is_some()),
            ("baseline", c.baseline.is_some()),
        ] {
            if present {
                diags.push(loc.at_key(
                    &format!("{base}/command/{key}"),
                    format!(
                        "slice `{}` serves its command under `load`, one invocation per request; a `{key}` \
                         is not run there",
                        spec.id
                    ),
                    Some(format!(
                        "remove `{key}`, or compare in a second slice without `load` (docs/load.md)"
                    )),
                ));
            }
        }
    }
    let mut seen: HashMap<&'static str, usize> = HashMap::new();
    let mut plans = Vec::with_capacity(entries.len());
    for (e, l) in entries.iter().enumerate() {
        let ptr = if matrix {
            format!("{base}/load/{e}")
        } else {
            format!("{base}/load")
        };
        if let Some(plan) = check_one_load(spec, l, &ptr, &guards, loc, diags) {
            let plan = super::LoadPlan { matrix, ..plan };
            if let Some(first) = seen.insert(plan.arrivals.pattern(), e) {
                diags.push(
                    loc.at_value(
                        &format!("{ptr}/arrivals"),
                        format!(
                            "`arrivals: {}` is listed twice in slice `{}`'s load matrix (also load/{first})",
                            plan.arrivals.pattern(),
                            spec.id
                        ),
                        Some(
                            "a load matrix holds each pattern once (its cells are named by it); use \
                         another slice for a second rate or burst size"
                                .into(),
                        ),
                    ),
                );
            }
            plans.push(plan);
        }
    }
    if diags.len() > before {
        return Vec::new();
    }
    plans
}

/// One entry of a `load` block at `ptr`; `None` where it has errors (pushed).
fn check_one_load(
    spec: &super::pack::SliceSpec,
    l: &super::pack::LoadSpec,
    ptr: &str,
    guards: &[(String, &Guardrail)],
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Option<super::LoadPlan> {
    use super::pack::ArrivalKind;
    use crate::sim::queue::Arrivals;
    let before = diags.len();
    if !(l.rate_hz.is_finite() && l.rate_hz > 0.0) {
        diags.push(loc.at_value(
            &format!("{ptr}/rate_hz"),
            format!(
                "rate_hz {} is not a positive number of requests per second",
                l.rate_hz
            ),
            Some("e.g. `rate_hz: 200`".into()),
        ));
    }
    if l.queue == 0 {
        diags.push(loc.at_value(
            &format!("{ptr}/queue"),
            "a queue of 0 drops every request",
            Some("use `queue: 1` or more".into()),
        ));
    }
    match (l.arrivals, l.burst) {
        (ArrivalKind::Bursts, Some(0)) => diags.push(loc.at_value(
            &format!("{ptr}/burst"),
            "a burst of 0 requests",
            Some("use `burst: 2` or more".into()),
        )),
        (ArrivalKind::Steady | ArrivalKind::Poisson, Some(_)) => diags.push(loc.at_key(
            &format!("{ptr}/burst"),
            "`burst` applies to `arrivals: bursts`",
            Some("set `arrivals: bursts` or remove `burst`".into()),
        )),
        _ => {}
    }
    let requests = super::decidable::load_requests(l);
    if requests == 0 {
        diags.push(loc.at_value(&format!("{ptr}/requests"), "0 requests measure nothing", None));
    }
    for (pointer, g) in guards {
        // Whether the load's requests can bound a p95/p99 is checked with every other
        // sample budget, by one helper (`decidable::check_budgets`, issue 24).
        if matches!(g.metric.as_str(), "effective_speedup" | "throughput_gflops") {
            diags.push(loc.at_value(
                pointer,
                format!("slice `{}` is served under `load`, which measures request latency, not `{}`", spec.id, g.metric),
                Some("judge `latency`, `latency_p50`, `latency_p95`, `latency_p99` or `drop_rate` under load; measure speedups in a slice without `load`".into()),
            ));
        }
    }
    if diags.len() > before {
        return None;
    }
    let arrivals = match l.arrivals {
        ArrivalKind::Steady => Arrivals::Steady {
            rate_per_s: l.rate_hz,
        },
        ArrivalKind::Poisson => Arrivals::Poisson {
            rate_per_s: l.rate_hz,
        },
        ArrivalKind::Bursts => Arrivals::Bursts {
            rate_per_s: l.rate_hz,
            size: l.burst.unwrap_or(8),
        },
    };
    Some(super::LoadPlan {
        arrivals,
        queue: l.queue,
        requests,
        matrix: false,
    })
}

/// Run every semantic check; `Err` carries all problems found.
pub(crate) fn check(pack: &PackFile, loc: &Locator) -> Result<Checked, Vec<PackDiagnostic>> {
    let mut diags = Vec::new();

    if pack.schema_version != PACK_SCHEMA_VERSION {
        diags.push(loc.at_value(
            "/schema_version",
            format!("unsupported schema_version {}", pack.schema_version),
            Some(format!(
                "this build of sparsegate reads pack format {PACK_SCHEMA_VERSION}"
            )),
        ));
    }

    if pack.owners.is_empty() {
        diags.push(loc.at_key(
            "/owners",
            "a pack needs at least one owner",
            Some("add `owners: [{name: ..., email: ..., role: owner}]`".into()),
        ));
    }
    for (i, owner) in pack.owners.iter().enumerate() {
        if owner.role.trim().is_empty() {
            diags.push(loc.at_value(
                &format!("/owners/{i}/role"),
                format!("owner `{}` has an empty role", owner.name),
                Some("give a role in sign-off, e.g. `owner`, `release-manager` or `reviewer`".into()),
            ));
        }
    }
    if pack.rollback.trigger.trim().is_empty() {
        diags.push(loc.at_value(
            "/rollback/trigger",
            "the rollback trigger is empty",
            Some("say what triggers a rollback, e.g. \"2:4 speedup below 1.1x on any layer\"".into()),
        ));
    }
    if pack.samples.min > pack.samples.max {
        diags.push(loc.at_value(
            "/samples/max",
            format!(
                "samples.max ({}) is less than samples.min ({})",
                pack.samples.max, pack.samples.min
            ),
            Some("raise `max` or lower `min` so that min ≤ max".into()),
        ));
    }
    if pack.samples.sequential && pack.samples.max_runs.is_none_or(|m| m <= pack.samples.runs) {
        diags.push(loc.at_value(
            "/samples/sequential",
            format!(
                "sequential sampling needs samples.max_runs above samples.runs ({})",
                pack.samples.runs
            ),
            Some(
                "set `max_runs`: the most runs the slice may take while its guardrails are undecided".into(),
            ),
        ));
    }
    if let Some(max_runs) = pack.samples.max_runs.filter(|&m| m < pack.samples.runs) {
        diags.push(loc.at_value(
            "/samples/max_runs",
            format!(
                "samples.max_runs ({max_runs}) is less than samples.runs ({})",
                pack.samples.runs
            ),
            Some("`runs` is the minimum the gate runs and `max_runs` the most it may plan; make runs ≤ max_runs".into()),
        ));
    }

    let backends: Vec<Backend> = {
        let mut b: Vec<Backend> = pack.slices.iter().map(|s| s.backend).collect();
        b.sort();
        b.dedup();
        b
    };
    let pack_guardrails = guardrails(&pack.guardrails, "/guardrails", &backends, loc, &mut diags);

    let mut sparsities = Vec::with_capacity(pack.slices.len());
    let mut resolved_backends = Vec::with_capacity(pack.slices.len());
    let mut checkpoints = Vec::with_capacity(pack.slices.len());
    let mut loads = Vec::with_capacity(pack.slices.len());
    let mut slice_guardrails = Vec::with_capacity(pack.slices.len());
    // Expanded id → pointer of the spec id that first produced it.
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (i, spec) in pack.slices.iter().enumerate() {
        let base = format!("/slices/{i}");

        let mut parsed: Vec<Sparsity> = Vec::new();
        let mut seen_tags: HashSet<String> = HashSet::new();
        for (j, s) in spec.sparsity.iter().enumerate() {
            let pointer = format!("{base}/sparsity/{j}");
            match s.resolve() {
                Ok(sp) => {
                    if seen_tags.insert(sp.tag()) {
                        parsed.push(sp);
                    } else {
                        diags.push(loc.at_value(
                            &pointer,
                            format!("sparsity `{sp}` is listed twice in slice `{}`", spec.id),
                            Some("remove the duplicate entry".into()),
                        ));
                    }
                }
                Err(e) => diags.push(loc.at_value(
                    &format!("{pointer}{}", s.value_pointer()),
                    e.message,
                    Some(e.hint),
                )),
            }
        }

        // The backend's own block, resolved; another backend's block is refused.
        let resolved = super::pack::check_backend(spec, &base, loc, &mut diags);
        let preset = resolved.as_ref().and_then(SliceBackend::preset);

        // Which blocks a slice needs follows from its backend; a block that belongs to
        // another backend is refused rather than silently ignored.
        let runs_workload = spec.backend.runs_workload();
        if runs_workload && spec.workload.is_none() {
            diags.push(loc.at_key(
                &base,
                format!(
                    "slice `{}` runs on {} but has no `workload`",
                    spec.id,
                    spec.backend.as_str()
                ),
                Some("add `workload: {ops: [{gemm: {name: qkv, m: 128, n: 2304, k: 768}}]}`".into()),
            ));
        }
        if runs_workload && spec.sparsity.is_empty() {
            diags.push(loc.at_key(
                &base,
                format!("slice `{}` lists no `sparsity`", spec.id),
                Some("add e.g. `sparsity: [\"2:4\", dense]`".into()),
            ));
        }
        if !runs_workload {
            for (key, present) in [
                ("workload", spec.workload.is_some()),
                ("sparsity", !spec.sparsity.is_empty()),
                ("pruning", spec.pruning.is_some()),
                ("precision_policies", !spec.precision_policies.is_empty()),
            ] {
                if present {
                    diags.push(loc.at_key(
                        &format!("{base}/{key}"),
                        format!(
                            "`{key}` applies to the built-in backends (cpu, sim), but slice `{}` runs on {}",
                            spec.id,
                            spec.backend.as_str()
                        ),
                        Some(format!(
                            "remove `{key}`: the {} backend measures what it is given",
                            spec.backend.as_str()
                        )),
                    ));
                }
            }
        }
        let has_comparator = (spec.backend.rules().has_comparator)(spec);
        if !has_comparator {
            let all = pack
                .guardrails
                .iter()
                .map(|g| (g, "/guardrails".to_owned()))
                .enumerate();
            let own = spec
                .guardrails
                .iter()
                .map(|g| (g, format!("{base}/guardrails")))
                .enumerate();
            for (j, (g, list)) in all.chain(own) {
                if g.metric == Metric::EffectiveSpeedup.name() {
                    diags.push(loc.at_value(
                        &format!("{list}/{j}/metric"),
                        format!(
                            "`effective_speedup` needs a comparator, and slice `{}` has none",
                            spec.id
                        ),
                        Some(format!(
                            "add `{}` to the slice's `{}` block",
                            "comparator",
                            spec.backend.as_str()
                        )),
                    ));
                }
            }
        }
        loads.push(check_load(pack, spec, &base, loc, &mut diags));

        let mut seen_precisions = HashSet::new();
        for (j, &p) in spec.precision.iter().enumerate() {
            let pointer = format!("{base}/precision/{j}");
            if !seen_precisions.insert(p) {
                diags.push(loc.at_value(
                    &pointer,
                    format!(
                        "precision `{}` is listed twice in slice `{}`",
                        p.as_str(),
                        spec.id
                    ),
                    Some("remove the duplicate entry".into()),
                ));
            } else if !spec.backend.supports_precision(p) {
                diags.push(loc.at_value(
                    &pointer,
                    format!(
                        "precision `{}` is not supported by the `{}` backend",
                        p.as_str(),
                        spec.backend.as_str()
                    ),
                    Some("choose one of fp32, fp16, bf16, int8".into()),
                ));
            } else if let Some(preset) = &preset
                && preset.peak_macs_per_cycle(p).is_none()
            {
                diags.push(loc.at_value(
                    &pointer,
                    format!("preset `{}` has no {} datapath", preset.name, p.as_str()),
                    Some("choose a precision the preset supports (see its macs_per_cycle_per_unit)".into()),
                ));
            }
        }

        let widest = spec
            .precision
            .iter()
            .map(|p| p.bytes())
            .max()
            .unwrap_or(Precision::Fp32.bytes());
        let mut op_names: HashSet<&str> = HashSet::new();
        let mut held = SliceMemory::default();
        let mut op_over_budget = false;
        for (j, op) in spec.workload.iter().flat_map(|w| &w.ops).enumerate() {
            let OpSpec::Gemm(g) = op;
            let pointer = format!("{base}/workload/ops/{j}/gemm");
            held.add(&g.name, operand_bytes(g.m, g.n, g.k, widest));
            if !op_names.insert(g.name.as_str()) {
                diags.push(loc.at_value(
                    &format!("{pointer}/name"),
                    format!("op name `{}` is used twice in slice `{}`", g.name, spec.id),
                    Some("give every op of a workload its own name".into()),
                ));
            }
            let bytes = operand_bytes(g.m, g.n, g.k, widest);
            // The simulator allocates nothing per op, so only real backends have a budget.
            if spec.backend != Backend::Sim && bytes > u128::from(MEMORY_BUDGET_BYTES) {
                op_over_budget = true;
                diags.push(
                    loc.at_key(
                        &pointer,
                        format!(
                            "op `{}` ({}x{}x{}) needs {:.1} GiB of operand memory, over the {} GiB budget",
                            g.name,
                            g.m,
                            g.n,
                            g.k,
                            bytes as f64 / GIB,
                            MEMORY_BUDGET_BYTES as f64 / GIB
                        ),
                        Some(
                            "X, W and Y plus the dense comparator's copy must fit; shrink m, n or k \
                         (e.g. measure one layer at a realistic token count)"
                                .into(),
                        ),
                    ),
                );
            }
        }

        if spec.backend != Backend::Sim && !op_over_budget {
            held.check(spec, &format!("{base}/workload/ops"), loc, &mut diags);
        }
        if let Some(named) = spec.workload.as_ref().and_then(|w| w.model.as_ref()) {
            named_model_checks(spec, named, &base, widest, loc, &mut diags);
        }
        model_checks(spec, &base, &parsed, &pack.guardrails, loc, &mut diags);
        super::applicability::refuse_on_dense_only(spec, &base, &parsed, loc, &mut diags);

        slice_guardrails.push(guardrails(
            &spec.guardrails,
            &format!("{base}/guardrails"),
            &[spec.backend],
            loc,
            &mut diags,
        ));

        let cells: Vec<String> = if runs_workload {
            parsed
                .iter()
                .flat_map(|sp| spec.precision.iter().map(move |&p| slice_id(&spec.id, sp, p)))
                .collect()
        } else {
            vec![spec.id.clone()]
        };
        // A load matrix names each cell by its pattern too (issue 24).
        let suffixes: Vec<String> = match loads.last() {
            Some(plans) if !plans.is_empty() => plans.iter().map(super::LoadPlan::id_suffix).collect(),
            _ => vec![String::new()],
        };
        let expanded: Vec<String> = cells
            .iter()
            .flat_map(|c| suffixes.iter().map(move |s| format!("{c}{s}")))
            .collect();
        {
            for id in expanded {
                match ids.get(&id) {
                    Some(&first) => diags.push(loc.at_value(
                        &format!("{base}/id"),
                        format!("slice id `{id}` is produced twice (also by slices[{first}])"),
                        Some("give every slice a distinct `id`".into()),
                    )),
                    None => {
                        ids.insert(id, i);
                    }
                }
            }
        }
        sparsities.push(parsed);
        resolved_backends.push(resolved);
        let checkpoint = checkpoint_checks(spec, &base, widest, loc, &mut diags);
        if let Some(w) = &checkpoint {
            claim_checks(spec, &base, w, loc, &mut diags);
        }
        checkpoints.push(checkpoint);
        artifact_guardrail_checks(spec, &base, &pack.guardrails, loc, &mut diags);
    }

    routing_checks(pack, loc, &mut diags);
    lock_field_checks(pack, loc, &mut diags);
    requirement_checks(pack, loc, &mut diags);
    let trigger = trigger_checks(pack, loc, &mut diags);

    let mut warnings = Vec::new();
    super::decidable::check_budgets(pack, loc, &mut diags, &mut warnings);
    if diags.is_empty() {
        super::decidable::nothing_to_gate(pack, loc, &mut diags, &mut warnings);
    }
    if diags.is_empty() {
        Ok(Checked {
            warnings,
            sparsities,
            pack_guardrails,
            slice_guardrails,
            backends: resolved_backends,
            checkpoints,
            loads,
            trigger,
        })
    } else {
        Err(diags)
    }
}

/// Each `lock.fields` entry names one source, and no name twice.
fn lock_field_checks(pack: &PackFile, loc: &Locator, diags: &mut Vec<PackDiagnostic>) {
    let mut seen = HashSet::new();
    for (i, f) in pack.lock.fields.iter().enumerate() {
        let pointer = format!("/lock/fields/{i}");
        if f.env.is_some() == f.command.is_some() {
            diags.push(loc.at_value(
                &pointer,
                format!("lock field `{}` needs exactly one of `env` or `command`", f.name),
                Some("e.g. `{name: cuda, command: [nvcc, --version]}` or `{name: torch, env: TORCH_VERSION}`".into()),
            ));
        }
        if f.command
            .as_ref()
            .is_some_and(|argv| argv.first().is_none_or(|p| p.is_empty()))
        {
            diags.push(loc.at_value(
                &format!("{pointer}/command"),
                format!("lock field `{}` has no program to run", f.name),
                Some("give the program first, then its arguments: `[nvcc, --version]`".into()),
            ));
        }
        if !seen.insert(f.name.as_str()) {
            diags.push(loc.at_value(
                &format!("{pointer}/name"),
                format!("lock field `{}` is defined twice", f.name),
                Some("give every lock field a distinct `name`".into()),
            ));
        }
    }
}

/// A pack that names what the machine must have (issue 25) is refused here, before anything
/// runs, where the machine lacks it: a GPU pack on a CPU runner says so instead of failing
/// slice by slice.
fn requirement_checks(pack: &PackFile, loc: &Locator, diags: &mut Vec<PackDiagnostic>) {
    for (i, &req) in pack.requires.iter().enumerate() {
        if !super::environment::requirement_met(req) {
            diags.push(loc.at_value(
                &format!("/requires/{i}"),
                format!(
                    "this pack requires `{}`, and this machine has none (no /proc/driver/nvidia/gpus entry, no /dev/nvidia0)",
                    req.as_str()
                ),
                Some("run it on a machine with an NVIDIA GPU and its driver; CPU-only runners should skip this pack".into()),
            ));
        }
    }
}

/// Every `routing:` role is one some owner holds (issue 24), so a failure is never routed
/// to nobody.
fn routing_checks(pack: &PackFile, loc: &Locator, diags: &mut Vec<PackDiagnostic>) {
    let held: Vec<&str> = pack.owners.iter().map(|o| o.role.as_str()).collect();
    for concern in crate::domain::Concern::ALL {
        let Some(role) = pack.routing.role_for(concern) else {
            continue;
        };
        if !held.contains(&role) {
            let mut roles = held.clone();
            roles.sort_unstable();
            roles.dedup();
            diags.push(loc.at_value(
                &format!("/routing/{concern}"),
                format!("no owner holds role `{role}`, so {concern} failures would reach nobody"),
                Some(format!(
                    "route to a role of the pack's owners ({}), or add an owner with role `{role}`",
                    quote_all(&roles)
                )),
            ));
        }
    }
}

/// Guardrail ids are unique in the pack, and `rollback.when` parses and names only them.
fn trigger_checks(
    pack: &PackFile,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Option<super::TriggerExpr> {
    let mut ids: HashMap<&str, String> = HashMap::new();
    let declared = pack
        .guardrails
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("/guardrails/{i}"), g))
        .chain(pack.slices.iter().enumerate().flat_map(|(s, spec)| {
            spec.guardrails
                .iter()
                .enumerate()
                .map(move |(i, g)| (format!("/slices/{s}/guardrails/{i}"), g))
        }));
    for (pointer, g) in declared {
        let Some(id) = g.id.as_deref() else { continue };
        match ids.get(id) {
            Some(first) => diags.push(loc.at_value(
                &format!("{pointer}/id"),
                format!(
                    "guardrail id `{id}` is used twice (first at {})",
                    loc.index
                        .value_pos(&format!("{first}/id"))
                        .map_or_else(|| first.clone(), |p| format!("line {}", p.line))
                ),
                Some("give every guardrail a distinct `id`; a pack-level guardrail already applies to every slice".into()),
            )),
            None => {
                ids.insert(id, pointer);
            }
        }
    }
    let text = pack.rollback.when.as_deref()?;
    let expr = match super::TriggerExpr::parse(text) {
        Ok(expr) => expr,
        Err(e) => {
            diags.push(loc.at_value(
                "/rollback/when",
                format!("rollback.when does not parse: {} (at character {})", e.message, e.at),
                Some(
                    "write guardrail ids joined by `and`, `or`, `not` and parentheses, e.g. `when: block-speedup or no-fallback`"
                        .into(),
                ),
            ));
            return None;
        }
    };
    let mut known: Vec<&str> = ids.keys().copied().collect();
    known.sort_unstable();
    for id in expr.ids() {
        if !ids.contains_key(id) {
            diags.push(loc.at_value(
                "/rollback/when",
                format!("rollback.when names `{id}`, which is no guardrail's id"),
                Some(if known.is_empty() {
                    "give the guardrails it means an `id:` (e.g. `{id: no-fallback, metric: fallback_rate, at_most: 0}`)".into()
                } else {
                    format!("the pack's guardrail ids are {}", quote_all(&known))
                }),
            ));
        }
    }
    Some(expr)
}

/// Guardrails on what only a checkpoint has (`pattern_violations`, `sparse_coverage`) on
/// a built-in slice without one: refused, like quality guardrails on `ops` slices, instead of
/// failing later for a counter that cannot exist.
fn artifact_guardrail_checks(
    spec: &super::pack::SliceSpec,
    base: &str,
    pack_guardrails: &[Guardrail],
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) {
    let Some(w) = spec.workload.as_ref() else { return };
    if w.checkpoint.is_some() {
        return;
    }
    let of_artifact = |g: &&Guardrail| {
        g.metric
            .parse::<Metric>()
            .is_ok_and(|m| matches!(m, Metric::PatternViolations | Metric::SparseCoverage))
    };
    for (i, g) in spec.guardrails.iter().enumerate().filter(|(_, g)| of_artifact(g)) {
        diags.push(
            loc.at_value(
                &format!("{base}/guardrails/{i}/metric"),
                format!(
                    "`{}` needs a checkpoint workload, but slice `{}` has none",
                    g.metric, spec.id
                ),
                Some(
                    "the structure of shipped weights is measured on `workload: {checkpoint: {...}}` slices"
                        .into(),
                ),
            ),
        );
    }
    for (i, g) in pack_guardrails.iter().enumerate().filter(|(_, g)| of_artifact(g)) {
        diags.push(loc.at_value(
            &format!("/guardrails/{i}/metric"),
            format!(
                "pack-level `{}` applies to every slice, but slice `{}` has no checkpoint",
                g.metric, spec.id
            ),
            Some("move the guardrail into the checkpoint slices' own `guardrails`".into()),
        ));
    }
}

/// A slice testing a pattern its checkpoint's config contradicts (the config claims `2:4`,
/// the pack tests `4:8` or `unstructured`, or the config claims `unstructured` and the pack
/// tests `2:4`) is refused: one of the two is wrong about the artifact, and the gate cannot
/// tell which (issue 21). `dense` agrees with every claim: it times the weights as stored,
/// and the claim is still verified on them.
fn claim_checks(
    spec: &super::pack::SliceSpec,
    base: &str,
    w: &super::checkpoint::CheckpointWorkload,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) {
    use super::checkpoint::ClaimedStructure;
    let Some(claimed) = w
        .checkpoint
        .config
        .as_ref()
        .and_then(|c| c.sparsity.as_ref())
        .and_then(|s| s.structure.as_ref())
    else {
        return;
    };
    let agreeing = match claimed.structure {
        ClaimedStructure::NOfM { n, m } => format!("`sparsity: [\"{n}:{m}\"]`"),
        ClaimedStructure::Unstructured => "`sparsity: [{unstructured: {sparsity: P%}}]`".to_owned(),
        ClaimedStructure::Unspecified => return,
    };
    for (j, entry) in spec.sparsity.iter().enumerate() {
        let Ok(pattern) = entry.resolve() else { continue };
        if claimed.structure.admits(pattern) {
            continue;
        }
        diags.push(loc.at_value(
            &format!("{base}/sparsity/{j}{}", entry.value_pointer()),
            format!(
                "slice `{}` tests `{pattern}` on a checkpoint whose config claims `{}` for its targeted tensors ({}); weights holding the claim need not hold `{pattern}`",
                spec.id, claimed.structure, claimed.at
            ),
            Some(format!(
                "test what the config claims ({agreeing}), or `dense`; if the config is wrong, correct its `sparsity_structure`"
            )),
        ));
    }
}

/// Open a checkpoint workload (every header checked, every file digested) and select its
/// layers; each problem is located at the pack key that names the file.
fn checkpoint_checks(
    spec: &super::pack::SliceSpec,
    base: &str,
    widest: u64,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Option<std::sync::Arc<super::checkpoint::CheckpointWorkload>> {
    use super::checkpoint::{CheckpointError, OpenError};
    let c = spec.workload.as_ref()?.checkpoint.as_ref()?;
    let pointer = format!("{base}/workload/checkpoint");
    if !matches!(spec.backend, Backend::Cpu | Backend::Sim) {
        diags.push(loc.at_key(
            &pointer,
            format!(
                "checkpoint workloads run on the cpu or sim backend, but slice `{}` uses `{}`",
                spec.id,
                spec.backend.as_str()
            ),
            Some("set `backend: cpu` (its own weights timed) or `backend: sim` (its per-layer densities modelled)".into()),
        ));
        return None;
    }
    match (&c.weights, &c.graph) {
        (Some(_), Some(_)) => {
            diags.push(loc.at_key(
                &format!("{pointer}/graph"),
                format!("slice `{}` names both `weights` and `graph`", spec.id),
                Some("an ONNX graph carries its weights as initializers: give `weights` (safetensors) or `graph` (ONNX), not both".into()),
            ));
            return None;
        }
        (None, None) => {
            diags.push(loc.at_key(
                &pointer,
                format!(
                    "slice `{}`'s checkpoint names neither `weights` nor `graph`",
                    spec.id
                ),
                Some("add `weights: model.safetensors` or `graph: model.onnx` (relative to the pack)".into()),
            ));
            return None;
        }
        _ => {}
    }
    let dir = super::pack_dir(&loc.file);
    match super::checkpoint::open_workload(&dir, c) {
        Ok(w) => {
            if spec.backend == Backend::Sim
                && let Some(op) = w.ops().into_iter().find(over_sim_dims)
            {
                diags.push(sim_dims_diag(&op, &format!("{pointer}/tokens"), loc));
                return None;
            }
            // The simulator holds no operands: only the CPU's memory is budgeted.
            let mut held = SliceMemory::default();
            for op in w.ops().into_iter().filter(|_| spec.backend == Backend::Cpu) {
                if let Some(gib) = held.add_op(&op, widest) {
                    diags.push(loc.at_value(
                        &format!("{pointer}/tokens"),
                        format!(
                            "tensor `{}` at {} tokens needs {gib:.1} GiB of operand memory, over the {} GiB budget",
                            op.name,
                            op.m,
                            MEMORY_BUDGET_BYTES as f64 / GIB
                        ),
                        Some("lower `tokens`, or select fewer layers with `layers`".into()),
                    ));
                    return None;
                }
            }
            if held.check(spec, &format!("{pointer}/tokens"), loc, diags) {
                return None;
            }
            let mut w = w;
            if let Some(e) = &c.eval {
                w.eval = Some(eval_checks(
                    spec,
                    e,
                    &dir,
                    &mut w.checkpoint,
                    &pointer,
                    loc,
                    diags,
                )?);
            }
            Some(std::sync::Arc::new(w))
        }
        Err(e) => {
            let (key, hint) = match &e {
                OpenError::Select(_) => ("layers", "`layers` is a pattern over tensor names where `*` matches any run of characters, e.g. `model.layers.*.mlp.*`".to_owned()),
                OpenError::Checkpoint(inner) => {
                    let in_config = c.config.as_deref().is_some_and(|name| match inner {
                        CheckpointError::Json { file, .. } | CheckpointError::Config { file, .. } => {
                            file == name
                        }
                        CheckpointError::OutsidePack { name: n } => n == name,
                        CheckpointError::File(f) => f.to_string().contains(name),
                        _ => false,
                    });
                    let source = if c.graph.is_some() { "graph" } else { "weights" };
                    (if in_config { "config" } else { source }, inner.hint().to_owned())
                }
            };
            let key_pointer = format!("{pointer}/{key}");
            let at = if spec
                .workload
                .as_ref()
                .and_then(|w| w.checkpoint.as_ref())
                .is_some_and(|c| key != "layers" || c.layers.is_some())
            {
                loc.at_value(&key_pointer, e.to_string(), Some(hint))
            } else {
                loc.at_key(&pointer, e.to_string(), Some(hint))
            };
            diags.push(at);
            None
        }
    }
}

/// Open a checkpoint's `eval` block (dataset, head, reference), each problem located at
/// its key; the dataset's and reference's files join the checkpoint's, so their digests are
/// bound into the lock, the evidence and the memo like the weights'.
fn eval_checks(
    spec: &super::pack::SliceSpec,
    e: &super::pack::EvalSpec,
    dir: &std::path::Path,
    checkpoint: &mut super::checkpoint::Checkpoint,
    pointer: &str,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Option<super::checkpoint::eval::Evaluation> {
    use super::checkpoint::eval::{EvalKey, open};
    let at = format!("{pointer}/eval");
    if spec.backend != Backend::Cpu {
        diags.push(loc.at_key(
            &at,
            format!(
                "a checkpoint's `eval` runs on the cpu backend, but slice `{}` uses `{}`",
                spec.id,
                spec.backend.as_str()
            ),
            Some("move `eval` to a `backend: cpu` slice of the same checkpoint".into()),
        ));
        return None;
    }
    match open(dir, e, checkpoint) {
        Ok(evaluation) => {
            checkpoint.files.push(evaluation.dataset.clone());
            checkpoint
                .files
                .extend(evaluation.reference.files.iter().cloned());
            Some(evaluation)
        }
        Err(err) => {
            let key = match err.key() {
                EvalKey::Dataset => "dataset".to_owned(),
                EvalKey::Head(i) => format!("head/{i}"),
                EvalKey::Reference => "reference".to_owned(),
            };
            diags.push(loc.at_value(&format!("{at}/{key}"), err.to_string(), Some(err.hint().into())));
            None
        }
    }
}

/// The operand memory `op` needs at the widest precision, in GiB, when it is over the
/// budget.
fn over_budget(op: &crate::domain::GemmOp, widest: u64) -> Option<f64> {
    let bytes = operand_bytes(op.m as u64, op.n as u64, op.k as u64, widest);
    (bytes > u128::from(MEMORY_BUDGET_BYTES)).then(|| bytes as f64 / GIB)
}

const GIB: f64 = (1u64 << 30) as f64;

/// The operand memory a slice holds at once: execution prepares every op of a slice
/// before timing any (issue 23: twelve ops of 3.6 GiB each passed the per-op check and
/// aborted at run time). Slices run one after another, each run in its own process, so
/// a pack's peak is its largest slice and this check bounds the whole pack too.
#[derive(Default)]
struct SliceMemory {
    ops: usize,
    total: u128,
    largest: Option<(String, u128)>,
}

impl SliceMemory {
    /// Count `op` at the widest precision; its own GiB when it alone is over the budget.
    fn add_op(&mut self, op: &crate::domain::GemmOp, widest: u64) -> Option<f64> {
        self.add(
            &op.name,
            operand_bytes(op.m as u64, op.n as u64, op.k as u64, widest),
        );
        over_budget(op, widest)
    }

    fn add(&mut self, op: &str, bytes: u128) {
        self.ops += 1;
        self.total = self.total.saturating_add(bytes);
        if self.largest.as_ref().is_none_or(|(_, b)| bytes > *b) {
            self.largest = Some((op.to_owned(), bytes));
        }
    }

    /// Refuse the slice at `pointer` when its ops together are over the budget; whether
    /// it was refused.
    fn check(
        &self,
        spec: &super::pack::SliceSpec,
        pointer: &str,
        loc: &Locator,
        diags: &mut Vec<PackDiagnostic>,
    ) -> bool {
        if self.total <= u128::from(MEMORY_BUDGET_BYTES) {
            return false;
        }
        let (name, bytes) = self.largest.clone().unwrap_or_default();
        diags.push(loc.at_key(
            pointer,
            format!(
                "slice `{}` holds {} ops in memory at once: {:.1} GiB of operand memory in all \
                 (the largest, `{name}`, {:.1} GiB), over the {} GiB budget",
                spec.id,
                self.ops,
                self.total as f64 / GIB,
                bytes as f64 / GIB,
                MEMORY_BUDGET_BYTES as f64 / GIB
            ),
            Some(
                "a slice prepares all its ops before timing them; split the ops into several slices \
                 (slices run one at a time, so a pack's peak is its largest slice) or shrink m, n, k or tokens"
                    .into(),
            ),
        ));
        true
    }
}

/// Most training epochs one model slice may ask for (dense training plus every
/// fine-tuning epoch): a typo such as `finetune_epochs: 10000` is refused, not run for hours.
const MAX_TOTAL_EPOCHS: u64 = 2000;

/// Checks of a named production model (`workload.model`): its layer filter names real
/// layers, and each expanded op fits the memory budget on backends that allocate.
fn named_model_checks(
    spec: &super::pack::SliceSpec,
    named: &super::pack::NamedModelSpec,
    base: &str,
    widest: u64,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) {
    let pointer = format!("{base}/workload/model");
    let known = named.name.layer_names();
    let mut seen: HashSet<&str> = HashSet::new();
    for (j, layer) in named.layers.iter().enumerate() {
        if !known.contains(&layer.as_str()) {
            diags.push(loc.at_value(
                &format!("{pointer}/layers/{j}"),
                format!("model `{}` has no layer `{layer}`", named.name.as_str()),
                Some(format!(
                    "its layers are {}",
                    known.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
                )),
            ));
        } else if !seen.insert(layer.as_str()) {
            diags.push(loc.at_value(
                &format!("{pointer}/layers/{j}"),
                format!("layer `{layer}` is listed twice in slice `{}`", spec.id),
                Some("list each layer once".into()),
            ));
        }
    }
    if spec.backend == Backend::Sim {
        if named.weights.is_some() {
            diags.push(loc.at_key(
                &format!("{pointer}/weights"),
                format!(
                    "slice `{}` runs on the simulator, which draws no weights",
                    spec.id
                ),
                Some("`weights` applies to `backend: cpu`; remove it here".into()),
            ));
        }
        let mut ops = named
            .tokens
            .counts()
            .into_iter()
            .flat_map(|t| named.name.select(t, &named.layers));
        if let Some(op) = ops.find(over_sim_dims) {
            diags.push(sim_dims_diag(&op, &format!("{pointer}/tokens"), loc));
        }
        return;
    }
    let mut held = SliceMemory::default();
    for tokens in named.tokens.counts() {
        for op in named.name.select(tokens, &named.layers) {
            if let Some(gib) = held.add_op(&op, widest) {
                diags.push(loc.at_value(
                    &format!("{pointer}/tokens"),
                    format!(
                        "layer `{}` of `{}` at {tokens} tokens ({}x{}x{}) needs {gib:.1} GiB of operand memory, over the {} GiB budget",
                        op.name,
                        named.name.as_str(),
                        op.m,
                        op.n,
                        op.k,
                        MEMORY_BUDGET_BYTES as f64 / GIB
                    ),
                    Some("scale `tokens` down for the cpu backend (the simulator takes full size)".into()),
                ));
                return;
            }
        }
    }
    held.check(spec, &format!("{pointer}/tokens"), loc, diags);
}

/// Whether `op` has a dimension the simulator refuses ([`crate::sim::layer::MAX_DIM`]): a
/// token count past it ran to an execution failure (exit 1, "did not run") instead of being
/// refused as bad input.
fn over_sim_dims(op: &crate::domain::GemmOp) -> bool {
    let max = crate::sim::layer::MAX_DIM;
    [op.m, op.n, op.k].iter().any(|&d| d as u64 > max)
}

/// The diagnostic for an op [`over_sim_dims`] refuses, at `pointer` (the `tokens`).
fn sim_dims_diag(op: &crate::domain::GemmOp, pointer: &str, loc: &Locator) -> PackDiagnostic {
    loc.at_value(
        pointer,
        format!(
            "op `{}` is {}x{}x{} (MxNxK), over the simulator's limit of {} on each GEMM dimension",
            op.name,
            op.m,
            op.n,
            op.k,
            crate::sim::layer::MAX_DIM
        ),
        Some("M is the token count (times a Conv's output positions): lower `tokens`".into()),
    )
}

/// Whether a metric needs a model workload (quality evidence) to be measured.
fn is_quality(metric: Metric) -> bool {
    matches!(metric, Metric::Accuracy | Metric::QualityDelta)
}

/// The guardrails of `list` on a quality metric, with their indices.
fn quality_guardrails(list: &[Guardrail]) -> impl Iterator<Item = (usize, &Guardrail)> {
    list.iter()
        .enumerate()
        .filter(|(_, g)| g.metric.parse::<Metric>().is_ok_and(is_quality))
}

/// Checks of model workloads (`workload.mlp`) and their `pruning:` block, and of quality
/// guardrails on slices that have no model to measure them on.
fn model_checks(
    spec: &super::pack::SliceSpec,
    base: &str,
    sparsities: &[Sparsity],
    pack_guardrails: &[Guardrail],
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) {
    use super::pack::{PruningScheduleKind, PruningScope};
    let workload = format!("{base}/workload");
    // No workload: a `command`/`import` slice (its model-only keys are refused with the
    // other built-in-backend blocks) or a built-in slice already told to add one.
    let Some(spec_workload) = spec.workload.as_ref() else {
        return;
    };
    let sources = usize::from(spec_workload.mlp.is_some())
        + usize::from(spec_workload.model.is_some())
        + usize::from(spec_workload.checkpoint.is_some())
        + usize::from(!spec_workload.ops.is_empty());
    if sources > 1 && spec_workload.checkpoint.is_some() {
        diags.push(loc.at_key(
            &format!("{workload}/checkpoint"),
            format!("slice `{}` names a `checkpoint` next to another workload", spec.id),
            Some("a checkpoint's ops are its tensors; give exactly one of `ops`, `mlp`, `model`, `checkpoint`".into()),
        ));
    }
    if sources > 1 && spec_workload.model.is_some() {
        diags.push(loc.at_key(
            &format!("{workload}/model"),
            format!("slice `{}` names a `model` next to `ops` or `mlp`", spec.id),
            Some("a named model's ops are its layers; give exactly one of `ops`, `mlp`, `model`".into()),
        ));
    }
    match (
        &spec_workload.mlp,
        spec_workload.ops.is_empty() && spec_workload.model.is_none() && spec_workload.checkpoint.is_none(),
    ) {
        (None, true) => diags.push(
            loc.at_key(
                &workload,
                format!("slice `{}` has an empty workload", spec.id),
                Some(
                    "give `ops: [{gemm: {name, m, n, k}}]` or a model: `mlp: {dataset: digits, hidden: 256}`"
                        .into(),
                ),
            ),
        ),
        (Some(_), false) => diags.push(loc.at_key(
            &format!("{workload}/mlp"),
            format!("slice `{}` has both `ops` and `mlp`", spec.id),
            Some("a model workload's ops are its layers; remove `ops` or split the slice in two".into()),
        )),
        _ => {}
    }
    let Some(mlp) = &spec_workload.mlp else {
        if !spec.precision_policies.is_empty() {
            diags.push(loc.at_key(
                &format!("{base}/precision_policies"),
                format!(
                    "`precision_policies` applies to model workloads, but slice `{}` has `ops`",
                    spec.id
                ),
                Some("ops slices list their formats in `precision: [fp32, int8, ...]`".into()),
            ));
        }
        if spec.pruning.is_some() {
            diags.push(loc.at_key(
                &format!("{base}/pruning"),
                format!("`pruning` applies to model workloads, but slice `{}` has `ops`", spec.id),
                Some("use `workload: {mlp: {...}}`, or remove `pruning` (ops are pruned in one shot by magnitude)".into()),
            ));
        }
        // A checkpoint with an `eval` block measures quality on its own classifier.
        if spec_workload
            .checkpoint
            .as_ref()
            .is_some_and(|c| c.eval.is_some())
        {
            return;
        }
        for (i, g) in quality_guardrails(&spec.guardrails) {
            let message = format!(
                "`{}` needs a model workload, but slice `{}` has only ops",
                g.metric, spec.id
            );
            let hint = "quality is measured on `workload: {mlp: {...}}` slices";
            diags.push(loc.at_value(
                &format!("{base}/guardrails/{i}/metric"),
                message,
                Some(hint.into()),
            ));
        }
        for (i, g) in quality_guardrails(pack_guardrails) {
            let message = format!(
                "pack-level `{}` applies to every slice, but slice `{}` has no model",
                g.metric, spec.id
            );
            let hint = "move the quality guardrail into the model slices' own `guardrails`";
            diags.push(loc.at_value(&format!("/guardrails/{i}/metric"), message, Some(hint.into())));
        }
        return;
    };
    if spec.backend != Backend::Cpu {
        diags.push(loc.at_key(
            &format!("{workload}/mlp"),
            format!(
                "model workloads run on the cpu backend, but slice `{}` uses `{}`",
                spec.id,
                spec.backend.as_str()
            ),
            Some("set `backend: cpu` (simulate the layers as `ops` on a sim slice instead)".into()),
        ));
    }
    for (j, &p) in spec.precision.iter().enumerate() {
        if p != Precision::Fp32 {
            diags.push(loc.at_value(
                &format!("{base}/precision/{j}"),
                format!(
                    "model workloads are trained and evaluated in fp32; `{}` is not supported yet",
                    p.as_str()
                ),
                Some("use `precision: [fp32]`; evaluate the layers in other formats with `precision_policies: [{name: mixed, default: int8, keep: {fc2: fp32}}]`".into()),
            ));
        }
    }
    let mut policy_names = HashSet::new();
    for (j, policy) in spec.precision_policies.iter().enumerate() {
        let pointer = format!("{base}/precision_policies/{j}");
        if !policy_names.insert(policy.name.as_str()) {
            diags.push(loc.at_value(
                &format!("{pointer}/name"),
                format!(
                    "precision policy `{}` is listed twice in slice `{}`",
                    policy.name, spec.id
                ),
                Some("give every policy its own name: it becomes part of the slice id".into()),
            ));
        }
        for layer in policy.keep.keys() {
            if !super::model::MLP_LAYERS.contains(&layer.as_str()) {
                diags.push(loc.at_key(
                    &format!("{pointer}/keep/{}", super::span::escape_segment(layer)),
                    format!(
                        "slice `{}` has no layer `{layer}` to keep in another precision",
                        spec.id
                    ),
                    Some(format!(
                        "the MLP's layers are {}",
                        super::model::MLP_LAYERS.map(|l| format!("`{l}`")).join(", ")
                    )),
                ));
            }
        }
    }
    let mut steps = 1u64;
    let mut finetune = 1u64;
    if let Some(p) = &spec.pruning {
        let pointer = format!("{base}/pruning");
        finetune = u64::from(p.finetune_epochs);
        match (p.schedule, p.steps) {
            (PruningScheduleKind::OneShot, Some(s)) if s != 1 => diags.push(loc.at_value(
                &format!("{pointer}/steps"),
                format!("a one_shot schedule has one step, not {s}"),
                Some("remove `steps`, or use `schedule: gradual` to ramp over several steps".into()),
            )),
            (PruningScheduleKind::Gradual, None) => diags.push(loc.at_key(
                &format!("{pointer}/schedule"),
                "a gradual schedule needs `steps`",
                Some("add e.g. `steps: 4` (the cubic ramp reaches the target at the last step)".into()),
            )),
            (PruningScheduleKind::Gradual, Some(s)) if s < 2 => diags.push(loc.at_value(
                &format!("{pointer}/steps"),
                format!("a gradual schedule over {s} step is a one-shot schedule"),
                Some("use `steps: 2` or more, or `schedule: one_shot`".into()),
            )),
            (PruningScheduleKind::Gradual, Some(s)) => steps = u64::from(s),
            _ => {}
        }
        if p.scope == PruningScope::Global
            && !sparsities
                .iter()
                .any(|s| matches!(s, Sparsity::Unstructured { .. }))
        {
            diags.push(loc.at_value(
                &format!("{pointer}/scope"),
                "`scope: global` applies to unstructured sparsity, and this slice lists none",
                Some("remove `scope`, or add an unstructured sparsity, e.g. `{unstructured: {sparsity: 90%}}`".into()),
            ));
        }
    }
    let total = u64::from(mlp.epochs) + steps * finetune;
    if total > MAX_TOTAL_EPOCHS {
        let pointer = if spec.pruning.is_some() {
            format!("{base}/pruning/finetune_epochs")
        } else {
            format!("{workload}/mlp/epochs")
        };
        diags.push(loc.at_value(
            &pointer,
            format!("training would run {total} epochs (epochs + steps × finetune_epochs), over {MAX_TOTAL_EPOCHS}"),
            Some("a digits MLP converges in tens of epochs; lower `epochs` or `finetune_epochs`".into()),
        ));
    }
}

/// Operand bytes of one GEMM and its dense comparator: `2 × bytes × (N·K + K·M + N·M)`.
pub(crate) fn operand_bytes(m: u64, n: u64, k: u64, element_bytes: u64) -> u128 {
    let (m, n, k) = (u128::from(m), u128::from(n), u128::from(k));
    let elements = n
        .saturating_mul(k)
        .saturating_add(k.saturating_mul(m))
        .saturating_add(n.saturating_mul(m));
    elements
        .saturating_mul(u128::from(element_bytes))
        .saturating_mul(2)
}

fn guardrails(
    list: &[Guardrail],
    base: &str,
    backends: &[Backend],
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Vec<GuardrailSpec> {
    let mut out = Vec::with_capacity(list.len());
    for (i, g) in list.iter().enumerate() {
        let pointer = format!("{base}/{i}");
        let metric_ptr = format!("{pointer}/metric");
        let metric = match g.metric.parse::<Metric>() {
            Ok(m) => Some(m),
            Err(_) => {
                let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                diags.push(loc.at_value(
                    &metric_ptr,
                    format!("unknown metric `{}`", g.metric),
                    Some(format!("known metrics: {}", known.join(", "))),
                ));
                None
            }
        };
        if let Some(m) = metric {
            for b in backends {
                if !b.measures(m) {
                    let measured: Vec<&str> = b.measured_metrics().iter().map(|m| m.name()).collect();
                    diags.push(loc.at_value(
                        &metric_ptr,
                        format!("the `{}` backend does not measure `{}`", b.as_str(), m.name()),
                        Some(format!("it measures: {}", measured.join(", "))),
                    ));
                }
            }
        }

        let set: Vec<&str> = [
            g.at_most.map(|_| "at_most"),
            g.at_least.map(|_| "at_least"),
            g.regress_at_most.as_ref().map(|_| "regress_at_most"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let rule_hint = || Some("set exactly one of `at_most`, `at_least` or `regress_at_most`".to_owned());
        let rule = match set.as_slice() {
            [] => {
                diags.push(loc.at_key(&metric_ptr, "guardrail has no rule", rule_hint()));
                None
            }
            [_] => match (g.at_most, g.at_least, &g.regress_at_most) {
                (Some(bound), _, _) => Some(Rule::AtMost { bound }),
                (_, Some(bound), _) => Some(Rule::AtLeast { bound }),
                (_, _, Some(p)) => match parse_percentage(p) {
                    Ok(margin) => Some(Rule::RegressAtMost { margin }),
                    Err(problem) => {
                        diags.push(loc.at_value(
                            &format!("{pointer}/regress_at_most"),
                            problem.to_string(),
                            Some("write the tolerated regression as a percentage, e.g. `regress_at_most: 5%`".into()),
                        ));
                        None
                    }
                },
                _ => None,
            },
            [_, second, ..] => {
                diags.push(loc.at_key(
                    &format!("{pointer}/{}", escape_segment(second)),
                    format!(
                        "guardrail sets {}; a guardrail has exactly one rule",
                        quote_all(&set)
                    ),
                    Some("split it into one guardrail per rule".into()),
                ));
                None
            }
        };

        if g.confidence <= 0.5 || g.confidence >= 1.0 {
            diags.push(loc.at_value(
                &format!("{pointer}/confidence"),
                format!("confidence {} is outside (0.5, 1)", g.confidence),
                Some("use a confidence such as 0.9, 0.95 or 0.99".into()),
            ));
        }

        if let (Some(metric), Some(rule)) = (metric, rule) {
            out.push(GuardrailSpec {
                id: g.id.clone(),
                metric,
                rule,
                confidence: g.confidence,
                severity: g.severity,
                location: loc.index.key_pos(&metric_ptr).map(|p| loc.location(p)),
            });
        }
    }
    out
}

fn quote_all(names: &[&str]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match q.as_slice() {
        [a, b] => format!("both {a} and {b}"),
        _ => q.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparsity_forms() {
        assert_eq!("dense".parse::<Sparsity>().unwrap(), Sparsity::Dense);
        assert_eq!("2:4".parse::<Sparsity>().unwrap(), Sparsity::NOfM { n: 2, m: 4 });
        assert_eq!(
            "1:32".parse::<Sparsity>().unwrap(),
            Sparsity::NOfM { n: 1, m: 32 }
        );
        assert_eq!(
            "unstructured:density=10%".parse::<Sparsity>().unwrap(),
            Sparsity::Unstructured { density: 0.1 }
        );
        assert_eq!(
            "unstructured:density=100%".parse::<Sparsity>().unwrap(),
            Sparsity::Unstructured { density: 1.0 }
        );
        assert_eq!(
            "block:16x8:sparsity=75%".parse::<Sparsity>().unwrap(),
            Sparsity::Block {
                rows: 16,
                cols: 8,
                density: 0.25
            }
        );
    }

    #[test]
    fn sparsity_refusals() {
        for bad in [
            "4:4",
            "0:4",
            "5:4",
            "1:33",
            "2:0",
            "a:b",
            "",
            "sparse",
            "unstructured:0",
            "unstructured:1.5",
            "unstructured:-0.1",
            "unstructured:nan",
            "unstructured:inf",
            "unstructured:0.5",
            "unstructured:density=0%",
            "unstructured:sparsity=100%",
            "unstructured:density=0.1",
            "block:0x4:density=50%",
            "block:4x4:density=0%",
            "block:4:density=50%",
            "block:4x4:0.5",
            "block:4x4",
            "2:4:8",
        ] {
            assert!(bad.parse::<Sparsity>().is_err(), "{bad:?} should be refused");
        }
        let e = "4:4".parse::<Sparsity>().unwrap_err();
        assert!(e.message.contains("N must be less than M"), "{e}");
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "dense",
            "2:4",
            "unstructured:density=10%",
            "block:16x16:density=25%",
        ] {
            let sp: Sparsity = s.parse().unwrap();
            assert_eq!(sp.to_string(), s);
            assert_eq!(sp.to_string().parse::<Sparsity>().unwrap(), sp);
        }
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percentage("5%").unwrap(), 0.05);
        assert!((parse_percentage("2.5%").unwrap() - 0.025).abs() < 1e-15);
        assert!((parse_percentage(" 10 %").unwrap() - 0.10).abs() < 1e-15);
        for bad in ["five", "5", "0%", "100%", "-1%", "%", "nan%", "inf%", "150%"] {
            assert!(parse_percentage(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn percentage_errors_read_as_the_diagnostics_show_them() {
        let text = |s| parse_percentage(s).unwrap_err().to_string();
        assert_eq!(text("five"), "expected a percentage such as `5%`, found \"five\"");
        assert_eq!(text(" x% "), "expected a percentage such as `5%`, found \" x% \"");
        assert_eq!(text(" 150% "), "150% is outside the range (0%, 100%)");
    }

    #[test]
    fn memory_budget() {
        // BERT-base QKV at 128 tokens: tiny.
        assert!(operand_bytes(128, 2304, 768, 4) < u128::from(MEMORY_BUDGET_BYTES));
        // 2 × 4 × 3·(1e5)² = 240 GB.
        assert_eq!(operand_bytes(100_000, 100_000, 100_000, 4), 240_000_000_000);
        // No overflow at the extremes.
        assert_eq!(operand_bytes(u64::MAX, u64::MAX, u64::MAX, 4), u128::MAX);
        // 8192³ fp32: 2·4·3·2^26 = 1.5 GiB, inside the 4 GiB budget; 16384³ is 6 GiB, outside.
        assert!(operand_bytes(8192, 8192, 8192, 4) <= u128::from(MEMORY_BUDGET_BYTES));
        assert!(operand_bytes(16384, 16384, 16384, 4) > u128::from(MEMORY_BUDGET_BYTES));
    }

    #[test]
    fn cpu_backend_metrics() {
        assert!(Backend::Cpu.measures(Metric::Latency));
        assert!(Backend::Cpu.measures(Metric::EffectiveSpeedup));
        assert!(!Backend::Cpu.measures(Metric::EnergyJ));
        assert!(!Backend::Cpu.measures(Metric::TcOccupancy));
        // Six speed metrics, two counters, accuracy and quality_delta (model slices only), and
        // pattern_violations and sparse_coverage (checkpoint slices only), drop_rate (under
        // `load` only, issue 24).
        assert_eq!(Backend::Cpu.measured_metrics().len(), 13);
    }
}
