//! `validate`: load and check every pack, collecting each one's outcome.

use crate::ingress::{LoadedPack, PackError, load_pack};
use std::path::PathBuf;

/// Load and check every pack, reporting each one's outcome (the `validate` command).
pub fn validate_packs(paths: &[PathBuf]) -> Vec<(PathBuf, Result<LoadedPack, PackError>)> {
    paths.iter().map(|p| (p.clone(), load_pack(p))).collect()
}
