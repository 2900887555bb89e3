//! A slice's stable id and seed, derived from the pack alone: the semantic checks use the ids
//! to find duplicates before expansion builds the slices.

use crate::domain::{Precision, Sparsity};
use sha2::{Digest, Sha256};

/// The stable id of an expanded slice: `<spec id>-<sparsity tag>-<precision>`.
pub(crate) fn slice_id(spec_id: &str, sparsity: &Sparsity, precision: Precision) -> String {
    format!("{spec_id}-{}-{}", sparsity.tag(), precision.as_str())
}

/// A slice's seed: the first 8 bytes (little-endian) of
/// `sha256("sparsegate/slice-seed/v1" ‖ pack seed (LE) ‖ slice id)`, so it is stable across
/// Rust versions and platforms, and adding a slice never changes another's seed.
pub(crate) fn slice_seed(pack_seed: u64, slice_id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(b"sparsegate/slice-seed/v1\0");
    h.update(pack_seed.to_le_bytes());
    h.update(slice_id.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}
