//! Issue 21: the checkpoint that ships is the subject of the gate. Fixtures are written by
//! the real `safetensors` package (tests/data/checkpoint/make_fixtures.py); its
//! `expected.json` says where the violations were planted.

use crate::support::*;

/// A sandbox holding the fixture files `names` (from tests/data/checkpoint/) under `ckpt/`
/// and a pack whose one slice gates `weights` with the given extra checkpoint keys.
fn sandbox(names: &[&str], weights: &str, extra: &str) -> Sandbox {
    let sb = Sandbox::new();
    for name in names {
        let from = repo_file(&format!("tests/data/checkpoint/{name}"));
        let to = sb.path().join("ckpt").join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{from}: {e}"));
    }
    write_pack(
        &sb,
        "{}",
        "{metric: pattern_violations, at_most: 0}",
        "mlp",
        &format!("{{weights: {weights}, tokens: 8{extra}}}"),
    );
    sb
}

/// `pack.yaml`: one 2:4 slice `id` over `checkpoint`, with `lock` and one pack guardrail.
fn write_pack(sb: &Sandbox, lock: &str, guardrail: &str, id: &str, checkpoint: &str) {
    write_header_and_slices(
        sb,
        &format!(
            "
            lock: {lock}
            guardrails:
              - {guardrail}"
        ),
        &format!(
            "
              - id: {id}
                workload:
                  checkpoint: {checkpoint}
                sparsity: [\"2:4\"]
            "
        ),
    );
}

/// `pack.yaml` with the given `slices:` items (YAML, indented 14 spaces) and no pack guardrails.
fn write_slices(sb: &Sandbox, slices: &str) {
    write_header_and_slices(sb, "", slices);
}

/// `pack.yaml`: the common head, `top` (more top-level keys, indented 12 spaces), `slices`.
fn write_header_and_slices(sb: &Sandbox, top: &str, slices: &str) {
    sb.write(
        "pack.yaml",
        &format!(
            "
            schema_version: 1
            name: ckpt
            owners: [{{name: Ada, email: ada@example.com, role: owner}}]
            rollback: {{trigger: any pattern violation}}
            samples: {FAST}{top}
            slices:{slices}"
        ),
    );
}

fn expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(repo_file("tests/data/checkpoint/expected.json")).unwrap())
        .unwrap()
}

#[test]
fn issue_21_the_gate_locates_the_planted_2of4_violations_in_the_shipped_weights() {
    let sb = sandbox(
        &["tiny.safetensors", "config.json"],
        "ckpt/tiny.safetensors",
        ", config: ckpt/config.json, layers: \"model.layers.*.mlp.*\"",
    );
    let (verdict, memo) = sb.gate_fails_at("validation");
    // The memo locates them too, tensor by tensor, and names the files with their digests.
    assert_contains(
        &memo,
        "| `model.layers.0.mlp.down_proj.weight` | F32 | 64×128 | 0.5004 | 2048 | 3 | [3, 8] [17, 40] [60, 124] | 2:4 |",
    );
    assert_contains(
        &memo,
        "Artifacts read: `ckpt/tiny.safetensors` (107352 B, `sha256:",
    );
    // The config claims 2:4 too, and says where; torch's semi-structured rules: the broken
    // tensor stays dense there too, and fp32 has no cuSPARSELt kernel.
    assert_contains(
        &memo,
        "| 2:4 | 2:4: 3 groups break it at [3, 8] [17, 40] [60, 124] | torch-cutlass: dense (3 groups break 2:4); torch-cusparselt: dense (fp32 is not a dtype it supports) |",
    );
    assert_contains(&memo, "torch-cutlass: sparse; torch-cusparselt: dense (fp32");
    assert_eq!(verdict["guardrails"][0]["metric"], "pattern_violations");
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "mlp-2of4-fp32");
    let down = slice["structure"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tensor"] == "model.layers.0.mlp.down_proj.weight")
        .expect("down_proj verified");
    let planted = &expected()["violations"]["model.layers.0.mlp.down_proj.weight"];
    assert_eq!(&down["first_violations"], planted);
    assert_eq!(down["violations"], planted.as_array().unwrap().len());
    // The CPU kernel cannot run the broken tensor as shipped: the matrix says what was timed.
    let down_op = slice["plan"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"]["name"] == "model.layers.0.mlp.down_proj.weight")
        .expect("down_proj lowered");
    assert!(
        down_op["reason"]
            .as_str()
            .unwrap()
            .ends_with("the shipped tensor breaks 2:4 in 3 groups, so it was timed after magnitude-pruning them to the pattern"),
        "{down_op}"
    );
    let up = slice["structure"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tensor"] == "model.layers.0.mlp.up_proj.weight")
        .unwrap();
    assert_eq!(up["violations"], 0);
    assert_eq!(
        up["density"],
        expected()["density"]["model.layers.0.mlp.up_proj.weight"]
    );
    assert_eq!(slice["counters"]["pattern_violations"], 3.0);
    // Half the FLOPs (up_proj) hold 2:4 and run sparse; down_proj breaks it.
    assert_eq!(slice["counters"]["sparse_coverage"], 0.5);
    // The shipped weights were timed, not generated ones: both ops ran on the 2:4 kernel.
    assert!(
        slice["metrics"]["latency"]["samples"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    let digests: Vec<&str> = slice["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(digests, ["ckpt/tiny.safetensors", "ckpt/config.json"]);
    // Issue 20: what the comparator and the candidate ran on is recorded.
    let paths = ["avx512-f32", "avx2-f32", "portable-f32"];
    assert!(
        paths.contains(&slice["isa"]["comparator"].as_str().unwrap()),
        "{}",
        slice["isa"]
    );
    assert_eq!(slice["isa"]["candidate"], slice["isa"]["comparator"]);
}

#[test]
fn issue_21_the_configs_ignore_list_leaves_layers_dense_and_says_why() {
    let sb = sandbox(
        &["tiny.safetensors", "config.json"],
        "ckpt/tiny.safetensors",
        ", config: ckpt/config.json",
    );
    assert_exit(&sb.gate("pack.yaml", &[]), 1);
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "mlp-2of4-fp32");
    let left: Vec<(&str, &str)> = slice["structure"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| Some((t["tensor"].as_str()?, t["left_dense"].as_str()?)))
        .collect();
    assert_eq!(
        left,
        [
            ("lm_head.weight", "in the config's sparsity_config.ignore"),
            (
                "model.layers.0.self_attn.o_proj.weight",
                "in the config's sparsity_config.ignore"
            ),
        ]
    );
    let ops: Vec<&str> = slice["plan"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"]["name"].as_str().unwrap())
        .collect();
    assert!(!ops.contains(&"lm_head.weight") && ops.contains(&"model.layers.0.self_attn.q_proj.weight"));
}

#[test]
fn issue_21_a_token_list_times_each_layer_at_every_count_and_reports_its_break_even() {
    let sb = sandbox(
        &["tiny.safetensors", "config.json"],
        "ckpt/tiny.safetensors",
        ", config: ckpt/config.json, layers: \"*up_proj*\"",
    );
    // The same pack with a token list instead of the sandbox's one count.
    write_pack(
        &sb,
        "{}",
        "{metric: pattern_violations, at_most: 0}",
        "mlp",
        "{weights: ckpt/tiny.safetensors, config: ckpt/config.json, layers: \"*up_proj*\", tokens: [32, 1, 4, 4]}",
    );
    assert_exit(&sb.gate("pack.yaml", &[]), 0);
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "mlp-2of4-fp32");
    let up = "model.layers.0.mlp.up_proj.weight";
    // One op per token count, ascending and deduplicated, each named after its tensor.
    let ops: Vec<(String, u64)> = slice["plan"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["op"]["name"].as_str().unwrap().to_owned(),
                o["op"]["m"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            (format!("{up}@1"), 1),
            (format!("{up}@4"), 4),
            (format!("{up}@32"), 32)
        ]
    );
    // Every op ran the checkpoint's 2:4 weights on the sparse kernel: full coverage.
    assert_eq!(slice["counters"]["sparse_coverage"], 1.0);
    let layers = slice["break_even"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["tensor"], up);
    let points = layers[0]["points"].as_array().unwrap();
    let tokens: Vec<u64> = points.iter().map(|p| p["tokens"].as_u64().unwrap()).collect();
    assert_eq!(tokens, [1, 4, 32]);
    for p in points {
        let (s, lo, hi) = (
            p["speedup"].as_f64().unwrap(),
            p["low"].as_f64().unwrap(),
            p["high"].as_f64().unwrap(),
        );
        assert!(s > 0.0 && lo <= s && s <= hi, "{p}");
    }
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "### Break-even per layer: mlp-2of4-fp32");
    assert_contains(
        &memo,
        "| tensor | 1 tok | 4 tok | 32 tok | wins | loses from | break-even |",
    );
    assert_contains(&memo, &format!("| `{up}` | "));
}

#[test]
fn issue_21_sharded_bf16_and_int8_checkpoints_are_read_and_verified() {
    for (files, weights) in [
        (
            &[
                "sharded/model.safetensors.index.json",
                "sharded/model-00001-of-00002.safetensors",
                "sharded/model-00002-of-00002.safetensors",
            ][..],
            "ckpt/sharded/model.safetensors.index.json",
        ),
        (&["tiny-bf16.safetensors"][..], "ckpt/tiny-bf16.safetensors"),
        (&["tiny-int8.safetensors"][..], "ckpt/tiny-int8.safetensors"),
    ] {
        let sb = sandbox(files, weights, ", layers: \"*down_proj*\"");
        assert_exit(&sb.gate("pack.yaml", &[]), 1);
        let evidence = sb.json("out/evidence.json");
        let slice = slice_named(&evidence, "mlp-2of4-fp32");
        assert_eq!(slice["counters"]["pattern_violations"], 3.0, "{weights}");
        assert_eq!(
            slice["artifacts"].as_array().unwrap().len(),
            files.len(),
            "{weights}"
        );
    }
}

#[test]
fn issue_21_a_tampered_weight_byte_changes_the_recorded_digest() {
    let digest = |sb: &Sandbox| {
        assert_exit(&sb.gate("pack.yaml", &[]), 1);
        slice_named(&sb.json("out/evidence.json"), "mlp-2of4-fp32")["artifacts"][0]["digest"].clone()
    };
    let sb = sandbox(&["tiny.safetensors"], "ckpt/tiny.safetensors", "");
    let before = digest(&sb);
    let path = sb.path().join("ckpt/tiny.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    assert_ne!(before, digest(&sb));
}

#[test]
fn issue_21_merge_refuses_shards_that_measured_different_checkpoint_bytes() {
    let sb = Sandbox::new();
    let to = sb.path().join("ckpt/tiny.safetensors");
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(repo_file("tests/data/checkpoint/tiny.safetensors"), &to).unwrap();
    write_slices(
        &sb,
        r#"
              - {id: up, workload: {checkpoint: {weights: ckpt/tiny.safetensors, layers: "*up_proj*", tokens: 4}}, sparsity: ["2:4"], guardrails: [{metric: latency, at_most: 1000}]}
              - {id: q, workload: {checkpoint: {weights: ckpt/tiny.safetensors, layers: "*q_proj*", tokens: 4}}, sparsity: ["2:4"], guardrails: [{metric: latency, at_most: 1000}]}
"#,
    );
    let shard = |k: &str| {
        sb.output(&[
            "run",
            "pack.yaml",
            "--shard",
            k,
            "--out",
            &format!("s{}", &k[..1]),
            "-q",
        ])
    };
    assert_exit(&shard("1/2"), 0);
    // The checkpoint is rewritten between the two CI jobs.
    let mut bytes = std::fs::read(&to).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&to, bytes).unwrap();
    assert_exit(&shard("2/2"), 0);
    let merged = sb.output(&["merge", "s1", "s2", "--out", "merged"]);
    assert_exit(&merged, 2);
    let err = stderr(&merged);
    assert_contains(
        &err,
        "different contents of artifact `ckpt/tiny.safetensors` of pack `ckpt`",
    );
    assert_contains(&err, "same checkpoint files");
    assert!(
        !sb.path().join("merged").exists(),
        "a refused merge writes nothing"
    );
}

#[test]
fn issue_21_the_simulator_models_each_tensor_with_the_structure_it_really_holds() {
    let sb = sandbox(&["tiny.safetensors"], "ckpt/tiny.safetensors", "");
    write_slices(
        &sb,
        r#"
              - id: mlp
                backend: sim
                preset: h100
                precision: [fp16]
                workload: {checkpoint: {weights: ckpt/tiny.safetensors, layers: "*mlp*", tokens: 64}}
                sparsity: ["2:4"]
                guardrails: [{metric: pattern_violations, at_most: 0}]
"#,
    );
    assert_exit(&sb.gate("pack.yaml", &[]), 1);
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "mlp-2of4-fp16");
    let speedup = |op: &str| {
        let c = slice["op_costs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["op"] == op)
            .unwrap();
        c["comparator_s"].as_f64().unwrap() / c["candidate_s"].as_f64().unwrap()
    };
    // down_proj breaks 2:4 in three groups: modelled dense, exactly the dense time.
    assert_eq!(speedup("model.layers.0.mlp.down_proj.weight"), 1.0);
    // up_proj holds 2:4: modelled on the sparse tensor cores, so its time differs.
    assert_ne!(speedup("model.layers.0.mlp.up_proj.weight"), 1.0);
    assert_eq!(slice["counters"]["pattern_violations"], 3.0);
    assert_eq!(slice["counters"]["sparse_coverage"], 0.5);
    // ...and the supported-layer matrix says so: a counted dense fallback with the reason,
    // not "sparse math units" for a layer no sparse unit runs.
    let row = |op: &str| {
        slice["plan"]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"]["name"] == op)
            .unwrap()
            .clone()
    };
    let down = row("model.layers.0.mlp.down_proj.weight");
    assert_eq!(down["path"], "dense_fallback", "{down}");
    let reason = down["reason"].as_str().unwrap();
    assert!(reason.contains("breaks 2:4 in 3 groups"), "{reason}");
    assert!(!reason.contains("timed after"), "nothing was timed: {reason}");
    assert_eq!(row("model.layers.0.mlp.up_proj.weight")["path"], "sparse");
    assert_eq!(slice["counters"]["fallback_rate"], 0.5);
}

#[test]
fn issue_21_malformed_checkpoints_are_refused_with_the_file_and_tensor() {
    for (name, needles) in [
        (
            "truncated.safetensors",
            &["ckpt/bad/truncated.safetensors", "the file is truncated"][..],
        ),
        ("short.safetensors", &["5 bytes is too short"][..]),
        (
            "length-past-end.safetensors",
            &["the header length says", "only"][..],
        ),
        (
            "huge-header.safetensors",
            &["10000000000 bytes", "read up to 100000000"][..],
        ),
        (
            "not-json.safetensors",
            &["not a safetensors JSON header", "syntax error at line 1"][..],
        ),
        ("overlap.safetensors", &["overlap tensor"][..]),
        (
            "shape-vs-bytes.safetensors",
            &["tensor `model.norm.weight`", "F32 × [65] is 260 bytes"][..],
        ),
        ("out-of-range.safetensors", &["run past the data section"][..]),
    ] {
        let sb = sandbox(&[&format!("bad/{name}")], &format!("ckpt/bad/{name}"), "");
        let printed = sb.refused_at_ingress("pack.yaml");
        assert_contains(&printed, "pack.yaml:12:29:");
        for needle in needles {
            assert_contains(&printed, needle);
        }
        assert!(!sb.path().join("out").exists(), "{name}: nothing is written");
    }
}

#[test]
fn issue_21_checkpoint_paths_stay_inside_the_pack_tree() {
    let sb = sandbox(&["tiny.safetensors"], "../tiny.safetensors", "");
    assert_contains(
        &sb.refused_at_ingress("pack.yaml"),
        "is outside the pack's directory",
    );
    #[cfg(unix)]
    {
        let sb = sandbox(&[], "ckpt/link.safetensors", "");
        std::fs::create_dir_all(sb.path().join("ckpt")).unwrap();
        std::os::unix::fs::symlink(
            repo_file("tests/data/checkpoint/tiny.safetensors"),
            sb.path().join("ckpt/link.safetensors"),
        )
        .unwrap();
        assert_contains(
            &sb.refused_at_ingress("pack.yaml"),
            "is outside the pack's directory",
        );
    }
}

#[test]
fn issue_21_the_example_checkpoint_pack_validates() {
    let out = Sandbox::new().output(&["validate", &example_pack("checkpoint.yaml")]);
    assert_exit(&out, 0);
}

/// A pack gating `ckpt/tiny.safetensors` against its golden baseline, with `lock`.
fn baseline_pack(sb: &Sandbox, lock: &str) {
    let checkpoint = "{weights: ckpt/tiny.safetensors, layers: \"*up_proj*\", tokens: 8}";
    write_pack(
        sb,
        lock,
        "{metric: latency, regress_at_most: 50%}",
        "up",
        checkpoint,
    );
}

#[test]
fn issue_21_a_baseline_blessed_on_one_checkpoint_is_refused_against_another() {
    let sb = sandbox(&["tiny.safetensors"], "ckpt/tiny.safetensors", "");
    baseline_pack(&sb, "{}");
    assert_exit(&sb.output(&["bless", "pack.yaml", "-q"]), 0);
    let baseline = sb.json("golden/ckpt/up-2of4-fp32.json");
    assert_eq!(baseline["artifacts"][0]["name"], "ckpt/tiny.safetensors");
    // One weight byte of another tensor changes: same shapes, another checkpoint.
    let path = sb.path().join("ckpt/tiny.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    assert_contains(
        &printed(&out),
        "the checkpoint differs from the one golden baseline",
    );
    assert_contains(&printed(&out), "artifact ckpt/tiny.safetensors");
    assert_contains(&printed(&out), "allow_artifact_change");
    // Said on purpose, the comparison runs and the memo lists what changed.
    baseline_pack(&sb, "{allow_artifact_change: true}");
    let out = sb.gate("pack.yaml", &[]);
    assert_ne!(out.status.code(), Some(2), "{}", printed(&out));
    assert_contains(&sb.read("out/memo.md"), "artifact ckpt/tiny.safetensors");
}

#[test]
fn issue_21_checkpoint_guardrails_on_a_generated_workload_are_refused_at_ingress() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "gen",
        FAST,
        &["{metric: pattern_violations, at_most: 0}"],
    ));
    let printed = sb.refused_at_ingress("pack.yaml");
    assert_contains(&printed, "`pattern_violations` needs a checkpoint workload");
    assert_contains(&printed, "workload: {checkpoint: {...}}");
}

#[test]
fn a_million_entry_token_list_is_refused_with_exit_2_and_nothing_written() {
    // 2 MB on one line, inside the 4 MiB pack limit: the YAML node limit refuses it, and
    // the diagnostic (at column 100 000+) prints as text instead of panicking in the renderer.
    let sb = sandbox(&["tiny.safetensors"], "ckpt/tiny.safetensors", "");
    let ones = vec!["1"; 1_000_000].join(",");
    write_pack(
        &sb,
        "{}",
        "{metric: pattern_violations, at_most: 0}",
        "mlp",
        &format!("{{weights: ckpt/tiny.safetensors, tokens: [{ones}]}}"),
    );
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert_contains(&err, "pack is too large or too deeply nested to load");
    assert_contains(&err, "hint: ");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!sb.path().join("out").exists(), "nothing is written");
}

#[test]
fn seventeen_token_counts_are_refused_saying_at_most_16() {
    let sb = sandbox(&["tiny.safetensors"], "ckpt/tiny.safetensors", "");
    let counts: Vec<String> = (1..=17).map(|t| t.to_string()).collect();
    write_pack(
        &sb,
        "{}",
        "{metric: pattern_violations, at_most: 0}",
        "mlp",
        &format!(
            "{{weights: ckpt/tiny.safetensors, tokens: [{}]}}",
            counts.join(", ")
        ),
    );
    let printed = sb.refused_at_ingress("pack.yaml");
    assert_contains(&printed, "/slices/0/workload/checkpoint/tokens");
    assert_contains(&printed, "a list of 1 to 16 of them");
}

#[test]
fn a_token_count_past_the_simulators_dimension_limit_is_refused_at_ingress() {
    // It ran to an execution failure ("did not run", exit 1) before.
    let sb = sandbox(&["tiny.safetensors"], "ckpt/tiny.safetensors", "");
    write_slices(
        &sb,
        "
              - id: sim
                backend: sim
                preset: h100
                precision: [fp16]
                workload:
                  checkpoint: {weights: ckpt/tiny.safetensors, layers: \"*up_proj*\", tokens: [1, 5000000000]}
                sparsity: [\"2:4\"]
                guardrails: [{metric: pattern_violations, at_most: 0}]
              - id: named
                backend: sim
                preset: h100
                precision: [fp16]
                workload:
                  model: {name: resnet-50, tokens: 18446744073709551615}
                sparsity: [\"2:4\"]
                guardrails: [{metric: latency, at_most: 1}]
            ",
    );
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    let err = printed(&out);
    assert_contains(
        &err,
        "op `model.layers.0.mlp.up_proj.weight@5000000000` is 5000000000x128x64 (MxNxK), over the simulator's limit of 4294967296 on each GEMM dimension",
    );
    assert_contains(&err, "op `conv1` is 18446744073709551615x64x147 (MxNxK)");
    assert_contains(&err, "lower `tokens`");
    assert_contains(&err, "pack.yaml:");
    assert!(!sb.path().join("out").exists(), "nothing is written");
}
