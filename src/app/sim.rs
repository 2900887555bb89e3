//! `sim`: one GEMM layer on an accelerator preset.

use crate::error::{Error, Result};
use crate::sim::measured::{Agreement, MeasuredGrid, compare};
use crate::sim::{Preset, SimRun, TrafficRequest, simulate_one};
use std::path::Path;

/// A measured grid is a few hundred cells of a few hundred bytes; 16 MiB is far beyond
/// any real one and bounds what a wrong file can cost.
const MEASURED_LIMIT: u64 = 16 << 20;

/// Simulate one layer (`gemm` as `MxNxK`) on the preset `arch` (a built-in name or a preset
/// file) at `sparsity` and `precision`, optionally served under `traffic`.
pub fn simulate(
    arch: &str,
    gemm: &str,
    sparsity: &str,
    precision: &str,
    traffic: Option<TrafficRequest<'_>>,
) -> Result<SimRun> {
    Ok(simulate_one(arch, gemm, sparsity, precision, traffic)?)
}

/// `sim --arch A --measured FILE` (issue 25): the preset's predicted dense and 2:4 times
/// beside a real GPU's, cell by cell, with the decode-size crossover per layer.
pub fn check_measured(arch: &str, path: &Path) -> Result<Agreement> {
    let preset = Preset::resolve(arch)?;
    let text = crate::files::read_bounded(path, MEASURED_LIMIT)?;
    let refused = |position: String, message: String| Error::Measured {
        path: path.to_owned(),
        position,
        message,
    };
    // serde's own message can quote the file's values: say where and what kind of problem.
    let grid: MeasuredGrid = serde_json::from_str(&text).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "not valid JSON",
            _ => "not a measured grid (a key is missing or has the wrong type)",
        };
        refused(format!(":{}:{}", e.line(), e.column()), what.to_owned())
    })?;
    compare(&preset, &grid).map_err(|e| refused(String::new(), e.to_string()))
}
