//! `bless`: measure the packs and record their slices as golden baselines.

use super::run::run_under;
use super::{Options, Progress, all_slices, capture_environment, load_packs};
use crate::error::{Error, Result};
use crate::files::{to_json, write_atomic};
use crate::ingress::workspace::user_identity;
use crate::release::calendar::{days_from_now_rfc3339, now_rfc3339};
use crate::validate::golden::{self, Baseline, BlessChange};
use std::path::PathBuf;

/// Measure the packs and record their slices as golden baselines (the `bless` command).
/// `only` restricts it to the named slice ids; every named id must exist. With
/// `expires_in_days`, the baselines carry an `expires_at` that many days from now. With
/// `per_runner`, they go under this runner's class (`golden/runners/<class>/`), beside the
/// baselines of other kinds of runner, instead of the class-less `golden/<pack>/`.
pub fn bless(
    paths: &[PathBuf],
    only: &[String],
    (expires_in_days, per_runner): (Option<u32>, bool),
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
    let environment = capture_environment(&packs, &options.work_dir)?;
    let class = per_runner.then(|| environment.runner_class());
    // Read every old baseline first: a corrupt one stops bless before anything is measured.
    let mut old = Vec::new();
    for slice in all_slices(&packs) {
        let path = golden::class_baseline_path(&options.golden_dir, class.as_deref(), &slice.pack, &slice.id);
        old.push((golden::load_baseline(&path)?, path));
    }
    let evidence = run_under(&packs, environment, None, &[], options, progress);
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
    let (blessed_at, blessed_by) = (now_rfc3339(), user_identity(&options.work_dir));
    let expires_at = expires_in_days.map(days_from_now_rfc3339);
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
        let baseline = Baseline {
            runner_class: class.clone(),
            ..baseline
        };
        write_atomic(&path, to_json(&baseline).as_bytes())?;
        changes.push(golden::describe_change(&path, old.as_ref(), &baseline));
    }
    Ok(changes)
}
