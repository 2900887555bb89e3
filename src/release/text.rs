//! How the release stage writes numbers, units, bounds and intervals, once, so the decision
//! sentence, the first screen and the validation matrix read the same in Markdown and HTML
//! (issue 24: "every number that has an interval shows it the same way").

use crate::domain::metric::Metric;
use crate::ingress::Rule;
use crate::validate::{GuardrailOutcome, Undecided, Yardstick};

// Numbers and units read as in the guardrails' details: one formatter for both stages.
pub(crate) use crate::validate::describe::{num as number, with_unit};

/// The bound in words: `≥ 1.5x`, `≤ 0`, `≤ +5% vs golden`.
pub(crate) fn bound(o: &GuardrailOutcome) -> String {
    match o.rule {
        Rule::AtLeast { bound } => format!("≥ {}", with_unit(bound, o.metric)),
        Rule::AtMost { bound } => format!("≤ {}", with_unit(bound, o.metric)),
        Rule::RegressAtMost { margin } => {
            let against = match o.yardstick {
                Some(Yardstick::BaselineBuild) => "baseline build (paired, this session)",
                _ => "golden",
            };
            format!("regresses ≤ {}% vs {against}", number(margin * 100.0))
        }
    }
}

/// The interval a verdict was read from, always as `[lo, hi] @ 95%` (none for a counter,
/// whose bounds are its value); a baseline rule's interval is of the ratio
/// candidate/baseline, and says so.
pub(crate) fn interval(o: &GuardrailOutcome) -> Option<String> {
    let (lo, hi) = (o.ci_low?, o.ci_high?);
    // A counter's "interval" is the value itself: no interval to show.
    if lo == hi {
        return None;
    }
    let confidence = number(o.confidence * 100.0);
    Some(match o.rule {
        Rule::RegressAtMost { .. } => {
            format!("ratio [{}, {}] @ {confidence}%", number(lo), number(hi))
        }
        _ => format!(
            "[{}, {}] @ {confidence}%",
            with_unit(lo, o.metric),
            with_unit(hi, o.metric)
        ),
    })
}

/// `quickstart/bert-qkv-2of4-fp32 effective_speedup 1.02x against ≥ 1.1x, [0.98x, 1.07x]
/// @ 95%`: one guardrail's outcome in a sentence.
pub(crate) fn outcome_sentence(o: &GuardrailOutcome) -> String {
    let value = o
        .value
        .map_or_else(|| "no value".to_owned(), |v| with_unit(v, o.metric));
    let mut s = format!("{}/{} {} {value} against {}", o.pack, o.slice, o.metric, bound(o));
    if let Some(i) = interval(o) {
        s.push_str(&format!(", {i}"));
    }
    s
}

/// What would decide an undecided guardrail, as the clause after "to decide it": more
/// samples narrow a straddling timing interval, but not a quality interval (a fixed test
/// split) nor one undecided by the baseline's session or contention (issue 22).
pub(crate) fn what_would_decide(o: &GuardrailOutcome) -> &'static str {
    match o.undecided_by {
        Some(Undecided::SessionDrift) => {
            "session drift since the golden baseline could explain the change: pair the candidate with a \
             baseline build in this session (`gate --baseline-bin`, or `baseline:` on a command slice)"
        }
        Some(Undecided::Contention) => {
            "other processes took a different share of the cores than in the golden baseline's session: \
             gate on a quiet runner, or pair with a baseline build in this session (`gate --baseline-bin`)"
        }
        None if matches!(o.metric, Metric::Accuracy | Metric::QualityDelta) => {
            "a quality interval straddles its bound: the test split cannot resolve that margin; a larger \
             test split or a wider margin would"
        }
        None => "take more samples (samples.max, samples.time_budget_s) or allow a wider margin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::stage::Stage;
    use crate::domain::verdict::Verdict;
    use crate::ingress::Severity;

    #[test]
    fn bounds_and_intervals_carry_the_metrics_unit() {
        let o = GuardrailOutcome {
            pack: "p".into(),
            slice: "s".into(),
            guardrail: None,
            metric: Metric::EffectiveSpeedup,
            rule: Rule::AtLeast { bound: 1.5 },
            verdict: Verdict::Fail,
            finding: Verdict::Fail,
            severity: Severity::Block,
            value: Some(1.23456),
            baseline: None,
            ci_low: Some(1.2),
            ci_high: Some(1.3),
            p_value: None,
            confidence: 0.95,
            samples: 9,
            bottleneck: None,
            stage: Stage::Validation,
            detail: String::new(),
            location: None,
            yardstick: None,
            undecided_by: None,
        };
        assert_eq!(bound(&o), "≥ 1.5x");
        assert_eq!(interval(&o).as_deref(), Some("[1.2x, 1.3x] @ 95%"));
        assert_eq!(
            outcome_sentence(&o),
            "p/s effective_speedup 1.235x against ≥ 1.5x, [1.2x, 1.3x] @ 95%"
        );
        let regression = GuardrailOutcome {
            metric: Metric::Latency,
            rule: Rule::RegressAtMost { margin: 0.05 },
            ..o
        };
        assert_eq!(bound(&regression), "regresses ≤ 5% vs golden");
        assert_eq!(interval(&regression).as_deref(), Some("ratio [1.2, 1.3] @ 95%"));
    }
}
