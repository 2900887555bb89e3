//! The measurement protocol for one slice (DESIGN.md §6): check correctness once, warm up
//! until timings settle, then sample the slice and its dense comparator *interleaved* in the
//! same process, so the speedup of every pair is a same-moment ratio that machine drift
//! cannot fake.

use super::evidence::{MetricSamples, SliceEvidence, SliceFailure};
use super::workload::Workload;
use crate::ingress::Slice;
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
    };
    let dense_flops: f64 = plan.ops.iter().map(|p| p.op.dense_flops()).sum();
    evidence
        .counters
        .insert("fallback_rate".into(), plan.fallback_rate());
    evidence.counters.insert("dense_flops".into(), dense_flops);
    if let Err(message) = measure(slice, plan, start, dense_flops, &mut evidence) {
        evidence.failure = Some(SliceFailure {
            stage: Stage::Execution,
            message,
        });
    }
    evidence.wall_time_s = start.elapsed().as_secs_f64();
    evidence
}

fn measure(
    slice: &Slice,
    plan: &Plan,
    start: Instant,
    dense_flops: f64,
    evidence: &mut SliceEvidence,
) -> Result<(), String> {
    if plan.ops.is_empty() {
        return Err("the slice has no ops to run".into());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(slice.threads.max(1))
        .build()
        .map_err(|e| format!("cannot start {} worker threads: {e}", slice.threads))?;
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

    let timed = pool.install(|| sample(slice, &mut work, start))?;
    evidence.warmup_iterations = timed.warmup_iterations;
    evidence
        .counters
        .insert("samples".into(), timed.candidate.len() as f64);
    let speedup = timed
        .comparator
        .iter()
        .zip(&timed.candidate)
        .map(|(c, s)| c / s)
        .collect();
    let throughput = timed.candidate.iter().map(|s| dense_flops / s / 1e9).collect();
    evidence.metrics.insert(
        "latency".into(),
        MetricSamples::single_run("s", timed.candidate.clone()),
    );
    evidence.metrics.insert(
        "effective_speedup".into(),
        MetricSamples::single_run("x", speedup),
    );
    evidence.metrics.insert(
        "throughput_gflops".into(),
        MetricSamples::single_run("GFLOP/s", throughput),
    );
    evidence.comparator = Some(MetricSamples::single_run("s", timed.comparator));
    Ok(())
}

/// Raw timings of one slice, in the order they were taken.
struct Timings {
    warmup_iterations: u32,
    candidate: Vec<f64>,
    comparator: Vec<f64>,
}

fn sample(slice: &Slice, work: &mut Workload, start: Instant) -> Result<Timings, String> {
    let kernel_error = |e| format!("kernel refused its inputs: {e}");
    work.run_candidate().map_err(kernel_error)?;
    work.run_comparator().map_err(kernel_error)?;
    work.check()?;

    let policy = &slice.samples;
    let budget = policy.time_budget_s.max(0.0);
    let elapsed = || start.elapsed().as_secs_f64();

    let mut warm = Vec::new();
    loop {
        warm.push(time(|| work.run_candidate()).map_err(kernel_error)?);
        time(|| work.run_comparator()).map_err(kernel_error)?;
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

    let (mut candidate, mut comparator) = (Vec::new(), Vec::new());
    loop {
        // Alternate which side goes first (A B, B A, …) so order effects cancel in the ratio.
        let (c, d) = if candidate.len() % 2 == 0 {
            let c = time(|| work.run_candidate()).map_err(kernel_error)?;
            (c, time(|| work.run_comparator()).map_err(kernel_error)?)
        } else {
            let d = time(|| work.run_comparator()).map_err(kernel_error)?;
            (time(|| work.run_candidate()).map_err(kernel_error)?, d)
        };
        candidate.push(c);
        comparator.push(d);
        let n = candidate.len() as u32;
        if n >= policy.min && (elapsed() >= budget || n >= policy.max) {
            break;
        }
    }
    Ok(Timings {
        warmup_iterations: warm.len() as u32,
        candidate,
        comparator,
    })
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
