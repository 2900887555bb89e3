//! The golden baselines a gate needs, loaded before anything runs: every slice with a
//! baseline-relative guardrail must have one, unexpired, taken under this run's lock
//! (or, where drift is allowed, the drift is returned for the memo to call out).

use super::golden::{self, Baselines, GoldenError};
use crate::ingress::{Environment, FieldDiff, LoadedPack, Slice, SliceBackend};
use std::path::{Path, PathBuf};

/// Why the baselines a run needs cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// A baseline is unreadable, corrupt or expired.
    #[error(transparent)]
    Golden(#[from] GoldenError),
    /// A slice's golden baseline does not exist.
    #[error("no golden baseline for slice `{slice}` of pack `{pack}` (expected {})", path.display())]
    Missing {
        /// The pack name.
        pack: String,
        /// The slice id.
        slice: String,
        /// Where the baseline was expected.
        path: PathBuf,
        /// The pack file.
        pack_path: String,
    },
    /// A baseline was measured on other artifact files than the slice reads now.
    #[error("the checkpoint differs from the one golden baseline {} was blessed on", baseline.display())]
    ArtifactChanged {
        /// The baseline file.
        baseline: PathBuf,
        /// Each file whose digest differs (`artifact <name>`), or that is new or gone.
        fields: Vec<FieldDiff>,
    },
    /// A baseline was taken under a different lock and drift is not allowed.
    #[error("environment does not match the golden baseline {}", baseline.display())]
    Drift {
        /// The baseline file.
        baseline: PathBuf,
        /// Every differing lock field.
        fields: Vec<FieldDiff>,
    },
}

/// A baseline taken under a different lock, compared anyway.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineDrift {
    /// The pack name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// The differing lock fields.
    pub fields: Vec<FieldDiff>,
}

/// Whether `slice` is measured against a baseline build in this session (issue 22): a
/// `command` slice that names its `baseline`, or a built-in kernels slice when the gate
/// was given a baseline binary (`baseline_bin`).
pub fn has_baseline_build(slice: &Slice, baseline_bin: bool) -> bool {
    match &slice.backend {
        SliceBackend::Command(c) => c.baseline.is_some(),
        SliceBackend::Kernels { .. } => baseline_bin,
        _ => false,
    }
}

/// The environments of slices measured on another machine than the run's, by (pack,
/// slice): a merge's shards on other kinds of runner.
pub type MeasuredOn = std::collections::BTreeMap<(String, String), Environment>;

/// Load the baselines every baseline-relative guardrail of `packs` needs from
/// `golden_dir` (this runner's class's where it has one, see
/// [`golden::resolve_baseline_path`]), refusing a missing baseline, one expired at `now` (RFC 3339), and, unless
/// `allow_drift`, one taken under a lock other than `environment`'s.
///
/// A slice measured against a baseline build ([`has_baseline_build`]) needs no golden
/// baseline for the guardrails the pairs decide: its golden file, if there is a usable one
/// (present, unexpired, same lock and artifacts), is loaded as history for the memo, and
/// skipped otherwise.
pub fn load_required_baselines(
    packs: &[LoadedPack],
    (environment, measured_on): (&Environment, &MeasuredOn),
    golden_dir: &Path,
    (allow_drift, baseline_bin): (bool, bool),
    now: &str,
) -> Result<(Baselines, Vec<BaselineDrift>), BaselineError> {
    let mut baselines = Baselines::new();
    let mut drift = Vec::new();
    for pack in packs {
        for slice in pack
            .slices
            .iter()
            .filter(|s| s.guardrails.iter().any(|g| g.rule.needs_baseline()))
        {
            let paired = has_baseline_build(slice, baseline_bin);
            let needs_golden = slice
                .guardrails
                .iter()
                .any(|g| g.rule.needs_baseline() && !(paired && super::rules::pairs_decide(g.metric)));
            // The machine the slice was measured on: a merged shard's own, else the run's.
            let environment = measured_on
                .get(&(slice.pack.clone(), slice.id.clone()))
                .unwrap_or(environment);
            let (path, runner_class) = golden::resolve_baseline_path(
                golden_dir,
                &environment.runner_class(),
                &slice.pack,
                &slice.id,
            );
            let with_class = |b: golden::Baseline| golden::Baseline {
                runner_class: runner_class.clone(),
                ..b
            };
            if !needs_golden {
                let usable = golden::load_baseline(&path)
                    .ok()
                    .flatten()
                    .map(with_class)
                    .filter(|b| {
                        b.check_expiry(&path, now).is_ok()
                            && artifact_diff(slice, &b.artifacts).is_empty()
                            && environment
                                .lock_diff_on(&b.environment, kernel_paths_used(slice))
                                .is_empty()
                    });
                if let Some(b) = usable {
                    baselines.insert(crate::domain::OfSlice::slice_key(slice), b);
                }
                continue;
            }
            let baseline =
                golden::load_baseline(&path)?
                    .map(with_class)
                    .ok_or_else(|| BaselineError::Missing {
                        pack: slice.pack.clone(),
                        slice: slice.id.clone(),
                        path: path.clone(),
                        pack_path: pack.path.display().to_string(),
                    })?;
            baseline.check_expiry(&path, now)?;
            let artifacts = artifact_diff(slice, &baseline.artifacts);
            if !artifacts.is_empty() && !pack.file.lock.allow_artifact_change {
                return Err(BaselineError::ArtifactChanged {
                    baseline: path,
                    fields: artifacts,
                });
            }
            let mut fields = environment.lock_diff_on(&baseline.environment, kernel_paths_used(slice));
            if !fields.is_empty() && !allow_drift {
                return Err(BaselineError::Drift {
                    baseline: path,
                    fields,
                });
            }
            // Allowed changes of the artifact are called out with the drift.
            fields.extend(artifacts);
            if !fields.is_empty() {
                drift.push(BaselineDrift {
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

/// How the artifact files `slice` reads now differ from those `baseline` recorded: one
/// `artifact <name>` field per file whose digest changed, appeared or went away. A baseline
/// without artifacts (blessed before checkpoints, or on a generated workload) binds none.
fn artifact_diff(
    slice: &crate::ingress::Slice,
    baseline: &[crate::execute::ArtifactRecord],
) -> Vec<FieldDiff> {
    let Some(w) = &slice.checkpoint else {
        return Vec::new();
    };
    if baseline.is_empty() {
        return Vec::new();
    }
    let now: std::collections::BTreeMap<&str, &str> = w
        .checkpoint
        .files
        .iter()
        .map(|f| (f.name.as_str(), f.digest.as_str()))
        .collect();
    let then: std::collections::BTreeMap<&str, &str> = baseline
        .iter()
        .map(|a| (a.name.as_str(), a.digest.as_str()))
        .collect();
    let names: std::collections::BTreeSet<&str> = now.keys().chain(then.keys()).copied().collect();
    names
        .into_iter()
        .filter(|n| now.get(n) != then.get(n))
        .map(|n| FieldDiff {
            field: format!("artifact {n}"),
            baseline: then.get(n).unwrap_or(&"(absent)").to_string(),
            current: now.get(n).unwrap_or(&"(absent)").to_string(),
        })
        .collect()
}

/// Which CPU kernel paths a slice's timings depend on, so that a baseline is refused only
/// for the paths the slice runs (`Environment::lock_diff_on`).
fn kernel_paths_used(slice: &crate::ingress::Slice) -> crate::ingress::KernelPathsUsed {
    use crate::ingress::{KernelPathsUsed, SliceBackend};
    match slice.backend {
        SliceBackend::Kernels { .. } | SliceBackend::Serving { .. } => KernelPathsUsed::One(slice.precision),
        SliceBackend::Model(_) => KernelPathsUsed::All,
        SliceBackend::Sim(_) | SliceBackend::Command(_) | SliceBackend::Import(_) => KernelPathsUsed::None,
    }
}
