//! Properties of the statistics engine on arbitrary finite data: no panics, and the
//! invariants every caller relies on.

use proptest::prelude::*;
use sparsegate::validate::compare::{CompareOptions, compare, parse_samples};
use sparsegate::validate::stats::{
    Bootstrap, CiMethod, MwuMethod, TwoSample, flag_outliers, hodges_lehmann, mann_whitney_u, median,
    quantile, quantile_ci, tost_welch, welch_t,
};
use std::path::Path;

fn sample() -> impl Strategy<Value = Vec<f64>> {
    // Rounded values so ties are common, as with timer resolution.
    prop::collection::vec((-1e3f64..1e3).prop_map(|v| (v * 4.0).round() / 4.0), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn quantiles_are_monotone_and_within_range(xs in sample(), q1 in 0.0f64..=1.0, q2 in 0.0f64..=1.0) {
        let (lo, hi) = if q1 <= q2 { (q1, q2) } else { (q2, q1) };
        let (a, b) = (quantile(&xs, lo).unwrap(), quantile(&xs, hi).unwrap());
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        prop_assert!(a <= b && min <= a && b <= max);
        if let Some((l, h)) = quantile_ci(&xs, 0.5, 0.95) {
            let m = median(&xs).unwrap();
            prop_assert!(l <= m && m <= h);
        }
    }

    #[test]
    fn mann_whitney_is_consistent(x in sample(), y in sample()) {
        let r = mann_whitney_u(&x, &y, MwuMethod::Auto).unwrap();
        let s = mann_whitney_u(&y, &x, MwuMethod::Auto).unwrap();
        let n = (x.len() * y.len()) as f64;
        prop_assert!((r.u + s.u - n).abs() < 1e-9);
        for p in [r.p_two_sided, r.p_less, r.p_greater] {
            prop_assert!((0.0..=1.0).contains(&p));
        }
        prop_assert!((r.p_less - s.p_greater).abs() < 1e-12);
        prop_assert!((r.p_two_sided - s.p_two_sided).abs() < 1e-12);
    }

    #[test]
    fn hodges_lehmann_is_antisymmetric_and_inside_its_interval(x in sample(), y in sample()) {
        let a = hodges_lehmann(&x, &y, 0.9).unwrap();
        let b = hodges_lehmann(&y, &x, 0.9).unwrap();
        prop_assert!((a.shift + b.shift).abs() < 1e-9);
        if let Some((lo, hi)) = a.ci {
            prop_assert!(lo <= a.shift && a.shift <= hi);
        }
    }

    #[test]
    fn bootstrap_and_welch_never_panic(x in sample(), y in sample(), seed in any::<u64>()) {
        let boot = Bootstrap::new(50, seed);
        if let Ok(ci) = boot.ratio_of_medians(&x, &y, 0.95) {
            prop_assert!(ci.low <= ci.high);
        }
        if let Ok(ci) = boot.median(&x, 0.9) {
            prop_assert!(ci.low <= ci.high);
        }
        let _ = welch_t(&x, &y);
    }

    /// Issue 5: the new engine pieces never panic on arbitrary finite data, and BCa
    /// intervals are ordered.
    #[test]
    fn issue_5_new_statistics_never_panic(x in sample(), y in sample(), seed in any::<u64>()) {
        let boot = Bootstrap::new(50, seed);
        for stat in [TwoSample::DiffOfMeans, TwoSample::DiffOfQuantiles { q: 0.99 }, TwoSample::RatioOfQuantiles { q: 0.5 }] {
            for method in [CiMethod::Percentile, CiMethod::Bca] {
                if let Ok(ci) = boot.two_sample(&x, &y, stat, method, 0.9) {
                    prop_assert!(ci.low <= ci.high || ci.low.is_nan() || ci.high.is_nan(), "{ci:?}");
                }
            }
        }
        let f = flag_outliers(&x).unwrap();
        prop_assert!(f.tukey_severe.iter().all(|i| f.tukey_mild.contains(i)));
        let _ = tost_welch(&x, &y, -1.0, 1.0);
    }

    /// Issue 5: `stats compare` input never panics: arbitrary text parses or is a located
    /// error, and parsed positive samples always compare.
    #[test]
    fn issue_5_compare_input_never_panics(text in "[0-9eE.+\\-\\[\\], \n#a-z]{0,60}", x in sample()) {
        let _ = parse_samples(Path::new("t"), &text);
        let pos: String = x.iter().map(|v| format!("{}\n", v.abs() + 1.0)).collect();
        let s = parse_samples(Path::new("t"), &pos).unwrap();
        let opts = CompareOptions { resamples: 50, ..CompareOptions::default() };
        prop_assert!(compare(&s, &s, &opts).is_ok());
    }
}
