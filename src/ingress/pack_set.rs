//! The packs of one invocation, taken together: loaded as a set (their names key golden
//! baselines, so they must differ), narrowed to a CI shard, and checked to share one lock
//! before the environment is captured for them.

use super::shard::Shard;
use super::{Environment, LoadedPack, PackError, load_pack, pack_threads};
use std::path::{Path, PathBuf};

/// Why a set of packs cannot be run together.
#[derive(Debug, thiserror::Error)]
pub enum PackSetError {
    /// A pack failed to load; carries every located problem.
    #[error(transparent)]
    Pack(Box<PackError>),
    /// Two packs have one name (names key golden baselines).
    #[error("packs {} and {} share the name `{name}`", first.display(), second.display())]
    SharedName {
        /// The pack loaded first.
        first: PathBuf,
        /// The pack with the same name.
        second: PathBuf,
        /// The name.
        name: String,
    },
    /// The packs ask for different `lock.threads`, so they cannot share one lock.
    #[error("the packs ask for different thread counts (lock.threads)")]
    MixedThreads,
    /// A pack's own lock field (`lock.fields`) could not be read.
    #[error("pack `{pack}`: lock field `{field}` could not be read: {reason}")]
    LockField {
        /// The pack name.
        pack: String,
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
    /// Two packs define one lock field that reads differently.
    #[error("the packs define lock field `{field}` differently (their values differ)")]
    MixedLockField {
        /// The field.
        field: String,
    },
    /// A pack requires a clean git work tree and it is not.
    #[error(
        "pack `{pack}` requires a clean git work tree (lock.require_clean_git), but it has uncommitted changes"
    )]
    DirtyWorkTree {
        /// The pack name.
        pack: String,
    },
    /// `--pack-digest` was given, and not once per pack.
    #[error("{digests} pack digest(s) given for {packs} pack(s)")]
    DigestCount {
        /// Packs gated.
        packs: usize,
        /// Digests given.
        digests: usize,
    },
    /// A pack's bytes are not the ones the failure was found in.
    #[error("{} has digest {actual}, not {expected}: the pack changed since the gate that failed", path.display())]
    PackChanged {
        /// The pack file.
        path: PathBuf,
        /// The digest asked for.
        expected: String,
        /// The digest of the file now.
        actual: String,
    },
    /// A slice id matches no slice of the packs.
    #[error("no pack has a slice `{id}` (slices: {known})")]
    UnknownSlice {
        /// The id asked for.
        id: String,
        /// The first ids the packs have, comma-separated.
        known: String,
    },
}

/// How to narrow a gate to the run that reproduces a failure (issue 22: the memo's repro
/// command): only these slices, exactly this many runs each, and only packs with these
/// bytes. The default narrows nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Focus {
    /// Expanded slice ids to keep (all when empty).
    pub slices: Vec<String>,
    /// Runs every kept slice takes, exactly: no planned count, no sequential looks.
    pub runs: Option<u32>,
    /// `sha256:<hex>` of each pack, in pack order (unchecked when empty).
    pub pack_digests: Vec<String>,
}

/// Narrow `packs` to `focus`, refusing a pack whose digest differs and an unknown slice id.
pub fn focus(packs: &mut [LoadedPack], focus: &Focus) -> Result<()> {
    if !focus.pack_digests.is_empty() {
        if focus.pack_digests.len() != packs.len() {
            return Err(PackSetError::DigestCount {
                packs: packs.len(),
                digests: focus.pack_digests.len(),
            });
        }
        for (pack, expected) in packs.iter().zip(&focus.pack_digests) {
            if &pack.digest != expected {
                return Err(PackSetError::PackChanged {
                    path: pack.path.clone(),
                    expected: expected.clone(),
                    actual: pack.digest.clone(),
                });
            }
        }
    }
    let all = || packs.iter().flat_map(|p| p.slices.iter());
    if let Some(id) = focus.slices.iter().find(|id| !all().any(|s| &&s.id == id)) {
        let known: Vec<&str> = all().map(|s| s.id.as_str()).take(12).collect();
        return Err(PackSetError::UnknownSlice {
            id: id.clone(),
            known: known.join(", "),
        });
    }
    for pack in packs.iter_mut() {
        if !focus.slices.is_empty() {
            let ids = |kept: bool| -> std::collections::BTreeSet<String> {
                let slices = pack
                    .slices
                    .iter()
                    .filter(|s| focus.slices.contains(&s.id) == kept);
                slices
                    .flat_map(|s| s.guardrails.iter().filter_map(|g| g.id.clone()))
                    .collect()
            };
            pack.left_out = ids(false).difference(&ids(true)).cloned().collect();
            pack.slices.retain(|s| focus.slices.contains(&s.id));
        }
        if let Some(runs) = focus.runs {
            for s in &mut pack.slices {
                s.samples.runs = runs.max(1);
                s.samples.max_runs = None;
                s.samples.sequential = false;
            }
        }
    }
    Ok(())
}

type Result<T, E = PackSetError> = std::result::Result<T, E>;

/// Load every pack, stopping at the first that is invalid, and refuse packs that cannot be
/// run together.
pub fn load_packs(paths: &[PathBuf]) -> Result<Vec<LoadedPack>> {
    let packs = paths
        .iter()
        .map(|p| load_pack(p).map_err(|e| PackSetError::Pack(Box::new(e))))
        .collect::<Result<Vec<_>>>()?;
    for (i, a) in packs.iter().enumerate() {
        if let Some(b) = packs[..i].iter().find(|b| b.file.name == a.file.name) {
            return Err(PackSetError::SharedName {
                first: b.path.clone(),
                second: a.path.clone(),
                name: a.file.name.clone(),
            });
        }
    }
    Ok(packs)
}

/// Keep only the slices of `shard` (the `run --shard K/N` of a CI matrix job).
pub fn select_shard(packs: &mut [LoadedPack], shard: Shard) {
    for pack in packs {
        pack.slices.retain(|s| shard.contains(s));
    }
}

/// The environment for a run; every pack must use the same thread count for one lock.
/// Read from the packs, not their slices: a shard that got no slice of a pack still
/// records the pack's thread count, so `merge` does not see a lock mismatch. A pack that
/// requires a clean git work tree is refused on a dirty one.
pub fn capture_environment(packs: &[LoadedPack], work_dir: &Path) -> Result<Environment> {
    let mut threads = packs.iter().map(|p| pack_threads(&p.file));
    let first = threads.next().unwrap_or(1);
    if threads.any(|t| t != first) {
        return Err(PackSetError::MixedThreads);
    }
    let mut environment = Environment::capture(first, work_dir);
    for pack in packs {
        let dir = pack
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        for field in &pack.file.lock.fields {
            let value =
                super::environment::read_lock_field(field, dir).map_err(|e| PackSetError::LockField {
                    pack: pack.file.name.clone(),
                    field: field.name.clone(),
                    reason: e.to_string(),
                })?;
            match environment.stack.get(&field.name) {
                Some(other) if other != &value => {
                    return Err(PackSetError::MixedLockField {
                        field: field.name.clone(),
                    });
                }
                _ => {
                    environment.stack.insert(field.name.clone(), value);
                }
            }
        }
    }
    for pack in packs.iter().filter(|p| p.file.lock.require_clean_git) {
        if environment.git.as_ref().is_none_or(|g| g.dirty) {
            return Err(PackSetError::DirtyWorkTree {
                pack: pack.file.name.clone(),
            });
        }
    }
    Ok(environment)
}
