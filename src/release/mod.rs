//! Stage 6, release decision: the gate verdict, exit code, memo, JUnit. It never
//! re-measures.

mod decision;
mod exit;
mod junit;
mod memo;
mod summary;

pub use decision::{decide, Decision, DriftNote, VerdictCounts, VERDICT_SCHEMA_VERSION};
pub use exit::ExitCode;
pub use junit::render_junit;
pub use memo::{Memo, MemoPack, MEMO_SCHEMA_VERSION};
pub use summary::render_summary;
