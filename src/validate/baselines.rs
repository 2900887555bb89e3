//! The golden baselines a gate needs, loaded before anything runs: every slice with a
//! baseline-relative guardrail must have one, unexpired, taken under this run's lock
//! (or, where drift is allowed, the drift is returned for the memo to call out).

use super::golden::{self, Baselines, GoldenError};
use crate::ingress::bf16_pick::{Bf16Kernel, Bf16Pick, Bf16Source, kernel_of_path};
use crate::ingress::environment::BF16_KERNEL_FIELD;
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
    /// A bf16 slice's baseline ran the other bf16 kernel than this gate, which could not
    /// pin the baseline's (issue 22), and drift is not allowed.
    #[error("{0}")]
    Bf16Kernel(Box<Bf16Mismatch>),
    /// A baseline was taken under a different lock and drift is not allowed.
    #[error("environment does not match the golden baseline {}", baseline.display())]
    Drift {
        /// The baseline file.
        baseline: PathBuf,
        /// Every differing lock field.
        fields: Vec<FieldDiff>,
    },
}

/// A bf16 slice's golden baseline blessed on one bf16 kernel, gated on the other (issue
/// 22): what was recorded, what this gate runs, what the CPU offers and who chose.
#[derive(Debug, Clone, PartialEq)]
pub struct Bf16Mismatch {
    /// The baseline file.
    pub baseline: PathBuf,
    /// The kernel the baseline was blessed on.
    pub recorded: Bf16Kernel,
    /// The kernel this gate runs, and how it was chosen.
    pub now: Bf16Pick,
    /// Every differing lock field (`kernel_paths` among them).
    pub fields: Vec<FieldDiff>,
}

impl Bf16Mismatch {
    /// Why the gate could not run the baseline's kernel.
    pub fn reason(&self) -> Bf16Reason {
        if self.now.source == Bf16Source::Requested {
            Bf16Reason::Requested
        } else if !self.now.offered.contains(&self.recorded) {
            Bf16Reason::NotOffered
        } else {
            Bf16Reason::OtherBaselines
        }
    }
}

/// Why a gate runs another bf16 kernel than a baseline recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Reason {
    /// `SPARSEGATE_BF16_KERNEL` chose it: the user's choice is never overridden.
    Requested,
    /// This CPU cannot run the baseline's kernel.
    NotOffered,
    /// Other baselines of the gate recorded the other kernel; one process runs one.
    OtherBaselines,
}

impl std::fmt::Display for Bf16Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "golden baseline {} was blessed on the bf16 {} kernel, and this gate runs {}: ",
            self.baseline.display(),
            self.recorded,
            self.now.kernel
        )?;
        match self.reason() {
            Bf16Reason::Requested => write!(
                f,
                "{}={} chooses it (a choice made in the environment is never overridden)",
                crate::ingress::bf16_pick::BF16_KERNEL_ENV,
                self.now.kernel.name()
            )?,
            Bf16Reason::NotOffered => write!(
                f,
                "this CPU cannot run {}; it offers {}",
                self.recorded,
                crate::ingress::bf16_pick::offered_text(&self.now.offered)
            )?,
            Bf16Reason::OtherBaselines => write!(
                f,
                "other golden baselines of this gate were blessed on {}, and one gate runs one bf16 kernel",
                self.now.kernel
            )?,
        }
        let others: Vec<String> = self
            .fields
            .iter()
            .filter(|d| d.field != "kernel_paths" && d.field != BF16_KERNEL_FIELD)
            .map(|d| format!("\n  {}: baseline `{}`, now `{}`", d.field, d.baseline, d.current))
            .collect();
        f.write_str(&others.concat())
    }
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
            if !allow_drift && let Some(mismatch) = bf16_mismatch(&path, environment, &baseline, &fields) {
                return Err(BaselineError::Bf16Kernel(Box::new(mismatch)));
            }
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

/// The bf16 kernel a golden baseline was blessed on, where it differs from the one this
/// gate runs (`fields`, the lock diff, holds `kernel_paths`) and both are bf16 kernels of
/// one CPU family: a like-for-like comparison the gate could not pin (issue 22). A change
/// of CPU family (a path that is no bf16 kernel) stays plain drift.
fn bf16_mismatch(
    path: &Path,
    environment: &Environment,
    baseline: &golden::Baseline,
    fields: &[FieldDiff],
) -> Option<Bf16Mismatch> {
    let recorded = if fields.iter().any(|d| d.field == "kernel_paths") {
        let path = baseline.environment.kernel_paths.get("bf16")?;
        kernel_of_path(path, baseline.environment.bf16_pick.as_ref())?
    } else if fields.iter().any(|d| d.field == BF16_KERNEL_FIELD) {
        baseline.environment.bf16_pick.as_ref()?.kernel
    } else {
        return None;
    };
    let now = environment.bf16_pick.clone()?;
    (now.kernel != recorded).then(|| Bf16Mismatch {
        baseline: path.to_owned(),
        recorded,
        now,
        fields: fields.to_vec(),
    })
}

/// The bf16 kernel paths ([`recorded_bf16_path`]) that the golden baselines of `packs`' slices
/// running bf16 recorded, read before the environment is captured so that the gate can pin
/// their kernel (issue 22) on runner class `class` (see
/// [`Environment::runner_class_here`]). Only slices with a baseline-relative guardrail
/// whose timings depend on the bf16 path count; a missing or unreadable baseline is
/// skipped here (loading it proper refuses it).
pub fn recorded_bf16_paths(packs: &[LoadedPack], golden_dir: &Path, class: &str) -> Vec<String> {
    use crate::ingress::KernelPathsUsed;
    packs
        .iter()
        .flat_map(|p| &p.slices)
        .filter(|s| s.guardrails.iter().any(|g| g.rule.needs_baseline()))
        .filter(|s| match kernel_paths_used(s) {
            KernelPathsUsed::One(p) => p == crate::domain::Precision::Bf16,
            KernelPathsUsed::All => true,
            KernelPathsUsed::None => false,
        })
        .filter_map(|s| {
            let (path, _) = golden::resolve_baseline_path(golden_dir, class, &s.pack, &s.id);
            golden::load_baseline(&path)
                .ok()
                .flatten()
                .and_then(|b| recorded_bf16_path(&b.environment))
        })
        .collect()
}

/// The bf16 kernel's path a baseline's environment recorded: its `kernel_paths.bf16`, or,
/// where that names the AMX tiles (which run whichever kernel the probe picks) or weights
/// widened once (`widen-f32`, which the `widen` pick does at many tokens), the pick's.
fn recorded_bf16_path(environment: &Environment) -> Option<String> {
    let path = environment.kernel_paths.get("bf16")?;
    if Bf16Kernel::from_path_name(path).is_some() {
        return Some(path.clone());
    }
    environment
        .bf16_pick
        .as_ref()
        .map(|pick| pick.kernel.path_name().to_owned())
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
pub fn kernel_paths_used(slice: &crate::ingress::Slice) -> crate::ingress::KernelPathsUsed {
    use crate::ingress::{KernelPathsUsed, SliceBackend};
    match slice.backend {
        SliceBackend::Kernels { .. } | SliceBackend::Serving { .. } => KernelPathsUsed::One(slice.precision),
        SliceBackend::Model(_) => KernelPathsUsed::All,
        SliceBackend::Sim(_) | SliceBackend::Command(_) | SliceBackend::Import(_) => KernelPathsUsed::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mismatch(now: Bf16Kernel, source: Bf16Source, offered: &[Bf16Kernel]) -> Bf16Mismatch {
        Bf16Mismatch {
            baseline: PathBuf::from("golden/p/s.json"),
            recorded: Bf16Kernel::Dot,
            now: Bf16Pick {
                kernel: now,
                source,
                offered: offered.to_vec(),
            },
            fields: vec![
                FieldDiff {
                    field: "kernel_paths".into(),
                    baseline: "bf16=avx512-bf16".into(),
                    current: "bf16=avx512-bf16-shift".into(),
                },
                FieldDiff {
                    field: "cpu_features".into(),
                    baseline: "avx512bf16".into(),
                    current: "avx512f".into(),
                },
            ],
        }
    }

    /// Issue 20: where a baseline's bf16 comparator ran on AMX tiles, the kernel to pin is
    /// the pick it recorded; elsewhere the path names it; neither, nothing to pin.
    #[test]
    fn the_bf16_kernel_to_pin_is_the_recorded_pick_behind_the_amx_tiles() {
        let mut env = crate::validate::tests::env();
        let pin = |env: &Environment| recorded_bf16_path(env);
        assert_eq!(pin(&env), None);
        env.kernel_paths.insert("bf16".into(), "avx512-bf16".into());
        assert_eq!(pin(&env).as_deref(), Some("avx512-bf16"));
        env.kernel_paths.insert("bf16".into(), "amx-bf16".into());
        assert_eq!(pin(&env), None, "no pick recorded");
        env.bf16_pick = Some(Bf16Pick {
            kernel: Bf16Kernel::Widen,
            source: Bf16Source::Measured,
            offered: vec![Bf16Kernel::Dot, Bf16Kernel::Widen],
        });
        assert_eq!(pin(&env).as_deref(), Some("avx512-bf16-shift"));
        env.kernel_paths.insert("bf16".into(), "widen-f32".into());
        assert_eq!(pin(&env).as_deref(), Some("avx512-bf16-shift"));
        env.bf16_pick = None;
        assert_eq!(pin(&env), None, "no AVX-512: nothing to pin");
    }

    /// Issue 20: a baseline blessed on the `widen` pick records `widen-f32` at many tokens;
    /// a gate on the `dot` pick is refused as a bf16 kernel mismatch (which says how to
    /// run like for like), not as plain drift. Across CPU families it stays drift.
    #[test]
    fn a_baseline_widening_once_is_a_bf16_kernel_mismatch_with_the_dot_pick() {
        let pick = |kernel| {
            Some(Bf16Pick {
                kernel,
                source: Bf16Source::Measured,
                offered: vec![Bf16Kernel::Dot, Bf16Kernel::Widen],
            })
        };
        let mut blessed = crate::validate::tests::env();
        blessed.kernel_paths.insert("bf16".into(), "widen-f32".into());
        blessed.bf16_pick = pick(Bf16Kernel::Widen);
        let mut now = blessed.clone();
        now.kernel_paths.insert("bf16".into(), "avx512-bf16".into());
        now.bf16_pick = pick(Bf16Kernel::Dot);
        let baseline = golden::Baseline {
            schema_version: 1,
            pack: "p".into(),
            slice: "s".into(),
            pack_digest: String::new(),
            blessed_at: String::new(),
            blessed_by: String::new(),
            environment: blessed.clone(),
            metrics: Default::default(),
            counters: Default::default(),
            expires_at: None,
            artifacts: Vec::new(),
            digest: String::new(),
            session_drift: None,
            runner_class: None,
        };
        let fields = now.lock_diff_on(&blessed, crate::ingress::KernelPathsUsed::All);
        let path = Path::new("golden/p/s.json");
        let m = bf16_mismatch(path, &now, &baseline, &fields).expect("a bf16 kernel mismatch");
        assert_eq!((m.recorded, m.now.kernel), (Bf16Kernel::Widen, Bf16Kernel::Dot));
        // The portable path (no pick) is another CPU family: drift.
        let mut portable = baseline.clone();
        portable.environment.bf16_pick = None;
        assert!(bf16_mismatch(path, &now, &portable, &fields).is_none());
    }

    /// Issue 22: a bf16 baseline the gate cannot run like for like is refused saying what
    /// was recorded, what this gate runs, and why: the user's variable, a CPU without the
    /// kernel, or other baselines on the other kernel.
    #[test]
    fn a_bf16_kernel_mismatch_says_what_was_recorded_what_runs_and_why() {
        use Bf16Kernel::{Dot, Widen};
        let m = mismatch(Widen, Bf16Source::Requested, &[Dot, Widen]);
        assert_eq!(m.reason(), Bf16Reason::Requested);
        let text = m.to_string();
        for needle in [
            "golden/p/s.json",
            "dot (avx512-bf16)",
            "widen (avx512-bf16-shift)",
            "SPARSEGATE_BF16_KERNEL=widen",
            "cpu_features: baseline `avx512bf16`, now `avx512f`",
        ] {
            assert!(text.contains(needle), "{needle} not in {text}");
        }
        assert!(!text.contains("kernel_paths:"), "{text}");
        let m = mismatch(Widen, Bf16Source::Only, &[Widen]);
        assert_eq!(m.reason(), Bf16Reason::NotOffered);
        assert!(
            m.to_string()
                .contains("this CPU cannot run dot (avx512-bf16); it offers only widen"),
            "{m}"
        );
        let m = mismatch(Widen, Bf16Source::Measured, &[Dot, Widen]);
        assert_eq!(m.reason(), Bf16Reason::OtherBaselines);
        assert!(m.to_string().contains("one gate runs one bf16 kernel"), "{m}");
    }
}
