//! The gate measured as an instrument (DESIGN.md §4): on A/A comparisons its false-alarm
//! rate must stay at or under nominal, and a real slowdown must be caught with high power.
//!
//! Setting: lognormal timings with a CV of 7% (within-process noise measured on this kind
//! of machine, DESIGN.md §6), 30 samples per side, `regress_at_most 5%` at 95% confidence.

use super::{baseline, evidence, guard, lognormal, slice, slice_ev, sparse_plan};
use crate::ingress::{Rule, Severity};
use crate::metric::Metric;
use crate::validate::golden::Baselines;
use crate::validate::{AssessOptions, assess_with};
use crate::verdict::Verdict;

/// Log-sd giving a CV of 7%: CV² = exp(σ²) − 1.
fn sigma_for_cv(cv: f64) -> f64 {
    (1.0 + cv * cv).ln().sqrt()
}

/// Run `trials` independent comparisons of a baseline against a candidate `slowdown` times
/// slower, through the real `assess`, and return the share of each verdict
/// (pass, inconclusive, fail).
fn run(trials: usize, slowdown: f64, margin: f64, seed: u64) -> (f64, f64, f64) {
    let sigma = sigma_for_cv(0.07);
    let mut slices = Vec::with_capacity(trials);
    let mut evs = Vec::with_capacity(trials);
    let mut baselines = Baselines::new();
    for t in 0..trials {
        let id = format!("s{t}");
        let s = seed.wrapping_mul(1_000_003).wrapping_add(t as u64 * 2);
        let mut sl = slice(
            &id,
            vec![guard(
                Metric::Latency,
                Rule::RegressAtMost { margin },
                Severity::Block,
            )],
        );
        sl.seed = s;
        slices.push(sl);
        evs.push(slice_ev(
            &id,
            vec![("latency", lognormal(30, 1e-3 * slowdown, sigma, s))],
            vec![],
            sparse_plan(),
        ));
        baselines.append(&mut baseline(
            &id,
            vec![("latency", lognormal(30, 1e-3, sigma, s + 1))],
        ));
    }
    let a = assess_with(
        &slices,
        &evidence(evs),
        &baselines,
        &AssessOptions { resamples: 1000 },
    );
    let share = |v: Verdict| a.outcomes.iter().filter(|o| o.verdict == v).count() as f64 / trials as f64;
    (
        share(Verdict::Pass),
        share(Verdict::Inconclusive),
        share(Verdict::Fail),
    )
}

/// Upper edge of a one-sided binomial slack: `p + 3·sqrt(p(1−p)/n)`.
fn slack(p: f64, n: usize) -> f64 {
    p + 3.0 * (p * (1.0 - p) / n as f64).sqrt()
}

#[test]
fn a_a_comparisons_rarely_fail_and_slowdowns_are_caught() {
    let (pass, inconclusive, fail) = run(500, 1.0, 0.05, 1);
    eprintln!("A/A, margin 5%: pass {pass:.3} inconclusive {inconclusive:.3} fail {fail:.3}");
    assert!(fail <= slack(0.05, 500), "A/A false-alarm rate {fail}");

    // With no margin at all the rule is a plain one-sided test at 2.5%: the sharpest check
    // that the bootstrap interval is calibrated, not just that the margin hides noise.
    let (_, _, fail0) = run(500, 1.0, 0.0, 2);
    eprintln!("A/A, margin 0: fail {fail0:.3} (nominal 0.025)");
    assert!(
        fail0 <= slack(0.05, 500),
        "A/A false-alarm rate at margin 0: {fail0}"
    );

    let (_, _, power) = run(200, 1.15, 0.05, 3);
    eprintln!("15% slowdown, margin 5%: fail {power:.3}");
    assert!(power >= 0.8, "power against a 15% slowdown: {power}");

    let (_, _, power5) = run(200, 1.05, 0.0, 4);
    eprintln!("5% slowdown, margin 0: fail {power5:.3} (reported, not asserted)");
}
