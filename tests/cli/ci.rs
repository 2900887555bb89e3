//! CI integration (issue 6): GitHub annotations on the pack line, the job summary, and JUnit
//! that a standard XML parser reads.

use crate::support::{Sandbox, stderr, stdout, tiny_pack};

const FAST: &str = "{warmup: 1, min: 8, max: 12, time_budget_s: 0.05}";

#[test]
fn issue_6_github_annotations_point_at_the_failing_guardrail() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "annotated",
            FAST,
            "      - {metric: fallback_rate, at_most: 0}\n      - {metric: effective_speedup, at_least: 100}",
        ),
    );
    let summary = sb.path().join("summary.md");
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // The pack's 2nd guardrail sits on line 16 (see `tiny_pack`).
    let line = text
        .lines()
        .find(|l| l.starts_with("::error "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("::error file=pack.yaml,line=16,col="), "{line}");
    assert!(line.contains("effective_speedup at_least 100"), "{line}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("::")).count(),
        1,
        "only the failing guardrail: {text}"
    );
    let summary = std::fs::read_to_string(summary).unwrap();
    assert!(summary.contains("# Closure memo: FAIL"), "{summary}");
}

#[test]
fn issue_6_junit_parses_with_a_standard_xml_parser() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "junit",
            FAST,
            "      - {metric: fallback_rate, at_most: 0}\n      - {metric: effective_speedup, at_least: 100}",
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let xml = std::fs::read_to_string(sb.path().join("out/junit.xml")).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let cases: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("testcase")).collect();
    assert_eq!(cases.len(), 2);
    let failures: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("failure")).collect();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0]
            .attribute("message")
            .unwrap_or("")
            .contains("effective_speedup"),
        "{xml}"
    );
    let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
    assert_eq!(suite.attribute("name"), Some("junit"));
}
