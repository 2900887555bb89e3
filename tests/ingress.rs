//! The pack corpus: every malformed pack is refused with a located, human diagnostic, and
//! every valid pack loads.
//!
//! Each file under `tests/packs/invalid/` starts with two comment lines:
//! `# expect: <substring of the first diagnostic's message>` and `# at: <line>:<col>`.

use sparsegate::ingress::{Rule, Sparsity, load_pack, parse_pack};
use sparsegate::metric::Metric;
use std::path::{Path, PathBuf};

fn corpus(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/packs")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn header<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
        .unwrap_or_else(|| panic!("missing `# {key}:` header"))
        .trim()
}

#[test]
fn every_invalid_pack_is_refused_with_a_located_diagnostic() {
    let files = corpus("invalid");
    assert!(
        files.len() >= 16,
        "the malformed corpus shrank to {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read pack");
        let expect = header(&text, "expect");
        let at = header(&text, "at");
        let err = match load_pack(path) {
            Ok(_) => {
                failures.push(format!("{}: loaded, expected an error", path.display()));
                continue;
            }
            Err(e) => e,
        };
        let first = &err.diagnostics[0];
        let got_at = format!("{}:{}", first.location.line, first.location.col);
        let shown = err.to_string();
        let located = format!("{}:{at}", path.display());
        if got_at != at || !first.message.contains(expect) || !shown.contains(&located) {
            failures.push(format!(
                "{}: expected `{expect}` at {at}, got:\n{shown}",
                path.display()
            ));
        }
        for d in &err.diagnostics {
            assert!(
                d.hint.is_some(),
                "{}: diagnostic without a hint: {d}",
                path.display()
            );
            assert!(
                d.span.0 + d.span.1 <= err.source_text.len(),
                "{}: span out of range",
                path.display()
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_valid_pack_loads() {
    let files = corpus("valid");
    assert!(files.len() >= 2);
    for path in &files {
        if let Err(e) = load_pack(path) {
            panic!("{e}");
        }
    }
}

#[test]
fn unreadable_pack_is_located_at_the_start() {
    let path = Path::new("tests/packs/does-not-exist.yaml");
    let err = load_pack(path).expect_err("missing file");
    assert_eq!(err.diagnostics.len(), 1);
    let shown = err.to_string();
    assert!(shown.contains("tests/packs/does-not-exist.yaml:1:1"), "{shown}");
    assert!(shown.contains("cannot read pack"), "{shown}");
}

#[test]
fn all_problems_are_reported_at_once() {
    let text = "schema_version: 1\nname: many\nowners: [{name: A, email: a@b.c, role: owner}]\n\
                rollback: {trigger: t}\nslices:\n  - id: s\n    workload: {ops: [{gemm: {name: g, m: -1, n: 0, k: 8}}]}\n    \
                sparsity: [\"4:4\"]\n    color: red\n";
    let err = parse_pack(Path::new("many.yaml"), text.into()).expect_err("invalid");
    // Schema errors come first (semantic checks need a schema-clean pack): m, n and `color`.
    assert_eq!(err.diagnostics.len(), 3, "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("many.yaml:7:42: -1 is less than the minimum of 1"),
        "{shown}"
    );
    assert!(
        shown.contains("many.yaml:7:49: 0 is less than the minimum of 1"),
        "{shown}"
    );
    assert!(shown.contains("many.yaml:9:5: unknown key `color`"), "{shown}");

    let text = text
        .replace("m: -1, n: 0", "m: 1, n: 1")
        .replace("    color: red\n", "");
    let text = text.replace(
        "sparsity: [\"4:4\"]",
        "sparsity: [\"4:4\", \"unstructured:2\"]\n    precision: [int8]",
    );
    let err = parse_pack(Path::new("many.yaml"), text).expect_err("invalid");
    assert_eq!(err.diagnostics.len(), 3, "{err}");
}

#[test]
fn quickstart_expands_in_pack_order() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/packs/valid/quickstart.yaml");
    let pack = load_pack(&path).expect("loads");
    let ids: Vec<&str> = pack.slices.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "bert-qkv-2of4-fp32",
            "bert-ffn-2of4-fp32",
            "bert-ffn-u0.25-fp32",
            "bert-ffn-b16x16-0.5-fp32",
            "bert-ffn-dense-fp32",
        ]
    );
    assert!(pack.digest.starts_with("sha256:") && pack.digest.len() == 7 + 64);
    let qkv = &pack.slices[0];
    assert_eq!(qkv.pack, "quickstart");
    assert_eq!(qkv.sparsity, Sparsity::NOfM { n: 2, m: 4 });
    assert_eq!(qkv.threads, 2);
    assert_eq!((qkv.ops[0].m, qkv.ops[0].n, qkv.ops[0].k), (128, 2304, 768));
    // Pack-level guardrails first, then the slice's own, merged from `x-` blocks.
    let rules: Vec<(Metric, Rule)> = qkv.guardrails.iter().map(|g| (g.metric, g.rule)).collect();
    assert_eq!(
        rules,
        [
            (Metric::FallbackRate, Rule::AtMost { bound: 0.0 }),
            (Metric::EffectiveSpeedup, Rule::AtLeast { bound: 1.1 }),
            (Metric::Latency, Rule::RegressAtMost { margin: 0.05 }),
        ]
    );
    assert_eq!(qkv.guardrails[2].confidence, 0.9);
    let loc = qkv.guardrails[0].location.as_ref().expect("located");
    assert_eq!((loc.line, loc.col), (27, 6));
    // The merged-in guardrail points at its definition under `x-speed`.
    let loc = qkv.guardrails[1].location.as_ref().expect("located");
    assert_eq!((loc.line, loc.col), (20, 3));
    let ffn = &pack.slices[1];
    assert_eq!(ffn.ops.len(), 2);
    assert_eq!(ffn.guardrails[1].rule, Rule::AtLeast { bound: 1.05 });
    // Seeds differ per slice and do not depend on the slice's position.
    assert_ne!(pack.slices[1].seed, pack.slices[2].seed);
}
