//! Stable exit codes (DESIGN.md §3): CI pipelines branch on these.

use crate::domain::verdict::Verdict;
use serde::{Deserialize, Serialize};

/// The process exit status of a sparsegate command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "i32", try_from = "i32")]
pub enum ExitCode {
    /// Every blocking guardrail passed (warnings allowed).
    Pass = 0,
    /// A blocking guardrail failed.
    Fail = 1,
    /// Bad input, refused environment, or an internal error.
    Error = 2,
    /// Not enough evidence to decide.
    Inconclusive = 3,
}

impl ExitCode {
    /// The exit status for an overall gate verdict.
    pub fn for_verdict(verdict: Verdict) -> ExitCode {
        match verdict {
            Verdict::Pass | Verdict::Warn => ExitCode::Pass,
            Verdict::Fail => ExitCode::Fail,
            Verdict::Inconclusive => ExitCode::Inconclusive,
        }
    }

    /// The numeric status.
    pub fn code(self) -> i32 {
        self as i32
    }
}

impl From<ExitCode> for i32 {
    fn from(c: ExitCode) -> i32 {
        c.code()
    }
}

/// A number that is not one of the stable exit codes (read from a file that holds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("exit code {0} is not one of 0, 1, 2, 3")]
pub struct UnknownExitCode(pub i32);

impl TryFrom<i32> for ExitCode {
    type Error = UnknownExitCode;

    fn try_from(v: i32) -> Result<Self, UnknownExitCode> {
        match v {
            0 => Ok(ExitCode::Pass),
            1 => Ok(ExitCode::Fail),
            2 => Ok(ExitCode::Error),
            3 => Ok(ExitCode::Inconclusive),
            other => Err(UnknownExitCode(other)),
        }
    }
}

impl schemars::JsonSchema for ExitCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ExitCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "0 pass (warnings allowed), 1 a blocking guardrail failed, 2 bad input or error, 3 inconclusive.",
            "type": "integer",
            "enum": [0, 1, 2, 3],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_exit_code_is_refused_by_number() {
        assert_eq!(ExitCode::try_from(3), Ok(ExitCode::Inconclusive));
        let e = ExitCode::try_from(7).unwrap_err();
        assert_eq!(e, UnknownExitCode(7));
        assert_eq!(e.to_string(), "exit code 7 is not one of 0, 1, 2, 3");
    }
}
