//! Executing a set of packs: the roofs their CPU slices are placed against, and the one
//! [`Evidence`] their slices' measurements make. Each slice goes through
//! [`super::execute_slice_on`], the stage's one entry point.

use super::{EVIDENCE_SCHEMA_VERSION, Evidence, PackRecord, SliceEvidence};
use crate::ingress::{Backend, Environment, LoadedPack, Slice};

/// Measure the roofs CPU slices are placed against on the memo's roofline, when any of
/// `slices` runs on the CPU: before the slices (on the same threads), recorded in the
/// environment, never in the lock.
pub fn place_roofs<'a>(environment: &mut Environment, mut slices: impl Iterator<Item = &'a Slice>) {
    if slices.any(|s| s.backend.kind() == Backend::Cpu) {
        environment.roofs = Some(super::roofs::measure_roofs(environment.threads));
    }
}

/// The evidence of `packs`: what each slice measured, under `environment`.
pub fn pack_evidence(packs: &[LoadedPack], environment: Environment, slices: Vec<SliceEvidence>) -> Evidence {
    Evidence {
        schema_version: EVIDENCE_SCHEMA_VERSION,
        environment,
        packs: packs.iter().map(pack_record).collect(),
        slices,
    }
}

fn pack_record(p: &LoadedPack) -> PackRecord {
    PackRecord {
        name: p.file.name.clone(),
        path: p.path.display().to_string(),
        digest: p.digest.clone(),
    }
}
