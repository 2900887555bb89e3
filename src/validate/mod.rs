//! Stage 5, result assembly and validation: statistics against golden baselines and
//! same-run comparators, guardrail verdicts, bottleneck class. It judges; it never renders.

pub mod baselines;
pub mod bottleneck;
pub mod compare;
mod contention;
mod contradictions;
pub mod diagnosis;
pub mod golden;
/// The statistics engine, a pure library on the floor; re-exported for existing paths.
pub use crate::stats;

mod assess;
pub(crate) mod describe;
mod interim;
mod looks;
mod observe;
mod outcome;
mod power_check;
pub mod quality;
mod rules;
pub mod session_drift;
#[cfg(test)]
mod tests;
pub mod under_burst;

pub use assess::{AssessOptions, assess, assess_with};
pub use diagnosis::{FallbackImpact, RooflinePoint, SliceDiagnosis};
pub use interim::interim_look;
pub use outcome::{Assessment, GuardrailOutcome, Undecided, Yardstick};
pub use power_check::{PowerNote, RunPlan, plan_runs, power_check};
pub use under_burst::BurstRegression;
