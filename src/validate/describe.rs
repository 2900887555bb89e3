//! Numbers in words: the formatting of guardrail details, kept in one place so every
//! sentence in the memo reads the same way.

use crate::domain::metric::Metric;

/// `v` with four significant digits, plain for everyday magnitudes and in scientific
/// notation for very small or large ones (latencies in seconds are often 1e-5).
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "NaN".into()
        } else if v > 0.0 {
            "∞".into()
        } else {
            "−∞".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor();
    if !(-3.0..6.0).contains(&mag) {
        return format!("{v:.3e}");
    }
    let decimals = (3.0 - mag).max(0.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// A value with the metric's unit: `1.52x`, `0.001234 s`, `310.5 GFLOP/s`.
pub(crate) fn with_unit(v: f64, metric: Metric) -> String {
    with_unit_named(v, metric.unit())
}

/// A value with a unit by name; unitless (`fraction`, or none given) reads as the number.
pub(crate) fn with_unit_named(v: f64, unit: &str) -> String {
    match unit {
        "x" => format!("{}x", num(v)),
        "fraction" | "" => num(v),
        unit => format!("{} {unit}", num(v)),
    }
}

/// An interval: `1.48–1.55`, or `−20.8 to −18.4` when a dash would read as a minus sign.
pub(crate) fn range(lo: f64, hi: f64) -> String {
    if lo >= 0.0 {
        format!("{}–{}", num(lo), num(hi))
    } else {
        format!("{} to {}", num(lo), num(hi))
    }
}

/// A signed change with unit: `+0.21 s`, `-3.1 GFLOP/s`.
pub(crate) fn signed_with_unit(v: f64, unit: &str) -> String {
    if v > 0.0 {
        format!("+{}", with_unit_named(v, unit))
    } else {
        with_unit_named(v, unit)
    }
}

/// `95%`, `99.9%`.
pub(crate) fn percent(confidence: f64) -> String {
    format!("{}%", num(confidence * 100.0))
}

/// A p-value: `p = 0.031`, `p = 2.1e-9`.
pub(crate) fn p_value(p: f64) -> String {
    if p < 1e-3 {
        format!("p = {p:.1e}")
    } else {
        format!("p = {}", num(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(1.5234), "1.523");
        assert_eq!(num(1.2), "1.2");
        assert_eq!(num(0.00123456), "0.001235");
        assert_eq!(num(1.2e-5), "1.200e-5");
        assert_eq!(num(310.54), "310.5");
        assert_eq!(num(95.0), "95");
        assert_eq!(with_unit(1.52, Metric::EffectiveSpeedup), "1.52x");
        assert_eq!(percent(0.95), "95%");
        assert_eq!(range(1.48, 1.55), "1.48–1.55");
        assert_eq!(range(-2.0, 1.0), "-2 to 1");
        assert_eq!(signed_with_unit(0.5, Metric::Latency.unit()), "+0.5 s");
    }
}
