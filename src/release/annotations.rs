//! GitHub Actions workflow commands: each guardrail that did not pass becomes an annotation
//! on the pack line that declared it, so a reviewer sees it in the PR diff.

use super::Decision;
use crate::domain::verdict::Verdict;
use crate::ingress::Severity;
use std::fmt::Write;

/// Escape a message for a workflow command (`%`, CR and LF are encoded).
fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// Escape a property value (also `:` and `,`).
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// `::error`/`::warning` lines for every guardrail that did not pass.
pub fn github_annotations(decision: &Decision) -> String {
    let mut out = String::new();
    for g in decision.guardrails.iter().filter(|g| g.verdict != Verdict::Pass) {
        let level = match (g.verdict, g.severity) {
            (Verdict::Fail, Severity::Block) => "error",
            _ => "warning",
        };
        let mut props = Vec::new();
        if let Some(loc) = &g.location {
            props.push(format!("file={}", escape_property(&loc.file)));
            props.push(format!("line={}", loc.line));
            props.push(format!("col={}", loc.col));
        }
        props.push(format!(
            "title={}",
            escape_property(&format!(
                "sparsegate {} {}: {} {}",
                g.verdict, g.slice, g.metric, g.rule
            ))
        ));
        let _ = writeln!(out, "::{level} {}::{}", props.join(","), escape_data(&g.detail));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_workflow_command_rules() {
        assert_eq!(escape_data("50%\nnext"), "50%25%0Anext");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
    }
}
