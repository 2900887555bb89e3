//! Issue 21: the checkpoint's Hugging Face `config.json`. Its sizes are checked before
//! anything runs (a missing or absurd field exits 2 with the field's `line:col`, what was
//! expected and a hint, and writes nothing), and its compressed-tensors
//! `sparsity_structure` is held against the checkpoint (every tensor the claim covers is
//! verified against it) and against the pack (a slice testing a pattern the claim does not
//! imply is refused).

use crate::support::*;

/// The fixture's config (tests/data/checkpoint/config.json), written out by hand so that
/// each field's position is fixed: `num_hidden_layers` at 3:24, `hidden_size` at 4:18,
/// `intermediate_size` at 5:24, `num_attention_heads` at 6:26, `sparsity_structure` at
/// 10:29.
const CONFIG: &str = r#"{
  "model_type": "llama",
  "num_hidden_layers": 1,
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_attention_heads": 4,
  "compression_config": {
    "sparsity_config": {
      "format": "sparse-24-bitmask",
      "sparsity_structure": "2:4",
      "targets": ["Linear"],
      "ignore": ["lm_head", "re:.*o_proj"]
    }
  }
}"#;

/// A sandbox with the fixture checkpoint at `ckpt/tiny.safetensors`, `config` at
/// `ckpt/config.json`, and a pack whose one slice gates both with `sparsity` (YAML list).
fn sandbox(config: &str, sparsity: &str) -> Sandbox {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.path().join("ckpt")).unwrap();
    std::fs::copy(
        repo_file("tests/data/checkpoint/tiny.safetensors"),
        sb.path().join("ckpt/tiny.safetensors"),
    )
    .unwrap();
    sb.write_raw("ckpt/config.json", config);
    sb.write(
        "pack.yaml",
        &format!(
            "
            schema_version: 1
            name: cfg
            owners: [{{name: Ada, email: ada@example.com, role: owner}}]
            rollback: {{trigger: any pattern violation}}
            samples: {FAST}
            guardrails:
              - {{metric: pattern_violations, at_most: 0}}
            slices:
              - id: mlp
                workload:
                  checkpoint: {{weights: ckpt/tiny.safetensors, config: ckpt/config.json, layers: \"*.mlp.*\", tokens: 8}}
                sparsity: {sparsity}
            "
        ),
    );
    sb
}

/// `CONFIG` with `from` replaced by `to` (which must be there).
fn config_with(from: &str, to: &str) -> String {
    assert!(CONFIG.contains(from), "{from}");
    CONFIG.replacen(from, to, 1)
}

#[test]
fn issue_21_missing_or_absurd_config_fields_are_refused_with_their_position_and_nothing_is_written() {
    let layers = "\"num_hidden_layers\": 1";
    let hidden = "\"hidden_size\": 64";
    let intermediate = "\"intermediate_size\": 128";
    let heads = "\"num_attention_heads\": 4";
    let structure = "\"sparsity_structure\": \"2:4\"";
    let cases: Vec<(String, &[&str])> = vec![
        (
            config_with(layers, "\"num_hidden_layers\": 1000000000"),
            &[
                "ckpt/config.json:3:24: `num_hidden_layers` is 1000000000; expected a whole number in 1..=4096",
                "hint: `num_hidden_layers` counts the transformer blocks",
            ],
        ),
        (
            config_with(layers, "\"num_hidden_layers\": 0"),
            &["ckpt/config.json:3:24: `num_hidden_layers` is 0; expected a whole number in 1..=4096"],
        ),
        (
            config_with(layers, "\"num_hidden_layers\": -3"),
            &["ckpt/config.json:3:24: `num_hidden_layers` is -3;"],
        ),
        (
            config_with(layers, "\"num_hidden_layers\": \"32\""),
            &["ckpt/config.json:3:24: `num_hidden_layers` is a string;"],
        ),
        (
            config_with(hidden, "\"hidden_size\": 1e30"),
            &[
                "ckpt/config.json:4:18: `hidden_size` is 1e30, past what 64 bits hold; expected a whole number in 1..=262144",
            ],
        ),
        (
            config_with(hidden, "\"hidden_size\": 18446744073709551616"),
            &["ckpt/config.json:4:18: `hidden_size` is 1.8446744073709552e19, past what 64 bits hold"],
        ),
        (
            config_with(hidden, "\"hidden_size\": 64.5"),
            &["ckpt/config.json:4:18: `hidden_size` is a fraction;"],
        ),
        (
            config_with(heads, "\"num_attention_heads\": 5"),
            &[
                "ckpt/config.json:6:26: `num_attention_heads` 5 does not divide `hidden_size` 64",
                "hint: `num_attention_heads` must divide `hidden_size`",
            ],
        ),
        (
            config_with(heads, "\"num_attention_heads\": 4, \"num_key_value_heads\": 3"),
            &["ckpt/config.json:6:52: `num_key_value_heads` 3 does not divide `num_attention_heads` 4"],
        ),
        (
            config_with(intermediate, "\"intermediate_size\": 0"),
            &["ckpt/config.json:5:24: `intermediate_size` is 0; expected a whole number in 1..=1048576"],
        ),
        (
            config_with(intermediate, "\"intermediate_size\": 4294967296"),
            &["ckpt/config.json:5:24: `intermediate_size` is 4294967296;"],
        ),
        (
            // Each plausible alone, absurd together: about 4.5e15 weights.
            config_with(layers, "\"num_hidden_layers\": 4096")
                .replacen(hidden, "\"hidden_size\": 262144", 1)
                .replacen(intermediate, "\"intermediate_size\": 1048576", 1),
            &[
                "ckpt/config.json:3:24: `num_hidden_layers` 4096 blocks of width 262144 and `intermediate_size` 1048576 imply 4.5e15 weights; expected at most 1e13",
            ],
        ),
        (
            config_with(&format!("{layers},\n"), ""),
            &[
                "ckpt/config.json: `num_hidden_layers` is missing (nor is it given as `n_layer` or `num_layers`)",
                "hint: a transformers config names the model's depth and width",
            ],
        ),
        (
            config_with(&format!("{hidden},\n"), ""),
            &["`hidden_size` is missing (nor is it given as `n_embd` or `d_model`)"],
        ),
        (
            config_with(structure, "\"sparsity_structure\": \"4:2\""),
            &[
                "ckpt/config.json:10:29: `sparsity_structure` `4:2` is not a structure; expected `N:M` with 0 < N < M ≤ 32 (e.g. `2:4`), `unstructured` or `0:0`",
                "hint: compressed-tensors writes `sparsity_structure` as `2:4`",
            ],
        ),
        (
            config_with(
                "\"ignore\": [\"lm_head\", \"re:.*o_proj\"]",
                "\"ignore\": \"lm_head\"",
            ),
            &[
                "ckpt/config.json:8:24: `compression_config.sparsity_config` is not what compressed-tensors writes",
            ],
        ),
        (
            config_with("\"re:.*o_proj\"", "\"re:(\""),
            &["ckpt/config.json:12:17: sparsity_config pattern `re:(` is not a valid regular expression"],
        ),
        (
            "[1, 2]".to_owned(),
            &["ckpt/config.json: not a model config (a JSON object): unexpected structure at line 1 column"],
        ),
    ];
    for (config, needles) in cases {
        let sb = sandbox(&config, "[\"2:4\"]");
        let printed = sb.refused_at_ingress("pack.yaml");
        // Located in the pack too, at the `config:` that names the file.
        assert_contains(&printed, "pack.yaml:11:");
        for needle in needles {
            assert_contains(&printed, needle);
        }
        let out = sb.gate("pack.yaml", &[]);
        assert_exit(&out, 2);
        assert!(!sb.path().join("out").exists(), "{config}: nothing is written");
    }
}

#[test]
fn issue_21_an_absurd_config_is_refused_in_bounded_memory() {
    // Sizes that would need petabytes if anything were allocated from them.
    let config = config_with("\"num_hidden_layers\": 1", "\"num_hidden_layers\": 4096")
        .replacen("\"hidden_size\": 64", "\"hidden_size\": 262144", 1)
        .replacen("\"num_attention_heads\": 4", "\"num_attention_heads\": 64", 1);
    let sb = sandbox(&config, "[\"2:4\"]");
    let time = std::path::Path::new("/usr/bin/time");
    let rss_file = sb.path().join("../rss-issue-21");
    let out = sparsegate_under(time.exists().then_some(time), &rss_file)
        .current_dir(sb.path())
        .args(["gate", "pack.yaml", "--out", "out"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert_contains(&printed(&out), "imply");
    assert!(!sb.path().join("out").exists(), "nothing is written");
    if time.exists() {
        let rss_kb: u64 = std::fs::read_to_string(&rss_file)
            .unwrap()
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap();
        let _ = std::fs::remove_file(&rss_file);
        assert!(rss_kb < 128 * 1024, "peak RSS {rss_kb} KiB");
    }
}

#[test]
fn issue_21_a_slice_testing_a_pattern_the_configs_claim_does_not_imply_is_refused_at_that_pattern() {
    // 2:4 implies 4:8 (two whole groups) and dense times the weights as stored; 1:4 is
    // stricter than the claim, so weights holding the claim need not hold it.
    let sb = sandbox(CONFIG, "[\"4:8\", \"1:4\", dense]");
    let printed = sb.refused_at_ingress("pack.yaml");
    assert_contains(
        &printed,
        "slice `mlp` tests `1:4` on a checkpoint whose config claims `2:4` for its targeted tensors (ckpt/config.json:10:29)",
    );
    assert_contains(&printed, "pack.yaml:12:");
    assert_contains(&printed, "(1 problem)");
    assert_contains(
        &printed,
        "test what the config claims (`sparsity: [\"2:4\"]`), or `dense`",
    );
    // A config claiming `unstructured` contradicts a pack testing 2:4.
    let sb = sandbox(
        &config_with(
            "\"sparsity_structure\": \"2:4\"",
            "\"sparsity_structure\": \"unstructured\"",
        ),
        "[\"2:4\"]",
    );
    assert_contains(
        &sb.refused_at_ingress("pack.yaml"),
        "tests `2:4` on a checkpoint whose config claims `unstructured`",
    );
    // `0:0` claims no structure: nothing to contradict.
    let sb = sandbox(
        &config_with(
            "\"sparsity_structure\": \"2:4\"",
            "\"sparsity_structure\": \"0:0\"",
        ),
        "[\"2:4\"]",
    );
    assert_exit(&sb.output(&["validate", "pack.yaml"]), 0);
}

#[test]
fn issue_21_every_tensor_the_config_claims_is_verified_against_the_claim_whatever_the_slice_tests() {
    let sb = sandbox(CONFIG, "[\"4:8\", dense]");
    let (_, memo) = sb.gate_fails_at("validation");
    let evidence = sb.json("out/evidence.json");
    let planted = &serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(repo_file("tests/data/checkpoint/expected.json")).unwrap(),
    )
    .unwrap()["violations"]["model.layers.0.mlp.down_proj.weight"];
    for (slice, violations) in [("mlp-4of8-fp32", 3.0 + 3.0), ("mlp-dense-fp32", 3.0)] {
        let slice = slice_named(&evidence, slice);
        let down = slice["structure"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tensor"] == "model.layers.0.mlp.down_proj.weight")
            .unwrap();
        // The claim's own check locates the planted groups, even on the dense slice.
        assert_eq!(down["claim"]["structure"], "2:4");
        assert_eq!(down["claim"]["at"], "ckpt/config.json:10:29");
        assert_eq!(&down["claim"]["first_violations"], planted);
        assert_eq!(down["claim"]["violations"], 3);
        // pattern_violations counts the slice's pattern and the claim: down_proj breaks
        // 4:8 in three groups as well, and 2:4 in three; the dense slice only the claim.
        assert_eq!(slice["counters"]["pattern_violations"], violations, "{slice}");
        let up = slice["structure"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tensor"] == "model.layers.0.mlp.up_proj.weight")
            .unwrap();
        assert_eq!(up["claim"]["violations"], 0);
    }
    assert_contains(
        &memo,
        "| dense | 2:4: 3 groups break it at [3, 8] [17, 40] [60, 124] |",
    );
    assert_contains(&memo, "| 4:8 | 2:4: holds |");
    assert_contains(
        &memo,
        "also checked against the structure it claims, `2:4` (`ckpt/config.json:10:29`)",
    );
}
