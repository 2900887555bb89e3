//! Evidence: what was measured, raw, with the environment it was measured under.
//! Never only summaries: every sample is kept, with the run it came from.

use crate::domain::stage::Stage;
use crate::domain::{Counter, Counters, KeyedMap, Metric, Precision, Series};
use crate::ingress::Environment;
use crate::ingress::pack::RunMode;
use crate::lower::Plan;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the `evidence.json` format.
pub const EVIDENCE_SCHEMA_VERSION: u32 = 1;

/// Everything one `run` produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evidence {
    /// Format version.
    pub schema_version: u32,
    /// The environment all slices ran under.
    pub environment: Environment,
    /// The packs that were run.
    pub packs: Vec<PackRecord>,
    /// One entry per slice, in pack order.
    pub slices: Vec<SliceEvidence>,
}

/// Which pack (and which exact version of it) evidence came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PackRecord {
    /// The pack's name.
    pub name: String,
    /// The path it was loaded from.
    pub path: String,
    /// `sha256:<hex>` of the pack file.
    pub digest: String,
}

/// The measurements of one slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SliceEvidence {
    /// The pack's name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// The sparsity under test, as written in packs (`2:4`).
    pub sparsity: String,
    /// The precision under test.
    pub precision: Precision,
    /// Kernel choice per op.
    pub plan: Plan,
    /// Samples per metric name (`latency`, `effective_speedup`, …).
    #[schemars(with = "BTreeMap<String, MetricSamples>")]
    pub metrics: KeyedMap<Series, MetricSamples>,
    /// The dense comparator's own timings, interleaved with the slice's.
    pub comparator: Option<MetricSamples>,
    /// Counters that are properties of the run, not samples (`fallback_rate`,
    /// `metadata_overhead`, `value_bytes`, `metadata_bytes`, `dense_flops`).
    #[schemars(with = "BTreeMap<String, f64>")]
    pub counters: Counters,
    /// Warm-up iterations run before timing started, summed over all runs.
    pub warmup_iterations: u32,
    /// Wall time spent on this slice, warm-up included, in seconds.
    pub wall_time_s: f64,
    /// Set when the slice could not be measured.
    pub failure: Option<SliceFailure>,
    /// One summary per run, in run order (empty in evidence from before runs were kept,
    /// and for simulated slices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunSummary>,
    /// How the runs were separated, when the slice was measured in runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<RunMode>,
    /// The interim looks of sequential sampling, in order (empty when the slice took a
    /// fixed number of runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub looks: Vec<Look>,
    /// Per op, in plan order: what the op cost on its planned path and on the dense kernel,
    /// so validation can attribute latency (and, on the simulator, energy) to the ops that
    /// fell back. Empty in evidence from before per-op timing and for failed slices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_costs: Vec<OpCost>,
    /// For a model workload: the quality evidence (paired test-split predictions of the
    /// slice's model and the dense reference, the pruning steps, the equal-latency dense
    /// model). Raw counts and predictions, judged in validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<QualityEvidence>,
    /// For a checkpoint workload: each selected tensor's structure against the slice's
    /// pattern, in name order (issue 21).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub structure: Vec<super::structure::TensorStructure>,
    /// The artifact files the slice was measured from, with their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactRecord>,
    /// For a checkpoint slice timed at several token counts: per layer, its speedup at each
    /// count and where it crosses 1 (issue 21).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub break_even: Vec<LayerBreakEven>,
    /// For the CPU kernels: the instruction-set path the dense comparator and the candidate
    /// took on this CPU (issue 20), e.g. `avx512-bf16`, so a bf16 speedup says what it was
    /// measured against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isa: Option<IsaRecord>,
    /// The baseline build measured in this session, interleaved with the candidate
    /// (issue 22): what ran, its latencies and the per-pair ratios candidate/baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_build: Option<super::paired::BaselineRuns>,
    /// For a GPU trace import (issue 21): the kernels the trace shows, classified sparse
    /// GEMM / dense GEMM / other, in total and per range (layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_kernels: Option<super::trace::GpuKernels>,
    /// The serving loop the slice ran under (`load:`: arrivals, queue, requests offered),
    /// so the memo can say under which traffic its latencies and drops were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::ingress::LoadPlan>,
    /// The machine this slice was measured on when it is not the evidence's own: set by
    /// `merge` for the slices of a shard that ran on another kind of runner (issue 22; its
    /// comparisons were paired on that machine, and its golden baseline is looked up for
    /// it). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_on: Option<Box<Environment>>,
}

/// The instruction-set paths of a CPU slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IsaRecord {
    /// The dense comparator's path; several joined by `+` when the slice's ops take
    /// different ones (bf16 runs on `vdpbf16ps` below a few tokens).
    pub comparator: String,
    /// The candidate's path (its planned form: dense, 2:4 or another sparse format), as
    /// for the comparator.
    pub candidate: String,
}

/// A file the slice was measured from (a checkpoint's weights, its index, its config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArtifactRecord {
    /// The path relative to the pack's directory.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// `sha256:<hex>` of the file.
    pub digest: String,
}

/// One interim look of sequential sampling: after how many runs, what it spent, and
/// whether it stopped the slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Look {
    /// Runs taken at this look.
    pub runs: u32,
    /// Samples (slice timings) taken at this look.
    pub samples: usize,
    /// The error rate this look spent (the smallest over the slice's blocking guardrails).
    pub alpha: f64,
    /// Whether every blocking guardrail was decided, which ended the sampling.
    pub decided: bool,
}

/// One op's cost on its planned path (the candidate) and on the dense kernel (the
/// comparator). CPU: medians of a short per-op timing pass after the main sampling, the two
/// sides interleaved op by op. Sim: the model's exact per-op figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpCost {
    /// The op's name, as in the plan.
    pub op: String,
    /// Seconds on the planned path (sparse, dense, or dense fallback).
    pub candidate_s: f64,
    /// Seconds on the dense kernel with the same weights.
    pub comparator_s: f64,
    /// Timed passes behind the medians (0 for simulated ops, which are exact).
    pub passes: usize,
    /// Joules on the planned path, where a model gives them (the simulator); `None` on the
    /// CPU, where no energy is measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_energy_j: Option<f64>,
    /// Joules on the dense path, where a model gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparator_energy_j: Option<f64>,
    /// CPU: how close the op's output (sparse, at the slice's precision) is to the fp32
    /// dense output of the *unpruned* weights on the same inputs. `None` on the simulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<OpFidelity>,
    /// CPU: the lowest and highest of the runs' own per-op speedups (comparator ÷
    /// candidate, each run's medians), so a per-op claim says how much it moved between
    /// fresh processes. `None` on the simulator, which is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_range: Option<[f64; 2]>,
}

/// Where a sweep's speedup crosses 1, from the measured points and their intervals. Decode
/// (few tokens) is memory-bound and prefill compute-bound, so a sparse kernel may win only
/// at few tokens (it falls through 1) or only at many (it rises through 1): both are named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BreakEven {
    /// The largest swept token count up to which every point wins (its speedup interval
    /// lies above 1); `null` when the first does not.
    pub wins_through: Option<usize>,
    /// The smallest swept token count from which every point loses (its interval lies below
    /// 1); `null` when the last does not.
    pub loses_from: Option<usize>,
    /// Tokens at which the speedup estimate first falls through 1, interpolated on log tokens
    /// between the two swept counts around it; `null` when it never does (or starts below).
    pub tokens: Option<f64>,
    /// The smallest swept token count from which every point wins; `null` when the last
    /// does not.
    #[serde(default)]
    pub wins_from: Option<usize>,
    /// Tokens at which an estimate that starts below 1 first rises through it (sparse starts
    /// to win), interpolated as `tokens`; `null` when it never does (or starts above).
    #[serde(default)]
    pub rises_at: Option<f64>,
}

/// One layer of a checkpoint across the slice's token counts: where its sparse path stops
/// paying (`bench --sweep-tokens` does the same for one shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LayerBreakEven {
    /// The tensor, e.g. `model.layers.0.mlp.up_proj.weight`.
    pub tensor: String,
    /// Its per-op speedup at each token count, ascending; the interval is the range over
    /// the runs (a point wins only when every run's speedup is above 1).
    pub points: Vec<TokenSpeedup>,
    /// Where the speedup crosses 1.
    pub break_even: BreakEven,
}

/// One layer's speedup at one token count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenSpeedup {
    /// The M of the op.
    pub tokens: u64,
    /// Comparator ÷ candidate, the median over runs of each run's per-op medians.
    pub speedup: f64,
    /// The lowest run's speedup.
    pub low: f64,
    /// The highest run's speedup.
    pub high: f64,
}

/// Numerical fidelity of one op's output `y` against a reference `y_ref`.
///
/// The reference is the fp32 dense product with the weights *before* pruning: the pruned
/// dense product is already required to match the candidate to rounding (the workload's
/// correctness check), so only the unpruned reference shows what pruning plus the storage
/// format cost the layer's output — the number a production gate needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpFidelity {
    /// `‖y − y_ref‖₂ / ‖y_ref‖₂`.
    pub relative_error: f64,
    /// `y·y_ref / (‖y‖₂ ‖y_ref‖₂)`.
    pub cosine: f64,
}

impl OpFidelity {
    /// Compare an output with its reference (same length); f64 sums. An all-zero pair is
    /// perfect agreement (error 0, cosine 1).
    pub fn of(y: &[f32], y_ref: &[f32]) -> OpFidelity {
        let (mut diff, mut dot, mut yy, mut rr) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for (&a, &b) in y.iter().zip(y_ref) {
            let (a, b) = (f64::from(a), f64::from(b));
            diff += (a - b) * (a - b);
            dot += a * b;
            yy += a * a;
            rr += b * b;
        }
        let relative_error = if rr > 0.0 { (diff / rr).sqrt() } else { diff.sqrt() };
        let cosine = if yy > 0.0 && rr > 0.0 {
            dot / (yy.sqrt() * rr.sqrt())
        } else if yy == rr {
            1.0
        } else {
            0.0
        };
        OpFidelity {
            relative_error,
            cosine,
        }
    }
}

/// What a model slice measured about quality, raw: validation turns it into intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QualityEvidence {
    /// The dataset's name (`digits`).
    pub dataset: String,
    /// `sha256:<hex>` of the embedded dataset file.
    pub dataset_digest: String,
    /// Samples in the train, validation and test splits (stratified, from the model seed).
    pub split: [usize; 3],
    /// Training epochs of the dense models.
    pub epochs: u32,
    /// True labels of the test split, in split order.
    pub labels: Vec<u8>,
    /// The dense reference model (the slice's dense model before pruning).
    pub dense: ModelScore,
    /// The slice's model (pruned to its sparsity), evaluated with the slice's kernels.
    pub candidate: ModelScore,
    /// The pruning schedule as run: `one_shot` or `gradual`, steps, fine-tuning epochs,
    /// scope.
    pub schedule: crate::ingress::PruningPlan,
    /// One record per pruning step (empty for a dense slice).
    pub steps: Vec<PruneStep>,
    /// The dense model that fits the candidate's measured latency, when the pack asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equal_latency: Option<EqualLatency>,
    /// The precision policy the candidate was evaluated under, with each layer's drift from
    /// the fp32 dense reference; absent when the slice has no `precision_policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<PrecisionEvidence>,
    /// Set when the quality was measured on a shipped checkpoint's classifier head (issue
    /// 21) rather than on a model trained here: nothing was trained or pruned (`epochs` and
    /// the schedule's steps are 0, `split` is `[0, 0, samples]`), `dense` is the reference
    /// checkpoint's head and `candidate` the checkpoint's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactQuality>,
}

/// Which checkpoint head and reference a quality measurement used (issue 21).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArtifactQuality {
    /// The head's Linear modules, in execution order.
    pub head: Vec<String>,
    /// The reference checkpoint's file(s), relative to the pack.
    pub reference: Vec<String>,
    /// The head's weights the candidate ran on the slice's sparse kernel (the others, and
    /// the whole reference, ran on the dense kernel).
    pub sparse_layers: Vec<String>,
}

/// A model evaluated under a precision policy (issue 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PrecisionEvidence {
    /// The policy as written in the pack.
    pub policy: crate::ingress::pack::PrecisionPolicy,
    /// One record per layer, in execution order.
    pub layers: Vec<LayerDrift>,
}

/// How far one layer's output on the test split moved from the fp32 dense reference
/// model's output of the same layer (after bias, and ReLU for hidden layers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LayerDrift {
    /// Layer name (`fc1`, `fc2`).
    pub layer: String,
    /// The precision the layer ran in.
    pub precision: crate::domain::Precision,
    /// `‖y − y_ref‖ / ‖y_ref‖` over the whole test split's outputs.
    pub relative_error: f64,
    /// Cosine similarity of `y` and `y_ref` over the whole test split's outputs.
    pub cosine: f64,
    /// `‖y − y₃₂‖ / ‖y₃₂‖` against the *same* (possibly pruned) weights run in fp32: the
    /// precision's own share of the drift, which pruning would otherwise swamp.
    pub precision_relative_error: f64,
}

/// A trained model's predictions on the test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelScore {
    /// Hidden width.
    pub hidden: usize,
    /// `sha256:<hex>` of the weights (little-endian f32, layer by layer): the same seed and
    /// recipe always give the same digest.
    pub weights_digest: String,
    /// Fraction of weights that are zero, over both layers.
    pub sparsity: f64,
    /// Test samples classified correctly.
    pub correct: u64,
    /// Test samples.
    pub total: u64,
    /// Predicted class per test sample, in split order.
    pub predictions: Vec<u8>,
}

/// One step of a pruning schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PruneStep {
    /// 1-based step number.
    pub step: u32,
    /// Sparsity the schedule asked for at this step (fraction of weights pruned).
    pub target_sparsity: f64,
    /// Sparsity reached (zero weights / all weights of the pruned layers).
    pub achieved_sparsity: f64,
    /// Fine-tuning epochs run after the step, mask fixed.
    pub finetune_epochs: u32,
    /// Validation-split accuracy after fine-tuning.
    pub validation_accuracy: f64,
}

/// The dense model of equal measured latency (issue 7): the widest dense MLP whose
/// inference is no slower than the candidate's, found by bisection on interleaved timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EqualLatency {
    /// The dense model at that width, trained with the same recipe and seed.
    pub dense: ModelScore,
    /// Median paired ratio (dense at that width) / (candidate) of inference time: ≤ 1 means
    /// it fits the candidate's latency.
    pub latency_ratio: f64,
    /// Every width probed, with its measured ratio, in probe order.
    pub probes: Vec<(usize, f64)>,
}

/// Medians of one run of a slice: the unit of replication (DESIGN.md §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunSummary {
    /// The run id, as in [`MetricSamples::runs`].
    pub run: u32,
    /// The child process the run took place in (`process` run mode); absent for runs
    /// inside the gate's own process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Warm-up iterations before this run's timing started.
    pub warmup_iterations: u32,
    /// Timed samples (slice/comparator/calibration triples) in this run.
    pub samples: usize,
    /// Median slice latency, seconds.
    pub latency_s: f64,
    /// Median dense-comparator latency, seconds.
    pub comparator_s: f64,
    /// Median calibration-workload latency, seconds.
    pub calibration_s: f64,
    /// Median of the run's paired speedups (comparator / slice).
    pub speedup: f64,
    /// The share of its cores the run's threads got while sampling (process CPU time ÷
    /// wall time × threads): about 1 on a quiet machine, about ½ when another process took
    /// one of two cores. Absent where it was not measured (imports, commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_share: Option<f64>,
}

/// Raw samples of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetricSamples {
    /// Unit of every value.
    pub unit: String,
    /// The values, in the order they were taken.
    pub samples: Vec<f64>,
    /// The run (process) each sample came from; same length as `samples`.
    pub runs: Vec<u32>,
}

impl MetricSamples {
    /// Samples all taken in run 0.
    pub fn single_run(unit: &str, samples: Vec<f64>) -> Self {
        let runs = vec![0; samples.len()];
        MetricSamples {
            unit: unit.to_owned(),
            samples,
            runs,
        }
    }

    /// Samples grouped by run (ascending run id); `None` when the run ids do not match
    /// the samples one for one.
    pub fn by_run(&self) -> Option<Vec<Vec<f64>>> {
        if self.runs.len() != self.samples.len() {
            return None;
        }
        let mut groups: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (&x, &r) in self.samples.iter().zip(&self.runs) {
            groups.entry(r).or_default().push(x);
        }
        Some(groups.into_values().collect())
    }
}

impl SliceEvidence {
    /// Close a measurement that began at `start`: what stopped it, if anything, is a failure
    /// of the execution stage (evidence, not an error), and the wall time is recorded.
    pub(crate) fn finish(
        mut self,
        outcome: Result<(), super::ExecError>,
        start: std::time::Instant,
    ) -> SliceEvidence {
        if let Err(error) = outcome {
            self.failure = Some(SliceFailure {
                stage: Stage::Execution,
                message: error.to_string(),
            });
        }
        self.wall_time_s = start.elapsed().as_secs_f64();
        self
    }

    /// [`SliceEvidence::empty`] with the plan's own counters (the share of ops that fell
    /// back, the dense FLOPs per iteration): where the CPU backends start.
    pub fn of_plan(slice: &crate::ingress::Slice, plan: &crate::lower::Plan) -> SliceEvidence {
        let mut evidence = SliceEvidence::empty(slice, plan);
        evidence
            .counters
            .insert(Metric::FallbackRate, plan.fallback_rate());
        evidence.counters.insert(Counter::DenseFlops, plan.dense_flops());
        evidence
    }

    /// The evidence of `slice` under `plan` before anything was measured: every backend
    /// starts here and fills in what it measures.
    pub fn empty(slice: &crate::ingress::Slice, plan: &crate::lower::Plan) -> SliceEvidence {
        SliceEvidence {
            sparsity: slice.sparsity.to_string(),
            precision: slice.precision,
            plan: plan.clone(),
            load: slice.load,
            ..SliceEvidence::named(&slice.pack, &slice.id)
        }
    }

    /// Evidence of slice `slice` of pack `pack` with nothing in it: a dense fp32 slice with
    /// no ops, for evidence built by hand (imports of other runs, tests).
    pub fn named(pack: &str, slice: &str) -> SliceEvidence {
        SliceEvidence {
            pack: pack.to_owned(),
            slice: slice.to_owned(),
            sparsity: "dense".into(),
            precision: crate::domain::Precision::Fp32,
            plan: crate::lower::Plan {
                ops: vec![],
                graph: vec![],
            },
            metrics: KeyedMap::new(),
            comparator: None,
            counters: Counters::new(),
            warmup_iterations: 0,
            wall_time_s: 0.0,
            failure: None,
            runs: vec![],
            run_mode: None,
            looks: vec![],
            op_costs: vec![],
            quality: None,
            structure: vec![],
            artifacts: vec![],
            break_even: vec![],
            isa: None,
            baseline_build: None,
            gpu_kernels: None,
            load: None,
            measured_on: None,
        }
    }

    /// The environment this slice was measured under: its own ([`Self::measured_on`]) if
    /// a merge gave it one, else the evidence's.
    pub fn environment<'a>(&'a self, evidence: &'a Environment) -> &'a Environment {
        self.measured_on.as_deref().unwrap_or(evidence)
    }
}

/// Why a slice produced no (or partial) evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SliceFailure {
    /// The stage that failed.
    pub stage: Stage,
    /// What happened.
    pub message: String,
}

impl Evidence {
    /// The evidence of one slice, by pack and slice id.
    pub fn slice(&self, pack: &str, slice: &str) -> Option<&SliceEvidence> {
        self.slices.iter().find(|s| s.pack == pack && s.slice == slice)
    }
}

crate::of_slice!(SliceEvidence: pack, slice);

#[cfg(test)]
mod fidelity_tests {
    use super::OpFidelity;

    #[test]
    fn issue_7_fidelity_on_a_tiny_case() {
        // y_ref = (3, 4), y = (3, 0): ‖y − y_ref‖ = 4, ‖y_ref‖ = 5 → 0.8; y·y_ref = 9,
        // ‖y‖‖y_ref‖ = 15 → cosine 0.6.
        let f = OpFidelity::of(&[3.0, 0.0], &[3.0, 4.0]);
        assert!((f.relative_error - 0.8).abs() < 1e-12, "{f:?}");
        assert!((f.cosine - 0.6).abs() < 1e-12, "{f:?}");
        let same = OpFidelity::of(&[1.0, -2.0, 0.5], &[1.0, -2.0, 0.5]);
        assert_eq!(same.relative_error, 0.0);
        assert!((same.cosine - 1.0).abs() < 1e-12);
        // A scaled output keeps its direction (cosine 1) but not its size.
        let half = OpFidelity::of(&[0.5, 1.0], &[1.0, 2.0]);
        assert!((half.relative_error - 0.5).abs() < 1e-12 && (half.cosine - 1.0).abs() < 1e-12);
        let zero = OpFidelity::of(&[0.0, 0.0], &[0.0, 0.0]);
        assert_eq!((zero.relative_error, zero.cosine), (0.0, 1.0));
    }
}
