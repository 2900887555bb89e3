//! `regress_at_most` decided against the baseline build measured in the same session
//! (issue 22): the per-pair ratios candidate/baseline instead of the candidate
//! against a golden baseline blessed in another session.
//!
//! The unit is the pair: each side of a pair is a fresh process (one invocation of each
//! command on `backend: command`; one run of each binary with `--baseline-bin`), and the
//! fresh process is the unit of replication (DESIGN.md §6). Machine drift cancels inside
//! a pair; what is left is the pair-to-pair spread, and on a loaded runner a few pairs in
//! which one side lost its core for a while (ratios of 0.5 or 2.4 among ratios of 1.09,
//! measured with one core kept busy). So the statistic is the **median** per-pair ratio,
//! with the distribution-free order-statistic interval of the median (a sign-test
//! interval: exact whatever the distribution, and a pair that lost its core moves it by
//! one rank, not by its size); its p-value is the sign test's. (The Hodges–Lehmann
//! location of the log ratios with its signed-rank interval was tried: on the same pairs
//! of 16 gates under a load average of 5 on 2 cores it was wider in 14, since a Walsh
//! average of a wild pair and a good one is itself wild.) With fewer pairs than that
//! interval needs (6 at 95%), a Student t interval of the log ratios is used instead and
//! the detail says so. Both are read against `1 ± margin` like the golden rule.

use super::{Judgement, read_interval};
use crate::domain::metric::{Better, Metric};
use crate::execute::{BaselineRuns, SideReading};
use crate::stats::{self, median};
use crate::validate::describe::{num, percent, range, with_unit};
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, StudentsT};

/// The metrics a baseline build can decide: latency (per-pair ratio of median latency)
/// and throughput (its inverse). Percentiles and quality stay on the golden yardstick.
pub(crate) fn pairs_decide(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::Latency | Metric::LatencyP50 | Metric::ThroughputGflops
    )
}

/// `regress_at_most margin` on `metric` from the baseline build's pairs.
pub(crate) fn paired_regression(
    metric: Metric,
    paired: &BaselineRuns,
    candidate_latency: Option<f64>,
    margin: f64,
    confidence: f64,
) -> Judgement {
    let lower_better = metric.better() == Better::Lower;
    let limit = if lower_better { 1.0 + margin } else { 1.0 - margin };
    let n = paired.ratio.samples.len();
    // The per-pair ratio of the metric: latency ratios as recorded, throughput's inverse.
    let ratios: Vec<f64> = paired
        .ratio
        .samples
        .iter()
        .map(|r| if lower_better { *r } else { 1.0 / r })
        .collect();
    let base_latency = median(&paired.latency.samples).ok();
    // Both columns read alike: with each side read as its fastest record, the candidate's
    // readings, not its median over every record.
    let candidate_latency = match paired.reading {
        SideReading::Median => candidate_latency,
        SideReading::Fastest => median(&paired.candidate_readings()).ok(),
    };
    let source = &paired.source;
    // The matrix's value and baseline columns are latencies: shown for latency rules only.
    let numbers = |j: Judgement| Judgement {
        value: candidate_latency.filter(|_| lower_better),
        baseline: base_latency.filter(|_| lower_better),
        samples: n,
        ..j
    };
    if n < 2 || ratios.iter().any(|u| !(u.is_finite() && *u > 0.0)) {
        return numbers(Judgement::inconclusive(format!(
            "paired with the {source} in this session: {n} pair(s); an interval needs at least 2 (more \
             `samples.runs`, or on `backend: command` more `samples.min`): inconclusive"
        )));
    }
    let Some(reading) = sign_interval(&ratios, limit, lower_better, confidence)
        .or_else(|| t_interval(&ratios, limit, lower_better, confidence))
    else {
        return numbers(Judgement::inconclusive(
            "paired: no interval for the pairs: inconclusive".into(),
        ));
    };
    let Reading {
        estimate,
        ci,
        p_fail,
        method,
    } = reading;
    let verdict = read_interval(ci, limit, lower_better);
    let mde_s = stats::se_from_interval(ci.0, ci.1, confidence).map_or_else(String::new, |se| {
        let m = if lower_better { margin } else { 1.0 / limit - 1.0 };
        let mde = stats::mde(se, m, confidence, stats::DEFAULT_POWER);
        format!(
            "; smallest regression detectable with 80% power from these pairs: {}{}%",
            if lower_better { "+" } else { "−" },
            num(if lower_better {
                mde
            } else {
                1.0 - 1.0 / (1.0 + mde)
            } * 100.0)
        )
    });
    let first = paired
        .order
        .iter()
        .filter(|o| **o == crate::execute::PairOrder::BaselineFirst)
        .count();
    let runs = paired.ratio.by_run().map_or(1, |g| g.len());
    let spread = stats::mad(&ratios)
        .ok()
        .zip(median(&ratios).ok())
        .map_or_else(String::new, |(mad, m)| {
            format!(
                "; pair-to-pair spread (1.4826·MAD) {}%",
                num(1.4826 * mad / m * 100.0)
            )
        });
    let show = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| with_unit(v, Metric::Latency));
    numbers(Judgement {
        undecided_by: None,
        verdict,
        ci: Some(ci),
        p_value: Some(p_fail),
        detail: format!(
            "paired with the {source} in this session, {} per pair: median {} vs baseline build {}; \
             median per-pair ratio candidate/baseline{} {} ({} CI {}, {method}; {n} pairs of fresh {}s in \
             {runs} run(s), the baseline first in {first}{spread}), allowed {} {}: {verdict}{mde_s}; \
             p(within margin) = {}",
            paired.reading.describe(),
            show(candidate_latency),
            show(base_latency),
            if lower_better { "" } else { " of throughput" },
            num(estimate),
            percent(confidence),
            range(ci.0, ci.1),
            paired.pair_unit,
            if lower_better { "≤" } else { "≥" },
            num(limit),
            num(p_fail),
        ),
        ..Judgement::inconclusive(String::new())
    })
}

/// One reading of the pairs: the estimate, its interval, the p-value of "within the
/// margin" (two-sided-equivalent, so `fail` ⇔ p < 1 − confidence) and how it was made.
struct Reading {
    estimate: f64,
    ci: (f64, f64),
    p_fail: f64,
    method: String,
}

/// The median ratio with its order-statistic interval and the sign test; `None` with too
/// few pairs for the interval.
fn sign_interval(ratios: &[f64], limit: f64, lower_better: bool, confidence: f64) -> Option<Reading> {
    let ci = stats::quantile_ci(ratios, 0.5, confidence)?;
    let estimate = median(ratios).ok()?;
    let n = ratios.len() as u64;
    // Pairs on the good side of the limit: few of them reject "within the margin".
    let good = ratios
        .iter()
        .filter(|&&r| if lower_better { r <= limit } else { r >= limit })
        .count() as u64;
    let p_one = Binomial::new(0.5, n).ok()?.cdf(good);
    Some(Reading {
        estimate,
        ci,
        p_fail: (2.0 * p_one).min(1.0),
        method: "order-statistic interval of the median, sign test".into(),
    })
}

/// Student t on the log ratios (a geometric-mean interval), for too few pairs for
/// [`sign_interval`].
fn t_interval(ratios: &[f64], limit: f64, lower_better: bool, confidence: f64) -> Option<Reading> {
    let k = ratios.len();
    let logs: Vec<f64> = ratios.iter().map(|u| u.ln()).collect();
    let mean = logs.iter().sum::<f64>() / k as f64;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
    let se = (var / k as f64).sqrt();
    let t = StudentsT::new(0.0, 1.0, (k - 1) as f64).ok()?;
    let tq = t.inverse_cdf(1.0 - (1.0 - confidence) / 2.0);
    let worse = if lower_better {
        mean - limit.ln()
    } else {
        limit.ln() - mean
    };
    let p_fail = if se > 0.0 {
        (2.0 * (1.0 - t.cdf(worse / se))).clamp(0.0, 1.0)
    } else if worse > 0.0 {
        0.0
    } else {
        1.0
    };
    Some(Reading {
        estimate: mean.exp(),
        ci: ((mean - tq * se).exp(), (mean + tq * se).exp()),
        p_fail,
        method: format!("Student t on the log ratios, {k} pairs: too few for the order-statistic interval"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::verdict::Verdict;
    use crate::execute::PairOrder;

    fn pairs(ratios: &[f64], runs: u32) -> BaselineRuns {
        let mut b = BaselineRuns::new(
            "baseline command `sh base.sh`".into(),
            "invocation",
            SideReading::Fastest,
        );
        for (i, r) in ratios.iter().enumerate() {
            let run = (i as u32) % runs;
            b.push(run, PairOrder::of_pair(i), 0.01 * r, 0.01);
        }
        b
    }

    #[test]
    fn issue_22_a_clear_slowdown_fails_and_a_steady_pair_passes() {
        let slow = pairs(&[1.20, 1.21, 1.19, 1.22, 1.20, 1.18], 3);
        let j = paired_regression(Metric::Latency, &slow, Some(0.012), 0.05, 0.95);
        assert_eq!(j.verdict, Verdict::Fail, "{}", j.detail);
        assert!(j.p_value.unwrap() < 0.05);
        let same = pairs(&[1.0, 1.01, 0.99, 1.0, 1.005, 0.995], 3);
        let j = paired_regression(Metric::Latency, &same, Some(0.01), 0.05, 0.95);
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.detail);
        assert!(
            j.detail.contains("smallest regression detectable"),
            "{}",
            j.detail
        );
        // With enough pairs, the median's order-statistic interval; a pair that lost its
        // core moves it by one rank.
        let mut many = vec![1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.002, 0.998, 1.01, 0.99];
        many.extend([2.4, 0.5]);
        let j = paired_regression(Metric::Latency, &pairs(&many, 2), Some(0.01), 0.05, 0.95);
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.detail);
        assert!(j.detail.contains("order-statistic"), "{}", j.detail);
    }

    /// Issue 22: with each side read as its fastest record, the matrix's value column is
    /// the candidate's readings (ratio × baseline), not its median over every record, and
    /// the detail says how the sides were read.
    #[test]
    fn a_fastest_record_pairing_shows_both_sides_read_alike() {
        let slow = pairs(&[1.10, 1.11, 1.09, 1.10, 1.10, 1.12], 2);
        let j = paired_regression(Metric::Latency, &slow, Some(0.025), 0.05, 0.95);
        assert!((j.value.unwrap() - 0.011).abs() < 1e-9, "{:?}", j.value);
        assert!((j.baseline.unwrap() - 0.01).abs() < 1e-12);
        assert!(j.detail.contains("fastest latency record"), "{}", j.detail);
    }

    #[test]
    fn issue_22_throughput_reads_the_inverse_ratio() {
        // Latency 20% up is throughput 1/1.2 down: beyond a 5% margin.
        let slow = pairs(&[1.20, 1.21, 1.19, 1.22], 1);
        let j = paired_regression(Metric::ThroughputGflops, &slow, None, 0.05, 0.95);
        assert_eq!(j.verdict, Verdict::Fail, "{}", j.detail);
        assert!(j.ci.unwrap().1 < 0.95);
        assert!(j.detail.contains("Student t"), "{}", j.detail);
    }

    #[test]
    fn issue_22_one_pair_is_inconclusive_and_says_what_to_do() {
        let one = pairs(&[1.3], 1);
        let j = paired_regression(Metric::Latency, &one, Some(0.013), 0.05, 0.95);
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.detail.contains("samples.runs"), "{}", j.detail);
    }
}
