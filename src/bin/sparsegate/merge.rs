//! `sparsegate merge DIR...`: shard evidence into one gate decision, printed like `gate`'s.

use crate::cli::DecideArgs;
use crate::options::{pr_comment, record_location, work_dir};
use sparsegate::Result;
use sparsegate::app::{self, Options};
use sparsegate::release::ExitCode;
use std::path::{Path, PathBuf};

pub fn run(shards: &[PathBuf], out: &Path, golden: PathBuf, decide: &DecideArgs) -> Result<ExitCode> {
    let work_dir = work_dir();
    let options = Options {
        golden_dir: golden,
        allow_env_drift: decide.allow_env_drift,
        history: record_location(&decide.history, &work_dir),
        work_dir,
        run_launcher: None,
        baseline_build: None,
        pr_comment: pr_comment(decide)?,
        focus: Default::default(),
    };
    let report = app::merge(shards, out, &options)?;
    crate::gate::print_report(&report, decide.json)?;
    Ok(report.decision.exit_code)
}
