//! `merge`: combine the evidence of `run --shard K/N` jobs into one gate decision, written
//! like `gate`'s.

use super::gate::{GateReport, decide_and_write, required_baselines};
use super::{Options, refusals};
use crate::error::Result;
use crate::execute::shards::{combine, into_evidence, read_shards, reload_packs};
use std::path::{Path, PathBuf};

/// Combine the evidence of shard runs (`DIR/evidence.json` each) into one gate decision,
/// written to `out_dir` like `gate`'s. Refuses shards measured under different locks, from
/// different versions of a pack, overlapping shards, and an incomplete set.
pub fn merge(dirs: &[PathBuf], out_dir: &Path, options: &Options) -> Result<GateReport> {
    let shards = read_shards(dirs).map_err(refusals::shard)?;
    let combined = combine(&shards).map_err(refusals::shard)?;
    let packs = reload_packs(&combined.packs).map_err(refusals::shard)?;
    let evidence = into_evidence(combined, &packs).map_err(refusals::shard)?;
    let (baselines, drift) = required_baselines(&packs, &evidence.environment, options)?;
    decide_and_write("merge", &packs, evidence, &baselines, drift, out_dir, options)
}
