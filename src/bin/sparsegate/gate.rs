//! `sparsegate gate PACK... --out DIR`: run, validate, decide; the summary (or
//! verdict.json) on stdout, the verdict as the exit code. [`print_report`] serves `merge`.

use crate::cli::{DecideArgs, FocusArgs, RunArgs};
use crate::options::{baseline_build, options, pr_comment, record_location};
use crate::progress::progress;
use sparsegate::Result;
use sparsegate::app::{self, GateReport, HistoryOutcome};
use sparsegate::files::FileError;
use sparsegate::ingress::pack_set::Focus;
use sparsegate::release::{ExitCode, github_annotations, render_summary};
use std::path::Path;

pub fn run(
    run: &RunArgs,
    out: &Path,
    baseline_bin: Option<&Path>,
    focus: FocusArgs,
    decide: &DecideArgs,
) -> Result<ExitCode> {
    let mut options = options(run, decide.allow_env_drift);
    options.history = record_location(&decide.history, &options.work_dir);
    options.baseline_build = baseline_bin.map(baseline_build).transpose()?;
    options.pr_comment = pr_comment(decide)?;
    options.focus = Focus {
        slices: focus.slices,
        runs: focus.runs,
        pack_digests: focus.pack_digests,
    };
    let report = app::gate(&run.packs, out, &options, &mut progress(run.quiet))?;
    print_report(&report, decide.json)?;
    Ok(report.decision.exit_code)
}

/// The gate's result on stdout: verdict.json with `--json`, else the summary and the files.
/// A history that could not be written is a warning on stderr; the verdict stands.
pub fn print_report(report: &GateReport, json: bool) -> Result<()> {
    if let HistoryOutcome::Failed { error, .. } = &report.history {
        eprintln!("warning: the run was not recorded in the history: {error}");
    }
    github_actions(report, json)?;
    if json {
        print!("{}", app::to_json(&report.decision));
    } else {
        print!("{}", render_summary(&report.decision));
        for file in &report.files {
            println!("wrote {}", file.display());
        }
    }
    Ok(())
}

/// In GitHub Actions: annotate the pack lines of guardrails that did not pass, and add the
/// memo to the job summary. With `--json` stdout is the verdict alone (issue 22: annotations
/// there broke every JSON reader), so the annotations go to stderr, which the Actions runner
/// reads for workflow commands as well.
fn github_actions(report: &GateReport, json: bool) -> Result<()> {
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        let annotations = github_annotations(&report.decision);
        if json {
            eprint!("{annotations}");
        } else {
            print!("{annotations}");
        }
    }
    if let Ok(summary) = std::env::var("GITHUB_STEP_SUMMARY") {
        let write_error = |source| FileError::Write {
            path: summary.clone().into(),
            source,
        };
        let memo = report.memo.render_markdown()?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&summary)
            .map_err(write_error)?;
        std::io::Write::write_all(&mut file, memo.as_bytes()).map_err(write_error)?;
    }
    Ok(())
}
