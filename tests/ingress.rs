//! The pack corpus: every malformed pack is refused with a located, human diagnostic, and
//! every valid pack loads.
//!
//! Each file under `tests/packs/invalid/` starts with two comment lines:
//! `# expect: <substring of the first diagnostic's message>` and `# at: <line>:<col>`; an
//! optional `# hint: <substring of its hint>` pins the fix it suggests (issue 24).

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

fn optional_header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
        .map(str::trim)
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
        let hint_ok = optional_header(&text, "hint")
            .is_none_or(|h| first.hint.as_deref().is_some_and(|got| got.contains(h)));
        if got_at != at || !first.message.contains(expect) || !shown.contains(&located) || !hint_ok {
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
        "sparsity: [\"4:4\", \"unstructured:2\"]\n    precision: [int8, int8]",
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

fn refused(text: &str) -> sparsegate::ingress::PackError {
    match parse_pack(Path::new("edge.yaml"), text.to_owned()) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            for d in &e.diagnostics {
                assert!(d.location.line >= 1 && d.location.col >= 1, "{e}");
                assert!(d.span.0 + d.span.1 <= text.len(), "{e}");
            }
            e
        }
    }
}

const MINIMAL: &str = "schema_version: 1\nname: edge\nowners: [{name: A, email: a@b.c, role: owner}]\n\
                       rollback: {trigger: t}\nguardrails: [{metric: latency, at_most: 1000}]\nslices:\n  - id: s\n    \
                       workload: {ops: [{gemm: {name: g, m: 8, n: 8, k: 8}}]}\n    sparsity: [\"2:4\"]\n";

#[test]
fn pathological_yaml_is_refused_quickly() {
    // Billion laughs.
    let mut bomb = String::from(
        "a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n",
    );
    for i in 1..12 {
        let prev = (b'a' + i - 1) as char;
        let cur = (b'a' + i) as char;
        bomb.push_str(&format!("{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    let start = std::time::Instant::now();
    refused(&bomb);
    // Deep nesting.
    refused(&format!("{}1{}", "[".repeat(5000), "]".repeat(5000)));
    refused(&format!(
        "x-deep: {}1{}\n{MINIMAL}",
        "[".repeat(100),
        "]".repeat(100)
    ));
    assert!(start.elapsed().as_secs() < 10, "took {:?}", start.elapsed());
}

#[test]
fn odd_documents_are_refused_with_locations() {
    let e = refused(&format!("{MINIMAL}---\n{MINIMAL}"));
    assert!(e.diagnostics[0].location.line > 1, "{e}");
    refused("\t- a\n");
    refused("just a string\n");
    refused("# only a comment\n");
    refused("   \n\n");
    refused("[1, 2");
    refused("a: 'unterminated\n");
    refused(&MINIMAL.replace("name: edge", "name: \"\""));
    refused(&MINIMAL.replace("m: 8", "m: 1e30"));
    refused(&MINIMAL.replace("schema_version: 1", "schema_version: 99999999999"));
    refused(&MINIMAL.replace("m: 8", "m: .nan"));
    refused(&MINIMAL.replace("m: 8", "m: ~"));
    refused(&MINIMAL.replace("name: g", "name: [g]"));
    let e = refused(&MINIMAL.replace(
        "rollback: {trigger: t}",
        "rollback: {trigger: t, action: 5}\nseed: -1",
    ));
    assert_eq!(e.diagnostics.len(), 2, "{e}");
}

#[test]
fn integral_floats_and_unicode_are_fine() {
    let text = MINIMAL
        .replace("m: 8", "m: 8.0")
        .replace("name: A,", "name: Zoë Ünïcode,");
    let pack = parse_pack(Path::new("edge.yaml"), text).expect("loads");
    assert_eq!(pack.slices[0].ops[0].m, 8);
    // Columns count characters, not bytes.
    let text = MINIMAL
        .replace("name: A,", "name: Zoë,")
        .replace("role: owner", "role: owner, extra: 1");
    let e = refused(&text);
    let d = &e.diagnostics[0];
    let line = text.lines().nth(d.location.line as usize - 1).unwrap();
    let col = line.chars().take_while(|_| true).collect::<Vec<_>>();
    let found: String = col[d.location.col as usize - 1..].iter().take(5).collect();
    assert_eq!(found, "extra", "{e}");
    assert_eq!(&text[d.span.0..d.span.0 + d.span.1], "extra");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Arbitrary edits of a valid pack never panic, and every diagnostic stays inside the text.
    #[test]
    fn mutated_packs_never_panic(pos in 0usize..2000, len in 0usize..8, insert in "[ -~\n\t:\\-\\[\\]{}&*<!|>]{0,8}") {
        let base = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/packs/valid/quickstart.yaml"),
        ).expect("read");
        let mut cut = pos.min(base.len());
        while !base.is_char_boundary(cut) { cut -= 1; }
        let mut end = (cut + len).min(base.len());
        while !base.is_char_boundary(end) { end -= 1; }
        let text = format!("{}{}{}", &base[..cut], insert, &base[end..]);
        if let Err(e) = parse_pack(Path::new("m.yaml"), text.clone()) {
            proptest::prop_assert!(!e.diagnostics.is_empty());
            for d in &e.diagnostics {
                proptest::prop_assert!(d.location.line >= 1 && d.location.col >= 1);
                proptest::prop_assert!(d.span.0 + d.span.1 <= text.len());
                proptest::prop_assert!(text.is_char_boundary(d.span.0));
                let located = format!("m.yaml:{}:{}", d.location.line, d.location.col);
                proptest::prop_assert!(e.to_string().contains(&located));
            }
        }
    }
}
