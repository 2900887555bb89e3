//! `sparsegate sim`: one simulated layer, as JSON for tools, and typed errors (exit 2 with a
//! hint) for an unknown preset, a bad preset file or a malformed request.

use crate::support::{
    Sandbox, assert_exit, assert_refused, example_pack, repo_file, stderr, stdout, stdout_json,
};

/// `sim ARGS... --json`, which must exit 0 and print a report its committed schema accepts.
#[track_caller]
fn sim_json(sb: &Sandbox, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    all.push("--json");
    sb.output_report(&all, "sim-report.schema.json")
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
    let text = std::fs::read_to_string(repo_file("scenarios/presets/systolic-32-os.yaml"))
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
        let out = sb.output(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
        assert!(
            err.contains("help") || err.contains("e.g."),
            "{args:?} has no hint: {err}"
        );
    }
}

#[test]
fn issue_4_sim_backend_gates_the_example_pack_deterministically() {
    let sb = Sandbox::new();
    let pack = example_pack("h100-bert.yaml");
    let mut evidence = Vec::new();
    for out_dir in ["a", "b"] {
        assert_exit(&sb.output(&["gate", &pack, "--out", out_dir, "-q"]), 0);
        evidence.push(sb.json(&format!("{out_dir}/evidence.json"))["slices"].clone());
    }
    let slices = evidence[0].as_array().unwrap();
    assert_eq!(slices.len(), 3);
    let counters = |i: usize| slices[i]["counters"].clone();
    // 2:4 is faster than dense and pays 2-bit metadata on fp16 values (1/8); 4:8 falls back.
    assert!(counters(1)["effective_speedup"].as_f64().unwrap() > 1.0);
    assert_eq!(counters(1)["metadata_overhead"], 0.125);
    assert_eq!(counters(2)["fallback_rate"], 1.0);
    for key in [
        "latency",
        "cycles",
        "energy_j",
        "tc_occupancy",
        "dram_bytes",
        "throughput_gflops",
    ] {
        assert!(counters(0)[key].as_f64().unwrap() > 0.0, "{key}");
    }
    // Same counters on every run (wall time aside).
    let strip = |v: &serde_json::Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["counters"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&evidence[0]), strip(&evidence[1]));
}

#[test]
fn issue_4_sim_slices_need_a_known_preset() {
    let sb = Sandbox::new();
    let pack = |extra: &str| {
        format!(
            "schema_version: 1\nname: p\nowners: [{{name: A, email: a@b.c, role: owner}}]\nrollback: {{trigger: t}}\n\
             guardrails: [{{metric: latency, at_most: 1000}}]\nslices:\n  - id: s\n{extra}    sparsity: [\"2:4\"]\n    precision: [fp16]\n    workload: {{ops: [{{gemm: {{name: g, m: 64, n: 64, k: 64}}}}]}}\n"
        )
    };
    for (name, extra, expect) in [
        ("missing.yaml", "    backend: sim\n", "no `preset`"),
        (
            "unknown.yaml",
            "    backend: sim\n    preset: b300\n",
            "unknown accelerator preset `b300`",
        ),
        ("cpu.yaml", "    preset: h100\n", "applies to `backend: sim`"),
        (
            "precision.yaml",
            "    backend: sim\n    preset: sparseloop-stc\n",
            "no fp16 datapath",
        ),
    ] {
        sb.write(name, &pack(extra));
        let out = sb.output(&["validate", name]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(stderr(&out).contains(expect), "{name}: {}", stderr(&out));
    }
    // A preset file next to the pack resolves relative to the pack.
    let preset = std::fs::read_to_string(repo_file("scenarios/presets/a100.yaml")).unwrap();
    sb.write("packs/parts/mine.yaml", &preset);
    sb.write(
        "packs/ok.yaml",
        &pack("    backend: sim\n    preset: parts/mine.yaml\n"),
    );
    assert_exit(&sb.output(&["validate", "packs/ok.yaml"]), 0);
}

#[test]
fn issue_4_sim_reports_tail_latency_under_traffic() {
    let sb = Sandbox::new();
    let base = ["--arch", "h100", "--gemm", "2048x4096x4096", "--sparsity", "2:4"];
    let plain = sim_json(&sb, &base);
    assert!(plain["traffic"].is_null());
    let mut args = base.to_vec();
    args.extend(["--traffic", "poisson:10000", "--requests", "2000"]);
    let v = sim_json(&sb, &args);
    let t = &v["traffic"];
    let (p50, p99) = (t["p50_s"].as_f64().unwrap(), t["p99_s"].as_f64().unwrap());
    assert!(p50 >= v["latency_s"].as_f64().unwrap() && p99 > p50, "{t}");
    assert_eq!(t["p99_min_requests"], 662);
    assert_eq!(t["p99_trustworthy"], true);
    assert_eq!(v, sim_json(&sb, &args), "seeded: identical on every run");
    let out = sb.output(&["sim", "--arch", "h100", "--gemm", "8x8x8", "--traffic", "lumpy:3"]);
    assert_refused(&out, "--traffic");
}

#[test]
fn issue_4_sim_slices_carry_the_simulators_bottleneck_class() {
    let sb = Sandbox::new();
    // A decode-sized GEMM on the H100 model is launch-bound (3 µs launch vs ~0.6 µs of
    // work); the CPU ridge-point heuristic would have called it memory-bound.
    sb.write(
        "decode.yaml",
        "schema_version: 1\nname: decode\nowners: [{name: A, email: a@b.c, role: owner}]\nrollback: {trigger: t}\n\
         slices:\n  - id: s\n    backend: sim\n    preset: h100\n    sparsity: [dense]\n    precision: [fp16]\n\
         \x20   workload: {ops: [{gemm: {name: g, m: 8, n: 768, k: 768}}]}\n    guardrails: [{metric: latency, at_most: 1}]\n",
    );
    let out = sb.output(&["gate", "decode.yaml", "--out", "o", "-q", "--json"]);
    assert_exit(&out, 0);
    let v = stdout_json(&out);
    assert_eq!(v["guardrails"][0]["bottleneck"], "synchronization", "{v}");
}

#[test]
fn the_sim_report_schema_refuses_a_report_missing_a_counter_or_naming_an_unknown_bottleneck() {
    let sb = Sandbox::new();
    let mut v = sim_json(
        &sb,
        &["--arch", "h100", "--gemm", "64x64x64", "--sparsity", "2:4"],
    );
    v.as_object_mut().unwrap().remove("cycles");
    v["bottleneck"] = "lunch".into();
    let errors = crate::support::schema_errors(&v, "sim-report.schema.json");
    assert!(errors.iter().any(|e| e.contains("cycles")), "{errors:?}");
    assert!(errors.iter().any(|e| e.starts_with("/bottleneck")), "{errors:?}");
}

/// A small grid in the measurement script's format: a test input for `--measured`, with
/// times chosen so 2:4 loses at 1 token and wins at 8192 (not a measurement).
const GRID: &str = r#"{"format": "sparsegate-gpu-measurement", "version": 1,
  "device": {"name": "test GPU", "sm_count": 132, "compute_capability": "9.0"},
  "stack": {"torch": "test"},
  "cells": [
    {"layer": "sq", "m": 1, "n": 8192, "k": 8192, "dtype": "fp16",
     "dense": {"median_us": 40.0, "p10_us": 39.0, "p90_us": 41.0, "reps": 30},
     "sparse_cusparselt": {"median_us": 44.0, "p10_us": 43.0, "p90_us": 45.0, "reps": 30}},
    {"layer": "sq", "m": 8192, "n": 8192, "k": 8192, "dtype": "fp16",
     "dense": {"median_us": 1500.0, "p10_us": 1490.0, "p90_us": 1510.0, "reps": 30},
     "sparse_cusparselt": {"median_us": 1250.0, "p10_us": 1240.0, "p90_us": 1260.0, "reps": 30},
     "sparse_cutlass": {"error": "RuntimeError: not on sm90"}},
    {"layer": "sq", "m": 16, "n": 8192, "k": 8192, "dtype": "fp8",
     "dense": {"median_us": 30.0, "p10_us": 29.0, "p90_us": 31.0, "reps": 30}}
  ]}"#;

#[test]
fn issue_25_sim_measured_puts_the_preset_beside_a_real_grid() {
    let sb = Sandbox::new();
    sb.write_raw("grid.json", GRID);
    let v = sb.output_report(
        &["sim", "--arch", "h200", "--measured", "grid.json", "--json"],
        "sim-measured-report.schema.json",
    );
    assert_eq!(v["preset"], "h200");
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{v}");
    let big = &cells[1];
    assert_eq!(big["m"], 8192);
    assert!((big["measured_speedup"].as_f64().unwrap() - 1.2).abs() < 1e-9);
    assert_eq!(big["compute_bound"], true);
    assert_eq!(v["skipped"][0]["reason"], "the simulator has no fp8 precision");
    let x = &v["crossovers"][0];
    assert_eq!(x["decode_tokens"], 1);
    assert_eq!(x["measured_wins_from"], 8192);

    let text = sb.output(&["sim", "--arch", "h200", "--measured", "grid.json"]);
    assert_exit(&text, 0);
    let printed = stdout(&text);
    assert!(
        printed.contains("compute-bound speedups within 10%:"),
        "{printed}"
    );
    assert!(printed.contains("skipped sq at 16 tokens (fp8)"), "{printed}");
}

#[test]
fn issue_25_a_malformed_grid_is_refused_with_its_position_and_no_content() {
    let sb = Sandbox::new();
    sb.write_raw(
        "bad.json",
        "{\"format\": \"sparsegate-gpu-measurement\", \"version\": 1, \"cells\": \"SECRET-TOKEN\"}",
    );
    let out = sb.output(&["sim", "--arch", "h200", "--measured", "bad.json"]);
    assert_refused(&out, "not a measured grid");
    assert!(!stderr(&out).contains("SECRET-TOKEN"), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad.json:1:"), "{}", stderr(&out));
    sb.write_raw("v2.json", &GRID.replace("\"version\": 1", "\"version\": 2"));
    let out = sb.output(&["sim", "--arch", "h200", "--measured", "v2.json"]);
    assert_refused(&out, "version 2");
}
