//! Evidence pointing two ways, found once by validation so the memo only shows it: sparse
//! faster on some slices and slower on others; a median that holds while the tail does
//! not; a same-run bar and a baseline comparison that disagree.

use super::GuardrailOutcome;
use crate::domain::OfSlice;
use crate::domain::metric::Metric;
use crate::domain::verdict::Verdict;
use crate::execute::SliceEvidence;
use crate::ingress::Rule;
use crate::stats::quantile_ci;

/// Whether the evidence behind `g` failed its rule, before severity made it advisory
/// (issue 24: an inconclusive check, advisory or not, did not fail).
pub(crate) fn failed(g: &GuardrailOutcome) -> bool {
    g.failed() == Some(true)
}

/// Evidence pointing two ways: sparse faster on some slices and slower on others; a
/// median that holds while the tail regresses; a baseline comparison and a same-run bar
/// that disagree.
pub fn contradictions(slices: &[SliceEvidence], guardrails: &[GuardrailOutcome]) -> Vec<String> {
    let mut found = Vec::new();
    // The side of 1.0 the median speedup's 95% order-statistic interval lies on, if either.
    let side = |s: &SliceEvidence| match s
        .metrics
        .get(Metric::EffectiveSpeedup)
        .and_then(|m| quantile_ci(&m.samples, 0.5, 0.95))
    {
        Some((lo, _)) if lo > 1.0 => Some(true),
        Some((_, hi)) if hi < 1.0 => Some(false),
        _ => None,
    };
    let faster: Vec<&str> = slices
        .iter()
        .filter(|s| side(s) == Some(true))
        .map(|s| s.slice.as_str())
        .collect();
    let slower: Vec<&str> = slices
        .iter()
        .filter(|s| side(s) == Some(false))
        .map(|s| s.slice.as_str())
        .collect();
    if !faster.is_empty() && !slower.is_empty() {
        found.push(format!(
            "the sparse path is faster than dense on {} but slower on {}",
            faster.join(", "),
            slower.join(", ")
        ));
    }
    let is_tail = |g: &GuardrailOutcome| matches!(g.metric, Metric::LatencyP95 | Metric::LatencyP99);
    let is_central = |g: &GuardrailOutcome| {
        matches!(
            g.metric,
            Metric::Latency | Metric::LatencyP50 | Metric::ThroughputGflops | Metric::EffectiveSpeedup
        )
    };
    let vs_baseline = |g: &GuardrailOutcome| matches!(g.rule, Rule::RegressAtMost { .. });
    for s in slices {
        let of_slice: Vec<&GuardrailOutcome> = guardrails.iter().filter(|g| g.same_slice(s)).collect();
        // Only a tail that failed "does not hold": an inconclusive one is not evidence
        // against the release, so never a contradiction (issue 24).
        let tail = of_slice.iter().find(|g| is_tail(g) && failed(g));
        let central_holds = of_slice
            .iter()
            .any(|g| is_central(g) && g.verdict == Verdict::Pass);
        if let (Some(tail), true) = (tail, central_holds) {
            found.push(format!(
                "{}: the typical case holds but the tail does not ({} {})",
                s.slice, tail.metric, tail.verdict
            ));
        }
        let decided = |g: &&&GuardrailOutcome| g.verdict != Verdict::Inconclusive;
        let same_run = of_slice
            .iter()
            .filter(decided)
            .find(|g| g.metric == Metric::EffectiveSpeedup && !vs_baseline(g));
        let baseline = of_slice.iter().filter(decided).find(|g| vs_baseline(g));
        if let (Some(a), Some(b)) = (same_run, baseline)
            && (a.verdict == Verdict::Pass) != (b.verdict == Verdict::Pass)
        {
            found.push(format!(
                "{}: against the same-run dense comparator it is {}, against the golden baseline ({}) it is {}",
                s.slice, a.verdict, b.metric, b.verdict
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::Severity;
    use crate::validate::tests::{evidence, guard, slice, slice_ev, sparse_plan};
    use crate::validate::{AssessOptions, assess_with};

    #[test]
    fn contradictions_are_called_out() {
        let speedups = |centre: f64| (0..30).map(|i| centre + 0.001 * f64::from(i)).collect::<Vec<_>>();
        let fast = slice_ev(
            "fast",
            vec![("effective_speedup", speedups(1.5))],
            vec![],
            sparse_plan(),
        );
        let slow = slice_ev(
            "slow",
            vec![("effective_speedup", speedups(0.8))],
            vec![],
            sparse_plan(),
        );
        let assessed = assess_with(
            &[slice(
                "fast",
                vec![guard(
                    Metric::LatencyP99,
                    Rule::AtMost { bound: 1.0 },
                    Severity::Block,
                )],
            )],
            &evidence(vec![fast.clone()]),
            &Default::default(),
            &AssessOptions { resamples: 100 },
        );
        let mut tail = assessed.outcomes[0].clone();
        tail.metric = Metric::LatencyP99;
        tail.verdict = Verdict::Fail;
        tail.finding = Verdict::Fail;
        let mut central = tail.clone();
        central.metric = Metric::Latency;
        central.verdict = Verdict::Pass;
        central.finding = Verdict::Pass;
        let found = contradictions(&[fast, slow], &[tail, central]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("faster than dense on fast but slower on slow"),
            "{found:?}"
        );
        assert!(
            found[1].contains("fast: the typical case holds but the tail does not"),
            "{found:?}"
        );
    }

    /// A `latency` that passed and a p99 with the given verdict, severity and detail; the
    /// finding is the verdict, or for an advisory `warn` the check its detail ends with.
    fn median_holds_tail(verdict: Verdict, severity: Severity, detail: &str) -> Vec<String> {
        let central = median_holds_tail_outcome();
        assert_eq!(central.verdict, Verdict::Pass, "{central:?}");
        let mut tail = central.clone();
        tail.metric = Metric::LatencyP99;
        tail.verdict = verdict;
        tail.finding = match verdict {
            Verdict::Warn if detail.contains(": fail") => Verdict::Fail,
            Verdict::Warn => Verdict::Inconclusive,
            v => v,
        };
        tail.severity = severity;
        tail.detail = detail.into();
        let ev = slice_ev("s", vec![("latency", vec![1.0; 10])], vec![], sparse_plan());
        contradictions(&[ev], &[central, tail])
    }

    #[test]
    fn an_inconclusive_tail_is_not_a_contradiction() {
        // Issue 24: inconclusive is never called a contradiction.
        let inconclusive = "p99 1 (95% CI 1 to 1, order statistics, n = 10); cannot judge <= 1: inconclusive";
        assert!(median_holds_tail(Verdict::Inconclusive, Severity::Block, inconclusive).is_empty());
        let advisory = format!("{inconclusive} (advisory guardrail: reported as warn, never blocks)");
        assert!(median_holds_tail(Verdict::Warn, Severity::Warn, &advisory).is_empty());
    }

    #[test]
    fn a_failed_tail_under_a_holding_median_is_a_contradiction() {
        // Issue 24: "the tail does not hold" only when the tail failed, blocking or advisory.
        let fail = "p99 3 (95% CI 3 to 3, order statistics, n = 700) > 1: fail";
        let found = median_holds_tail(Verdict::Fail, Severity::Block, fail);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("the typical case holds but the tail does not"),
            "{found:?}"
        );
        let advisory = format!("{fail} (advisory guardrail: reported as warn, never blocks)");
        assert_eq!(
            median_holds_tail(Verdict::Warn, Severity::Warn, &advisory).len(),
            1
        );
    }

    #[test]
    fn the_failed_helper_reads_the_finding_not_the_softened_verdict() {
        let mut g = median_holds_tail_outcome();
        g.verdict = Verdict::Warn;
        g.finding = Verdict::Inconclusive;
        assert!(!failed(&g));
        g.finding = Verdict::Fail;
        assert!(failed(&g));
    }

    fn median_holds_tail_outcome() -> GuardrailOutcome {
        let ev = slice_ev("s", vec![("latency", vec![1.0; 10])], vec![], sparse_plan());
        assess_with(
            &[slice(
                "s",
                vec![guard(
                    Metric::Latency,
                    Rule::AtMost { bound: 2.0 },
                    Severity::Block,
                )],
            )],
            &evidence(vec![ev]),
            &Default::default(),
            &AssessOptions { resamples: 100 },
        )
        .outcomes[0]
            .clone()
    }
}
