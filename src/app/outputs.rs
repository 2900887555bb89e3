//! The output directory of `gate`, `merge` and `run`, written as a whole (issue 23): every
//! file of a run is built in a fresh directory beside it and swapped into place in one
//! atomic rename ([`OutputSet`]), with a [`RUN_MANIFEST`] naming the run and the digest of
//! each file, so a reader never mixes two runs, whenever the gate is killed.

use crate::domain::digest::sha256_hex;
use crate::error::Result;
use crate::files::{OutputSet, to_json};
use crate::release::sign::{ENVELOPE_FILE, OUTPUTS, STATEMENT_FILE};
use std::path::{Path, PathBuf};

/// The file beside a run's `evidence.json` that lists the sha256 of each file the run wrote,
/// which `merge` checks before it trusts a shard (issue 23: edited shard evidence, latency
/// ×1000, was merged as measured). An unkeyed digest: it catches evidence edited or
/// corrupted after the run, not a forger who rewrites the manifest too.
pub const RUN_MANIFEST: &str = "run-manifest.json";

/// [`RUN_MANIFEST`]: what a run wrote, by digest.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunManifest {
    /// Format version.
    pub schema_version: u32,
    /// The run's id (128 random bits, hex): every file of one output set shares it
    /// (issue 23). Absent in manifests of sparsegate before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Each file the run wrote, relative to its output directory.
    pub files: Vec<ManifestEntry>,
}

/// One file of a [`RunManifest`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ManifestEntry {
    /// File name in the output directory.
    pub name: String,
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
}

/// Whether `name` in an output directory is sparsegate's: a gate output, the run manifest,
/// the signed statement and envelope, or a signature (`memo.….sig`). These are replaced
/// by the next run's set, or dropped when it has none of that name: a previous run's
/// signature never lies next to a new memo. Anything else is the user's and is carried
/// over.
pub fn is_output(name: &str) -> bool {
    OUTPUTS.contains(&name)
        || name == RUN_MANIFEST
        || name == STATEMENT_FILE
        || name == ENVELOPE_FILE
        || (name.starts_with("memo.") && name.ends_with(".sig"))
}

/// A fresh run id: 128 random bits, hex.
fn run_id() -> String {
    format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}

/// Write `files` (name, text), then the run manifest naming them, as one set into
/// `out_dir`; the paths written, the manifest last.
pub(super) fn write_output_set(out_dir: &Path, files: &[(&str, String)]) -> Result<Vec<PathBuf>> {
    let mut set = OutputSet::begin(out_dir, is_output)?;
    let mut paths = Vec::with_capacity(files.len() + 1);
    let mut entries = Vec::with_capacity(files.len());
    for (name, text) in files {
        paths.push(set.write(name, text.as_bytes())?);
        entries.push(ManifestEntry {
            name: (*name).to_owned(),
            digest: sha256_hex(text.as_bytes()),
        });
    }
    let manifest = RunManifest {
        schema_version: 1,
        run: Some(run_id()),
        files: entries,
    };
    paths.push(set.write(RUN_MANIFEST, to_json(&manifest).as_bytes())?);
    set.commit()?;
    Ok(paths)
}

/// Refuse, before anything runs, an output directory that cannot take a set (see
/// [`OutputSet`]: a link, the current directory or one above it, a git work tree) and a
/// run history inside it (each run replaces the directory as a whole).
pub fn check_out_dir(out_dir: &Path, history: Option<&Path>) -> Result<()> {
    OutputSet::check(out_dir)?;
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    if let Some(history) = history
        && absolute(history).starts_with(absolute(out_dir))
    {
        return Err(crate::error::Error::Usage {
            message: format!(
                "the run history {} lies inside the output directory {}",
                history.display(),
                out_dir.display()
            ),
            hint:
                "keep the history outside the output directory: each run replaces that directory as a whole"
                    .into(),
        });
    }
    Ok(())
}

/// Refuse a PR comment (`--pr-comment`) that would replace one of the gate's own outputs
/// in `out_dir` (`out/memo.md`): the output set owns those names.
pub(super) fn check_pr_comment(out_dir: &Path, comment: Option<&Path>) -> Result<()> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let Some(comment) = comment else {
        return Ok(());
    };
    let clash = absolute(comment).parent() == Some(absolute(out_dir).as_path())
        && comment
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_output);
    if clash {
        return Err(crate::error::Error::Usage {
            message: format!(
                "the PR comment {} would replace one of the gate's outputs in {}",
                comment.display(),
                out_dir.display()
            ),
            hint: "write the PR comment under another name, e.g. pr-comment.md".into(),
        });
    }
    Ok(())
}
