//! Issue 9: the gate plans runs from the baseline's between-run spread.

use super::{assert_says, baseline, guard, lognormal, slice};
use crate::domain::metric::Metric;
use crate::execute::MetricSamples;
use crate::ingress::{Rule, Severity, Slice};
use crate::validate::golden::Baselines;
use crate::validate::{plan_runs, power_check};

/// A baseline of `runs` runs × 20 samples: within-run log-sd 2%, each run's level shifted
/// by a lognormal factor of log-sd `between` (the process-level speed modes).
fn run_grouped_baseline(runs: usize, between: f64, seed: u64) -> Baselines {
    let levels = lognormal(runs, 1e-3, between, seed);
    let mut metric = MetricSamples {
        unit: "s".into(),
        samples: vec![],
        runs: vec![],
    };
    for (run, level) in (0u32..).zip(levels) {
        metric
            .samples
            .extend(lognormal(20, level, 0.02, seed + 1 + u64::from(run)));
        metric.runs.extend([run; 20]);
    }
    let mut b = baseline("s", vec![]);
    b.values_mut().for_each(|b| {
        b.metrics.insert(Metric::Latency, metric.clone());
    });
    b
}

fn regress_slice(margin: f64, runs: u32, max_runs: Option<u32>) -> Slice {
    let mut s = slice(
        "s",
        vec![guard(
            Metric::Latency,
            Rule::RegressAtMost { margin },
            Severity::Block,
        )],
    );
    s.samples.runs = runs;
    s.samples.max_runs = max_runs;
    s
}

#[test]
fn issue_9_runs_are_planned_from_the_between_run_spread() {
    let calm = run_grouped_baseline(10, 0.02, 1);
    let noisy = run_grouped_baseline(10, 0.04, 1);
    let s = regress_slice(0.02, 2, Some(100));
    let a = plan_runs(&s, &calm).expect("a plan");
    let b = plan_runs(&s, &noisy).expect("a plan");
    eprintln!(
        "margin 2%, baseline of 10 runs × 20 samples (within-run log-sd 2%): between-run \
         log-sd 2% → {} runs needed ({} planned), 4% → {} needed ({} planned), cap 100",
        a.needed, a.runs, b.needed, b.runs
    );
    assert!(a.needed >= 2 && a.runs as usize == a.needed.max(2), "{a:?}");
    // Twice the between-run spread needs about four times the runs (the same seed gives
    // the same shape of run levels, scaled).
    let ratio = b.needed as f64 / a.needed as f64;
    assert!((2.5..=5.5).contains(&ratio), "{a:?} {b:?}");
    assert_eq!(b.runs as usize, b.needed.min(100));
    // A wider margin needs fewer runs.
    let wide = plan_runs(&regress_slice(0.05, 2, Some(100)), &noisy).unwrap();
    assert!(wide.needed < b.needed, "{wide:?} {b:?}");
}

#[test]
fn issue_9_a_cap_too_small_is_said_before_running() {
    let noisy = run_grouped_baseline(10, 0.08, 3);
    let mut s = regress_slice(0.02, 2, Some(3));
    let plan = plan_runs(&s, &noisy).expect("a plan");
    assert_eq!(plan.runs, 3, "{plan:?}");
    assert!(plan.needed > 3, "{plan:?}");
    s.samples.runs = plan.runs;
    let notes = power_check(&[s], &noisy);
    assert_eq!(notes.len(), 1);
    assert!(!notes[0].plan.margin_resolvable);
    assert_says(&notes[0].message, &["planned up to samples.max_runs", "warning"]);
}

#[test]
fn issue_9_nothing_is_planned_without_a_cap_or_a_run_grouped_baseline() {
    let grouped = run_grouped_baseline(10, 0.02, 5);
    assert_eq!(plan_runs(&regress_slice(0.05, 2, None), &grouped), None);
    let flat = baseline("s", vec![("latency", lognormal(50, 1e-3, 0.05, 6))]);
    assert_eq!(plan_runs(&regress_slice(0.05, 2, Some(10)), &flat), None);
    let absolute = {
        let mut s = regress_slice(0.05, 2, Some(10));
        s.guardrails = vec![guard(
            Metric::Latency,
            Rule::AtMost { bound: 1.0 },
            Severity::Block,
        )];
        s
    };
    assert_eq!(plan_runs(&absolute, &grouped), None);
}

#[test]
fn issue_9_advisory_guardrails_do_not_spend_the_run_budget() {
    let noisy = run_grouped_baseline(10, 0.04, 1);
    let blocking_wide = guard(
        Metric::Latency,
        Rule::RegressAtMost { margin: 0.10 },
        Severity::Block,
    );
    let advisory_tight = guard(
        Metric::Latency,
        Rule::RegressAtMost { margin: 0.01 },
        Severity::Warn,
    );
    let mut s = slice("s", vec![blocking_wide.clone(), advisory_tight]);
    s.samples.runs = 2;
    s.samples.max_runs = Some(100);
    let mut only_blocking = slice("s", vec![blocking_wide]);
    only_blocking.samples = s.samples.clone();
    let with_advisory = plan_runs(&s, &noisy).expect("a plan");
    let without = plan_runs(&only_blocking, &noisy).expect("a plan");
    assert_eq!(with_advisory, without);
    assert!(with_advisory.runs < 100, "{with_advisory:?}");
}
