//! Robust outlier flags: reported, never silently dropped.
//!
//! Why two rules: Tukey's fences (`Q1 − k·IQR`, `Q3 + k·IQR`, with k = 1.5 "mild" and 3
//! "severe", as criterion reports them) describe the shape of the sample; the MAD rule
//! (Iglewicz–Hoaglin modified z-score `|x − median| / (1.4826·MAD) > 3.5`) is the robust
//! analogue of "more than 3.5 standard deviations out". Timing samples are skewed, so both
//! flag mostly slow values (preemption, page faults); a release manager sees how many, and
//! a pack may choose to drop them (`samples.drop_outliers`), never the engine on its own.

use super::error::{StatsError, check_sample, sorted};
use super::quantile::quantile_sorted;
use serde::{Deserialize, Serialize};

/// Normal-consistency constant of the MAD: `1/Φ⁻¹(¾)`.
pub const MAD_NORMAL_SCALE: f64 = 1.482_602_218_505_602;

/// Modified z-score above which the MAD rule flags a value (Iglewicz & Hoaglin, 1993).
pub const MAD_THRESHOLD: f64 = 3.5;

/// Median absolute deviation from the median (unscaled, like
/// `scipy.stats.median_abs_deviation(x)`).
pub fn mad(xs: &[f64]) -> Result<f64, StatsError> {
    check_sample("x", xs, 1)?;
    let s = sorted(xs);
    let med = quantile_sorted(&s, 0.5);
    let dev = sorted(&s.iter().map(|v| (v - med).abs()).collect::<Vec<_>>());
    Ok(quantile_sorted(&dev, 0.5))
}

/// Tukey's fences of a sample, with type-7 quartiles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TukeyFences {
    /// First quartile.
    pub q1: f64,
    /// Third quartile.
    pub q3: f64,
    /// `Q1 − 1.5·IQR`.
    pub low_mild: f64,
    /// `Q3 + 1.5·IQR`.
    pub high_mild: f64,
    /// `Q1 − 3·IQR`.
    pub low_severe: f64,
    /// `Q3 + 3·IQR`.
    pub high_severe: f64,
}

/// Tukey's fences of `xs`.
pub fn tukey_fences(xs: &[f64]) -> Result<TukeyFences, StatsError> {
    check_sample("x", xs, 1)?;
    let s = sorted(xs);
    let (q1, q3) = (quantile_sorted(&s, 0.25), quantile_sorted(&s, 0.75));
    let iqr = q3 - q1;
    Ok(TukeyFences {
        q1,
        q3,
        low_mild: q1 - 1.5 * iqr,
        high_mild: q3 + 1.5 * iqr,
        low_severe: q1 - 3.0 * iqr,
        high_severe: q3 + 3.0 * iqr,
    })
}

/// Which values of a sample are outliers, by index (ascending).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutlierFlags {
    /// Beyond Tukey's 1.5·IQR fences (severe ones included).
    pub tukey_mild: Vec<usize>,
    /// Beyond Tukey's 3·IQR fences.
    pub tukey_severe: Vec<usize>,
    /// Modified z-score above [`MAD_THRESHOLD`]. Empty when the MAD is 0 (more than half
    /// the values are equal, e.g. at timer resolution): the scale is then unknown and
    /// flagging every other value would be noise, not information.
    pub mad: Vec<usize>,
}

impl OutlierFlags {
    /// Indices flagged by either rule (severe Tukey or MAD), ascending: what
    /// `drop_outliers` removes.
    pub fn to_drop(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.tukey_severe.iter().chain(&self.mad).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// One line for a memo: `2 Tukey-mild (1 severe), 1 MAD`.
    pub fn describe(&self) -> String {
        format!(
            "{} Tukey-mild ({} severe), {} MAD",
            self.tukey_mild.len(),
            self.tukey_severe.len(),
            self.mad.len()
        )
    }
}

/// Flag the outliers of `xs` by both rules.
pub fn flag_outliers(xs: &[f64]) -> Result<OutlierFlags, StatsError> {
    let f = tukey_fences(xs)?;
    let m = mad(xs)?;
    let med = quantile_sorted(&sorted(xs), 0.5);
    let scale = MAD_NORMAL_SCALE * m;
    let pick = |pred: &dyn Fn(f64) -> bool| -> Vec<usize> {
        xs.iter()
            .enumerate()
            .filter(|(_, v)| pred(**v))
            .map(|(i, _)| i)
            .collect()
    };
    Ok(OutlierFlags {
        tukey_mild: pick(&|v| v < f.low_mild || v > f.high_mild),
        tukey_severe: pick(&|v| v < f.low_severe || v > f.high_severe),
        mad: if scale > 0.0 {
            pick(&|v| (v - med).abs() / scale > MAD_THRESHOLD)
        } else {
            vec![]
        },
    })
}

/// `xs` without the values at `drop` (indices as from [`OutlierFlags::to_drop`]).
pub fn without(xs: &[f64], drop: &[usize]) -> Vec<f64> {
    xs.iter()
        .enumerate()
        .filter(|(i, _)| drop.binary_search(i).is_err())
        .map(|(_, v)| *v)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_slow_value_is_flagged_by_both_rules() {
        let mut xs: Vec<f64> = (0..20).map(|i| 1.0 + f64::from(i) * 0.01).collect();
        xs.push(5.0);
        let f = flag_outliers(&xs).unwrap();
        assert_eq!(f.tukey_severe, vec![20]);
        assert_eq!(f.mad, vec![20]);
        assert_eq!(f.to_drop(), vec![20]);
        assert_eq!(without(&xs, &f.to_drop()).len(), 20);
        assert!((mad(&[1.0, 2.0, 3.0, 4.0, 100.0]).unwrap() - 1.0).abs() < 1e-15);
    }

    #[test]
    fn constant_samples_flag_nothing() {
        let f = flag_outliers(&[2.0; 10]).unwrap();
        assert_eq!(f, OutlierFlags::default());
        assert!(flag_outliers(&[]).is_err());
    }
}
