//! Sharding (issue 8): `run --shard K/N` jobs merged into one decision equal to the
//! unsharded gate, and every merge refusal.

use crate::support::{Sandbox, assert_exit, assert_stdout_matches_schema, stderr, stdout};

/// Five slices whose guardrails are decided exactly (fallback counters), so the sharded and
/// unsharded verdicts can be compared row for row despite timing noise.
const PACK: &str = "
schema_version: 1
name: sharded
owners:
  - {name: Ada, email: ada@example.com, role: owner}
rollback:
  trigger: any layer falls back
samples: {warmup: 1, min: 4, max: 6, time_budget_s: 0.02}
guardrails:
  - {metric: fallback_rate, at_most: 0}
slices:
  - {id: a, workload: {ops: [{gemm: {name: x, m: 16, n: 32, k: 32}}]}, sparsity: [\"2:4\", dense]}
  - {id: b, workload: {ops: [{gemm: {name: x, m: 16, n: 32, k: 30}}]}, sparsity: [\"2:4\"]}
  - {id: c, workload: {ops: [{gemm: {name: x, m: 16, n: 48, k: 64}}]}, sparsity: [\"1:4\"]}
  - {id: d, workload: {ops: [{gemm: {name: x, m: 8, n: 32, k: 32}}]}, sparsity: [{unstructured: {sparsity: 50%}}]}
";

fn rows(verdict_json: &str) -> Vec<(String, String, String, String)> {
    let v: serde_json::Value = serde_json::from_str(verdict_json).unwrap();
    v["guardrails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let s = |k: &str| g[k].as_str().unwrap_or_default().to_owned();
            (s("pack"), s("slice"), s("metric"), s("verdict"))
        })
        .collect()
}

/// `run pack.yaml --shard K/N --out <prefix>K -q` for every K of N, each exiting 0.
fn run_shards_into(sb: &Sandbox, n: usize, prefix: &str) {
    for k in 1..=n {
        let (shard, out_dir) = (format!("{k}/{n}"), format!("{prefix}{k}"));
        assert_exit(
            &sb.output(&["run", "pack.yaml", "--shard", &shard, "--out", &out_dir, "-q"]),
            0,
        );
    }
}

/// The pack's three shards, into `shard1` to `shard3`.
fn run_shards(sb: &Sandbox) {
    run_shards_into(sb, 3, "shard");
}

#[test]
fn issue_8_three_shards_merged_equal_the_single_run() {
    let sb = Sandbox::with_pack(PACK);
    let single = sb.output(&["gate", "pack.yaml", "--out", "single", "--json", "-q"]);
    assert_exit(&single, 1);
    run_shards(&sb);
    let merged = sb.output(&["merge", "shard1", "shard2", "shard3", "--out", "merged", "--json"]);
    assert_exit(&merged, 1);
    assert_stdout_matches_schema(&merged, "verdict.schema.json");
    assert_eq!(rows(&stdout(&merged)), rows(&stdout(&single)));
    assert_eq!(rows(&stdout(&single)).len(), 5);
    assert!(sb.path().join("merged/memo.html").exists());
}

#[test]
fn issue_8_merge_refuses_gaps_overlaps_and_changed_packs() {
    let sb = Sandbox::with_pack(PACK);
    run_shards(&sb);
    let refused = |args: &[&str], needle: &str| {
        let out = sb.output(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(needle),
            "{args:?}: expected {needle:?} in {}",
            stderr(&out)
        );
    };
    // Leave out a shard that measured something (a shard may legitimately be empty).
    let nonempty = (1..=3)
        .find(|k| {
            !sb.json(&format!("shard{k}/evidence.json"))["slices"]
                .as_array()
                .unwrap()
                .is_empty()
        })
        .unwrap();
    let others: Vec<String> = (1..=3)
        .filter(|k| *k != nonempty)
        .map(|k| format!("shard{k}"))
        .collect();
    let mut gap: Vec<&str> = vec!["merge"];
    gap.extend(others.iter().map(String::as_str));
    refused(&gap, "no shard measured");
    let dup = format!("shard{nonempty}");
    refused(
        &["merge", "shard1", "shard2", "shard3", &dup],
        "more than one shard",
    );

    // Shards may run on other machines (see below), not on another build.
    let mut evidence = sb.json("shard1/evidence.json");
    evidence["environment"]["tool_version"] = "0.0.1-other".into();
    sb.write_raw("shard1/evidence.json", &evidence.to_string());
    refused(
        &["merge", "shard1", "shard2", "shard3"],
        "shard1/evidence.json changed since its run wrote it",
    );
    rehash(&sb, "shard1");
    refused(
        &["merge", "shard1", "shard2", "shard3"],
        "different locks (tool_version)",
    );
    run_shards(&sb);

    sb.write(
        "pack.yaml",
        &PACK.replace("any layer falls back", "any layer falls back to dense"),
    );
    refused(
        &["merge", "shard1", "shard2", "shard3"],
        "changed since the shards ran",
    );
}

/// Rewrite `dir/run-manifest.json` for the evidence as it is now, as a forger who knows the
/// format would: the digest is unkeyed.
fn rehash(sb: &Sandbox, dir: &str) {
    use sha2::Digest;
    let bytes = std::fs::read(sb.path().join(dir).join("evidence.json")).unwrap();
    let hex: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut manifest = sb.json(&format!("{dir}/run-manifest.json"));
    manifest["files"][0]["digest"] = format!("sha256:{hex}").into();
    sb.write_raw(&format!("{dir}/run-manifest.json"), &manifest.to_string());
}

/// Issue 23: shard evidence edited after its run (latency ×1000) is refused by `merge`,
/// naming the file, with exit 2; so is a shard without its manifest.
#[test]
fn merge_refuses_shard_evidence_edited_after_its_run() {
    let sb = Sandbox::with_pack(PACK);
    run_shards(&sb);
    let text = sb.read("shard2/evidence.json");
    let mut evidence: serde_json::Value = serde_json::from_str(&text).unwrap();
    // Latency ×1000: every sample of every slice's metrics.
    fn scale(v: &mut serde_json::Value, in_samples: bool, scaled: &mut usize) {
        match v {
            serde_json::Value::Number(n) if in_samples => {
                *v = (n.as_f64().unwrap() * 1000.0).into();
                *scaled += 1;
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| scale(x, in_samples, scaled)),
            serde_json::Value::Object(o) => {
                for (k, x) in o.iter_mut() {
                    scale(x, in_samples || k == "samples", scaled);
                }
            }
            _ => {}
        }
    }
    let mut scaled = 0;
    for s in evidence["slices"].as_array_mut().unwrap() {
        scale(&mut s["metrics"], false, &mut scaled);
    }
    assert!(scaled > 0, "{text}");
    let edited = evidence.to_string();
    assert_ne!(edited, text);
    sb.write_raw("shard2/evidence.json", &edited);
    let out = sb.output(&["merge", "shard1", "shard2", "shard3", "--out", "merged"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("shard2/evidence.json changed since its run wrote it"),
        "{}",
        stderr(&out)
    );
    assert!(!sb.path().join("merged").exists());

    std::fs::remove_file(sb.path().join("shard3/run-manifest.json")).unwrap();
    sb.write_raw("shard2/evidence.json", &text);
    let out = sb.output(&["merge", "shard1", "shard2", "shard3", "--out", "merged"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("shard3/run-manifest.json is missing"),
        "{}",
        stderr(&out)
    );
}

/// An empty shard must record the pack's thread count, not a default: with a pack that
/// locks 2 threads and has a single slice, one of two shards measures nothing, and merge
/// must still accept both.
#[test]
fn issue_8_an_empty_shard_records_the_packs_threads_and_merges() {
    let sb = Sandbox::with_pack(
        "
schema_version: 1
name: one
owners: [{name: Ada, email: ada@example.com, role: owner}]
rollback: {trigger: any layer falls back}
lock: {threads: 2}
samples: {warmup: 1, min: 4, max: 6, time_budget_s: 0.02}
guardrails:
  - {metric: fallback_rate, at_most: 0}
slices:
  - {id: a, workload: {ops: [{gemm: {name: x, m: 16, n: 32, k: 32}}]}, sparsity: [\"2:4\"]}
",
    );
    run_shards_into(&sb, 2, "s");
    for k in 1..=2 {
        let v = sb.json(&format!("s{k}/evidence.json"));
        assert_eq!(v["environment"]["threads"], 2, "shard {k}");
    }
    assert_exit(
        &sb.output(&["merge", "s1", "s2", "--out", "merged", "--json", "--no-history"]),
        0,
    );
}

#[test]
fn issue_22_shards_on_different_cpu_models_merge_each_slice_judged_on_its_own_machine() {
    // Hosted runners mix CPU models: one shard ran elsewhere. Every comparison of its
    // slices was paired on its own machine, so the merge combines them and says where.
    let sb = Sandbox::with_pack(PACK);
    let single = sb.output(&["gate", "pack.yaml", "--out", "single", "--json", "-q"]);
    run_shards(&sb);
    let mut evidence = sb.json("shard3/evidence.json");
    evidence["environment"]["cpu_model"] = "Imaginary CPU 9000".into();
    evidence["environment"]["cpu_features"] = serde_json::json!(["imaginary"]);
    sb.write_raw("shard3/evidence.json", &evidence.to_string());
    rehash(&sb, "shard3");
    let moved: Vec<String> = evidence["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slice"].as_str().unwrap().to_owned())
        .collect();
    assert!(!moved.is_empty(), "shard 3 measured nothing");

    let merged = sb.output(&["merge", "shard1", "shard2", "shard3", "--out", "merged", "--json"]);
    assert_exit(&merged, 1);
    assert_eq!(rows(&stdout(&merged)), rows(&stdout(&single)));
    let memo = sb.read("merged/memo.md");
    assert!(
        memo.matches("measured on Imaginary CPU 9000 (runner class imaginary-cpu-9000-")
            .count()
            >= moved.len(),
        "every slice of the other machine says so: {memo}"
    );
    let ev = sb.json("merged/evidence.json");
    for s in ev["slices"].as_array().unwrap() {
        let elsewhere = moved.contains(&s["slice"].as_str().unwrap().to_owned());
        assert_eq!(s["measured_on"].is_object(), elsewhere, "{}", s["slice"]);
    }
}

/// Issue 22: the bf16 kernel is a per-process timing probe's pick, and under load one
/// shard in four on one machine recorded the other bf16 path; its fp32 slices were then
/// reported and judged as measured on another machine. Only a slice whose own precision's
/// path differs keeps the other machine.
#[test]
fn a_shard_whose_bf16_pick_flipped_still_measured_its_fp32_slices_here() {
    let sb = Sandbox::with_pack(PACK);
    run_shards(&sb);
    let mut evidence = sb.json("shard2/evidence.json");
    let bf16 = evidence["environment"]["kernel_paths"]["bf16"]
        .as_str()
        .unwrap_or("");
    let other = if bf16 == "avx512-bf16" {
        "avx512-bf16-shift"
    } else {
        "avx512-bf16"
    };
    evidence["environment"]["kernel_paths"]["bf16"] = other.into();
    sb.write_raw("shard2/evidence.json", &evidence.to_string());
    rehash(&sb, "shard2");
    let merged = sb.output(&["merge", "shard1", "shard2", "shard3", "--out", "merged", "--json"]);
    assert_exit(&merged, 1);
    for s in sb.json("merged/evidence.json")["slices"].as_array().unwrap() {
        assert!(s["measured_on"].is_null(), "{}: {}", s["slice"], s["measured_on"]);
    }
    assert!(!sb.read("merged/memo.md").contains(" · measured on "));
}
