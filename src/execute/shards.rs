//! Shard evidence (`run --shard K/N`, one `evidence.json` per CI job) combined into the
//! evidence one unsharded run would have produced, refusing anything that would make the
//! combination a lie: shards under different locks, different versions of a pack,
//! overlapping shards, packs changed since, and gaps.

use super::{EVIDENCE_SCHEMA_VERSION, Evidence, PackRecord, SliceEvidence};
use crate::files::FileError;
use crate::ingress::{Environment, LoadedPack, PackError, load_pack};
use std::path::{Path, PathBuf};

/// Why shard evidence cannot be combined.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// A shard's `evidence.json` cannot be read or parsed.
    #[error(transparent)]
    File(#[from] FileError),
    /// A pack the shards ran no longer loads.
    #[error(transparent)]
    Pack(Box<PackError>),
    /// No shard directory at all.
    #[error("no shard directories given")]
    NoShards,
    /// Two shards were measured under different environment locks.
    #[error("{} and {} were measured under different locks ({}); shards may run on different machines, not different tools or settings", first.display(), other.display(), fields.join(", "))]
    LockMismatch {
        /// The first shard's evidence file.
        first: PathBuf,
        /// The shard that differs.
        other: PathBuf,
        /// The differing lock fields.
        fields: Vec<String>,
    },
    /// Two shards ran different versions of one pack.
    #[error("shards ran different versions of pack `{pack}` ({})", path.display())]
    PackVersions {
        /// The pack name.
        pack: String,
        /// The shard that differs.
        path: PathBuf,
    },
    /// Two shards measured different contents of one artifact file (a checkpoint rewritten
    /// between jobs): their results are about different weights.
    #[error("shards measured different contents of artifact `{}` of pack `{}` ({} in one, {} in {})", .0.name, .0.pack, .0.first, .0.other, .0.path.display())]
    ArtifactVersions(Box<ArtifactMismatch>),
    /// A slice was measured by more than one shard.
    #[error("slice `{pack}/{slice}` appears in more than one shard")]
    Overlap {
        /// The pack name.
        pack: String,
        /// The slice id.
        slice: String,
    },
    /// A pack file changed since the shards ran it.
    #[error("pack {path} changed since the shards ran")]
    PackChanged {
        /// The pack file.
        path: String,
    },
    /// Slices (`pack/slice`) no shard measured.
    #[error("no shard measured {}", .0.join(", "))]
    Missing(Vec<String>),
}

/// One artifact file whose digest differs between two shards.
#[derive(Debug)]
pub struct ArtifactMismatch {
    /// The pack name.
    pub pack: String,
    /// The artifact, relative to the pack.
    pub name: String,
    /// The digest the first shard recorded.
    pub first: String,
    /// The digest the other recorded.
    pub other: String,
    /// The shard that differs.
    pub path: PathBuf,
}

type Result<T, E = ShardError> = std::result::Result<T, E>;

/// The shards' evidence, checked against each other but not yet against the packs.
#[derive(Debug)]
pub struct Combined {
    /// The first shard's environment (all share its lock but for [`RUNNER_FIELDS`]; a slice
    /// measured elsewhere carries its own).
    pub environment: Environment,
    /// Every pack any shard ran, once.
    pub packs: Vec<PackRecord>,
    /// Every slice any shard measured, in shard order.
    pub slices: Vec<SliceEvidence>,
}

/// The largest shard evidence read: far above what a pack's samples produce (a few MB),
/// far below what would exhaust a runner's memory.
const MAX_EVIDENCE_BYTES: u64 = 256 << 20;

/// Read `DIR/evidence.json` of every shard directory.
pub fn read_shards(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Evidence)>> {
    let mut shards = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let path = dir.join("evidence.json");
        let text = crate::files::read_bounded(&path, MAX_EVIDENCE_BYTES)?;
        let evidence: Evidence = serde_json::from_str(&text)
            .map_err(|e| FileError::json(&path, &e, "evidence.json is written by `sparsegate run`"))?;
        shards.push((path, evidence));
    }
    Ok(shards)
}

/// Lock fields in which shards may differ: the machine (hosted runners mix CPU models).
/// Every comparison of a slice is made on the machine that measured it (sparse against
/// dense, a baseline build against the candidate, its runner class's golden baseline), so
/// per-slice verdicts combine; the tool, its kernel libraries, the OS, the threads and
/// the pack's own lock fields must still agree (issue 22).
pub const RUNNER_FIELDS: &[&str] = &["cpu_model", "cpu_features", "kernel_paths", "logical_cpus"];

/// Combine the shards (each with the file it came from), refusing none at all, shards
/// under locks that differ beyond the machine ([`RUNNER_FIELDS`]), different versions of
/// one pack, and a slice in two shards. A slice from a shard on another machine than the
/// first keeps its shard's environment (`measured_on`).
pub fn combine(shards: &[(PathBuf, Evidence)]) -> Result<Combined> {
    let Some((first_path, first)) = shards.first() else {
        return Err(ShardError::NoShards);
    };
    let mut records: Vec<PackRecord> = Vec::new();
    let mut slices: Vec<SliceEvidence> = Vec::new();
    // Each artifact's digest as first recorded, by pack and file (issue 21).
    let mut artifacts: std::collections::BTreeMap<(String, String), String> = Default::default();
    for (path, evidence) in shards {
        let fields = evidence.environment.lock_diff(&first.environment);
        let (hardware, other): (Vec<_>, Vec<_>) = fields
            .into_iter()
            .partition(|f| RUNNER_FIELDS.contains(&f.field.as_str()));
        if !other.is_empty() {
            return Err(ShardError::LockMismatch {
                first: first_path.clone(),
                other: path.clone(),
                fields: other.into_iter().map(|f| f.field).collect(),
            });
        }
        // Another kind of runner: its slices keep the machine they were measured on.
        let measured_on = (!hardware.is_empty()).then(|| Box::new(evidence.environment.clone()));
        for record in &evidence.packs {
            match records.iter().find(|r| r.name == record.name) {
                Some(known) if known.digest != record.digest => {
                    return Err(ShardError::PackVersions {
                        pack: record.name.clone(),
                        path: path.clone(),
                    });
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
                return Err(ShardError::Overlap {
                    pack: slice.pack.clone(),
                    slice: slice.slice.clone(),
                });
            }
            for a in &slice.artifacts {
                let key = (slice.pack.clone(), a.name.clone());
                match artifacts.get(&key) {
                    Some(first) if *first != a.digest => {
                        return Err(ShardError::ArtifactVersions(Box::new(ArtifactMismatch {
                            pack: key.0,
                            name: key.1,
                            first: first.clone(),
                            other: a.digest.clone(),
                            path: path.clone(),
                        })));
                    }
                    Some(_) => {}
                    None => {
                        artifacts.insert(key, a.digest.clone());
                    }
                }
            }
            let mut slice = slice.clone();
            if slice.measured_on.is_none() {
                slice.measured_on.clone_from(&measured_on);
            }
            slices.push(slice);
        }
    }
    Ok(Combined {
        environment: first.environment.clone(),
        packs: records,
        slices,
    })
}

/// Load the packs the shards ran, refusing one whose file changed since.
pub fn reload_packs(records: &[PackRecord]) -> Result<Vec<LoadedPack>> {
    let mut packs = Vec::with_capacity(records.len());
    for record in records {
        let pack = load_pack(Path::new(&record.path)).map_err(|e| ShardError::Pack(Box::new(e)))?;
        if pack.digest != record.digest {
            return Err(ShardError::PackChanged {
                path: record.path.clone(),
            });
        }
        packs.push(pack);
    }
    Ok(packs)
}

/// The combined evidence as an unsharded run of `packs` would have it (slices in pack
/// order), refusing a slice no shard measured.
pub fn into_evidence(combined: Combined, packs: &[LoadedPack]) -> Result<Evidence> {
    let Combined {
        environment,
        packs: records,
        mut slices,
    } = combined;
    let all = || packs.iter().flat_map(|p| p.slices.iter());
    let missing: Vec<String> = all()
        .filter(|s| !slices.iter().any(|e| e.pack == s.pack && e.slice == s.id))
        .map(|s| format!("{}/{}", s.pack, s.id))
        .collect();
    if !missing.is_empty() {
        return Err(ShardError::Missing(missing));
    }
    let order: Vec<(&str, &str)> = all().map(|s| (s.pack.as_str(), s.id.as_str())).collect();
    slices.sort_by_key(|e| order.iter().position(|(p, s)| *p == e.pack && *s == e.slice));
    Ok(Evidence {
        schema_version: EVIDENCE_SCHEMA_VERSION,
        environment,
        packs: records,
        slices,
    })
}
