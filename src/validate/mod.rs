//! Stage 5, result assembly and validation: statistics against golden baselines and
//! same-run comparators, guardrail verdicts, bottleneck class. It judges; it never renders.

pub mod golden;
pub mod stats;

mod outcome;

pub use outcome::{Assessment, GuardrailOutcome};
