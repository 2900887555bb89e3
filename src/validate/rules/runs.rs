//! Run-aware readings (DESIGN.md §6, issue 9): when the evidence holds two or more runs,
//! the run is the unit of replication. Samples inside a run share the run's speed mode
//! and are autocorrelated, so treating them as independent shrinks intervals and makes
//! the gate cry wolf on machine noise.

use super::{Judgement, read_interval};
use crate::domain::metric::Metric;
use crate::stats::{self, median};
use crate::validate::describe::{num, percent, range, with_unit};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// An absolute bound on a positive ratio metric (`effective_speedup`) from per-run paired
/// ratios: the value is the median of the per-run medians, the interval a Student-t
/// interval of the per-run medians on the log scale (a geometric-mean interval with
/// `runs − 1` degrees of freedom). The detail states the smallest change from the bound
/// that the runs could detect with 80% power.
///
/// `None` when there are fewer than two runs or a per-run median is not positive (the
/// caller then keeps the sample-level rule).
pub(crate) fn absolute_by_run(
    metric: Metric,
    groups: &[Vec<f64>],
    bound: f64,
    upper: bool,
    confidence: f64,
) -> Option<Judgement> {
    let medians: Vec<f64> = groups
        .iter()
        .filter(|g| !g.is_empty())
        .map(|g| median(g))
        .collect::<Result<_, _>>()
        .ok()?;
    let k = medians.len();
    if k < 2 || medians.iter().any(|&m| !(m > 0.0 && m.is_finite())) || bound.is_nan() || bound <= 0.0 {
        return None;
    }
    let logs: Vec<f64> = medians.iter().map(|m| m.ln()).collect();
    let mean = logs.iter().sum::<f64>() / k as f64;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
    let se = (var / k as f64).sqrt();
    let t = StudentsT::new(0.0, 1.0, (k - 1) as f64)
        .ok()?
        .inverse_cdf(1.0 - (1.0 - confidence) / 2.0);
    let ci = ((mean - t * se).exp(), (mean + t * se).exp());
    let value = median(&medians).ok()?;
    let verdict = read_interval(ci, bound, upper);
    let between_cv = var.sqrt() * 100.0;
    let mde = stats::mde(se, 0.0, confidence, stats::DEFAULT_POWER) * 100.0;
    let n: usize = groups.iter().map(Vec::len).sum();
    Some(Judgement {
        undecided_by: None,
        verdict,
        value: Some(value),
        baseline: None,
        ci: Some(ci),
        p_value: None,
        samples: n,
        detail: format!(
            "run-aware: median of {k} per-run medians {} ({} CI {}, Student t on the log of the per-run \
             medians, {k} runs, {n} samples; between-run spread {}%) against {} {}: {verdict}; smallest \
             change from the bound detectable with 80% power from {k} runs: ±{}%",
            with_unit(value, metric),
            percent(confidence),
            range(ci.0, ci.1),
            num(between_cv),
            if upper { "at most" } else { "at least" },
            with_unit(bound, metric),
            num(mde),
        ),
    })
}

/// Latency samples divided by the median of the calibration workload of their run, or
/// `None` when the runs of the two do not line up (then no normalisation is possible).
pub(crate) fn normalise_by_calibration(
    samples: &[f64],
    runs: &[u32],
    calibration: &crate::execute::MetricSamples,
) -> Option<Vec<f64>> {
    if samples.len() != runs.len() || calibration.samples.len() != calibration.runs.len() {
        return None;
    }
    let mut per_run = std::collections::BTreeMap::<u32, Vec<f64>>::new();
    for (&x, &r) in calibration.samples.iter().zip(&calibration.runs) {
        per_run.entry(r).or_default().push(x);
    }
    let medians: std::collections::BTreeMap<u32, f64> = per_run
        .into_iter()
        .filter_map(|(r, xs)| median(&xs).ok().filter(|m| *m > 0.0).map(|m| (r, m)))
        .collect();
    samples
        .iter()
        .zip(runs)
        .map(|(x, r)| medians.get(r).map(|m| x / m))
        .collect()
}
