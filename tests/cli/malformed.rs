//! Bad input: every malformed pack exits 2 with a located message and writes nothing.
//! The corpus lives in `tests/packs/invalid/`; each file's header says what to expect:
//! `# expect: <message fragment>` and `# at: <line>:<col>`.

use crate::support::{Sandbox, stderr};
use std::path::PathBuf;

struct Case {
    path: PathBuf,
    expect: String,
    at: String,
    /// `# hint:` when the file pins the fix its diagnostic suggests (issue 24).
    hint: Option<String>,
}

fn corpus() -> Vec<Case> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/packs/invalid");
    let mut cases: Vec<Case> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let header = |key: &str| {
                text.lines()
                    .find_map(|l| {
                        l.strip_prefix(&format!("# {key}: "))
                            .map(str::trim)
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| panic!("{} lacks a `# {key}:` header", path.display()))
            };
            // The empty-file case cannot carry a header; its expectations are fixed here.
            let (expect, at) = if text.trim().is_empty() {
                ("empty".to_owned(), "1:1".to_owned())
            } else {
                (header("expect"), header("at"))
            };
            let hint = text
                .lines()
                .find_map(|l| l.strip_prefix("# hint: ").map(|h| h.trim().to_owned()));
            Case {
                path,
                expect,
                at,
                hint,
            }
        })
        .collect();
    cases.sort_by(|a, b| a.path.cmp(&b.path));
    cases
}

#[test]
fn issue_2_corpus_is_large_enough() {
    assert!(
        corpus().len() >= 15,
        "the malformed-pack corpus must hold at least 15 packs"
    );
}

#[test]
fn issue_2_every_malformed_pack_exits_2_located_and_writes_nothing() {
    for case in corpus() {
        let sb = Sandbox::new();
        let pack = case.path.display().to_string();
        for args in [
            vec!["validate", pack.as_str()],
            vec!["gate", pack.as_str(), "--out", "out"],
            vec!["bless", pack.as_str()],
        ] {
            let out = sb.output(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?} on {pack}:\n{err}");
            let located = format!("{pack}:{}", case.at);
            assert!(
                err.contains(&located),
                "{args:?}: expected `{located}` in:\n{err}"
            );
            assert!(
                err.contains(&case.expect),
                "{args:?}: expected {:?} in:\n{err}",
                case.expect
            );
            if let Some(hint) = &case.hint {
                assert!(err.contains(hint), "{args:?}: expected hint {hint:?} in:\n{err}");
            }
            assert!(!err.contains("panicked"), "{err}");
            assert!(
                sb.files_under(".").is_empty(),
                "{args:?} on {pack} wrote {:?}",
                sb.files_under(".")
            );
        }
    }
}

#[test]
fn issue_2_unreadable_pack_exits_2_located() {
    let sb = Sandbox::new();
    for missing in ["does-not-exist.yaml", "."] {
        let out = sb.gate(missing, &[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("{missing}:1:1")), "{err}");
        assert!(sb.files_under(".").is_empty());
    }
}

#[test]
fn issue_2_all_problems_are_reported_at_once() {
    let sb = Sandbox::new();
    sb.write(
        "multi.yaml",
        "
         schema_version: 1
         name: multi
         owners: [{name: A, email: a@example.com, role: owner}]
         rollback: {trigger: t}
         slices:
           - id: a
             workload: {ops: [{gemm: {name: x, m: 0, n: 8, k: 8}}]}
             sparsity: [\"2:4\"]
             colour: blue
           - id: b
             workload: {ops: [{gemm: {name: y, m: 8, n: -1, k: 8}}]}
             sparsity: [\"2:4\"]",
    );
    let out = sb.output(&["validate", "multi.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for loc in ["multi.yaml:7:", "multi.yaml:9:", "multi.yaml:11:"] {
        assert!(err.contains(loc), "expected {loc} in:\n{err}");
    }
}
