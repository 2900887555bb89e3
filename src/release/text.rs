//! How the release stage writes numbers, units, bounds and intervals, once, so the decision
//! sentence, the first screen and the validation matrix read the same in Markdown and HTML
//! (issue 24: "every number that has an interval shows it the same way").

use crate::domain::metric::Metric;
use crate::ingress::Rule;
use crate::validate::{GuardrailOutcome, Yardstick};

/// Four significant digits, no trailing zeros; scientific outside [1e-3, 1e6).
pub(crate) fn number(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "NaN".into()
        } else if x > 0.0 {
            "∞".into()
        } else {
            "−∞".into()
        };
    }
    if x == 0.0 {
        return "0".to_owned();
    }
    let a = x.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{x:.3e}");
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// `1.234x`, `0.0021 s`, `455 GFLOP/s`, `0.02` (fractions and counts bare). A baseline
/// rule's `value` is the raw median even when the rule compared calibration-normalised
/// ratios, so the metric's own unit is right for it.
pub(crate) fn with_unit(x: f64, metric: Metric) -> String {
    match metric.unit() {
        "x" => format!("{}x", number(x)),
        "fraction" | "groups" | "" => number(x),
        u => format!("{} {u}", number(x)),
    }
}

/// The bound in words: `≥ 1.5x`, `≤ 0`, `≤ +5% vs golden`.
pub(crate) fn bound(o: &GuardrailOutcome) -> String {
    match o.rule {
        Rule::AtLeast { bound } => format!("≥ {}", with_unit(bound, o.metric)),
        Rule::AtMost { bound } => format!("≤ {}", with_unit(bound, o.metric)),
        Rule::RegressAtMost { margin } => {
            let against = match o.yardstick {
                Some(Yardstick::BaselineBuild) => "the baseline build",
                _ => "golden",
            };
            format!("regresses ≤ {}% vs {against}", number(margin * 100.0))
        }
    }
}

/// The interval a verdict was read from, always as `[lo, hi] @ 95%`; a baseline rule's
/// interval is of the ratio candidate/baseline, and says so.
pub(crate) fn interval(o: &GuardrailOutcome) -> Option<String> {
    let (lo, hi) = (o.ci_low?, o.ci_high?);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_four_significant_digits_without_trailing_zeros() {
        assert_eq!(number(1.23456), "1.235");
        assert_eq!(number(2.0), "2");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(455.3), "455.3");
        assert_eq!(number(4.4e-4), "4.400e-4");
        assert_eq!(number(f64::INFINITY), "∞");
    }

    #[test]
    fn units_follow_the_metric() {
        assert_eq!(with_unit(1.5, Metric::EffectiveSpeedup), "1.5x");
        assert_eq!(with_unit(0.002, Metric::Latency), "0.002 s");
        assert_eq!(with_unit(0.0, Metric::FallbackRate), "0");
        assert_eq!(with_unit(455.0, Metric::ThroughputGflops), "455 GFLOP/s");
    }
}
