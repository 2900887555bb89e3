//! The golden baselines a gate needs, loaded before anything runs: every slice with a
//! baseline-relative guardrail must have one, unexpired, taken under this run's lock
//! (or, where drift is allowed, the drift is returned for the memo to call out).

use super::golden::{self, Baselines, GoldenError};
use crate::ingress::{Environment, FieldDiff, LoadedPack};
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

/// Load the baselines every baseline-relative guardrail of `packs` needs from
/// `golden_dir`, refusing a missing baseline, one expired at `now` (RFC 3339), and, unless
/// `allow_drift`, one taken under a lock other than `environment`'s.
pub fn load_required_baselines(
    packs: &[LoadedPack],
    environment: &Environment,
    golden_dir: &Path,
    allow_drift: bool,
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
            let path = golden::baseline_path(golden_dir, &slice.pack, &slice.id);
            let baseline = golden::load_baseline(&path)?.ok_or_else(|| BaselineError::Missing {
                pack: slice.pack.clone(),
                slice: slice.id.clone(),
                path: path.clone(),
                pack_path: pack.path.display().to_string(),
            })?;
            baseline.check_expiry(&path, now)?;
            let fields = environment.lock_diff(&baseline.environment);
            if !fields.is_empty() {
                if !allow_drift {
                    return Err(BaselineError::Drift {
                        baseline: path,
                        fields,
                    });
                }
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
