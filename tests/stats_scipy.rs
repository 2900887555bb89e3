//! The statistics engine against scipy/numpy on the committed fixtures
//! (`scripts/gen_stats_fixtures.py` → `tests/data/stats/scipy_cases.json`).

use serde_json::Value;
use sparsegate::validate::stats::{MwuMethod, hodges_lehmann, mann_whitney_u, quantile, welch_t};

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/stats/scipy_cases.json"
    ))
    .expect("fixture file");
    let doc: Value = serde_json::from_str(&text).expect("fixture JSON");
    doc["cases"].as_array().expect("cases").clone()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

/// Agreement to 1e-9 relative, or 1e-12 absolute near zero.
fn close(ours: f64, theirs: f64, what: &str) {
    let ok = (ours - theirs).abs() <= 1e-12 || (ours - theirs).abs() <= 1e-9 * theirs.abs();
    assert!(ok, "{what}: ours {ours:e} vs scipy {theirs:e}");
}

#[test]
fn there_are_enough_cases() {
    assert!(cases().len() >= 40);
}

#[test]
fn mann_whitney_matches_scipy() {
    let mut checked = 0;
    for case in cases() {
        let name = case["name"].as_str().unwrap_or("?");
        let (x, y) = (floats(&case["x"]), floats(&case["y"]));
        let Some(methods) = case["mannwhitneyu"].as_object() else {
            continue;
        };
        for (method, results) in methods {
            let m = match method.as_str() {
                "exact" => MwuMethod::Exact,
                "asymptotic" => MwuMethod::Asymptotic,
                _ => MwuMethod::Auto,
            };
            let r = mann_whitney_u(&x, &y, m).expect("valid samples");
            for (alt, p) in [
                ("two-sided", r.p_two_sided),
                ("less", r.p_less),
                ("greater", r.p_greater),
            ] {
                let want = &results[alt];
                close(
                    r.u,
                    want["u"].as_f64().expect("u"),
                    &format!("{name} {method} {alt} U"),
                );
                close(
                    p,
                    want["p"].as_f64().expect("p"),
                    &format!("{name} {method} {alt} p"),
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 300, "only {checked} comparisons");
}

#[test]
fn welch_matches_scipy() {
    for case in cases() {
        let name = case["name"].as_str().unwrap_or("?");
        let (x, y) = (floats(&case["x"]), floats(&case["y"]));
        match case["welch"].as_object() {
            Some(w) => {
                let r = welch_t(&x, &y).expect("defined");
                close(r.t, w["t"].as_f64().expect("t"), &format!("{name} t"));
                close(r.df, w["df"].as_f64().expect("df"), &format!("{name} df"));
                close(r.p_two_sided, w["p"].as_f64().expect("p"), &format!("{name} p"));
            }
            None => assert!(
                welch_t(&x, &y).is_err(),
                "{name}: scipy has no answer, we must refuse"
            ),
        }
    }
}

#[test]
fn quantiles_match_numpy_linear() {
    for case in cases() {
        let name = case["name"].as_str().unwrap_or("?");
        let x = floats(&case["x"]);
        for key in ["percentile_x", "quantile_x"] {
            for item in case[key].as_array().expect("quantiles") {
                let q = item["q"].as_f64().expect("q");
                let want = item["value"].as_f64().expect("value");
                close(
                    quantile(&x, q).expect("valid"),
                    want,
                    &format!("{name} {key} q={q}"),
                );
            }
        }
    }
}

#[test]
fn hodges_lehmann_shift_matches_numpy() {
    for case in cases() {
        let name = case["name"].as_str().unwrap_or("?");
        let (x, y) = (floats(&case["x"]), floats(&case["y"]));
        let hl = hodges_lehmann(&x, &y, 0.95).expect("valid");
        close(
            hl.shift,
            case["hl_shift"].as_f64().expect("shift"),
            &format!("{name} HL"),
        );
        if let Some((lo, hi)) = hl.ci {
            assert!(lo <= hl.shift && hl.shift <= hi, "{name}: {lo} {} {hi}", hl.shift);
        }
    }
}
