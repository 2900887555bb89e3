//! The one error type of the statistics engine: bad input is reported, never panicked on,
//! because samples come from user files and measured runs.

/// Why a statistic could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// A sample had no values (or fewer than the statistic needs).
    #[error("sample `{what}` has {got} value(s); at least {need} needed")]
    TooFew {
        /// Which sample.
        what: &'static str,
        /// How many values it had.
        got: usize,
        /// How many the statistic needs.
        need: usize,
    },
    /// A sample held NaN or an infinity, which no rank or moment statistic can use.
    #[error("sample `{what}` holds a non-finite value ({value}) at index {index}")]
    NonFinite {
        /// Which sample.
        what: &'static str,
        /// Position of the first offending value.
        index: usize,
        /// The value.
        value: f64,
    },
    /// A parameter (probability, confidence, resample count) was out of its range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The data admit no answer (e.g. a ratio with a zero denominator, a t statistic of
    /// two constant samples).
    #[error("degenerate data: {0}")]
    Degenerate(String),
}

/// Check that `xs` has at least `need` values, all finite.
pub(crate) fn check_sample(what: &'static str, xs: &[f64], need: usize) -> Result<(), StatsError> {
    if xs.len() < need {
        return Err(StatsError::TooFew {
            what,
            got: xs.len(),
            need,
        });
    }
    if let Some((index, &value)) = xs.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(StatsError::NonFinite { what, index, value });
    }
    Ok(())
}

/// Check that `p` lies strictly inside (0, 1) (for confidences) or inside [0, 1].
pub(crate) fn check_probability(name: &str, p: f64, open: bool) -> Result<(), StatsError> {
    let ok = if open {
        p > 0.0 && p < 1.0
    } else {
        (0.0..=1.0).contains(&p)
    };
    if ok {
        Ok(())
    } else {
        Err(StatsError::InvalidArgument(format!(
            "{name} = {p} is outside its range"
        )))
    }
}

/// A copy of `xs`, sorted ascending (callers have checked finiteness).
pub(crate) fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    v
}
