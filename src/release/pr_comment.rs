//! The pull-request comment (`--pr-comment FILE`, issue 22): the memo's first screen cut to
//! what a reviewer reads in a PR thread — the call and its exit code, the guardrails that
//! failed, stayed undecided or warned, and those whose ratio to the baseline moved, each
//! with its value and interval — and a link to the full memo.
//!
//! It renders the same [`Memo`] model as `memo.md` (so the same decision, the same numbers
//! and the same Markdown escaping) and never judges. It is at most
//! [`PR_COMMENT_MAX_LINES`] lines whatever the packs hold: GitHub folds long comments, and
//! a 500-guardrail pack must not bury the call. Rows past [`MAX_ROWS`] and rollback
//! triggers past [`MAX_TRIGGERS`] are counted in an "… and N more" line that points to the
//! memo; every value is escaped onto one line, so the line count is the template's.

use super::Memo;
use super::error::Result;
use super::text::{bound, interval, with_unit};
use crate::domain::metric::Better;
use crate::domain::verdict::Verdict;
use crate::ingress::{Rule, Severity};
use crate::validate::GuardrailOutcome;
use serde::Serialize;

/// The most lines a PR comment has.
pub const PR_COMMENT_MAX_LINES: usize = 60;
/// Guardrail rows shown; the template's other lines (heading, call, counts, at most
/// [`MAX_TRIGGERS`] + 1 trigger lines, table header, "more" line, link, blanks) take 19.
pub const MAX_ROWS: usize = 40;
/// Fired or undecided rollback triggers named; more are counted.
pub const MAX_TRIGGERS: usize = 3;

/// Where the full memo is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoLink {
    /// A web page holding it (the CI job, an artifact); checked by [`MemoLink::url`].
    Url(String),
    /// The memo file, when there is no page to link to.
    File(String),
}

/// A URL a Markdown link can carry as written, refused with what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoUrlError {
    /// Not `http://` or `https://`.
    #[error("the memo URL must start with https:// or http://")]
    Scheme,
    /// A character that would end or break the Markdown link.
    #[error("the memo URL holds {0:?}, which would break the Markdown link (percent-encode it)")]
    Character(char),
}

impl MemoLink {
    /// `url` as a link target: an `http(s)` URL without whitespace, control characters,
    /// quotes, backslashes, `<>`, `()`, `[]` or backticks (none of which a URL needs
    /// unencoded), so it is safe inside `[memo](…)`.
    pub fn url(url: &str) -> std::result::Result<MemoLink, MemoUrlError> {
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .filter(|r| !r.is_empty())
            .ok_or(MemoUrlError::Scheme)?;
        if let Some(bad) = rest
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || "\"'\\<>()[]`".contains(*c))
        {
            return Err(MemoUrlError::Character(bad));
        }
        Ok(MemoLink::Url(url.to_owned()))
    }
}

/// One guardrail row of the comment.
#[derive(Debug, Serialize)]
struct Row {
    slice: String,
    guardrail: String,
    value: String,
    bound: String,
    interval: String,
    verdict: Verdict,
    /// `worse` / `better` than the baseline, for a baseline rule whose interval excludes 1.
    changed: Option<&'static str>,
}

/// What the template prints besides the memo itself.
#[derive(Debug, Serialize)]
struct PrView {
    exit_meaning: &'static str,
    rows: Vec<Row>,
    more_rows: usize,
    /// Guardrails listed or counted (failed, undecided, warned or changed).
    listed: usize,
    triggers: Vec<usize>,
    more_triggers: usize,
    url: Option<String>,
    file: Option<String>,
}

/// Whether a baseline-relative outcome's ratio interval (candidate / baseline) excludes 1:
/// `worse` or `better` than the baseline, by the metric's direction.
fn change(o: &GuardrailOutcome) -> Option<&'static str> {
    if !matches!(o.rule, Rule::RegressAtMost { .. }) {
        return None;
    }
    let (lo, hi) = (o.ci_low?, o.ci_high?);
    let higher = match o.metric.better() {
        Better::Higher => "better",
        Better::Lower => "worse",
    };
    let lower = if higher == "better" { "worse" } else { "better" };
    if lo > 1.0 {
        Some(higher)
    } else if hi < 1.0 {
        Some(lower)
    } else {
        None
    }
}

fn exit_meaning(memo: &Memo) -> &'static str {
    match memo.exit_code {
        super::ExitCode::Pass => "every blocking guardrail passed",
        super::ExitCode::Fail => "a blocking guardrail failed or a rollback trigger fired",
        super::ExitCode::Inconclusive => "not enough evidence to decide",
        super::ExitCode::Error => "bad input or a refused environment",
    }
}

impl Memo {
    /// The PR comment (see the module documentation), at most [`PR_COMMENT_MAX_LINES`].
    pub fn render_pr_comment(&self, link: &MemoLink) -> Result<String> {
        let rank = |o: &GuardrailOutcome| match o.verdict {
            Verdict::Fail if o.severity == Severity::Block => 0,
            Verdict::Fail | Verdict::Inconclusive => 1,
            Verdict::Warn => 2,
            Verdict::Pass => 3,
        };
        let mut shown: Vec<&GuardrailOutcome> = self
            .guardrails
            .iter()
            .filter(|o| o.verdict != Verdict::Pass || change(o).is_some())
            .collect();
        shown.sort_by_key(|o| rank(o));
        let listed = shown.len();
        let rows = shown
            .into_iter()
            .take(MAX_ROWS)
            .map(|o| Row {
                slice: format!("{}/{}", o.pack, o.slice),
                guardrail: match &o.guardrail {
                    Some(id) => format!("{} ({id})", o.metric.name()),
                    None => o.metric.name().to_owned(),
                },
                value: o.value.map_or_else(|| "–".to_owned(), |v| with_unit(v, o.metric)),
                bound: bound(o),
                interval: interval(o).unwrap_or_else(|| "–".to_owned()),
                verdict: o.verdict,
                changed: change(o),
            })
            .collect();
        let triggers: Vec<usize> = self
            .brief
            .rollback
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                matches!(
                    r.state,
                    super::TriggerState::Fired | super::TriggerState::Undecided
                )
            })
            .map(|(i, _)| i)
            .collect();
        let view = PrView {
            exit_meaning: exit_meaning(self),
            more_rows: listed.saturating_sub(MAX_ROWS),
            rows,
            listed,
            more_triggers: triggers.len().saturating_sub(MAX_TRIGGERS),
            triggers: triggers.into_iter().take(MAX_TRIGGERS).collect(),
            url: match link {
                MemoLink::Url(u) => Some(u.clone()),
                MemoLink::File(_) => None,
            },
            file: match link {
                MemoLink::File(f) => Some(f.clone()),
                MemoLink::Url(_) => None,
            },
        };
        let extra = minijinja::context! {
            pr => minijinja::Value::from(minijinja::value::Serde(&view)),
            // Checked by `MemoLink::url`: nothing in it can leave the link's parentheses.
            url => view.url.clone().map(minijinja::Value::from_safe_string),
        };
        self.render("pr-comment.md", PR_COMMENT_TEMPLATE, extra)
    }
}

const PR_COMMENT_TEMPLATE: &str = include_str!("../../templates/pr-comment.md.j2");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_url_that_would_break_the_link_is_refused() {
        assert!(MemoLink::url("https://ci.example.com/jobs/42").is_ok());
        assert_eq!(MemoLink::url("javascript:alert(1)"), Err(MemoUrlError::Scheme));
        assert_eq!(MemoLink::url("https://"), Err(MemoUrlError::Scheme));
        assert_eq!(
            MemoLink::url("https://x.org/a) [click](javascript:1"),
            Err(MemoUrlError::Character(')'))
        );
        assert_eq!(
            MemoLink::url("https://x.org/a b"),
            Err(MemoUrlError::Character(' '))
        );
    }

    fn regress(metric: crate::domain::metric::Metric, lo: f64, hi: f64) -> GuardrailOutcome {
        GuardrailOutcome {
            pack: "p".into(),
            slice: "s".into(),
            guardrail: None,
            metric,
            rule: Rule::RegressAtMost { margin: 0.05 },
            verdict: Verdict::Pass,
            finding: Verdict::Pass,
            severity: Severity::Block,
            value: Some(1.0),
            baseline: Some(1.0),
            ci_low: Some(lo),
            ci_high: Some(hi),
            p_value: None,
            confidence: 0.95,
            samples: 10,
            bottleneck: None,
            stage: crate::domain::stage::Stage::Validation,
            detail: String::new(),
            location: None,
            yardstick: None,
            undecided_by: None,
        }
    }

    #[test]
    fn a_passing_guardrail_whose_ratio_interval_excludes_one_counts_as_changed() {
        use crate::domain::metric::Metric;
        assert_eq!(change(&regress(Metric::Latency, 1.01, 1.03)), Some("worse"));
        assert_eq!(change(&regress(Metric::Latency, 0.90, 0.97)), Some("better"));
        assert_eq!(
            change(&regress(Metric::ThroughputGflops, 0.90, 0.97)),
            Some("worse")
        );
        assert_eq!(change(&regress(Metric::Latency, 0.98, 1.03)), None);
        let mut absolute = regress(Metric::Latency, 1.01, 1.03);
        absolute.rule = Rule::AtMost { bound: 1.0 };
        assert_eq!(change(&absolute), None);
    }
}
