//! `sim`: one GEMM layer on an accelerator preset.

use crate::error::Result;
use crate::sim::{SimRun, TrafficRequest, simulate_one};

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
