//! `merge`: combine the evidence of `run --shard K/N` jobs into one gate decision, written
//! like `gate`'s.

use super::gate::{GateReport, decide_and_write, required_baselines};
use super::history::CommandHistory;
use super::outputs::{RUN_MANIFEST, RunManifest};
use super::{Options, refusals};
use crate::domain::digest::sha256_hex;
use crate::error::Error;
use crate::error::Result;
use crate::execute::shards::{combine, into_evidence, read_shards, reload_packs};
use crate::files::{FileError, read_bounded, read_bounded_bytes};
use crate::validate::baselines::kernel_paths_used;
use std::path::{Path, PathBuf};

/// Combine the evidence of shard runs (`DIR/evidence.json` each) into one gate decision,
/// written to `out_dir` like `gate`'s. Shards may run on different machines (each slice is
/// compared on its own, against its runner class's baselines). Refuses shards measured
/// under locks that differ otherwise, from
/// different versions of a pack, overlapping shards, and an incomplete set.
pub fn merge(dirs: &[PathBuf], out_dir: &Path, options: &Options) -> Result<GateReport> {
    super::outputs::check_out_dir(
        out_dir,
        options
            .history
            .as_ref()
            .and_then(crate::release::history::HistoryLocation::sqlite_path),
    )?;
    super::outputs::check_pr_comment(out_dir, options.pr_comment.as_ref().map(|c| c.path.as_path()))?;
    for dir in dirs {
        check_manifest(dir)?;
    }
    let shards = read_shards(dirs).map_err(refusals::shard)?;
    let combined = combine(&shards).map_err(refusals::shard)?;
    let packs = reload_packs(&combined.packs).map_err(refusals::shard)?;
    let mut evidence = into_evidence(combined, &packs).map_err(refusals::shard)?;
    same_machine_where_it_matters(&mut evidence, &packs);
    let measured_on = evidence
        .slices
        .iter()
        .filter_map(|s| {
            Some((
                (s.pack.clone(), s.slice.clone()),
                (**s.measured_on.as_ref()?).clone(),
            ))
        })
        .collect();
    let mut history = CommandHistory::new(options.history.as_ref());
    let (baselines, drift) = required_baselines(
        &packs,
        (&evidence.environment, &measured_on),
        options,
        &mut history,
    )?;
    let decided = (&baselines, drift);
    decide_and_write("merge", &packs, evidence, decided, out_dir, options, &mut history)
}

/// Forget the other machine of a slice that the difference does not touch (issue 22): the
/// bf16 kernel is a per-process timing probe's pick, so on a loaded runner two shards on
/// one machine record different `kernel_paths`, and an fp32 slice (or a user's command)
/// was reported and judged as measured elsewhere (seen in the shard tests under load, one
/// shard in four). A slice keeps its own machine where a runner field differs for the
/// kernel paths it runs ([`kernel_paths_used`]).
fn same_machine_where_it_matters(
    evidence: &mut crate::execute::Evidence,
    packs: &[crate::ingress::LoadedPack],
) {
    use crate::execute::shards::RUNNER_FIELDS;
    let run = evidence.environment.clone();
    for s in &mut evidence.slices {
        let Some(elsewhere) = s.measured_on.as_deref() else {
            continue;
        };
        let Some(slice) = super::all_slices(packs).find(|x| x.pack == s.pack && x.id == s.slice) else {
            continue;
        };
        let differs = elsewhere
            .lock_diff_on(&run, kernel_paths_used(slice))
            .iter()
            .any(|f| RUNNER_FIELDS.contains(&f.field.as_str()));
        if !differs {
            s.measured_on = None;
        }
    }
}

/// The most bytes of a manifest read.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// The most bytes of a shard's file hashed (evidence is read up to 256 MiB by `merge`).
const MAX_SHARD_FILE_BYTES: u64 = 256 << 20;

/// Check that every file of the shard in `dir` still has the digest its run recorded, and
/// that the manifest covers `evidence.json` (issue 23).
fn check_manifest(dir: &Path) -> Result<()> {
    let refuse = |message: String, hint: &str| Error::Usage {
        message,
        hint: hint.to_owned(),
    };
    let path = dir.join(RUN_MANIFEST);
    let text = match read_bounded(&path, MAX_MANIFEST_BYTES) {
        Ok(text) => text,
        Err(FileError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(
                format!(
                    "{} is missing: the shard's evidence cannot be checked",
                    path.display()
                ),
                "merge the output directories of `sparsegate run --shard K/N`, as they were written",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let manifest: RunManifest = serde_json::from_str(&text)
        .map_err(|e| FileError::json(&path, &e, "run-manifest.json is written by `sparsegate run`"))?;
    if !manifest.files.iter().any(|f| f.name == "evidence.json") {
        return Err(refuse(
            format!("{} does not list evidence.json", path.display()),
            "re-run the shard with `sparsegate run --shard K/N`",
        ));
    }
    for entry in &manifest.files {
        let plain = !entry.name.is_empty()
            && !entry.name.starts_with('.')
            && entry
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !plain {
            return Err(refuse(
                format!(
                    "{} names `{}`, which is not a file of the shard",
                    path.display(),
                    entry.name.escape_debug()
                ),
                "re-run the shard with `sparsegate run --shard K/N`",
            ));
        }
        let file = dir.join(&entry.name);
        let bytes = read_bounded_bytes(&file, MAX_SHARD_FILE_BYTES)?;
        let now = sha256_hex(&bytes);
        if now != entry.digest {
            return Err(refuse(
                format!(
                    "{} changed since its run wrote it ({} recorded in {}, {now} now)",
                    file.display(),
                    entry.digest,
                    path.display()
                ),
                "merge shard evidence as `sparsegate run --shard K/N` wrote it; re-run the shard",
            ));
        }
    }
    Ok(())
}
