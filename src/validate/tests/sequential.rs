//! Issue 5: sequential sampling over runs, driven by the interim rule.

use super::{guard, lognormal, slice, slice_ev, sparse_plan};
use crate::domain::metric::Metric;
use crate::domain::verdict::Verdict;
use crate::execute::{MetricSamples, RunSummary, SliceEvidence};
use crate::ingress::{Rule, Severity, Slice};
use crate::stats::wilson;
use crate::validate::{assess, interim_look};

/// `effective_speedup ≥ 1.1`, 3 runs first, up to 20.
fn sequential_slice() -> Slice {
    let mut s = slice(
        "s",
        vec![guard(
            Metric::EffectiveSpeedup,
            Rule::AtLeast { bound: 1.1 },
            Severity::Block,
        )],
    );
    s.samples.runs = 3;
    s.samples.max_runs = Some(20);
    s.samples.sequential = true;
    s
}

/// Evidence of the first `runs.len()` runs: 10 paired speedups per run around each run's
/// level (within-run log-sd 1%).
fn evidence_of(levels: &[f64], seed: u64) -> SliceEvidence {
    let mut metric = MetricSamples {
        unit: "x".into(),
        samples: vec![],
        runs: vec![],
    };
    let mut ev = slice_ev("s", vec![], vec![], sparse_plan());
    for (run, &level) in (0u32..).zip(levels) {
        let xs = lognormal(10, level, 0.01, seed + u64::from(run));
        ev.runs.push(RunSummary {
            run,
            pid: None,
            warmup_iterations: 1,
            samples: xs.len(),
            latency_s: 1e-3,
            comparator_s: 1e-3 * level,
            calibration_s: 1e-4,
            speedup: level,
            cpu_share: None,
        });
        metric.samples.extend(&xs);
        metric.runs.extend([run; 10]);
    }
    ev.metrics.insert(Metric::EffectiveSpeedup, metric.clone());
    ev.metrics.insert(
        Metric::Latency,
        MetricSamples {
            unit: "s".into(),
            ..metric
        },
    );
    ev
}

/// Drive the interim rule as the execution loop does: one run at a time from 3, up to 20.
/// Returns the runs taken and the final verdict, read at the last look by `assess`.
fn sequential_trial(true_speedup: f64, between: f64, seed: u64) -> (usize, Verdict) {
    let s = sequential_slice();
    let levels = lognormal(20, true_speedup, between, seed);
    let mut looks = Vec::new();
    for n in 3..=20 {
        let mut ev = evidence_of(&levels[..n], seed * 100);
        ev.looks = looks.clone();
        let d = interim_look(&s, &ev, None);
        looks.push(crate::execute::Look {
            runs: n as u32,
            samples: n * 10,
            alpha: d.alpha,
            decided: d.decided,
        });
        if d.decided || n == 20 {
            ev.looks = looks;
            let a = assess(
                std::slice::from_ref(&s),
                &super::evidence(vec![ev]),
                &Default::default(),
            );
            let o = &a.outcomes[0];
            assert!(o.detail.contains("sequential: read at look"), "{}", o.detail);
            return (n, o.verdict);
        }
    }
    unreachable!()
}

#[test]
fn issue_5_the_interim_rule_stops_early_on_a_clear_effect_and_keeps_going_when_undecided() {
    // A clear effect: 1.5x against a bound of 1.1x, between-run log-sd 3%.
    let clear: Vec<(usize, Verdict)> = (0..20).map(|t| sequential_trial(1.5, 0.03, 10 + t)).collect();
    let mean_runs = clear.iter().map(|c| c.0 as f64).sum::<f64>() / clear.len() as f64;
    eprintln!("clear 1.5x vs ≥ 1.1x: decided after {mean_runs:.1} runs on average (≤ 20)");
    assert!(
        clear.iter().all(|&(n, v)| n < 20 && v == Verdict::Pass),
        "{clear:?}"
    );
    // Undecided: the true speedup sits on the bound; nearly every trial uses all 20 runs.
    let edge: Vec<(usize, Verdict)> = (0..20).map(|t| sequential_trial(1.1, 0.03, 50 + t)).collect();
    let full = edge.iter().filter(|c| c.0 == 20).count();
    eprintln!("on the bound: {full}/20 trials took all 20 runs");
    assert!(full >= 17, "{edge:?}");
}

/// The same looks read naively, each at the guardrail's full 95%: stop at the first look
/// that passes or fails.
fn naive_trial(true_speedup: f64, between: f64, seed: u64) -> Verdict {
    let s = sequential_slice();
    let levels = lognormal(20, true_speedup, between, seed);
    for n in 3..=20 {
        let ev = evidence_of(&levels[..n], seed * 100);
        let a = assess(
            std::slice::from_ref(&s),
            &super::evidence(vec![ev]),
            &Default::default(),
        );
        let v = a.outcomes[0].verdict;
        if v != Verdict::Inconclusive || n == 20 {
            return v;
        }
    }
    unreachable!()
}

#[test]
fn issue_5_sequential_looks_over_runs_keep_the_false_failure_rate() {
    // The true speedup is exactly the bound: any `fail` is a false alarm. Up to 18 looks.
    let trials = 400;
    let fails = (0..trials)
        .filter(|&t| sequential_trial(1.1, 0.03, 1000 + t).1 == Verdict::Fail)
        .count();
    let (lo, hi) = wilson(fails as u64, trials, 0.95).unwrap();
    eprintln!(
        "sequential over runs, speedup on the bound, {trials} trials: false failures {} ({lo:.4}–{hi:.4}), \
         nominal one-sided 0.025",
        fails as f64 / trials as f64
    );
    assert!(lo <= 0.025, "{fails}/{trials}");
    let naive = (0..trials)
        .filter(|&t| naive_trial(1.1, 0.03, 1000 + t) == Verdict::Fail)
        .count();
    let (nlo, nhi) = wilson(naive as u64, trials, 0.95).unwrap();
    eprintln!(
        "same trials, every look read at the full 95%: false failures {} ({nlo:.4}–{nhi:.4})",
        naive as f64 / trials as f64
    );
    assert!(naive > fails, "naive {naive} vs spending {fails}");
}
