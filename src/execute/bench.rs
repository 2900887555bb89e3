//! `sparsegate bench`: one GEMM, one kernel, against its dense comparator.
//!
//! It is a one-op slice run through the same stages as a pack (lowering chooses the kernel
//! or the fallback, [`execute_slice`] warms up and samples the kernel interleaved with the
//! dense comparator), so a number printed here is the number a pack would measure. What it
//! adds is the summary people read: medians, GFLOP/s, and the speedup with its interval.

use super::run::execute_slice;
use crate::domain::{Counter, Metric};
use crate::domain::{GemmOp, Precision, Sparsity};
use crate::ingress::pack::SamplePolicy;
use crate::ingress::{Slice, SliceBackend};
use crate::lower::{KernelPath, lower};
use crate::stats::{Bootstrap, StatsError, median, quantile_ci};
use serde::Serialize;
use thiserror::Error;

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    /// Tokens.
    pub m: usize,
    /// Output features (weight rows).
    pub n: usize,
    /// Input features (reduction length).
    pub k: usize,
    /// Weight sparsity under test.
    pub sparsity: Sparsity,
    /// Precision under test.
    pub precision: Precision,
    /// Worker threads.
    pub threads: usize,
    /// Warm-up and sample budget.
    pub samples: SamplePolicy,
    /// Seed of the inputs and of the bootstrap.
    pub seed: u64,
    /// Confidence of the intervals, in (0, 1).
    pub confidence: f64,
}

/// A confidence interval around an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Interval {
    /// Point estimate.
    pub estimate: f64,
    /// Lower end (`null` in JSON when too few samples bound it).
    pub low: Option<f64>,
    /// Upper end.
    pub high: Option<f64>,
    /// Confidence.
    pub confidence: f64,
}

/// The measured result, as `--json` prints it. The type is the format
/// (`schemas/bench-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct BenchReport {
    /// `MxNxK`.
    pub gemm: String,
    /// The sparsity, in pack form.
    pub sparsity: String,
    /// The precision.
    pub precision: Precision,
    /// Worker threads.
    pub threads: usize,
    /// The path lowering chose.
    pub path: KernelPath,
    /// Why: the kernel, or the reason for falling back.
    pub reason: String,
    /// The instruction-set paths the kernel and its dense comparator took on this CPU
    /// (e.g. bf16 `avx512-bf16` or `avx512-bf16-shift`), so a number says what it measured.
    pub isa: super::IsaRecord,
    /// Paired samples taken.
    pub samples: usize,
    /// Warm-up iterations before sampling.
    pub warmup_iterations: u32,
    /// Kernel time, median with its order-statistic interval (seconds).
    pub kernel_s: Interval,
    /// Dense comparator time, median with its interval (seconds).
    pub comparator_s: Interval,
    /// 2·M·N·K over the kernel's median time: the rate a dense kernel would need to match it.
    pub gflops_dense_equivalent: f64,
    /// The multiply-adds on kept weights only (2·M·N·K·density) over the kernel's median time.
    pub gflops_useful: f64,
    /// 2·M·N·K over the comparator's median time.
    pub comparator_gflops: f64,
    /// Comparator time / kernel time: the bootstrap interval of the ratio of medians
    /// (seeded), the estimate being the ratio of the two medians.
    pub speedup: Interval,
    /// Median of the per-pair ratios (each pair taken back to back in one process).
    pub speedup_paired_median: f64,
    /// Bytes of stored weight values on the sparse path (0 when dense).
    pub value_bytes: f64,
    /// Bytes of index metadata on the sparse path.
    pub metadata_bytes: f64,
    /// metadata / value bytes.
    pub metadata_overhead: f64,
}

/// Why a benchmark produced no report.
#[derive(Debug, Error)]
pub enum BenchError {
    /// The kernel could not run (e.g. a refused shape or an allocation failure).
    #[error("the benchmark did not run: {0}")]
    Execution(String),
    /// The samples could not be summarised.
    #[error("cannot summarise the samples: {0}")]
    Stats(#[from] StatsError),
}

/// Run the benchmark described by `req`.
pub fn bench_gemm(req: &BenchRequest) -> Result<BenchReport, BenchError> {
    let op = GemmOp {
        name: "gemm".into(),
        m: req.m,
        n: req.n,
        k: req.k,
    };
    let slice = Slice {
        pack: "bench".into(),
        id: format!(
            "gemm-{}x{}x{}-{}-{}",
            req.m,
            req.n,
            req.k,
            req.sparsity.tag(),
            req.precision.as_str()
        ),
        ops: vec![op.clone()],
        sparsity: req.sparsity,
        precision: req.precision,
        backend: SliceBackend::Kernels {
            weights: Default::default(),
        },
        guardrails: vec![],
        not_applicable: vec![],
        samples: req.samples.clone(),
        seed: req.seed,
        threads: req.threads.max(1),
        checkpoint: None,
        load: None,
    };
    let plan = lower(&slice);
    let ev = execute_slice(&slice, &plan);
    if let Some(f) = &ev.failure {
        return Err(BenchError::Execution(f.message.clone()));
    }
    let missing = || BenchError::Execution("no samples were taken".into());
    let kernel = &ev.metrics.get(Metric::Latency).ok_or_else(missing)?.samples;
    let comparator = &ev.comparator.as_ref().ok_or_else(missing)?.samples;
    let paired = &ev
        .metrics
        .get(Metric::EffectiveSpeedup)
        .ok_or_else(missing)?
        .samples;
    let interval = |xs: &[f64]| -> Result<Interval, StatsError> {
        let ci = quantile_ci(xs, 0.5, req.confidence);
        Ok(Interval {
            estimate: median(xs)?,
            low: ci.map(|c| c.0),
            high: ci.map(|c| c.1),
            confidence: req.confidence,
        })
    };
    let (kernel_s, comparator_s) = (interval(kernel)?, interval(comparator)?);
    // `ratio_of_medians(a, b)` is median(b) / median(a): kernel first gives comparator / kernel.
    let ratio = Bootstrap::seeded(req.seed).ratio_of_medians(kernel, comparator, req.confidence)?;
    let flops = op.dense_flops();
    let density = if plan.ops[0].path == KernelPath::Dense {
        1.0
    } else {
        req.sparsity.density()
    };
    let counter = |key: Counter| ev.counters.value(key).unwrap_or(0.0);
    Ok(BenchReport {
        gemm: format!("{}x{}x{}", req.m, req.n, req.k),
        sparsity: req.sparsity.to_string(),
        precision: req.precision,
        threads: slice.threads,
        path: plan.ops[0].path,
        reason: plan.ops[0].reason.clone(),
        isa: super::isa_record(&slice, &plan),
        samples: kernel.len(),
        warmup_iterations: ev.warmup_iterations,
        gflops_dense_equivalent: flops / kernel_s.estimate / 1e9,
        gflops_useful: flops * density / kernel_s.estimate / 1e9,
        comparator_gflops: flops / comparator_s.estimate / 1e9,
        kernel_s,
        comparator_s,
        speedup: Interval {
            estimate: ratio.estimate,
            low: Some(ratio.low),
            high: Some(ratio.high),
            confidence: req.confidence,
        },
        speedup_paired_median: median(paired)?,
        value_bytes: counter(Counter::ValueBytes),
        metadata_bytes: counter(Counter::MetadataBytes),
        metadata_overhead: counter(Metric::MetadataOverhead.into()),
    })
}

/// One shape at several token counts, and where the sparse kernel stops paying: the
/// answer to "below how many tokens does sparse win on this CPU?" (issue 20). The type is
/// the format (`schemas/bench-sweep.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SweepReport {
    /// The weights' shape, `NxK`.
    pub weights: String,
    /// The sparsity, in pack form.
    pub sparsity: String,
    /// The precision.
    pub precision: Precision,
    /// Worker threads.
    pub threads: usize,
    /// One benchmark per swept token count, in ascending order.
    pub points: Vec<BenchReport>,
    /// Where the speedup crosses 1.
    pub break_even: BreakEven,
}

pub use super::evidence::BreakEven;

/// [`bench_gemm`] of `req`'s weights at each of `tokens` (sorted, deduplicated), and the
/// break-even point.
pub fn sweep_tokens(req: &BenchRequest, tokens: &[usize]) -> Result<SweepReport, BenchError> {
    let mut tokens = tokens.to_vec();
    tokens.sort_unstable();
    tokens.dedup();
    if tokens.first().is_none_or(|&t| t == 0) {
        return Err(BenchError::Execution(
            "a sweep needs token counts of at least 1".into(),
        ));
    }
    let points = tokens
        .iter()
        .map(|&m| bench_gemm(&BenchRequest { m, ..req.clone() }))
        .collect::<Result<Vec<_>, _>>()?;
    let measured: Vec<(usize, Interval)> = tokens
        .iter()
        .copied()
        .zip(points.iter().map(|p| p.speedup))
        .collect();
    Ok(SweepReport {
        weights: format!("{}x{}", req.n, req.k),
        sparsity: req.sparsity.to_string(),
        precision: req.precision,
        threads: req.threads.max(1),
        points,
        break_even: break_even(&measured),
    })
}

/// The break-even of speedups measured at ascending token counts.
pub fn break_even(points: &[(usize, Interval)]) -> BreakEven {
    let wins = |i: &Interval| i.low.is_some_and(|l| l > 1.0);
    let loses = |i: &Interval| i.high.is_some_and(|h| h < 1.0);
    let wins_through = points.iter().take_while(|(_, i)| wins(i)).last().map(|(t, _)| *t);
    let loses_from = points
        .iter()
        .rev()
        .take_while(|(_, i)| loses(i))
        .last()
        .map(|(t, _)| *t);
    let wins_from = points
        .iter()
        .rev()
        .take_while(|(_, i)| wins(i))
        .last()
        .map(|(t, _)| *t);
    // The first crossing of 1 in the given direction, log-interpolated between the two
    // swept counts around it.
    let crossing = |falling: bool| {
        points.windows(2).find_map(|w| {
            let ((t0, a), (t1, b)) = (w[0], w[1]);
            let crosses = if falling {
                a.estimate >= 1.0 && b.estimate < 1.0
            } else {
                a.estimate < 1.0 && b.estimate >= 1.0
            };
            crosses.then(|| {
                let (l0, l1) = ((t0 as f64).ln(), (t1 as f64).ln());
                (l0 + (l1 - l0) * (a.estimate - 1.0) / (a.estimate - b.estimate)).exp()
            })
        })
    };
    let starts_above = points.first().is_some_and(|(_, i)| i.estimate >= 1.0);
    // A sweep that starts below 1 has no break-even below which sparse wins, and one that
    // starts above has none from which it starts to.
    BreakEven {
        wins_through,
        loses_from,
        tokens: crossing(true).filter(|_| starts_above),
        wins_from,
        rises_at: crossing(false).filter(|_| !starts_above),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(sparsity: Sparsity) -> BenchRequest {
        BenchRequest {
            m: 9,
            n: 32,
            k: 48,
            sparsity,
            precision: Precision::Fp32,
            threads: 1,
            samples: SamplePolicy {
                warmup: 1,
                min: 6,
                max: 12,
                time_budget_s: 0.01,
                ..Default::default()
            },
            seed: 3,
            confidence: 0.95,
        }
    }

    #[test]
    fn issue_3_bench_reports_every_sparse_format() {
        for s in [
            "2:4",
            "unstructured:density=10%",
            "block:16x16:density=25%",
            "dense",
        ] {
            let r = bench_gemm(&request(s.parse().unwrap())).unwrap();
            assert_eq!(r.gemm, "9x32x48");
            assert!((6..=12).contains(&r.samples), "{s}: {}", r.samples);
            assert!(r.speedup.estimate > 0.0 && r.speedup.low <= r.speedup.high, "{s}");
            assert!(r.gflops_useful <= r.gflops_dense_equivalent, "{s}");
            let want = if s == "dense" {
                KernelPath::Dense
            } else {
                KernelPath::Sparse
            };
            assert_eq!(r.path, want, "{s}: {}", r.reason);
            assert_eq!(r.value_bytes > 0.0, s != "dense", "{s}");
        }
    }

    fn interval(estimate: f64, low: f64, high: f64) -> Interval {
        Interval {
            estimate,
            low: Some(low),
            high: Some(high),
            confidence: 0.95,
        }
    }

    #[test]
    fn issue_20_break_even_is_where_the_speedup_falls_through_one() {
        let points = [
            (1, interval(1.8, 1.7, 1.9)),
            (16, interval(1.4, 1.3, 1.5)),
            (128, interval(1.2, 0.95, 1.3)),
            (512, interval(0.8, 0.7, 0.9)),
            (1024, interval(0.7, 0.6, 0.8)),
        ];
        let b = break_even(&points);
        assert_eq!((b.wins_through, b.loses_from), (Some(16), Some(512)));
        // Log-linear between 128 (1.2) and 512 (0.8): halfway, 256.
        assert!((b.tokens.unwrap() - 256.0).abs() < 1e-9, "{:?}", b.tokens);

        // Winning everywhere: no break-even inside the sweep.
        let all = [(1, interval(2.0, 1.9, 2.1)), (8, interval(1.5, 1.4, 1.6))];
        let b = break_even(&all);
        assert_eq!((b.wins_through, b.loses_from, b.tokens), (Some(8), None, None));
        // Losing from the start: none either, whatever follows.
        let below = [
            (1, interval(0.9, 0.8, 0.95)),
            (8, interval(1.1, 1.0, 1.2)),
            (16, interval(0.9, 0.8, 1.0)),
        ];
        let b = break_even(&below);
        assert_eq!((b.wins_through, b.loses_from, b.tokens), (None, None, None));
    }

    #[test]
    fn issue_21_break_even_names_where_a_sparse_path_starts_to_win() {
        // Prefill-only wins: below 1 at few tokens, above from 64 on.
        let rising = [
            (1, interval(0.4, 0.35, 0.45)),
            (16, interval(0.8, 0.7, 0.9)),
            (64, interval(1.25, 1.2, 1.3)),
            (256, interval(1.3, 1.2, 1.4)),
        ];
        let b = break_even(&rising);
        assert_eq!((b.wins_through, b.tokens), (None, None));
        assert_eq!((b.wins_from, b.loses_from), (Some(64), None));
        // Log-linear between 16 (0.8) and 64 (1.25): 4/9 of the way in log tokens.
        let expected = (16f64.ln() + (64f64.ln() - 16f64.ln()) * 0.2 / 0.45).exp();
        assert!((b.rises_at.unwrap() - expected).abs() < 1e-9, "{:?}", b.rises_at);
        // A sweep that starts above 1 never "starts to win".
        let falling = [(1, interval(1.5, 1.4, 1.6)), (8, interval(0.5, 0.4, 0.6))];
        assert_eq!(break_even(&falling).rises_at, None);
    }

    #[test]
    fn issue_20_sweep_measures_every_token_count_in_order() {
        let r = sweep_tokens(&request("2:4".parse().unwrap()), &[8, 1, 8, 3]).unwrap();
        let tokens: Vec<&str> = r.points.iter().map(|p| p.gemm.as_str()).collect();
        assert_eq!(tokens, ["1x32x48", "3x32x48", "8x32x48"]);
        assert_eq!(r.weights, "32x48");
        assert!(sweep_tokens(&request("2:4".parse().unwrap()), &[]).is_err());
    }

    #[test]
    fn issue_3_bench_records_the_fallback() {
        let mut req = request("block:16x16:density=25%".parse().unwrap());
        req.k = 40;
        let r = bench_gemm(&req).unwrap();
        assert_eq!(r.path, KernelPath::DenseFallback);
        assert!(r.reason.contains("do not tile"), "{}", r.reason);
    }
}
