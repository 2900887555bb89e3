//! JUnit XML: one test suite per pack, one test case per slice × guardrail, so CI systems
//! show guardrails the way they show tests.

use super::Decision;
use crate::domain::verdict::Verdict;
use crate::ingress::Severity;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::collections::BTreeMap;

/// Render the decision as JUnit XML.
pub fn render_junit(decision: &Decision) -> String {
    let mut suites: BTreeMap<&str, TestSuite> = BTreeMap::new();
    for g in &decision.guardrails {
        let status = match (g.verdict, g.severity) {
            (Verdict::Pass, _) => TestCaseStatus::success(),
            (Verdict::Fail, Severity::Block) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(format!("{} {}: fail", g.metric, g.rule));
                s.set_type(format!("stage:{}", g.stage));
                s.set_description(g.detail.clone());
                s
            }
            (Verdict::Inconclusive, Severity::Block) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(format!("{} {}: inconclusive", g.metric, g.rule));
                s.set_type("inconclusive");
                s.set_description(g.detail.clone());
                s
            }
            // Advisory guardrails never fail the build; CI shows them as skipped with why.
            _ => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!("warning: {}", g.detail));
                s
            }
        };
        let mut case = TestCase::new(format!("{} {} {}", g.slice, g.metric, g.rule), status);
        case.set_classname(format!("{}.{}", g.pack, g.slice));
        case.set_system_out(g.detail.clone());
        suites
            .entry(g.pack.as_str())
            .or_insert_with(|| TestSuite::new(g.pack.clone()))
            .add_test_case(case);
    }
    let mut report = Report::new("sparsegate");
    report.add_test_suites(suites.into_values());
    report.to_string().unwrap_or_else(|e| {
        // quick-junit only fails on I/O to its in-memory buffer; keep the file valid anyway.
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"sparsegate\" errors=\"1\"><!-- {e} --></testsuites>\n")
    })
}
