//! The commands, as library functions: each strings the stages together and returns typed
//! results. No argument parsing and no printing happen here; progress is reported through a
//! callback so the binary decides how (and whether) to show it.

use crate::error::{Error, Result};
use crate::execute::{
    EVIDENCE_SCHEMA_VERSION, Evidence, PackRecord, RunLauncher, RunReply, RunRequest, SliceEvidence,
    measure_run,
};
use crate::ingress::Backend;
use crate::ingress::shard::Shard;
use crate::ingress::{Environment, LoadedPack, PackError, Slice, load_pack};
use crate::lower::lower;
use crate::release::MemoTrend;
use crate::release::history::{DEFAULT_HISTORY_PATH, History, HistoryError, RunRow};
use crate::release::trend::{self, TrendReport};
use crate::release::{Decision, DriftNote, Memo, decide, render_junit};
use crate::validate::golden::{self, Baseline, Baselines, BlessChange};
use crate::validate::stats::{EDivisiveOptions, e_divisive};
use crate::validate::{PowerNote, RunPlan, assess, interim_look, plan_runs, power_check};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Settings shared by the commands that run slices.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where golden baselines live (`golden/` by default).
    pub golden_dir: PathBuf,
    /// Compare against baselines taken under a different lock (the memo says so).
    pub allow_env_drift: bool,
    /// Where to look for the git repository whose state is recorded.
    pub work_dir: PathBuf,
    /// How `process`-mode runs are started (the binary injects one that spawns
    /// `sparsegate __run-slice`). Without one, every run takes place in this process and
    /// the evidence says `in_process`.
    pub run_launcher: Option<Arc<dyn RunLauncher>>,
    /// The run-history database `gate` and `merge` record into; `None` records nothing.
    pub history: Option<PathBuf>,
}

/// What became of recording a gate run in the history. A failure to record never changes
/// the verdict or the exit code: the gate decided on its evidence, and a locked or
/// unwritable history is an operations problem the binary reports on stderr.
#[derive(Debug)]
pub enum HistoryOutcome {
    /// History is switched off (`--no-history`).
    Off,
    /// The run was recorded.
    Recorded {
        /// The database.
        path: PathBuf,
        /// The run's id in it.
        run_id: i64,
    },
    /// Recording failed; the gate's outputs are unaffected.
    Failed {
        /// The database.
        path: PathBuf,
        /// Why.
        error: HistoryError,
    },
}

/// The default run-history location for a command run in `work_dir`:
/// [`DEFAULT_HISTORY_PATH`] under the root of the git work tree holding `work_dir`, else
/// under `work_dir` itself.
pub fn default_history_path(work_dir: &Path) -> PathBuf {
    let root = git2::Repository::discover(work_dir)
        .ok()
        .and_then(|r| r.workdir().map(Path::to_path_buf))
        .unwrap_or_else(|| work_dir.to_path_buf());
    root.join(DEFAULT_HISTORY_PATH)
}

/// Progress of a run, for the binary to display.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A slice is about to run.
    SliceStarted {
        /// The slice.
        slice: &'a Slice,
        /// 1-based position.
        index: usize,
        /// Slices in the run.
        total: usize,
    },
    /// A slice finished.
    SliceFinished {
        /// What it measured.
        evidence: &'a SliceEvidence,
    },
    /// Before running: a baseline-relative guardrail whose margin the sample budget cannot
    /// resolve, estimated from the baseline's spread (it is also in the verdict's detail).
    PowerWarning {
        /// The estimate and its sentence.
        note: &'a PowerNote,
    },
    /// Before running: the run count planned for a slice from its baseline's between-run
    /// spread (`samples.max_runs`).
    RunsPlanned {
        /// The plan.
        plan: &'a RunPlan,
    },
}

/// Load and check every pack, reporting each one's outcome (the `validate` command).
pub fn validate_packs(paths: &[PathBuf]) -> Vec<(PathBuf, std::result::Result<LoadedPack, PackError>)> {
    paths.iter().map(|p| (p.clone(), load_pack(p))).collect()
}

/// Load every pack, stopping at the first that is invalid, and refuse packs that cannot be
/// run together.
pub fn load_packs(paths: &[PathBuf]) -> Result<Vec<LoadedPack>> {
    let packs = paths
        .iter()
        .map(|p| load_pack(p).map_err(Error::from))
        .collect::<Result<Vec<_>>>()?;
    for (i, a) in packs.iter().enumerate() {
        if let Some(b) = packs[..i].iter().find(|b| b.file.name == a.file.name) {
            return Err(Error::Usage {
                message: format!(
                    "packs {} and {} share the name `{}`",
                    b.path.display(),
                    a.path.display(),
                    a.file.name
                ),
                hint: "pack names key golden baselines; give each pack its own `name`".into(),
            });
        }
    }
    Ok(packs)
}

fn all_slices(packs: &[LoadedPack]) -> impl Iterator<Item = &Slice> {
    packs.iter().flat_map(|p| p.slices.iter())
}

/// The environment for a run; every pack must use the same thread count for one lock.
/// Read from the packs, not their slices: a shard that got no slice of a pack still
/// records the pack's thread count, so `merge` does not see a lock mismatch.
fn capture_environment(packs: &[LoadedPack], options: &Options) -> Result<Environment> {
    let mut threads = packs.iter().map(|p| crate::ingress::pack_threads(&p.file));
    let first = threads.next().unwrap_or(1);
    if threads.any(|t| t != first) {
        return Err(Error::Usage {
            message: "the packs ask for different thread counts (lock.threads)".into(),
            hint: "run packs with different locks in separate invocations".into(),
        });
    }
    let environment = Environment::capture(first, &options.work_dir);
    for pack in packs.iter().filter(|p| p.file.lock.require_clean_git) {
        if environment.git.as_ref().is_none_or(|g| g.dirty) {
            return Err(Error::DirtyWorkTree {
                pack: pack.file.name.clone(),
            });
        }
    }
    Ok(environment)
}

/// Run every slice of `packs` (the `run` command): lower, execute, collect evidence.
pub fn run(
    packs: &[LoadedPack],
    options: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Evidence> {
    let environment = capture_environment(packs, options)?;
    Ok(run_under(packs, environment, None, options, progress))
}

/// How long one child run may take before it is killed: generous (a slice's runs are
/// bounded by its time budget, but `samples.min` may outlast it on a slow kernel), yet
/// finite, so a wedged child can never hang the gate.
fn child_timeout(slice: &Slice) -> Duration {
    Duration::from_secs_f64(300.0 + 10.0 * slice.samples.time_budget_s)
}

fn run_under(
    packs: &[LoadedPack],
    mut environment: Environment,
    baselines: Option<&Baselines>,
    options: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Evidence {
    // The roofs CPU slices are placed against on the memo's roofline: measured before the
    // slices (on the same threads), recorded in the environment, never in the lock.
    if all_slices(packs).any(|s| s.backend.kind() == Backend::Cpu) {
        environment.roofs = Some(crate::execute::roofs::measure_roofs(environment.threads));
    }
    let total = all_slices(packs).count();
    let mut slices = Vec::with_capacity(total);
    let with_pack = packs.iter().flat_map(|p| p.slices.iter().map(move |s| (p, s)));
    for (i, (pack, slice)) in with_pack.enumerate() {
        progress(Progress::SliceStarted {
            slice,
            index: i + 1,
            total,
        });
        let plan = lower(slice);
        let launch = |run: u32| {
            let launcher = options.run_launcher.as_ref().ok_or("no run launcher")?;
            let request = RunRequest {
                pack_path: pack.path.clone(),
                pack_digest: pack.digest.clone(),
                slice: slice.id.clone(),
                run,
                environment: environment.clone(),
            };
            let reply = launcher.launch(&request, child_timeout(slice))?;
            let fields = environment.lock_diff(&reply.environment);
            if !fields.is_empty() {
                let names: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
                return Err(format!(
                    "the child process measured under a different environment lock ({})",
                    names.join(", ")
                ));
            }
            Ok(reply.record)
        };
        // Sequential sampling: execution asks validate's interim check after each run.
        let baseline = baselines.and_then(|b| b.get(&crate::domain::OfSlice::slice_key(slice)));
        let stop = |ev: &SliceEvidence| interim_look(slice, ev, baseline);
        let launch = options
            .run_launcher
            .is_some()
            .then_some(&launch as &crate::execute::LaunchRun<'_>);
        let evidence = crate::execute::execute_slice_on(slice, &plan, launch, Some(&stop));
        progress(Progress::SliceFinished { evidence: &evidence });
        slices.push(evidence);
    }
    Evidence {
        schema_version: EVIDENCE_SCHEMA_VERSION,
        environment,
        packs: packs
            .iter()
            .map(|p| PackRecord {
                name: p.file.name.clone(),
                path: p.path.display().to_string(),
                digest: p.digest.clone(),
            })
            .collect(),
        slices,
    }
}

/// Load the baselines every baseline-relative guardrail needs, refusing (before anything
/// runs) a missing baseline or one taken under a different lock.
fn load_required_baselines(
    packs: &[LoadedPack],
    environment: &Environment,
    options: &Options,
) -> Result<(Baselines, Vec<DriftNote>)> {
    let mut baselines = Baselines::new();
    let mut drift = Vec::new();
    for pack in packs {
        for slice in pack
            .slices
            .iter()
            .filter(|s| s.guardrails.iter().any(|g| g.rule.needs_baseline()))
        {
            let path = golden::baseline_path(&options.golden_dir, &slice.pack, &slice.id);
            let baseline = golden::load_baseline(&path)?.ok_or_else(|| Error::MissingBaseline {
                pack: slice.pack.clone(),
                slice: slice.id.clone(),
                path: path.clone(),
                pack_path: pack.path.display().to_string(),
            })?;
            baseline.check_expiry(&path, &now_rfc3339())?;
            let fields = environment.lock_diff(&baseline.environment);
            if !fields.is_empty() {
                if !options.allow_env_drift {
                    return Err(Error::EnvironmentDrift {
                        baseline: path,
                        fields,
                    });
                }
                drift.push(DriftNote {
                    pack: slice.pack.clone(),
                    slice: slice.id.clone(),
                    fields,
                });
            }
            baselines.insert(crate::domain::OfSlice::slice_key(slice), baseline);
        }
    }
    Ok((baselines, drift))
}

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
    let mut packs = load_packs(paths)?;
    let environment = capture_environment(&packs, options)?;
    let (baselines, drift) = load_required_baselines(&packs, &environment, options)?;
    for slice in packs.iter_mut().flat_map(|p| p.slices.iter_mut()) {
        if let Some(plan) = plan_runs(slice, &baselines) {
            slice.samples.runs = plan.runs;
            progress(Progress::RunsPlanned { plan: &plan });
        }
    }
    let slices: Vec<Slice> = all_slices(&packs).cloned().collect();
    for note in power_check(&slices, &baselines)
        .iter()
        .filter(|n| !n.plan.margin_resolvable)
    {
        progress(Progress::PowerWarning { note });
    }
    let evidence = run_under(&packs, environment, Some(&baselines), options, progress);
    decide_and_write("gate", &packs, evidence, &baselines, drift, out_dir, options)
}

/// Validate evidence against the packs' guardrails, decide, and write every output.
fn decide_and_write(
    command: &str,
    packs: &[LoadedPack],
    evidence: Evidence,
    baselines: &Baselines,
    drift: Vec<DriftNote>,
    out_dir: &Path,
    options: &Options,
) -> Result<GateReport> {
    let slices: Vec<Slice> = all_slices(packs).cloned().collect();
    let assessment = assess(&slices, &evidence, baselines);
    let decision = decide(&assessment, drift);
    // Record first, so the memo's trend charts end with this run.
    let history = record_history(command, &evidence, &decision, options);
    let trends = match &history {
        HistoryOutcome::Recorded { path, .. } => memo_trends(path, &evidence),
        _ => Vec::new(),
    };
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
    let mut files = Vec::with_capacity(outputs.len());
    for (name, text) in outputs {
        let path = out_dir.join(name);
        golden::write_atomic(&path, text.as_bytes())?;
        files.push(path);
    }
    Ok(GateReport {
        decision,
        evidence,
        memo,
        files,
        history,
    })
}

/// Runs of history the memo charts per slice.
pub const MEMO_TREND_RUNS: usize = 30;

/// The metric the memo's trend chart follows: the one every backend records.
const MEMO_TREND_METRIC: &str = "latency";

/// The recent latency history of every slice with at least two recorded runs, with its
/// change points, read back from the history just written. A read failure only drops the
/// charts (the run is recorded; the memo stays correct without them).
fn memo_trends(path: &Path, evidence: &Evidence) -> Vec<MemoTrend> {
    let Ok(history) = History::open(path) else {
        return Vec::new();
    };
    evidence
        .slices
        .iter()
        .filter_map(|s| {
            let (_, series) = history.series(Some(&s.pack), &s.slice, MEMO_TREND_METRIC).ok()?;
            let recent = &series[series.len().saturating_sub(MEMO_TREND_RUNS)..];
            if recent.len() < 2 {
                return None;
            }
            let values: Vec<f64> = recent.iter().map(|p| p.value).collect();
            let mut change_points: Vec<usize> = e_divisive(&values, &EDivisiveOptions::default())
                .ok()?
                .iter()
                .map(|c| c.index)
                .collect();
            change_points.sort_unstable();
            Some(MemoTrend {
                pack: s.pack.clone(),
                slice: s.slice.clone(),
                metric: MEMO_TREND_METRIC.to_owned(),
                points: recent.iter().map(|p| (p.run_id, p.value)).collect(),
                change_points,
            })
        })
        .collect()
}

/// Record a decided run in the history, if one is configured.
fn record_history(
    command: &str,
    evidence: &Evidence,
    decision: &Decision,
    options: &Options,
) -> HistoryOutcome {
    let Some(path) = &options.history else {
        return HistoryOutcome::Off;
    };
    match History::open(path).and_then(|mut h| h.record(command, &now_rfc3339(), evidence, decision)) {
        Ok(run_id) => HistoryOutcome::Recorded {
            path: path.clone(),
            run_id,
        },
        Err(error) => HistoryOutcome::Failed {
            path: path.clone(),
            error,
        },
    }
}

/// Open an existing history for reading (`history`, `trend`): a missing file is bad input,
/// not an empty history to create.
fn open_existing_history(path: &Path) -> Result<History> {
    if !path.is_file() {
        return Err(Error::Usage {
            message: format!("no run history at {}", path.display()),
            hint: "`sparsegate gate` records one; point at another with --history PATH or SPARSEGATE_HISTORY"
                .into(),
        });
    }
    Ok(History::open(path)?)
}

/// The recorded runs, newest first (the `history` command).
pub fn history_runs(path: &Path, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
    Ok(open_existing_history(path)?.runs(pack, limit)?)
}

/// A slice's metric over the recorded runs with its change points (the `trend` command).
pub fn trend(
    path: &Path,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
    options: &EDivisiveOptions,
) -> Result<TrendReport> {
    let history = open_existing_history(path)?;
    if pack.is_none() {
        let packs = history.packs_with_slice(slice)?;
        if packs.len() > 1 {
            return Err(Error::Usage {
                message: format!(
                    "slice `{slice}` was recorded by several packs: {}",
                    packs.join(", ")
                ),
                hint: "choose one with --pack NAME".into(),
            });
        }
    }
    let report = trend::trend(&history, pack, slice, metric, options)?;
    if report.points.is_empty() {
        let known = history.metric_names(slice)?;
        return Err(Error::Usage {
            message: format!(
                "no recorded values of `{metric}` for slice `{slice}` in {}",
                path.display()
            ),
            hint: if known.is_empty() {
                let slices = history.slice_names()?;
                if slices.is_empty() {
                    "the history has no runs yet; `sparsegate gate` records them".to_owned()
                } else {
                    format!(
                        "no run recorded a slice `{slice}`; recorded (pack/slice): {}",
                        slices.join(", ")
                    )
                }
            } else {
                format!("recorded metrics of `{slice}`: {}", known.join(", "))
            },
        });
    }
    Ok(report)
}

/// Keep only the slices of `shard` (the `run --shard K/N` of a CI matrix job).
pub fn select_shard(packs: &mut [LoadedPack], shard: Shard) {
    for pack in packs {
        pack.slices.retain(|s| shard.contains(s));
    }
}

/// Combine the evidence of shard runs (`DIR/evidence.json` each) into one gate decision,
/// written to `out_dir` like `gate`'s. Refuses shards measured under different locks, from
/// different versions of a pack, overlapping shards, and an incomplete set.
pub fn merge(dirs: &[PathBuf], out_dir: &Path, options: &Options) -> Result<GateReport> {
    let refuse = |message: String, hint: &str| Error::Usage {
        message,
        hint: hint.to_owned(),
    };
    let mut shards = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let path = dir.join("evidence.json");
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
            path: path.clone(),
            source,
        })?;
        let evidence: Evidence = serde_json::from_str(&text)
            .map_err(|e| Error::json(&path, &e, "evidence.json is written by `sparsegate run`"))?;
        shards.push((path, evidence));
    }
    let Some((first_path, first)) = shards.first() else {
        return Err(refuse(
            "no shard directories given".into(),
            "pass the output directory of every shard",
        ));
    };
    let mut records: Vec<PackRecord> = Vec::new();
    let mut slices: Vec<SliceEvidence> = Vec::new();
    for (path, evidence) in &shards {
        let fields = evidence.environment.lock_diff(&first.environment);
        if !fields.is_empty() {
            let names: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
            return Err(refuse(
                format!(
                    "{} and {} were measured under different locks ({})",
                    first_path.display(),
                    path.display(),
                    names.join(", ")
                ),
                "run every shard on the same machine class with the same sparsegate build",
            ));
        }
        for record in &evidence.packs {
            match records.iter().find(|r| r.name == record.name) {
                Some(known) if known.digest != record.digest => {
                    return Err(refuse(
                        format!(
                            "shards ran different versions of pack `{}` ({})",
                            record.name,
                            path.display()
                        ),
                        "run every shard from the same commit",
                    ));
                }
                Some(_) => {}
                None => records.push(record.clone()),
            }
        }
        for slice in &evidence.slices {
            if slices
                .iter()
                .any(|s| s.pack == slice.pack && s.slice == slice.slice)
            {
                return Err(refuse(
                    format!(
                        "slice `{}/{}` appears in more than one shard",
                        slice.pack, slice.slice
                    ),
                    "give each shard a distinct --shard K/N with the same N",
                ));
            }
            slices.push(slice.clone());
        }
    }
    let mut packs = Vec::with_capacity(records.len());
    for record in &records {
        let pack = load_pack(Path::new(&record.path)).map_err(Error::from)?;
        if pack.digest != record.digest {
            return Err(refuse(
                format!("pack {} changed since the shards ran", record.path),
                "merge the shards of this commit, or run them again",
            ));
        }
        packs.push(pack);
    }
    let missing: Vec<String> = all_slices(&packs)
        .filter(|s| !slices.iter().any(|e| e.pack == s.pack && e.slice == s.id))
        .map(|s| format!("{}/{}", s.pack, s.id))
        .collect();
    if !missing.is_empty() {
        return Err(refuse(
            format!("no shard measured {}", missing.join(", ")),
            "pass the output directory of every shard (K = 1..N)",
        ));
    }
    // Slices in pack order, as an unsharded run would have them.
    let order: Vec<(&str, &str)> = all_slices(&packs)
        .map(|s| (s.pack.as_str(), s.id.as_str()))
        .collect();
    slices.sort_by_key(|e| order.iter().position(|(p, s)| *p == e.pack && *s == e.slice));
    let evidence = Evidence {
        schema_version: EVIDENCE_SCHEMA_VERSION,
        environment: first.environment.clone(),
        packs: records,
        slices,
    };
    let (baselines, drift) = load_required_baselines(&packs, &evidence.environment, options)?;
    decide_and_write("merge", &packs, evidence, &baselines, drift, out_dir, options)
}

/// Write the evidence of a `run` to `out_dir/evidence.json`.
pub fn write_evidence(evidence: &Evidence, out_dir: &Path) -> Result<PathBuf> {
    let path = out_dir.join("evidence.json");
    golden::write_atomic(&path, to_json(evidence).as_bytes())?;
    Ok(path)
}

/// Measure the packs and record their slices as golden baselines (the `bless` command).
/// `only` restricts it to the named slice ids; every named id must exist. With
/// `expires_in_days`, the baselines carry an `expires_at` that many days from now.
pub fn bless(
    paths: &[PathBuf],
    only: &[String],
    expires_in_days: Option<u32>,
    options: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Vec<BlessChange>> {
    let mut packs = load_packs(paths)?;
    if let Some(unknown) = only.iter().find(|id| !all_slices(&packs).any(|s| &s.id == *id)) {
        return Err(Error::Usage {
            message: format!("no slice `{unknown}` in the given packs"),
            hint: format!(
                "slice ids are: {}",
                all_slices(&packs)
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    if !only.is_empty() {
        for pack in &mut packs {
            pack.slices.retain(|s| only.contains(&s.id));
        }
    }
    let environment = capture_environment(&packs, options)?;
    // Read every old baseline first: a corrupt one stops bless before anything is measured.
    let mut old = Vec::new();
    for slice in all_slices(&packs) {
        let path = golden::baseline_path(&options.golden_dir, &slice.pack, &slice.id);
        old.push((golden::load_baseline(&path)?, path));
    }
    let evidence = run_under(&packs, environment, None, options, progress);
    if let Some(failed) = evidence.slices.iter().find(|s| s.failure.is_some()) {
        let failure = failed
            .failure
            .as_ref()
            .map(|f| f.message.as_str())
            .unwrap_or_default();
        return Err(Error::Usage {
            message: format!(
                "slice `{}` did not run ({failure}); no baseline was written",
                failed.slice
            ),
            hint: "fix the slice, then bless again".into(),
        });
    }
    let (blessed_at, blessed_by) = (now_rfc3339(), blesser(&options.work_dir));
    let expires_at = expires_in_days.map(|d| rfc3339(now_secs() + i64::from(d) * 86_400));
    let digests = packs
        .iter()
        .flat_map(|p| p.slices.iter().map(move |_| p.digest.as_str()));
    let mut changes = Vec::new();
    for ((slice_evidence, (old, path)), pack_digest) in evidence.slices.iter().zip(old).zip(digests) {
        let baseline = Baseline::new(
            slice_evidence,
            &evidence.environment,
            pack_digest,
            blessed_at.clone(),
            blessed_by.clone(),
        )
        .with_expiry(expires_at.clone());
        golden::write_atomic(&path, to_json(&baseline).as_bytes())?;
        changes.push(golden::describe_change(&path, old.as_ref(), &baseline));
    }
    Ok(changes)
}

/// The child's side of a `process`-mode run (the hidden `__run-slice` command): reload the
/// pack (refusing one that changed since the gate loaded it), capture this process's
/// environment and refuse a lock that differs from the gate's, then measure one run of the
/// slice in this fresh process.
pub fn serve_run(request: &RunRequest, options: &Options) -> Result<RunReply> {
    let pack = load_pack(&request.pack_path).map_err(Error::from)?;
    if pack.digest != request.pack_digest {
        return Err(Error::Usage {
            message: format!(
                "pack {} changed after the gate loaded it",
                request.pack_path.display()
            ),
            hint: "do not edit packs while a gate is running; run the gate again".into(),
        });
    }
    let slice = pack
        .slices
        .iter()
        .find(|s| s.id == request.slice)
        .ok_or_else(|| Error::Usage {
            message: format!(
                "pack {} has no slice `{}`",
                request.pack_path.display(),
                request.slice
            ),
            hint: "`__run-slice` is started by the gate; do not call it by hand".into(),
        })?;
    let environment = Environment::capture(slice.threads, &options.work_dir);
    let fields = environment.lock_diff(&request.environment);
    if !fields.is_empty() {
        let diffs: Vec<String> = fields
            .iter()
            .map(|f| format!("{}: gate `{}`, child `{}`", f.field, f.baseline, f.current))
            .collect();
        return Err(Error::Usage {
            message: format!(
                "this run's process has a different environment lock than the gate's ({})",
                diffs.join("; ")
            ),
            hint: "runs of one gate must share the lock; start the gate and its runs the same way".into(),
        });
    }
    let record = measure_run(slice, &lower(slice)).map_err(|message| Error::Usage {
        message: format!("run {} of slice `{}`: {message}", request.run, slice.id),
        hint: "the gate reports this as an execution failure of the slice".into(),
    })?;
    Ok(RunReply { environment, record })
}

/// Pretty JSON with a trailing newline: our files are read by people in PRs too.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("sparsegate types serialize to JSON");
    s.push('\n');
    s
}

/// Who is blessing: the git user where configured, else `$USER`.
fn blesser(work_dir: &Path) -> String {
    let from_git = git2::Repository::discover(work_dir)
        .and_then(|r| r.config())
        .or_else(|_| git2::Config::open_default())
        .ok()
        .and_then(|c| {
            let name = c.get_string("user.name").ok()?;
            Some(match c.get_string("user.email") {
                Ok(email) => format!("{name} <{email}>"),
                Err(_) => name,
            })
        });
    from_git
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The current time in RFC 3339 (UTC, seconds), or `SOURCE_DATE_EPOCH` when set, so
/// reproducible builds of baselines are possible.
fn now_rfc3339() -> String {
    rfc3339(now_secs())
}

fn now_secs() -> i64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        })
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_pack(dir: &Path, samples: &str) -> PathBuf {
        let path = dir.join("pack.yaml");
        let text = format!(
            "schema_version: 1\nname: tiny\nowners:\n  - {{name: O, email: o@example.com, role: owner}}\n\
             rollback: {{trigger: t}}\nsamples: {samples}\nslices:\n  - id: s\n    workload:\n      ops:\n\
             \x20       - gemm: {{name: p, m: 16, n: 32, k: 32}}\n    sparsity: [\"2:4\"]\n    guardrails:\n\
             \x20     - {{metric: effective_speedup, at_least: 0.01}}\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    fn options(dir: &Path, launcher: Option<Arc<dyn RunLauncher>>) -> Options {
        Options {
            golden_dir: dir.join("golden"),
            allow_env_drift: false,
            work_dir: dir.to_owned(),
            run_launcher: launcher,
            history: None,
        }
    }

    #[test]
    fn issue_9_a_crashing_child_fails_the_slice_at_execution_with_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let pack = tiny_pack(dir.path(), "{min: 3, max: 4, time_budget_s: 0.01, runs: 2}");
        let crash: Arc<dyn RunLauncher> = Arc::new(crate::execute::ChildProcessLauncher::new(
            "/bin/sh",
            [
                "-c",
                "cat >/dev/null; echo 'segfault in kernel' >&2; kill -SEGV $$",
            ],
        ));
        let out = dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let report = gate(&[pack], &out, &options(dir.path(), Some(crash)), &mut |_| {}).unwrap();
        let slice = &report.evidence.slices[0];
        let failure = slice.failure.as_ref().expect("the slice must fail");
        assert_eq!(failure.stage, crate::stage::Stage::Execution);
        assert!(
            failure.message.contains("segfault in kernel"),
            "{}",
            failure.message
        );
        assert_eq!(report.decision.exit_code, crate::release::ExitCode::Fail);
        assert_eq!(
            report.decision.first_failing_stage,
            Some(crate::stage::Stage::Execution)
        );
    }

    #[test]
    fn issue_9_a_child_under_another_lock_is_refused() {
        // A "child" that answers with a reply measured under another CPU model.
        let dir = tempfile::tempdir().unwrap();
        let pack = tiny_pack(dir.path(), "{min: 3, max: 4, time_budget_s: 0.01, runs: 2}");
        let mut environment = Environment::capture(1, dir.path());
        environment.cpu_model = "Some Other CPU".into();
        let reply = RunReply {
            environment,
            record: crate::execute::RunRecord {
                pid: Some(7),
                warmup_iterations: 1,
                candidate: vec![1.0; 3],
                comparator: vec![1.0; 3],
                calibration: vec![1.0; 3],
                counters: Default::default(),
                op_costs: vec![],
            },
        };
        let script = format!(
            "cat >/dev/null; printf '%s' '{}'",
            serde_json::to_string(&reply).unwrap()
        );
        let liar: Arc<dyn RunLauncher> = Arc::new(crate::execute::ChildProcessLauncher::new(
            "/bin/sh",
            ["-c".to_owned(), script],
        ));
        let packs = load_packs(&[pack]).unwrap();
        let evidence = run(&packs, &options(dir.path(), Some(liar)), &mut |_| {}).unwrap();
        let failure = evidence.slices[0].failure.as_ref().expect("the slice must fail");
        assert!(
            failure.message.contains("different environment lock (cpu_model"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_906_800), "2026-11-28T23:00:00Z");
    }
}
