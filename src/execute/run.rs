//! The measurement protocol for one slice (DESIGN.md §6): check correctness once, warm up
//! until timings settle, then sample the slice and its dense comparator *interleaved* in the
//! same process, so the speedup of every pair is a same-moment ratio that machine drift
//! cannot fake.

use super::evidence::{MetricSamples, RunSummary, SliceEvidence, SliceFailure};
use super::kernels::KernelError;
use super::workload::Workload;
use crate::ingress::Slice;
use crate::ingress::pack::SamplePolicy;
use crate::lower::Plan;
use crate::stage::Stage;
use std::collections::BTreeMap;
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

/// Measure `slice` under `plan`. Never panics on a user's shape: anything that prevents a
/// measurement comes back as [`SliceEvidence::failure`] with the execution stage.
pub fn execute_slice(slice: &Slice, plan: &Plan) -> SliceEvidence {
    let start = Instant::now();
    let mut evidence = SliceEvidence {
        pack: slice.pack.clone(),
        slice: slice.id.clone(),
        sparsity: slice.sparsity.to_string(),
        precision: slice.precision,
        plan: plan.clone(),
        metrics: BTreeMap::new(),
        comparator: None,
        counters: BTreeMap::new(),
        warmup_iterations: 0,
        wall_time_s: 0.0,
        failure: None,
        runs: vec![],
        run_mode: None,
        quality: None,
    };
    let dense_flops: f64 = plan.ops.iter().map(|p| p.op.dense_flops()).sum();
    evidence
        .counters
        .insert("fallback_rate".into(), plan.fallback_rate());
    evidence.counters.insert("dense_flops".into(), dense_flops);
    if let Err(message) = measure(slice, plan, dense_flops, &mut evidence) {
        evidence.failure = Some(SliceFailure {
            stage: Stage::Execution,
            message,
        });
    }
    evidence.wall_time_s = start.elapsed().as_secs_f64();
    evidence
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
    fn check(&self) -> Result<(), String>;
}

impl TimedPair for Workload {
    fn run_candidate(&mut self) -> Result<(), KernelError> {
        Workload::run_candidate(self)
    }
    fn run_comparator(&mut self) -> Result<(), KernelError> {
        Workload::run_comparator(self)
    }
    fn check(&self) -> Result<(), String> {
        Workload::check(self)
    }
}

/// The worker pool a slice's kernels run on.
pub(crate) fn worker_pool(slice: &Slice) -> Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(slice.threads.max(1))
        .build()
        .map_err(|e| format!("cannot start {} worker threads: {e}", slice.threads))
}

fn measure(slice: &Slice, plan: &Plan, dense_flops: f64, evidence: &mut SliceEvidence) -> Result<(), String> {
    if plan.ops.is_empty() {
        return Err("the slice has no ops to run".into());
    }
    let pool = worker_pool(slice)?;
    let mut work = Workload::prepare(slice, plan)?;
    let (value_bytes, metadata_bytes) = work.sparse_bytes();
    let counters = &mut evidence.counters;
    counters.insert("value_bytes".into(), value_bytes as f64);
    counters.insert("metadata_bytes".into(), metadata_bytes as f64);
    let overhead = if value_bytes == 0 {
        0.0
    } else {
        metadata_bytes as f64 / value_bytes as f64
    };
    counters.insert("metadata_overhead".into(), overhead);
    counters.insert("weight_bytes".into(), work.weight_bytes() as f64);
    measure_pair(slice, &pool, &mut work, dense_flops, evidence)
}

/// Time `work` in the pack's runs (warm-up, interleaved samples, calibration) and record
/// latency, speedup, throughput and the comparator's timings in `evidence`.
pub(crate) fn measure_pair(
    slice: &Slice,
    pool: &rayon::ThreadPool,
    work: &mut impl TimedPair,
    dense_flops: f64,
    evidence: &mut SliceEvidence,
) -> Result<(), String> {
    let runs = slice.samples.runs.max(1);
    let mut calibration = Calibration::new();
    let (mut latency, mut comparator, mut speedup, mut calib) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut run_ids = Vec::new();
    for run in 0..runs {
        let timed = pool.install(|| sample(&slice.samples, work, &mut calibration, run == 0))?;
        let pairs: Vec<f64> = timed
            .comparator
            .iter()
            .zip(&timed.candidate)
            .map(|(c, s)| c / s)
            .collect();
        evidence.warmup_iterations += timed.warmup_iterations;
        evidence.runs.push(RunSummary {
            run,
            warmup_iterations: timed.warmup_iterations,
            samples: timed.candidate.len(),
            latency_s: median(&timed.candidate),
            comparator_s: median(&timed.comparator),
            calibration_s: median(&timed.calibration),
            speedup: median(&pairs),
        });
        run_ids.extend(std::iter::repeat_n(run, timed.candidate.len()));
        latency.extend(timed.candidate);
        comparator.extend(timed.comparator);
        calib.extend(timed.calibration);
        speedup.extend(pairs);
    }
    evidence.run_mode = Some(slice.samples.run_mode);
    evidence.counters.insert("samples".into(), latency.len() as f64);
    evidence.counters.insert("runs".into(), f64::from(runs));
    let throughput = latency.iter().map(|s| dense_flops / s / 1e9).collect();
    let tagged = |unit: &str, samples: Vec<f64>| MetricSamples {
        unit: unit.to_owned(),
        samples,
        runs: run_ids.clone(),
    };
    evidence.metrics.insert("latency".into(), tagged("s", latency));
    evidence
        .metrics
        .insert("effective_speedup".into(), tagged("x", speedup));
    evidence
        .metrics
        .insert("throughput_gflops".into(), tagged("GFLOP/s", throughput));
    evidence
        .metrics
        .insert(CALIBRATION_METRIC.into(), tagged("s", calib));
    evidence.comparator = Some(tagged("s", comparator));
    Ok(())
}

/// Name of the calibration workload's samples in [`SliceEvidence::metrics`].
pub const CALIBRATION_METRIC: &str = "calibration";

/// Side of the calibration GEMM: small enough to cost little next to a slice, large
/// enough (≈ 110k multiply-adds) to be timed well above clock resolution.
const CALIBRATION_DIM: usize = 48;

/// A fixed dense GEMM timed interleaved with every pair of a run: its per-run median
/// measures how fast *this run* of the machine is, independent of the slice, so absolute
/// times can be normalised by it (DESIGN.md §6).
struct Calibration {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Calibration {
    fn new() -> Calibration {
        let n = CALIBRATION_DIM * CALIBRATION_DIM;
        let a = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
        let b = (0..n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0).collect();
        Calibration {
            a,
            b,
            c: vec![0.0; n],
        }
    }

    /// One product `C = A·B` (i-k-j order, so the inner loop vectorises).
    fn run(&mut self) -> Result<(), String> {
        let d = CALIBRATION_DIM;
        self.c.fill(0.0);
        for i in 0..d {
            for k in 0..d {
                let aik = self.a[i * d + k];
                let (row, b) = (&mut self.c[i * d..(i + 1) * d], &self.b[k * d..(k + 1) * d]);
                for (c, b) in row.iter_mut().zip(b) {
                    *c += aik * b;
                }
            }
        }
        std::hint::black_box(&self.c);
        Ok(())
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Raw timings of one run of a slice, in the order they were taken.
struct Timings {
    warmup_iterations: u32,
    candidate: Vec<f64>,
    comparator: Vec<f64>,
    calibration: Vec<f64>,
}

/// One run: (on the first run, check correctness), warm up until timings settle, then
/// sample slice, comparator and calibration interleaved. The sample counts and time
/// budget of the pack apply to each run.
fn sample(
    policy: &SamplePolicy,
    work: &mut impl TimedPair,
    calibration: &mut Calibration,
    first: bool,
) -> Result<Timings, String> {
    let start = Instant::now();
    let kernel_error = |e| format!("kernel refused its inputs: {e}");
    if first {
        work.run_candidate().map_err(kernel_error)?;
        work.run_comparator().map_err(kernel_error)?;
        work.check()?;
    }

    let budget = policy.time_budget_s.max(0.0);
    let elapsed = || start.elapsed().as_secs_f64();

    let mut warm = Vec::new();
    loop {
        warm.push(time(|| work.run_candidate()).map_err(kernel_error)?);
        time(|| work.run_comparator()).map_err(kernel_error)?;
        calibration.run()?;
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
    loop {
        // Alternate which side goes first (A B C, B A C, …) so order effects cancel in the
        // ratio; the calibration workload follows every pair.
        let (c, d) = if candidate.len() % 2 == 0 {
            let c = time(|| work.run_candidate()).map_err(kernel_error)?;
            (c, time(|| work.run_comparator()).map_err(kernel_error)?)
        } else {
            let d = time(|| work.run_comparator()).map_err(kernel_error)?;
            (time(|| work.run_candidate()).map_err(kernel_error)?, d)
        };
        candidate.push(c);
        comparator.push(d);
        calib.push(time(|| calibration.run())?);
        let n = candidate.len() as u32;
        if n >= policy.min && (elapsed() >= budget || n >= policy.max) {
            break;
        }
    }
    Ok(Timings {
        warmup_iterations: warm.len() as u32,
        candidate,
        comparator,
        calibration: calib,
    })
}

/// The median same-moment ratio comparator time / candidate time of `work`, sampled in
/// one short run under `policy` (correctness checked first). Used where a decision needs
/// a ratio, not evidence: e.g. the equal-latency width search.
pub(crate) fn median_paired_ratio(
    pool: &rayon::ThreadPool,
    policy: &SamplePolicy,
    work: &mut impl TimedPair,
) -> Result<f64, String> {
    let mut calibration = Calibration::new();
    let timed = pool.install(|| sample(policy, work, &mut calibration, true))?;
    let pairs: Vec<f64> = timed
        .comparator
        .iter()
        .zip(&timed.candidate)
        .map(|(c, s)| c / s)
        .collect();
    Ok(median(&pairs))
}

/// Seconds `f` took, or its error.
fn time<E>(f: impl FnOnce() -> Result<(), E>) -> Result<f64, E> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64().max(MIN_TIMING_S))
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
