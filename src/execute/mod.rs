//! Stage 4, tensor execution: runs each slice interleaved with its dense comparator and
//! produces [`Evidence`]. It measures; it never judges.

pub mod bench;
mod evidence;
pub mod kernels;
pub mod quality;
mod run;
mod sim;
mod workload;

pub use evidence::{
    EVIDENCE_SCHEMA_VERSION, EqualLatency, Evidence, MetricSamples, ModelScore, PackRecord, PruneStep,
    QualityEvidence, RunSummary, SliceEvidence, SliceFailure,
};
pub use quality::execute_model_slice;
pub use run::{CALIBRATION_METRIC, execute_slice};
pub use sim::execute_sim_slice;
