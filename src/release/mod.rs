//! Stage 6, release decision: the gate verdict, exit code, memo, JUnit. It never
//! re-measures.

mod annotations;
mod brief;
pub mod calendar;
mod charts;
mod decision;
mod error;
mod exit;
pub mod history;
mod junit;
pub mod markdown;
mod memo;
mod memo_load;
pub mod memo_trends;
pub mod pr_comment;
mod repro;
pub mod sign;
mod summary;
mod text;
pub mod trend;

pub use annotations::github_annotations;
pub use brief::{Action, Brief, Call, Finding, RollbackState, TriggerState};
pub use decision::{Decision, DriftNote, VERDICT_SCHEMA_VERSION, VerdictCounts, decide};
pub use error::ReleaseError;
pub use exit::{ExitCode, UnknownExitCode};
pub use junit::render_junit;
pub use memo::{MEMO_SCHEMA_VERSION, Memo, MemoPack, MemoTrend};
pub use pr_comment::{MemoLink, MemoUrlError, PR_COMMENT_MAX_LINES};
pub use repro::Repro;
pub use summary::render_summary;
