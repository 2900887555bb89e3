//! Scheduling a GEMM onto the compute fabric: output tiles in waves over the units of a
//! tensor-core part (tile quantisation and wave tails are where occupancy is lost), or
//! folds over a systolic array with its fill/drain skew (SCALE-Sim's compute model).

use super::preset::{Dataflow, Systolic, TensorCore, Tile};

/// How a GEMM maps onto the fabric, before efficiency and memory are considered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Cycles the compute fabric needs at 100% kernel efficiency.
    pub cycles: u64,
    /// Useful work / work the occupied slots could have done, in (0, 1]: tile
    /// quantisation, wave tails, array under-fill.
    pub occupancy: f64,
    /// Output tiles (tensor core) or folds (systolic).
    pub tiles: u64,
    /// Waves of tiles over the units (1 per fold on a systolic array).
    pub waves: u64,
}

/// Ceiling division for positive integers.
pub fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// Tensor-core schedule: `ceil(m/tm)·ceil(n/tn)` output tiles, each computing a full
/// `tm × tn × k_eff` block (edge tiles are padded, which is tile quantisation), issued in
/// waves of `units`; a tile takes `ceil(tm·tn·k_eff / rate)` cycles.
///
/// On one unit with tile-aligned shapes this is exactly `m·n·k_eff / rate`, the Sparseloop
/// STC result (research §B.4: 128·1152·1024/1024 = 147,456).
///
/// Of the preset's tile shapes the one with the fewest cycles wins (ties: the earlier one),
/// as a BLAS heuristic would pick it.
pub fn tensor_core(tc: &TensorCore, rate_per_unit: u64, m: u64, n: u64, k_eff: u64) -> Schedule {
    let mut best: Option<Schedule> = None;
    for tile in &tc.tiles {
        let s = one_tile(tc.units, *tile, rate_per_unit, m, n, k_eff);
        if best.is_none_or(|b| s.cycles < b.cycles) {
            best = Some(s);
        }
    }
    best.unwrap_or_else(|| one_tile(tc.units, Tile { m: 1, n: 1 }, rate_per_unit, m, n, k_eff))
}

fn one_tile(units: u32, tile: Tile, rate_per_unit: u64, m: u64, n: u64, k_eff: u64) -> Schedule {
    let tiles = ceil_div(m, tile.m).saturating_mul(ceil_div(n, tile.n));
    let units = u64::from(units);
    let waves = ceil_div(tiles, units);
    let tile_cycles = ceil_div(tile.m.saturating_mul(tile.n).saturating_mul(k_eff), rate_per_unit);
    let slots = waves as f64 * units as f64 * (tile.m * tile.n) as f64;
    Schedule {
        cycles: waves.saturating_mul(tile_cycles),
        occupancy: (m as f64 * n as f64) / slots,
        tiles,
        waves,
    }
}

/// Systolic-array compute cycles, SCALE-Sim's model: the GEMM becomes an `Sr × T` operand
/// streamed against `T × Sc`, cut into `ceil(Sr/R)·ceil(Sc/C)` folds. Per fold, OS costs
/// `T + R + C − 2` cycles and WS/IS cost `2R + C + T − 2` (weights or inputs are first
/// loaded into the array); the last cycle of the last fold is not counted. With SCALE-Sim's
/// GEMM mapping (`M` → ifmap rows, `N` → filters, `K` → reduction), OS has `Sr = M`,
/// `Sc = N`, `T = K`; WS `Sr = K`, `Sc = N`, `T = M`; IS `Sr = K`, `Sc = M`, `T = N`.
/// `k_eff` is the reduction after N:M compression (`ceil(K/m)·n`).
///
/// This reproduces every one of the 90 SCALE-Sim 3.0.0 runs committed in
/// `tests/data/sim/scalesim_reference.json` cycle for cycle.
pub fn systolic(s: &Systolic, m: u64, n: u64, k_eff: u64) -> Schedule {
    let (r, c) = (u64::from(s.rows), u64::from(s.cols));
    let (sr, sc, t) = match s.dataflow {
        Dataflow::Os => (m, n, k_eff),
        Dataflow::Ws => (k_eff, n, m),
        Dataflow::Is => (k_eff, m, n),
    };
    let folds = ceil_div(sr, r).saturating_mul(ceil_div(sc, c));
    let per_fold = match s.dataflow {
        Dataflow::Os => t.saturating_add(r + c - 2),
        Dataflow::Ws | Dataflow::Is => t.saturating_add(2 * r + c - 2),
    };
    let cycles = folds.saturating_mul(per_fold).saturating_sub(1).max(1);
    Schedule {
        cycles,
        occupancy: (sr as f64 * sc as f64) / (folds as f64 * r as f64 * c as f64),
        tiles: folds,
        waves: folds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::preset::{Efficiency, PerPrecision};

    fn tc(units: u32, tm: u64, tn: u64) -> TensorCore {
        TensorCore {
            units,
            macs_per_cycle_per_unit: PerPrecision::default(),
            tiles: vec![Tile { m: tm, n: tn }],
            efficiency: Efficiency::default(),
            per_precision: PerPrecision::default(),
        }
    }

    #[test]
    fn issue_4_waves_and_tails() {
        // 3 tiles on 2 units: 2 waves, the second half empty.
        let s = tensor_core(&tc(2, 16, 16), 256, 48, 16, 64);
        assert_eq!((s.tiles, s.waves), (3, 2));
        assert_eq!(s.cycles, 2 * 64);
        assert!((s.occupancy - 0.75).abs() < 1e-12);
        // A ragged edge pads the tile.
        let s = tensor_core(&tc(1, 16, 16), 256, 17, 16, 64);
        assert_eq!(s.tiles, 2);
        assert!((s.occupancy - 17.0 / 32.0).abs() < 1e-12);
    }
}
