//! Stage 4, tensor execution: runs each slice interleaved with its dense comparator and
//! produces [`Evidence`]. It measures; it never judges.

pub mod bench;
mod command;
mod evidence;
mod import;
pub mod kernels;
mod load;
mod run;
mod sim;
mod workload;

pub use command::{COMMAND_CONTRACT_VERSION, RecordError, execute_command_slice, parse_records};
pub use evidence::{
    EVIDENCE_SCHEMA_VERSION, Evidence, MetricSamples, PackRecord, RunSummary, SliceEvidence, SliceFailure,
};
pub use import::{Imported, execute_import_slice, read_entry};
pub use load::{LoadOutcome, execute_load_slice, serve};
pub use run::{CALIBRATION_METRIC, execute_slice};
pub use sim::execute_sim_slice;
