//! The commands, as library functions: each strings the stages together and returns typed
//! results. No argument parsing and no printing happen here; progress is reported through a
//! callback so the binary decides how (and whether) to show it.

use crate::error::{Error, Result};
use crate::execute::{
    EVIDENCE_SCHEMA_VERSION, Evidence, PackRecord, SliceEvidence, execute_model_slice, execute_sim_slice,
    execute_slice,
};
use crate::ingress::Backend;
use crate::ingress::shard::Shard;
use crate::ingress::{Environment, LoadedPack, PackError, Slice, load_pack};
use crate::lower::lower;
use crate::release::{Decision, DriftNote, Memo, decide, render_junit};
use crate::validate::golden::{self, Baseline, Baselines, BlessChange};
use crate::validate::{PowerNote, assess, power_check};
use std::path::{Path, PathBuf};

/// Settings shared by the commands that run slices.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where golden baselines live (`golden/` by default).
    pub golden_dir: PathBuf,
    /// Compare against baselines taken under a different lock (the memo says so).
    pub allow_env_drift: bool,
    /// Where to look for the git repository whose state is recorded.
    pub work_dir: PathBuf,
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

/// The environment for a run; every slice must use the same thread count for one lock.
fn capture_environment(packs: &[LoadedPack], options: &Options) -> Result<Environment> {
    let mut threads = all_slices(packs).map(|s| s.threads);
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
    Ok(run_under(packs, environment, progress))
}

fn run_under(
    packs: &[LoadedPack],
    environment: Environment,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Evidence {
    let total = all_slices(packs).count();
    let mut slices = Vec::with_capacity(total);
    for (i, slice) in all_slices(packs).enumerate() {
        progress(Progress::SliceStarted {
            slice,
            index: i + 1,
            total,
        });
        let plan = lower(slice);
        // Dispatch by backend: measured on this machine, or evaluated on the simulated part.
        let evidence = match slice.backend {
            Backend::Cpu if slice.model.is_some() => execute_model_slice(slice, &plan),
            Backend::Cpu => execute_slice(slice, &plan),
            Backend::Sim => execute_sim_slice(slice, &plan),
        };
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
            baselines.insert((slice.pack.clone(), slice.id.clone()), baseline);
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
    let packs = load_packs(paths)?;
    let environment = capture_environment(&packs, options)?;
    let (baselines, drift) = load_required_baselines(&packs, &environment, options)?;
    let slices: Vec<Slice> = all_slices(&packs).cloned().collect();
    for note in power_check(&slices, &baselines)
        .iter()
        .filter(|n| !n.plan.margin_resolvable)
    {
        progress(Progress::PowerWarning { note });
    }
    let evidence = run_under(&packs, environment, progress);
    decide_and_write(&packs, evidence, &baselines, drift, out_dir, options)
}

/// Validate evidence against the packs' guardrails, decide, and write every output.
fn decide_and_write(
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
    let memo = Memo::new(packs, &evidence, baselines, &options.golden_dir, &decision);

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
    })
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
    decide_and_write(&packs, evidence, &baselines, drift, out_dir, options)
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
    let evidence = run_under(&packs, environment, progress);
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

    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_906_800), "2026-11-28T23:00:00Z");
    }
}
