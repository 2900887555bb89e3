//! `gate`: refuse what cannot be judged, plan the runs, run, then decide and write every
//! output. `merge` shares [`decide_and_write`] and [`required_baselines`].

use super::history::{CommandHistory, HistoryOutcome, recording};
use super::outputs::{check_out_dir, write_output_set};
use super::run::{pin_baselines_bf16_kernel, planned_slice, run_under};
use super::{Options, PrCommentTarget, Progress, all_slices, capture_environment, load_packs, refusals};
use crate::error::Result;
use crate::execute::Evidence;
use crate::files::{to_json, write_atomic};
use crate::ingress::{Environment, LoadedPack, Slice};
use crate::release::calendar::now_rfc3339;
use crate::release::history::{History, HistoryLocation};
use crate::release::memo_trends::memo_trends;
use crate::release::{Decision, DriftNote, Memo, MemoLink, decide, render_junit};
use crate::validate::baselines::{MeasuredOn, load_required_baselines};
use crate::validate::golden::Baselines;
use crate::validate::session_drift::SessionDrift;
use crate::validate::{RunPlan, assess, plan_runs, power_check};
use std::path::{Path, PathBuf};

/// What a gate run produced.
#[derive(Debug)]
pub struct GateReport {
    /// The decision (`verdict.json`).
    pub decision: Decision,
    /// The raw evidence (`evidence.json`).
    pub evidence: Evidence,
    /// The memo model (`memo.md`, `memo.html`).
    pub memo: Memo,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// Whether (and where) the run was recorded in the history.
    pub history: HistoryOutcome,
}

/// Run, validate and decide (the `gate` command), writing `memo.json` (the memo model
/// that signatures cover), `evidence.json`, `verdict.json`, `memo.md`, `memo.html` and
/// `junit.xml` into `out_dir`.
///
/// Every refusal (bad pack, missing baseline, environment drift) happens before anything
/// runs or is written.
pub fn gate(
    paths: &[PathBuf],
    out_dir: &Path,
    options: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<GateReport> {
    check_out_dir(
        out_dir,
        options.history.as_ref().and_then(HistoryLocation::sqlite_path),
    )?;
    super::outputs::check_pr_comment(out_dir, options.pr_comment.as_ref().map(|c| c.path.as_path()))?;
    let mut packs = load_packs(paths)?;
    crate::ingress::pack_set::focus(&mut packs, &options.focus).map_err(refusals::pack_set)?;
    for warning in packs.iter().flat_map(|p| &p.warnings) {
        progress(Progress::PackWarning { warning });
    }
    // Before anything reads the bf16 kernel pick (capturing the environment does): the
    // golden baselines' pick, so that bless and gate run the same bf16 kernel (issue 22).
    pin_baselines_bf16_kernel(&packs, &options.golden_dir);
    let environment = capture_environment(&packs, &options.work_dir)?;
    let mut history = CommandHistory::new(options.history.as_ref());
    let (baselines, drift) =
        required_baselines(&packs, (&environment, &MeasuredOn::new()), options, &mut history)?;
    // Validate plans the run counts from the baselines' between-run spread; execution takes
    // them in place of the packs' `samples.runs`, and the packs stay as ingress read them.
    let plans: Vec<RunPlan> = all_slices(&packs)
        .filter_map(|s| plan_runs(s, &baselines))
        .collect();
    for plan in &plans {
        progress(Progress::RunsPlanned { plan });
    }
    let planned: Vec<Slice> = all_slices(&packs)
        .map(|s| planned_slice(s, &plans).into_owned())
        .collect();
    for note in power_check(&planned, &baselines)
        .iter()
        .filter(|n| !n.plan.margin_resolvable)
    {
        progress(Progress::PowerWarning { note });
    }
    let evidence = run_under(&packs, environment, Some(&baselines), &plans, options, progress);
    let decided = (&baselines, drift);
    decide_and_write("gate", &packs, evidence, decided, out_dir, options, &mut history)
}

/// The baselines `packs` need under `environment`, with the drift the memo must call out
/// (refused unless `options.allow_env_drift`), each with its session drift from `history`.
pub(super) fn required_baselines(
    packs: &[LoadedPack],
    environments: (&Environment, &MeasuredOn),
    options: &Options,
    history: &mut CommandHistory<'_>,
) -> Result<(Baselines, Vec<DriftNote>)> {
    let (baselines, drift) = load_required_baselines(
        packs,
        environments,
        &options.golden_dir,
        (options.allow_env_drift, options.baseline_build.is_some()),
        &now_rfc3339(),
    )
    .map_err(refusals::baseline)?;
    let mut baselines = baselines;
    attach_session_drift(&mut baselines, history.readable());
    let drift = drift
        .into_iter()
        .map(|d| DriftNote {
            pack: d.pack,
            slice: d.slice,
            fields: d.fields,
        })
        .collect();
    Ok((baselines, drift))
}

/// Give every golden baseline the between-session drift of its slice's latency (issue
/// 22): estimated from the run history's repeated gates of one commit when it holds them,
/// else assumed. A history that cannot be read is no reason to refuse a gate: the drift is
/// then assumed too.
fn attach_session_drift(baselines: &mut Baselines, history: Option<&History>) {
    for b in baselines.values_mut() {
        let points: Vec<(String, f64)> = history
            .and_then(|h| h.series(Some(&b.pack), &b.slice, "latency").ok())
            .map(|(_, points)| {
                points
                    .into_iter()
                    .filter_map(|p| p.git_commit.map(|c| (c, p.value)))
                    .collect()
            })
            .unwrap_or_default();
        b.session_drift = Some(SessionDrift::from_history(&points).unwrap_or_else(SessionDrift::assumed));
    }
}

/// What the PR comment links to: the target's page, else the memo file just written.
fn memo_link(target: &PrCommentTarget, out_dir: &Path) -> MemoLink {
    target
        .link
        .clone()
        .unwrap_or_else(|| MemoLink::File(out_dir.join("memo.md").display().to_string()))
}

/// Validate evidence against the packs' guardrails and `baselines`, decide (calling out
/// `drift`), write every output, and record the run in `history`.
pub(super) fn decide_and_write(
    command: &str,
    packs: &[LoadedPack],
    evidence: Evidence,
    (baselines, drift): (&Baselines, Vec<DriftNote>),
    out_dir: &Path,
    options: &Options,
    history: &mut CommandHistory<'_>,
) -> Result<GateReport> {
    let slices: Vec<Slice> = all_slices(packs).cloned().collect();
    let assessment = assess(&slices, &evidence, baselines);
    let decision = decide(packs, &assessment, drift).with_not_applicable(&slices);
    // Issue 23: the history records the run after its outputs are written, with what became
    // of them; the run is inserted first inside the history's transaction, so the memo's
    // trend charts still end with this run.
    let (written, history) = recording(command, &evidence, &decision, history, |pending| {
        let trends = pending.map(|p| memo_trends(p, &evidence)).unwrap_or_default();
        let memo = Memo::new(
            packs,
            &evidence,
            baselines,
            &options.golden_dir,
            &decision,
            &assessment,
        )
        .with_trends(trends);
        let outputs = [
            ("memo.json", to_json(&memo)),
            ("evidence.json", to_json(&evidence)),
            ("verdict.json", to_json(&decision)),
            ("memo.md", memo.render_markdown()?),
            ("memo.html", memo.render_html()?),
            ("junit.xml", render_junit(&decision)),
        ];
        // Rendered before anything is written, so a template error leaves no output.
        let comment = match &options.pr_comment {
            Some(target) => Some((&target.path, memo.render_pr_comment(&memo_link(target, out_dir))?)),
            None => None,
        };
        let mut files = write_output_set(out_dir, &outputs)?;
        // Outside the output set (it may live anywhere), written whole all the same.
        if let Some((path, text)) = comment {
            write_atomic(path, text.as_bytes())?;
            files.push(path.clone());
        }
        Ok((memo, files))
    });
    let (memo, files) = written?;
    Ok(GateReport {
        decision,
        evidence,
        memo,
        files,
        history,
    })
}
