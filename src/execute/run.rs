//! The measurement protocol for one slice (DESIGN.md §6): check correctness once, warm up
//! until timings settle, then sample the slice and its dense comparator *interleaved* in the
//! same process, so the speedup of every pair is a same-moment ratio that machine drift
//! cannot fake.

use super::evidence::{MetricSamples, OpCost, RunSummary, SliceEvidence, SliceFailure};
use super::workload::Workload;
use crate::ingress::Slice;
use crate::lower::{KernelPath, Plan};
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
        op_costs: vec![],
    };
    let dense_flops: f64 = plan.ops.iter().map(|p| p.op.dense_flops()).sum();
    evidence
        .counters
        .insert("fallback_rate".into(), plan.fallback_rate());
    evidence.counters.insert("dense_flops".into(), dense_flops);
    evidence.counters.insert(
        "useful_flops".into(),
        useful_flops(plan, slice.sparsity.density()),
    );
    if let Err(message) = measure(slice, plan, dense_flops, &mut evidence) {
        evidence.failure = Some(SliceFailure {
            stage: Stage::Execution,
            message,
        });
    }
    evidence.wall_time_s = start.elapsed().as_secs_f64();
    evidence
}

fn measure(slice: &Slice, plan: &Plan, dense_flops: f64, evidence: &mut SliceEvidence) -> Result<(), String> {
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
    let activation_bytes = slice.precision.bytes() as usize;
    counters.insert("bytes_moved".into(), work.bytes_moved(activation_bytes) as f64);

    let runs = slice.samples.runs.max(1);
    let mut calibration = Calibration::new();
    let (mut latency, mut comparator, mut speedup, mut calib) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut run_ids = Vec::new();
    for run in 0..runs {
        let timed = pool.install(|| sample(slice, &mut work, &mut calibration, run == 0))?;
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
    evidence.op_costs = pool.install(|| op_costs(&mut work))?;
    Ok(())
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

/// Each op timed alone on its planned path and on the dense kernel, interleaved op by op
/// (alternating which side goes first) for [`OP_TIMING_PASSES`] passes after one untimed
/// pass; the medians say where a slice's latency goes, which the whole-workload samples
/// cannot. Taken after the main sampling, so it never perturbs the gate's own samples.
fn op_costs(work: &mut Workload) -> Result<Vec<OpCost>, String> {
    let kernel_error = |e| format!("kernel refused its inputs: {e}");
    let names: Vec<String> = work.op_names().map(str::to_owned).collect();
    let mut candidate = vec![Vec::with_capacity(OP_TIMING_PASSES); names.len()];
    let mut comparator = vec![Vec::with_capacity(OP_TIMING_PASSES); names.len()];
    for pass in 0..=OP_TIMING_PASSES {
        for i in 0..names.len() {
            let (c, d) = if (pass + i) % 2 == 0 {
                let c = time(|| work.run_candidate_op(i)).map_err(kernel_error)?;
                (c, time(|| work.run_comparator_op(i)).map_err(kernel_error)?)
            } else {
                let d = time(|| work.run_comparator_op(i)).map_err(kernel_error)?;
                (time(|| work.run_candidate_op(i)).map_err(kernel_error)?, d)
            };
            // Pass 0 warms each op's caches after the previous op evicted them.
            if pass > 0 {
                candidate[i].push(c);
                comparator[i].push(d);
            }
        }
    }
    Ok(names
        .into_iter()
        .zip(candidate.iter().zip(&comparator))
        .map(|(op, (c, d))| OpCost {
            op,
            candidate_s: median(c),
            comparator_s: median(d),
            passes: c.len(),
            candidate_energy_j: None,
            comparator_energy_j: None,
        })
        .collect())
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
    slice: &Slice,
    work: &mut Workload,
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

    let policy = &slice.samples;
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
