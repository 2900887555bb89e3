//! Stage 4, tensor execution: runs each slice interleaved with its dense comparator and
//! produces [`Evidence`]. It measures; it never judges.

pub mod bench;
mod child;
mod evidence;
pub mod kernels;
pub mod roofs;
mod run;
mod sim;
mod workload;

pub use child::{ChildProcessLauncher, RunLauncher, RunReply, RunRequest};
pub use evidence::{
    EVIDENCE_SCHEMA_VERSION, Evidence, Look, MetricSamples, OpCost, PackRecord, RunSummary, SliceEvidence,
    SliceFailure,
};
pub use run::{
    CALIBRATION_METRIC, LaunchRun, RunRecord, StopDecision, StopRule, execute_slice, execute_slice_with,
    measure_run,
};
pub use sim::execute_sim_slice;
