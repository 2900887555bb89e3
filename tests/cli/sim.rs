//! `sparsegate sim`: one simulated layer, as JSON for tools, and typed errors (exit 2 with a
//! hint) for an unknown preset, a bad preset file or a malformed request.

use crate::support::{Sandbox, stderr, stdout};

fn sim_json(sb: &Sandbox, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = sb.cmd(&all).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn issue_4_sim_reports_every_counter_as_json() {
    let sb = Sandbox::new();
    let v = sim_json(
        &sb,
        &[
            "--arch",
            "h100",
            "--gemm",
            "2048x12288x12288",
            "--sparsity",
            "2:4",
        ],
    );
    for key in [
        "cycles",
        "latency_s",
        "energy_j",
        "tc_occupancy",
        "dram_bytes",
        "metadata_bytes",
        "fallback",
        "bottleneck",
        "bottleneck_reason",
        "effective_speedup",
    ] {
        assert!(!v[key].is_null(), "missing {key}: {v}");
    }
    assert_eq!(v["arch"], "h100");
    assert_eq!(v["sparsity"], "2:4");
    assert_eq!(v["fallback"], false);
    assert_eq!(v["bottleneck"], "compute");
    assert!(v["metadata_bytes"].as_f64().unwrap() > 0.0);
}

#[test]
fn issue_4_sim_is_deterministic_and_matches_the_sparseloop_stc() {
    let sb = Sandbox::new();
    // Research §B.4: M128-K1152-N1024 on the 2:4 STC takes exactly 73,728 cycles.
    let args = [
        "--arch",
        "sparseloop-stc",
        "--gemm",
        "1024x128x1152",
        "--sparsity",
        "2:4",
        "--precision",
        "int8",
    ];
    let a = sim_json(&sb, &args);
    assert_eq!(a["cycles"], 73_728);
    assert_eq!(a, sim_json(&sb, &args), "bit-identical across runs");
}

#[test]
fn issue_4_sim_counts_fallback_for_patterns_the_hardware_lacks() {
    let sb = Sandbox::new();
    let v = sim_json(
        &sb,
        &["--arch", "a100", "--gemm", "4096x4096x4096", "--sparsity", "4:8"],
    );
    assert_eq!(v["fallback"], true);
    assert_eq!(v["bottleneck"], "fallback");
    assert_eq!(v["effective_speedup"], 1.0);
}

#[test]
fn issue_4_sim_accepts_a_user_preset_file() {
    let sb = Sandbox::new();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/presets/systolic-32-os.yaml"
    ))
    .unwrap()
    .replace("name: systolic-32-os", "name: my-array");
    sb.write("my-array.yaml", &text);
    let v = sim_json(
        &sb,
        &[
            "--arch",
            "my-array.yaml",
            "--gemm",
            "64x64x64",
            "--precision",
            "int8",
        ],
    );
    assert_eq!(v["arch"], "my-array");
    // SCALE-Sim OS, 32×32: 4 folds × (64 + 32 + 32 − 2) − 1 = 503 (tests/data/sim fixture).
    assert_eq!(v["ideal_compute_cycles"], 503);
}

#[test]
fn issue_4_sim_errors_exit_2_with_a_hint() {
    let sb = Sandbox::new();
    sb.write("broken.yaml", "name: x\nclock_ghz: 1\nunknown_key: 3\n");
    for (args, expect) in [
        (
            vec!["--arch", "b300", "--gemm", "8x8x8"],
            "unknown accelerator preset",
        ),
        (
            vec!["--arch", "missing.yaml", "--gemm", "8x8x8"],
            "cannot read preset",
        ),
        (vec!["--arch", "broken.yaml", "--gemm", "8x8x8"], "unknown_key"),
        (vec!["--arch", "h100", "--gemm", "8x8"], "not a GEMM shape"),
        (
            vec!["--arch", "h100", "--gemm", "8x8x8", "--sparsity", "5:4"],
            "--sparsity",
        ),
        (
            vec!["--arch", "h100", "--gemm", "8x8x8", "--precision", "fp64"],
            "unknown precision",
        ),
        (
            vec![
                "--arch",
                "sparseloop-stc",
                "--gemm",
                "8x8x8",
                "--precision",
                "fp16",
            ],
            "no fp16 datapath",
        ),
    ] {
        let mut all = vec!["sim"];
        all.extend(args.iter().copied());
        let out = sb.cmd(&all).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
        assert!(
            err.contains("help") || err.contains("e.g."),
            "{args:?} has no hint: {err}"
        );
    }
}
