//! The gate measured as an instrument (DESIGN.md §4, issue 5): on A/A comparisons its
//! false-alarm rate must stay at or under nominal, and a real slowdown must be caught with
//! high power. Every comparison goes through the real `assess` as its own one-guardrail
//! gate (so Holm has nothing to adjust), except the multiplicity test, which puts ten
//! guardrails in one gate on purpose.
//!
//! Setting: lognormal timings (CV 5–10%, the within-process noise measured on this kind of
//! machine, DESIGN.md §6), `regress_at_most` on the median (or p99) at 95% confidence, so
//! the fail test is one-sided at 2.5%. To stay fast (< 3 s in release) the bootstraps use
//! 200 resamples instead of the gate's 2000: the interval ends are then noisier, which can
//! only move the measured rates by Monte-Carlo error, not bias them.
//!
//! Why the power test uses margin 0 and not 5%: a `regress_at_most 5%` rule fails only
//! when the whole interval lies beyond +5%, so a true 5% slowdown sits exactly on the limit
//! and is failed at most α/2 of the time: no rule can both pass A/A comparisons against a
//! 5% margin and fail a 5% slowdown. Catching a 5% slowdown needs a margin below it (here
//! 0: "any regression").

use super::{baseline, evidence, guard, lognormal, slice, slice_ev, sparse_plan};
use crate::domain::metric::Metric;
use crate::domain::verdict::Verdict;
use crate::ingress::{Rule, Severity};
use crate::stats::wilson;
use crate::validate::golden::Baselines;
use crate::validate::{AssessOptions, assess_with};

/// Log-sd giving a coefficient of variation `cv`: CV² = exp(σ²) − 1.
fn sigma_for_cv(cv: f64) -> f64 {
    (1.0 + cv * cv).ln().sqrt()
}

/// One study: `trials` independent one-guardrail gates.
struct Study {
    trials: usize,
    n: usize,
    /// CV of trial t runs linearly from `cv.0` to `cv.1`.
    cv: (f64, f64),
    slowdown: f64,
    margin: f64,
    metric: Metric,
    seed: u64,
}

/// What the studies below start from: 300 A/A comparisons of median latency at CV 5%, n = 30
/// per side, margin 0. Every study sets its own seed.
const AA: Study = Study {
    trials: 300,
    n: 30,
    cv: (0.05, 0.05),
    slowdown: 1.0,
    margin: 0.0,
    metric: Metric::Latency,
    seed: 0,
};

/// Shares of (pass, inconclusive, fail).
fn run(s: &Study) -> (f64, f64, f64) {
    let mut counts = [0usize; 3];
    for t in 0..s.trials {
        let cv = s.cv.0 + (s.cv.1 - s.cv.0) * t as f64 / (s.trials.max(2) - 1) as f64;
        let sigma = sigma_for_cv(cv);
        let seed = s.seed.wrapping_mul(1_000_003).wrapping_add(t as u64 * 2);
        let mut sl = slice(
            "s",
            vec![guard(
                s.metric,
                Rule::RegressAtMost { margin: s.margin },
                Severity::Block,
            )],
        );
        sl.seed = seed;
        let base: Baselines = baseline("s", vec![("latency", lognormal(s.n, 1e-3, sigma, seed + 1))]);
        let ev = slice_ev(
            "s",
            vec![("latency", lognormal(s.n, 1e-3 * s.slowdown, sigma, seed))],
            vec![],
            sparse_plan(),
        );
        let a = assess_with(
            &[sl],
            &evidence(vec![ev]),
            &base,
            &AssessOptions { resamples: 200 },
        );
        counts[match a.outcomes[0].verdict {
            Verdict::Pass => 0,
            Verdict::Fail => 2,
            _ => 1,
        }] += 1;
    }
    let share = |k: usize| counts[k] as f64 / s.trials as f64;
    (share(0), share(1), share(2))
}

/// 95% Wilson interval of a rate observed in `trials`.
fn interval(rate: f64, trials: usize) -> (f64, f64) {
    wilson((rate * trials as f64).round() as u64, trials as u64, 0.95).expect("valid counts")
}

/// Issue 5: 2,000 seeded A/A comparisons (CV 5–10%, n = 30 per side, margin 0, so the
/// sharpest test of the interval's calibration) fail at most at the nominal one-sided
/// 2.5%: the lower end of the observed rate's 95% Wilson interval must not exceed it.
/// With the gate's 5% margin the A/A false-alarm rate is ~0 and most comparisons pass.
#[test]
fn issue_5_a_a_false_alarm_rate_is_at_most_nominal() {
    let study = Study {
        trials: 2000,
        cv: (0.05, 0.10),
        seed: 1,
        ..AA
    };
    let (_, _, fail) = run(&study);
    let (lo, hi) = interval(fail, study.trials);
    eprintln!(
        "A/A margin 0, 2000 trials: false alarms {fail:.4} (95% Wilson {lo:.4}–{hi:.4}), nominal 0.025"
    );
    assert!(lo <= 0.025, "false-alarm rate {fail} is above nominal: {lo}–{hi}");

    let (pass, inconclusive, fail) = run(&Study {
        trials: 500,
        margin: 0.05,
        seed: 2,
        ..study
    });
    let (lo, hi) = interval(fail, 500);
    eprintln!(
        "A/A margin 5%, 500 trials: pass {pass:.3} inconclusive {inconclusive:.3} fail {fail:.4} ({lo:.4}–{hi:.4})"
    );
    assert!(lo <= 0.025 && pass > 0.3, "pass {pass} fail {fail}");
}

/// Issue 5: an injected 5% slowdown at n = 30 per side, caught with power ≥ 0.9 at CV 5%.
///
/// The median rule decides on the Hodges–Lehmann interval of the log-time shift (see
/// `rules/regression.rs`), whose efficiency relative to the t-test is 3/π ≈ 0.955 under
/// normal log times, so its theoretical power at margin 0 and 95% confidence is
/// Φ(ln 1.05 / (σ·√(π/3)·√(2/n)) − 1.96): 0.96 at CV 5%, 0.75 at CV 7% and 0.46 at CV 10%
/// for n = 30 (the bootstrap of the ratio of medians it replaced reached 0.85 / 0.53 /
/// 0.28). Power 0.9 needs n ≥ 23 per side at CV 5%, 46 at CV 7% and 92 at CV 10%.
/// Asserted: ≥ 0.9 at CV 5% with n = 30, and at CV 7% (n = 50) and CV 10% (n = 100) with
/// the n the formula asks for; the CV 7% and 10% figures at n = 30 are reported.
#[test]
fn issue_5_a_five_percent_slowdown_is_caught() {
    let base = Study {
        slowdown: 1.05,
        seed: 3,
        ..AA
    };
    let (_, _, power5) = run(&base);
    let (lo, hi) = interval(power5, base.trials);
    eprintln!("5% slowdown, n 30, CV 5%, margin 0: power {power5:.3} ({lo:.3}–{hi:.3}; theory 0.96)");
    assert!(power5 >= 0.9, "power {power5}");
    for (cv, n, seed, asserted) in [
        (0.07, 30, 4, false),
        (0.10, 30, 5, false),
        (0.07, 50, 6, true),
        (0.10, 100, 7, true),
    ] {
        let (_, _, power) = run(&Study {
            n,
            cv: (cv, cv),
            seed,
            ..base
        });
        eprintln!(
            "5% slowdown, n {n}, CV {:.0}%, margin 0: power {power:.3}",
            cv * 100.0
        );
        if asserted {
            assert!(power >= 0.9, "CV {cv} n {n}: power {power}");
        }
    }
}

/// Issue 5: p99 guardrails. A p99 needs at least 367 values per side for any 95%
/// order-statistic bound; with 400 per side at CV 7% the bootstrap interval of the p99
/// ratio has a log-sd of ≈ 0.03, so a 10% tail regression is caught with stated power
/// ≥ 0.9 and A/A comparisons false-alarm at ≤ 2.5% (margin 0).
#[test]
fn issue_5_p99_guardrails_have_their_stated_power() {
    let study = Study {
        trials: 100,
        n: 400,
        cv: (0.07, 0.07),
        slowdown: 1.10,
        metric: Metric::LatencyP99,
        seed: 6,
        ..AA
    };
    let (_, _, power) = run(&study);
    eprintln!("p99: 10% slowdown, n 400, CV 7%, margin 0: power {power:.3}");
    assert!(power >= 0.9, "p99 power {power}");
    let (_, _, fail) = run(&Study {
        slowdown: 1.0,
        seed: 7,
        ..study
    });
    let (lo, hi) = interval(fail, study.trials);
    eprintln!("p99: A/A, n 400: false alarms {fail:.3} ({lo:.3}–{hi:.3})");
    assert!(lo <= 0.025, "p99 false-alarm rate {fail}");
}

/// Issue 5: ten blocking A/A guardrails in one gate. Uncorrected, the chance that at least
/// one fails is 1 − 0.975¹⁰ ≈ 22%; Holm keeps the gate's false-failure rate at ≤ 5%.
#[test]
fn issue_5_holm_keeps_the_gate_false_failure_rate() {
    let gates = 150;
    let mut failed_gates = 0;
    let mut failed_raw = 0;
    for gt in 0..gates {
        let mut slices = Vec::new();
        let mut evs = Vec::new();
        let mut baselines = Baselines::new();
        for k in 0..10 {
            let id = format!("s{k}");
            let seed = (gt * 10 + k) as u64 * 7919 + 11;
            let mut sl = slice(
                &id,
                vec![guard(
                    Metric::Latency,
                    Rule::RegressAtMost { margin: 0.0 },
                    Severity::Block,
                )],
            );
            sl.seed = seed;
            slices.push(sl);
            let sigma = sigma_for_cv(0.07);
            evs.push(slice_ev(
                &id,
                vec![("latency", lognormal(30, 1e-3, sigma, seed))],
                vec![],
                sparse_plan(),
            ));
            baselines.append(&mut baseline(
                &id,
                vec![("latency", lognormal(30, 1e-3, sigma, seed + 1))],
            ));
        }
        let a = assess_with(
            &slices,
            &evidence(evs),
            &baselines,
            &AssessOptions { resamples: 200 },
        );
        if a.outcomes.iter().any(|o| o.verdict == Verdict::Fail) {
            failed_gates += 1;
        }
        if a.outcomes
            .iter()
            .any(|o| o.detail.contains("not a failure after correction"))
        {
            failed_raw += 1;
        }
        assert!(a.outcomes.iter().all(|o| o.detail.contains("Holm-adjusted")));
    }
    let rate = failed_gates as f64 / gates as f64;
    let (lo, hi) = interval(rate, gates);
    eprintln!(
        "10 A/A guardrails per gate, {gates} gates: gate false-failure {rate:.3} ({lo:.3}–{hi:.3}); \
         {failed_raw} gates had a raw failure removed by Holm"
    );
    assert!(lo <= 0.05, "gate false-failure rate {rate}");
}
