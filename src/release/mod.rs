//! Stage 6, release decision: the gate verdict, exit code, memo, JUnit. It never
//! re-measures.

mod exit;

pub use exit::ExitCode;
