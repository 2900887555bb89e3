//! The few summaries execution computes itself while it records (run summaries for the memo
//! and the history): NaN-tolerant, because a run may have no samples of a side. Judging
//! uses the statistics engine, never these.

/// Median (the mean of the middle two for an even count); NaN for no values.
pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `x`, or 0 when it is NaN (an empty median), since evidence is JSON and JSON has no NaN.
pub(crate) fn zero_if_nan(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x }
}

/// Same-moment speedups: each comparator time over the candidate time taken beside it.
pub(crate) fn paired_speedups(comparator: &[f64], candidate: &[f64]) -> Vec<f64> {
    comparator.iter().zip(candidate).map(|(c, s)| c / s).collect()
}
