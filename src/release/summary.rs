//! A short plain-text summary of a decision for terminals and CI logs.

use super::Decision;
use crate::domain::verdict::Verdict;
use std::fmt::Write;

/// One line per guardrail plus the verdict line, aligned for reading in a log.
pub fn render_summary(decision: &Decision) -> String {
    let mut out = String::new();
    let width = decision
        .guardrails
        .iter()
        .map(|g| g.pack.len() + g.slice.len() + 1)
        .max()
        .unwrap_or(0);
    for g in &decision.guardrails {
        let name = format!("{}/{}", g.pack, g.slice);
        let _ = writeln!(
            out,
            "{:<13} {name:<width$}  {} {}: {}",
            format!("[{}]", g.verdict),
            g.metric,
            g.rule,
            g.detail
        );
    }
    let c = decision.counts;
    let _ = write!(
        out,
        "\ngate {}: {} passed, {} warned, {} inconclusive, {} failed",
        decision.verdict.as_str().to_uppercase(),
        c.pass,
        c.warn,
        c.inconclusive,
        c.fail
    );
    if let Some(stage) = decision.first_failing_stage {
        let _ = write!(out, "; first failing stage: {stage}");
    }
    if decision.verdict == Verdict::Inconclusive {
        // One clause per distinct reason, in the order the guardrails first give it.
        let mut said: Vec<&str> = Vec::new();
        for g in decision
            .guardrails
            .iter()
            .filter(|g| g.verdict == Verdict::Inconclusive)
        {
            let clause = super::text::what_would_decide(g);
            if !said.contains(&clause) {
                said.push(clause);
            }
        }
        for clause in said {
            let _ = write!(out, "; to decide: {clause}");
        }
    }
    // Issue 24: the memo's first sentence, so a CI log says what to do, not only the counts.
    let _ = write!(out, "\n{}", decision.brief.headline);
    for r in &decision.brief.rollback {
        if r.state != super::TriggerState::NotFired {
            let _ = write!(
                out,
                "\nrollback trigger of {}: {}: {}",
                r.pack,
                r.state.as_str(),
                r.why
            );
        }
    }
    for a in &decision.brief.act {
        let _ = write!(
            out,
            "\nmust act: {} ({}) on {}",
            a.role,
            a.holders.join("; "),
            a.on.join(", ")
        );
    }
    out.push('\n');
    out
}
