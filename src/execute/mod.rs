//! Stage 4, tensor execution: runs each slice interleaved with its dense comparator and
//! produces [`Evidence`]. It measures; it never judges.

pub mod bench;
mod evidence;
pub mod kernels;
pub mod roofs;
mod run;
mod sim;
mod workload;

pub use evidence::{
    EVIDENCE_SCHEMA_VERSION, Evidence, MetricSamples, OpCost, PackRecord, RunSummary, SliceEvidence,
    SliceFailure,
};
pub use run::{CALIBRATION_METRIC, execute_slice};
pub use sim::execute_sim_slice;
