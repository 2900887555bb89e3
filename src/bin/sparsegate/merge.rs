//! `sparsegate merge DIR...`: shard evidence into one gate decision, printed like `gate`'s.

use crate::cli::RecordArgs;
use crate::options::{record_path, work_dir};
use sparsegate::Result;
use sparsegate::app::{self, Options};
use sparsegate::release::ExitCode;
use std::path::{Path, PathBuf};

pub fn run(
    shards: &[PathBuf],
    out: &Path,
    golden: PathBuf,
    allow_env_drift: bool,
    json: bool,
    history: &RecordArgs,
) -> Result<ExitCode> {
    let work_dir = work_dir();
    let options = Options {
        golden_dir: golden,
        allow_env_drift,
        history: record_path(history, &work_dir),
        work_dir,
        run_launcher: None,
    };
    let report = app::merge(shards, out, &options)?;
    crate::gate::print_report(&report, json)?;
    Ok(report.decision.exit_code)
}
