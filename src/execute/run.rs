//! The measurement protocol for one slice (DESIGN.md §6): check correctness once, warm up
//! until timings settle, then sample the slice and its dense comparator *interleaved* in the
//! same process, so the speedup of every pair is a same-moment ratio that machine drift
//! cannot fake.

use super::error::ChildError;
use super::error::ExecError;
use super::evidence::{Look, MetricSamples, OpCost, RunSummary, SliceEvidence, SliceFailure};
use super::kernels::KernelError;
use super::numbers::{median, paired_speedups};
use super::paired::{BaselineRuns, PairOrder, SideReading};
use super::workload::Workload;
use crate::domain::stage::Stage;
use crate::domain::{Counter, Counters, Metric, Series};
use crate::ingress::Slice;
use crate::ingress::pack::{RunMode, SamplePolicy};
use crate::lower::{KernelPath, Plan};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Warm-up never runs longer than this many iterations past the requested minimum…
const WARMUP_CAP: u32 = 50;
/// …nor past this share of the slice's time budget.
const WARMUP_BUDGET_SHARE: f64 = 0.25;
/// Warm-up ends once the last few slice timings agree within this fraction of their median.
const STABLE_WINDOW: usize = 3;
const STABLE_SPREAD: f64 = 0.05;
/// Shortest duration a timing may report: keeps ratios finite on sub-resolution workloads.
const MIN_TIMING_S: f64 = 1e-9;

/// The raw timings of one run of a slice, wherever it ran (this process or a child
/// process): what a child sends back to the gate, and what the gate merges into the
/// slice's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The process the run took place in, when it was a child of the gate.
    pub pid: Option<u32>,
    /// Warm-up iterations before timing started.
    pub warmup_iterations: u32,
    /// Slice timings, seconds, in the order taken.
    pub candidate: Vec<f64>,
    /// Dense-comparator timings, interleaved with the slice's.
    pub comparator: Vec<f64>,
    /// Calibration-workload timings, one after every pair.
    pub calibration: Vec<f64>,
    /// Properties of the prepared weights (`value_bytes`, `metadata_bytes`,
    /// `metadata_overhead`, `weight_bytes`, `bytes_moved`): the same in every run.
    pub counters: Counters,
    /// Each op timed alone after the run's sampling (see `op_costs`).
    #[serde(default)]
    pub op_costs: Vec<OpCost>,
    /// The share of its cores the run's threads got while sampling (see [`cpu_share`]).
    #[serde(default)]
    pub cpu_share: Option<f64>,
}

/// Runs one run of a slice elsewhere (in practice: a fresh child process) and returns its
/// record, or why it could not. Given the run index.
pub type LaunchRun<'a> = dyn Fn(u32) -> Result<RunRecord, ChildError> + 'a;

/// The baseline build's runs (issue 22): how to start one (in practice a child process of
/// the baseline binary) and what to call it in the evidence.
pub struct BaselineLaunch<'a> {
    /// Runs one run of the baseline build, given the run index.
    pub launch: &'a LaunchRun<'a>,
    /// What runs, e.g. `baseline binary /tmp/base/sparsegate (sparsegate 0.3.0)`.
    pub source: String,
}

/// What the validate stage answers at an interim look of sequential sampling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopDecision {
    /// Every blocking guardrail is decided: take no more runs.
    pub decided: bool,
    /// The error rate this look spent.
    pub alpha: f64,
}

/// Asked after each run from the `samples.runs`-th on when a slice samples sequentially,
/// with the evidence so far (its `looks` hold the earlier looks). Execution measures and
/// never judges: the rule is the validate stage's, passed in by the caller.
pub type StopRule<'a> = dyn Fn(&SliceEvidence) -> StopDecision + 'a;

/// Where a slice's measurement stands while it runs (issue 24: a slice that ran 25 s
/// printed nothing until it ended). Execution reports it; the caller decides whether and
/// how to show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunProgress {
    /// What the slice is doing.
    pub phase: Phase,
    /// Seconds since the slice began.
    pub elapsed_s: f64,
}

/// What a running slice is doing, with how far along it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Timing runs (CPU kernels, a model's inference, a command).
    Runs {
        /// Runs finished so far.
        runs_done: u32,
        /// Runs the slice plans (`samples.runs`, or the run count planned from the
        /// baseline).
        runs_planned: u32,
        /// The most runs it may take (`samples.max_runs` under sequential sampling; else
        /// `runs_planned`).
        runs_max: u32,
        /// Samples of the slice taken so far, over all runs.
        samples: usize,
    },
    /// A model slice training a dense model.
    Training {
        /// Its hidden width.
        hidden: u32,
        /// Epochs finished.
        epoch: u32,
        /// Epochs the recipe trains.
        epochs: u32,
    },
    /// A model slice's pruning schedule.
    Pruning {
        /// Steps finished, each with its fine-tuning epochs.
        step: u32,
        /// Steps the schedule takes.
        steps: u32,
    },
    /// A model slice's search for the widest dense model as fast as the sparse one.
    EqualLatency {
        /// Widths timed so far.
        probes: u32,
    },
    /// A load slice serving its requests.
    Serving {
        /// Arrivals considered so far (served or dropped).
        offered: u64,
        /// Arrivals the load offers in all.
        requests: u64,
        /// Requests served so far.
        served: u64,
        /// Arrivals that found the queue full so far.
        dropped: u64,
    },
}

/// Told after each run (and, where a run is long, as its samples come in).
pub type OnProgress<'a> = dyn FnMut(RunProgress) + 'a;

/// Measure `slice` under `plan` with every run in this process. Never panics on a user's
/// shape: anything that prevents a measurement comes back as [`SliceEvidence::failure`]
/// with the execution stage.
pub fn execute_slice(slice: &Slice, plan: &Plan) -> SliceEvidence {
    execute_slice_with(slice, plan, None, None)
}

/// Measure `slice` under `plan`. When the slice's run mode is `process` and `launch` is
/// given, every run is delegated to it (the gate passes one that spawns a child process
/// per run), and the records are merged here; otherwise the runs take place in this
/// process, and the evidence says `in_process` (a library caller that injects no
/// launcher gets in-process runs, honestly labelled). With `samples.sequential` and a
/// `stop` rule, runs are added one at a time past `samples.runs` until the rule says the
/// guardrails are decided or `samples.max_runs` is reached; every look is recorded.
pub fn execute_slice_with(
    slice: &Slice,
    plan: &Plan,
    launch: Option<&LaunchRun<'_>>,
    stop: Option<&StopRule<'_>>,
) -> SliceEvidence {
    execute_slice_paired(slice, plan, launch, None, stop, None)
}

/// [`execute_slice_with`], with the runs of a baseline build interleaved run by run with
/// the candidate's (issue 22): run `i` of the candidate and run `i` of the baseline form
/// pair `i`, the candidate first in even pairs and the baseline first in odd ones. With a
/// baseline, the candidate's runs go to `launch` whatever the run mode, so both sides are
/// fresh processes. `on_progress` hears after each run where the slice stands.
pub fn execute_slice_paired(
    slice: &Slice,
    plan: &Plan,
    launch: Option<&LaunchRun<'_>>,
    baseline: Option<&BaselineLaunch<'_>>,
    stop: Option<&StopRule<'_>>,
    on_progress: Option<&mut OnProgress<'_>>,
) -> SliceEvidence {
    let start = Instant::now();
    let mut evidence = SliceEvidence::of_plan(slice, plan);
    let dense_flops = plan.dense_flops();
    evidence
        .counters
        .insert(Counter::UsefulFlops, useful_flops(plan, slice.sparsity.density()));
    let hooks = (stop, on_progress);
    let outcome = take_runs(slice, plan, (launch, baseline), hooks, &evidence, dense_flops).map(
        |(mode, records, looks, paired)| {
            merge_runs(&mut evidence, mode, records, dense_flops);
            evidence.looks = looks;
            evidence.baseline_build = paired;
        },
    );
    evidence.finish(outcome, start)
}

/// What [`take_runs`] took: the run mode, the records, the looks, the baseline's pairs.
type Runs = (RunMode, Vec<RunRecord>, Vec<Look>, Option<BaselineRuns>);

/// The runs of a slice, in order, with the looks of sequential sampling and, with a
/// baseline build, its runs interleaved (see [`execute_slice_paired`]).
fn take_runs(
    slice: &Slice,
    plan: &Plan,
    (launch, baseline): (Option<&LaunchRun<'_>>, Option<&BaselineLaunch<'_>>),
    (stop, mut on_progress): (Option<&StopRule<'_>>, Option<&mut OnProgress<'_>>),
    empty: &SliceEvidence,
    dense_flops: f64,
) -> Result<Runs, ExecError> {
    let started = Instant::now();
    if plan.ops.is_empty() {
        return Err(ExecError::NoOps);
    }
    let launch =
        launch.filter(|_| baseline.is_some() || slice.samples.effective_run_mode() == RunMode::Process);
    let mut paired = baseline.map(|b| BaselineRuns::new(b.source.clone(), "run", SideReading::Median));
    let mut local = match launch {
        Some(_) => None,
        None => Some(InProcessRuns::prepare(slice, plan)?),
    };
    let mode = if launch.is_some() {
        RunMode::Process
    } else {
        RunMode::InProcess
    };
    let first = slice.samples.runs.max(1);
    let stop = stop.filter(|_| slice.samples.sequential);
    let most = match stop {
        Some(_) => slice.samples.max_runs.unwrap_or(first).max(first),
        None => first,
    };
    let (mut records, mut looks) = (Vec::new(), Vec::new());
    for run in 0..most {
        let order = PairOrder::of_pair(run as usize);
        let base_run = |b: &BaselineLaunch<'_>| {
            (b.launch)(run).map_err(|source| ExecError::BaselineChild { run, source })
        };
        let base_first = match (baseline, order) {
            (Some(b), PairOrder::BaselineFirst) => Some(base_run(b)?),
            _ => None,
        };
        let record = match (&mut local, launch) {
            (Some(local), _) => local.run(slice, run)?,
            (None, Some(launch)) => launch(run).map_err(|source| ExecError::Child { run, source })?,
            (None, None) => unreachable!("a launcher or in-process runs"),
        };
        let base = match (baseline, base_first) {
            (_, Some(b)) => Some(b),
            (Some(b), None) => Some(base_run(b)?),
            (None, None) => None,
        };
        if let (Some(base), Some(paired)) = (base, paired.as_mut()) {
            if let Some(error) = check_record(run as usize, &base) {
                return Err(error);
            }
            paired.push(run, order, median(&record.candidate), median(&base.candidate));
        }
        records.push(record);
        if let Some(tell) = on_progress.as_deref_mut() {
            tell(RunProgress {
                phase: Phase::Runs {
                    runs_done: run + 1,
                    runs_planned: first,
                    runs_max: most,
                    samples: records.iter().map(|r| r.candidate.len()).sum(),
                },
                elapsed_s: started.elapsed().as_secs_f64(),
            });
        }
        let Some(stop) = stop.filter(|_| run + 1 >= first) else {
            continue;
        };
        let mut so_far = empty.clone();
        merge_runs(&mut so_far, mode, records.clone(), dense_flops);
        if so_far.failure.is_some() {
            break; // the final merge reports it
        }
        if take_look(&mut so_far, &mut looks, run + 1, stop) {
            break;
        }
    }
    Ok((mode, records, looks, paired))
}

/// One interim look of sequential sampling at the evidence of the first `runs` runs: the
/// validate stage's `stop` decides on it (seeing the looks before), the look is recorded,
/// and whether the slice is decided comes back. Shared by every backend that samples
/// sequentially (the built-in kernels, `backend: command`).
pub(super) fn take_look(
    so_far: &mut SliceEvidence,
    looks: &mut Vec<Look>,
    runs: u32,
    stop: &StopRule<'_>,
) -> bool {
    so_far.looks = looks.clone();
    let decision = stop(so_far);
    looks.push(Look {
        runs,
        samples: so_far.metrics.get(Metric::Latency).map_or(0, |m| m.samples.len()),
        alpha: decision.alpha,
        decided: decision.decided,
    });
    decision.decided
}

/// One run of `slice` in a fresh workload, as a child process does it: prepare, check the
/// sparse result against the comparator, warm up, sample.
pub fn measure_run(slice: &Slice, plan: &Plan) -> Result<RunRecord, ExecError> {
    if plan.ops.is_empty() {
        return Err(ExecError::NoOps);
    }
    let mut local = InProcessRuns::prepare(slice, plan)?;
    let mut record = local.run(slice, 0)?;
    record.pid = Some(std::process::id());
    Ok(record)
}

/// Two things timed against each other: the slice's candidate and its dense comparator.
/// The measurement protocol is the same whatever they compute (a list of GEMMs, or a
/// model's inference on its test split).
pub(crate) trait TimedPair: Send {
    /// One pass of the candidate (the slice under test).
    fn run_candidate(&mut self) -> Result<(), KernelError>;
    /// One pass of the dense comparator.
    fn run_comparator(&mut self) -> Result<(), KernelError>;
    /// After one pass of each: do their outputs agree?
    fn check(&mut self) -> Result<(), ExecError>;
}

impl TimedPair for Workload {
    fn run_candidate(&mut self) -> Result<(), KernelError> {
        Workload::run_candidate(self)
    }
    fn run_comparator(&mut self) -> Result<(), KernelError> {
        Workload::run_comparator(self)
    }
    fn check(&mut self) -> Result<(), ExecError> {
        Workload::check(self)
    }
}

/// Time `work` in the slice's runs, all in this process (warm-up, interleaved samples,
/// calibration), and merge them into `evidence` like any other runs. Used by workloads
/// that are not a list of GEMMs (a model's inference on its test split).
pub(crate) fn measure_pair(
    slice: &Slice,
    pool: &rayon::ThreadPool,
    work: &mut impl TimedPair,
    dense_flops: f64,
    (evidence, tell): (&mut SliceEvidence, &mut dyn FnMut(Phase)),
) -> Result<(), ExecError> {
    let mut calibration = Calibration::new();
    let mut records = Vec::new();
    let runs = slice.samples.runs.max(1);
    let mut samples = 0;
    for run in 0..runs {
        let timed = pool.install(|| sample(&slice.samples, work, &mut calibration, run == 0))?;
        let record = record(timed, Counters::new(), Vec::new(), None);
        samples += record.candidate.len();
        records.push(record);
        tell(Phase::Runs {
            runs_done: run + 1,
            runs_planned: runs,
            runs_max: runs,
            samples,
        });
    }
    merge_runs(evidence, RunMode::InProcess, records, dense_flops);
    Ok(())
}

/// The worker pool a slice's kernels run on.
pub(crate) fn worker_pool(slice: &Slice) -> Result<rayon::ThreadPool, ExecError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(slice.threads.max(1))
        .build()
        .map_err(|source| ExecError::WorkerPool {
            threads: slice.threads,
            source,
        })
}

/// Runs in this process: one workload prepared once, checked on the first run.
struct InProcessRuns {
    pool: rayon::ThreadPool,
    work: Workload,
    calibration: Calibration,
    counters: Counters,
}

impl InProcessRuns {
    fn prepare(slice: &Slice, plan: &Plan) -> Result<InProcessRuns, ExecError> {
        let pool = worker_pool(slice)?;
        let work = Workload::prepare(slice, plan)?;
        let mut counters = weight_counters(&work, slice);
        let llc = super::kernels::roofs::last_level_cache_bytes().unwrap_or(32 << 20) as usize;
        let calibration = Calibration::for_regime(work.bytes_moved(slice.precision.bytes() as usize), llc);
        counters.insert(Counter::CalibrationStreamBytes, calibration.stream_bytes() as f64);
        Ok(InProcessRuns {
            pool,
            work,
            calibration,
            counters,
        })
    }

    fn run(&mut self, slice: &Slice, run: u32) -> Result<RunRecord, ExecError> {
        let (work, calibration) = (&mut self.work, &mut self.calibration);
        let timed = self
            .pool
            .install(|| sample(&slice.samples, work, calibration, run == 0))?;
        let op_costs = self.pool.install(|| op_costs(work))?;
        Ok(record(timed, self.counters.clone(), op_costs, None))
    }
}

fn weight_counters(work: &Workload, slice: &Slice) -> Counters {
    let (value_bytes, metadata_bytes) = work.sparse_bytes();
    let overhead = if value_bytes == 0 {
        0.0
    } else {
        metadata_bytes as f64 / value_bytes as f64
    };
    Counters::from([
        (Counter::ValueBytes, value_bytes as f64),
        (Counter::MetadataBytes, metadata_bytes as f64),
        (Metric::MetadataOverhead.into(), overhead),
        (Counter::WeightBytes, work.weight_bytes() as f64),
        (
            Counter::BytesMoved,
            work.bytes_moved(slice.precision.bytes() as usize) as f64,
        ),
    ])
}

fn record(timed: Timings, counters: Counters, op_costs: Vec<OpCost>, pid: Option<u32>) -> RunRecord {
    RunRecord {
        pid,
        warmup_iterations: timed.warmup_iterations,
        candidate: timed.candidate,
        comparator: timed.comparator,
        calibration: timed.calibration,
        counters,
        op_costs,
        cpu_share: timed.cpu_share,
    }
}

/// Merge the runs' records, in run order, into the slice's evidence: every sample tagged
/// with its run id, one [`RunSummary`] per run. Refuses records that do not hold together
/// (a child that sent ragged or non-positive timings).
fn merge_runs(evidence: &mut SliceEvidence, mode: RunMode, records: Vec<RunRecord>, dense_flops: f64) {
    if let Some(error) = records
        .iter()
        .enumerate()
        .find_map(|(run, r)| check_record(run, r))
    {
        evidence.failure = Some(SliceFailure {
            stage: Stage::Execution,
            message: error.to_string(),
        });
        return;
    }
    evidence.op_costs = merge_op_costs(&records);
    let (mut latency, mut comparator, mut speedup, mut calib) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut run_ids = Vec::new();
    for (run, timed) in (0u32..).zip(records) {
        if run == 0 {
            evidence.counters.extend(timed.counters.clone());
        }
        let pairs = paired_speedups(&timed.comparator, &timed.candidate);
        evidence.warmup_iterations += timed.warmup_iterations;
        evidence.runs.push(RunSummary {
            run,
            pid: timed.pid,
            warmup_iterations: timed.warmup_iterations,
            samples: timed.candidate.len(),
            latency_s: median(&timed.candidate),
            comparator_s: median(&timed.comparator),
            calibration_s: median(&timed.calibration),
            speedup: median(&pairs),
            cpu_share: timed.cpu_share,
        });
        run_ids.extend(std::iter::repeat_n(run, timed.candidate.len()));
        latency.extend(timed.candidate);
        comparator.extend(timed.comparator);
        calib.extend(timed.calibration);
        speedup.extend(pairs);
    }
    evidence.run_mode = Some(mode);
    let shares: Vec<f64> = evidence.runs.iter().filter_map(|r| r.cpu_share).collect();
    if !shares.is_empty() {
        evidence.counters.insert(Counter::CpuShare, median(&shares));
    }
    evidence.counters.insert(Counter::Samples, latency.len() as f64);
    evidence
        .counters
        .insert(Counter::Runs, evidence.runs.len() as f64);
    let throughput = latency.iter().map(|s| dense_flops / s / 1e9).collect();
    let tagged = |unit: &str, samples: Vec<f64>| MetricSamples {
        unit: unit.to_owned(),
        samples,
        runs: run_ids.clone(),
    };
    evidence.metrics.insert(Metric::Latency, tagged("s", latency));
    evidence
        .metrics
        .insert(Metric::EffectiveSpeedup, tagged("x", speedup));
    evidence
        .metrics
        .insert(Metric::ThroughputGflops, tagged("GFLOP/s", throughput));
    evidence.metrics.insert(Series::Calibration, tagged("s", calib));
    evidence.comparator = Some(tagged("s", comparator));
}

/// Why a run's record cannot be used, if it cannot.
fn check_record(run: usize, r: &RunRecord) -> Option<ExecError> {
    let n = r.candidate.len();
    if n == 0 || r.comparator.len() != n || r.calibration.len() != n {
        return Some(ExecError::RaggedRun {
            run,
            candidate: n,
            comparator: r.comparator.len(),
            calibration: r.calibration.len(),
        });
    }
    let all = r.candidate.iter().chain(&r.comparator).chain(&r.calibration);
    all.copied()
        .find(|t| !(t.is_finite() && *t > 0.0))
        .map(|timing| ExecError::BadTiming { run, timing })
}

/// FLOPs on kept weights only, all ops: `2·M·N·K·density` on the sparse path, `2·M·N·K`
/// on a dense or fallback op. The roofline plots these (what the hardware actually did),
/// beside the dense-equivalent rate people compare with dense.
pub(crate) fn useful_flops(plan: &Plan, density: f64) -> f64 {
    plan.ops
        .iter()
        .map(|p| match p.path {
            KernelPath::Sparse => p.op.dense_flops() * density,
            KernelPath::Dense | KernelPath::DenseFallback => p.op.dense_flops(),
        })
        .sum()
}

/// Timed passes of the per-op timing that follows the main sampling.
const OP_TIMING_PASSES: usize = 5;

/// Per op, the median over runs of each run's per-op medians (runs are the unit, as for
/// the slice's own timings); empty when the runs measured none.
fn merge_op_costs(records: &[RunRecord]) -> Vec<OpCost> {
    let Some(first) = records.first() else {
        return Vec::new();
    };
    if records.iter().any(|r| r.op_costs.len() != first.op_costs.len()) {
        return Vec::new();
    }
    (0..first.op_costs.len())
        .map(|i| {
            let of = |f: fn(&OpCost) -> f64| -> f64 {
                median(&records.iter().map(|r| f(&r.op_costs[i])).collect::<Vec<_>>())
            };
            let speedups: Vec<f64> = records
                .iter()
                .map(|r| r.op_costs[i].comparator_s / r.op_costs[i].candidate_s)
                .filter(|s| s.is_finite())
                .collect();
            let range = speedups.iter().copied().fold(None, |acc: Option<[f64; 2]>, s| {
                Some(acc.map_or([s, s], |[lo, hi]| [lo.min(s), hi.max(s)]))
            });
            OpCost {
                op: first.op_costs[i].op.clone(),
                candidate_s: of(|c| c.candidate_s),
                comparator_s: of(|c| c.comparator_s),
                passes: records.iter().map(|r| r.op_costs[i].passes).sum(),
                candidate_energy_j: None,
                comparator_energy_j: None,
                // Seeded inputs and weights: every run computes the same outputs.
                fidelity: first.op_costs[i].fidelity,
                speedup_range: range,
            }
        })
        .collect()
}

/// Each op timed alone on its planned path and on the dense kernel, interleaved op by op
/// (alternating which side goes first) for [`OP_TIMING_PASSES`] passes after one untimed
/// pass; the medians say where a slice's latency goes, which the whole-workload samples
/// cannot. Taken after the main sampling, so it never perturbs the gate's own samples.
fn op_costs(work: &mut Workload) -> Result<Vec<OpCost>, ExecError> {
    let names: Vec<String> = work.op_names().map(str::to_owned).collect();
    let mut candidate = vec![Vec::with_capacity(OP_TIMING_PASSES); names.len()];
    let mut comparator = vec![Vec::with_capacity(OP_TIMING_PASSES); names.len()];
    for pass in 0..=OP_TIMING_PASSES {
        for i in 0..names.len() {
            let (c, d) = if (pass + i) % 2 == 0 {
                let c = time(|| work.run_candidate_op(i))?;
                (c, time(|| work.run_comparator_op(i))?)
            } else {
                let d = time(|| work.run_comparator_op(i))?;
                (time(|| work.run_candidate_op(i))?, d)
            };
            // Pass 0 warms each op's caches after the previous op evicted them.
            if pass > 0 {
                candidate[i].push(c);
                comparator[i].push(d);
            }
        }
    }
    // The last pass left each op's candidate output in place: compare it with the reference.
    let fidelity: Vec<_> = (0..names.len()).map(|i| work.fidelity(i)).collect();
    Ok(names
        .into_iter()
        .zip(candidate.iter().zip(&comparator))
        .zip(fidelity)
        .map(|((op, (c, d)), fidelity)| OpCost {
            op,
            candidate_s: median(c),
            comparator_s: median(d),
            passes: c.len(),
            candidate_energy_j: None,
            comparator_energy_j: None,
            fidelity,
            speedup_range: None,
        })
        .collect())
}

/// Side of the calibration GEMM: small enough to cost little next to a slice, large
/// enough (≈ 110k multiply-adds) to be timed well above clock resolution.
const CALIBRATION_DIM: usize = 48;

/// The stream probe reads at least this many times the last-level cache, so it is served
/// from DRAM whatever the replacement policy keeps.
const STREAM_LLC_FACTOR: f64 = 1.5;
/// …and at most this many bytes, so a huge slice does not double its memory.
const STREAM_MAX_BYTES: usize = 256 << 20;
/// Words per task of the stream probe (512 KiB).
const STREAM_CHUNK_WORDS: usize = 1 << 16;

/// A fixed workload timed interleaved with every pair of a run: its per-run median
/// measures how fast *this run* of the machine is, independent of the slice, so absolute
/// times can be normalised by it (DESIGN.md §6).
///
/// Matched to the slice's regime (issue 22): a slice that moves more bytes a pass than the
/// last-level cache holds streams from DRAM, and its time follows the memory bandwidth of
/// the moment, which an in-cache GEMM cannot see (a LLaMA-2-7B FFN slice gated right after
/// `bless` failed 2 of 3 times with the GEMM probe); it gets a read of a buffer past the
/// cache. Every other slice gets the in-cache FMA probe.
struct Calibration {
    probe: Probe,
}

enum Probe {
    /// A 48³ f32 GEMM, in L1.
    Gemm { a: Vec<f32>, b: Vec<f32>, c: Vec<f32> },
    /// A read of `words`, past the last-level cache.
    Stream { words: Vec<u64> },
}

impl Calibration {
    /// The FMA probe.
    fn new() -> Calibration {
        let n = CALIBRATION_DIM * CALIBRATION_DIM;
        let a = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
        let b = (0..n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0).collect();
        Calibration {
            probe: Probe::Gemm {
                a,
                b,
                c: vec![0.0; n],
            },
        }
    }

    /// The probe for a slice that moves `bytes_moved` bytes a pass on a machine whose
    /// last-level cache holds `llc` bytes: the stream probe past the cache when the slice's
    /// bytes do not fit in it, else the FMA probe.
    fn for_regime(bytes_moved: usize, llc: usize) -> Calibration {
        if bytes_moved <= llc {
            return Calibration::new();
        }
        let bytes = ((llc as f64 * STREAM_LLC_FACTOR) as usize).max(bytes_moved.min(STREAM_MAX_BYTES));
        let words = (0..bytes / 8).map(|i| i as u64).collect();
        Calibration {
            probe: Probe::Stream { words },
        }
    }

    /// Bytes the probe streams per sample (0: the in-cache FMA probe), recorded in the
    /// evidence so that a baseline and a gate normalise only by the same probe.
    fn stream_bytes(&self) -> usize {
        match &self.probe {
            Probe::Gemm { .. } => 0,
            Probe::Stream { words } => words.len() * 8,
        }
    }

    /// One probe: `C = A·B` (i-k-j order, so the inner loop vectorises), or a wrapping sum
    /// of the buffer (vectorised; the result kept live).
    fn run(&mut self) {
        match &mut self.probe {
            Probe::Gemm { a, b, c } => {
                let d = CALIBRATION_DIM;
                c.fill(0.0);
                for i in 0..d {
                    for k in 0..d {
                        let aik = a[i * d + k];
                        let (row, b) = (&mut c[i * d..(i + 1) * d], &b[k * d..(k + 1) * d]);
                        for (c, b) in row.iter_mut().zip(b) {
                            *c += aik * b;
                        }
                    }
                }
                std::hint::black_box(&*c);
            }
            Probe::Stream { words } => {
                // On the slice's workers (`sample` runs inside its pool), split like the
                // slice's own work: a core taken by another process slows one of the slice's
                // threads, and a probe on one thread would run on the free core and see
                // nothing (A/A of the LLaMA FFN slice with one core busy: the slice 55%
                // slower, a one-thread probe 7%).
                let sum = words
                    .par_chunks(STREAM_CHUNK_WORDS)
                    .map(|c| c.iter().fold(0u64, |s, &w| s.wrapping_add(w)))
                    .reduce(|| 0, u64::wrapping_add);
                std::hint::black_box(sum);
            }
        }
    }
}

/// Raw timings of one run of a slice, in the order they were taken.
struct Timings {
    warmup_iterations: u32,
    candidate: Vec<f64>,
    comparator: Vec<f64>,
    calibration: Vec<f64>,
    /// The share of its cores the sampling got, when the platform can say.
    cpu_share: Option<f64>,
}

/// CPU time this process has used, when the platform can say.
fn process_cpu_s() -> Option<f64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// The share of its cores a stretch of sampling got: the process's CPU time over the
/// stretch ÷ (its wall time × the pool's threads) (issue 22). About 1 on a quiet machine
/// for a slice that keeps every worker busy (less where a kernel runs on fewer threads
/// than the pool: the same in every session on one machine); about ½ when another
/// process takes one of two cores, since a slice split in equal shares waits for the
/// worker that shares its core. Wall time alone cannot tell that slowdown from a
/// regression, the calibration probe only partly (a LLaMA FFN slice 1.97× slower, the
/// stream probe 1.45×); this says how much of it the machine explains.
fn cpu_share(cpu_s: f64, wall_s: f64, threads: usize) -> Option<f64> {
    (wall_s > 0.0 && cpu_s >= 0.0).then(|| (cpu_s / (wall_s * threads.max(1) as f64)).min(1.0))
}

/// One run: (on the first run, check correctness), warm up until timings settle, then
/// sample slice, comparator and calibration interleaved. The sample counts and time
/// budget of the pack apply to each run.
fn sample(
    policy: &SamplePolicy,
    work: &mut impl TimedPair,
    calibration: &mut Calibration,
    first: bool,
) -> Result<Timings, ExecError> {
    let start = Instant::now();
    if first {
        work.run_candidate()?;
        work.run_comparator()?;
        work.check()?;
    }

    let budget = policy.time_budget_s.max(0.0);
    let elapsed = || start.elapsed().as_secs_f64();

    let mut warm = Vec::new();
    loop {
        warm.push(time(|| work.run_candidate())?);
        time(|| work.run_comparator())?;
        calibration.run();
        let done = warm.len() as u32;
        if done < policy.warmup {
            continue;
        }
        if is_stable(&warm)
            || done >= policy.warmup.max(WARMUP_CAP)
            || elapsed() >= WARMUP_BUDGET_SHARE * budget
        {
            break;
        }
    }

    let (mut candidate, mut comparator, mut calib) = (Vec::new(), Vec::new(), Vec::new());
    let (wall, cpu) = (Instant::now(), process_cpu_s());
    loop {
        // Alternate which side goes first (A B C, B A C, …) so order effects cancel in the
        // ratio; the calibration workload follows every pair.
        let (c, d) = if candidate.len() % 2 == 0 {
            let c = time(|| work.run_candidate())?;
            (c, time(|| work.run_comparator())?)
        } else {
            let d = time(|| work.run_comparator())?;
            (time(|| work.run_candidate())?, d)
        };
        candidate.push(c);
        comparator.push(d);
        calib.push(seconds(|| calibration.run()));
        let n = candidate.len() as u32;
        if n >= policy.min && (elapsed() >= budget || n >= policy.max) {
            break;
        }
    }
    let cpu_share = cpu.zip(process_cpu_s()).and_then(|(from, to)| {
        cpu_share(
            to - from,
            wall.elapsed().as_secs_f64(),
            rayon::current_num_threads(),
        )
    });
    Ok(Timings {
        warmup_iterations: warm.len() as u32,
        candidate,
        comparator,
        calibration: calib,
        cpu_share,
    })
}

/// The median same-moment ratio comparator time / candidate time of `work`, sampled in
/// one short run under `policy` (correctness checked first). Used where a decision needs
/// a ratio, not evidence: e.g. the equal-latency width search.
pub(crate) fn median_paired_ratio(
    pool: &rayon::ThreadPool,
    policy: &SamplePolicy,
    work: &mut impl TimedPair,
) -> Result<f64, ExecError> {
    let mut calibration = Calibration::new();
    let timed = pool.install(|| sample(policy, work, &mut calibration, true))?;
    let pairs = paired_speedups(&timed.comparator, &timed.candidate);
    Ok(median(&pairs))
}

/// Seconds `f` took, or its error.
fn time<E>(f: impl FnOnce() -> Result<(), E>) -> Result<f64, E> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64().max(MIN_TIMING_S))
}

/// Seconds `f` took (it cannot fail).
fn seconds(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64().max(MIN_TIMING_S)
}

/// Whether the last [`STABLE_WINDOW`] timings lie within [`STABLE_SPREAD`] of their median.
fn is_stable(timings: &[f64]) -> bool {
    let Some(window) = timings.len().checked_sub(STABLE_WINDOW).map(|s| &timings[s..]) else {
        return false;
    };
    let mut sorted = window.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    window
        .iter()
        .all(|t| (t - median).abs() <= STABLE_SPREAD * median)
}

#[cfg(test)]
mod tests;
