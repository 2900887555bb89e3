//! The per-GEMM cost model: path selection, schedule, roofline, energy, throttling and the
//! bottleneck class with the numbers behind it. Pure and allocation-free, so a sweep can
//! evaluate millions of layers per second and every result is bit-identical run to run.

use super::energy::{Actions, EnergyBreakdown, energy};
use super::preset::{Compute, Preset, SparseAction};
use super::sparse::{SimPath, select};
use super::tiling::{self, ceil_div};
use super::traffic::{traffic, weight_bytes};
use super::{Layer, SimError};
use crate::domain::verdict::Bottleneck;
use serde::Serialize;

/// Metadata share of DRAM traffic above which a memory-bound layer is called
/// metadata-bound: at 20% the index stream is a fifth of what the sparse format was meant
/// to shrink (2:4 fp16 sits at 1/9 of the weight stream, int8 at 1/5).
pub const METADATA_SHARE_LIMIT: f64 = 0.2;
/// Occupancy below which a compute-bound layer is called occupancy-bound: half the
/// tensor-core slots idle in tails and padding.
pub const OCCUPANCY_LIMIT: f64 = 0.5;
/// Share of latency in launch/synchronisation overhead above which a layer is called
/// synchronization-bound.
pub const LAUNCH_SHARE_LIMIT: f64 = 0.5;
/// Clock factor below which a layer is called thermal-bound (5% throttled).
pub const THROTTLE_LIMIT: f64 = 0.95;

/// Largest GEMM dimension accepted (2^32): products of three stay exact enough in f64 and
/// tile arithmetic cannot overflow.
pub const MAX_DIM: u64 = 1 << 32;

/// Everything the model says about one GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LayerReport {
    /// How it ran.
    pub path: SimPath,
    /// Whether it was a counted dense fallback (1 layer → 0 or 1).
    pub fallback: bool,
    /// Total cycles at the nominal clock: max(compute, memory), throttling included.
    pub cycles: u64,
    /// Compute cycles (schedule / kernel efficiency).
    pub compute_cycles: u64,
    /// Compute cycles at 100% kernel efficiency (the published-model figure: Sparseloop,
    /// SCALE-Sim compute cycles).
    pub ideal_compute_cycles: u64,
    /// DRAM-transfer cycles at the achieved bandwidth.
    pub memory_cycles: u64,
    /// Seconds: cycles at the (possibly throttled) clock plus launch overhead.
    pub latency_s: f64,
    /// Joules.
    pub energy_j: f64,
    /// Joules per component.
    pub energy: EnergyBreakdown,
    /// Action counts behind the energy.
    pub actions: Actions,
    /// Useful / occupied tensor-core (or PE) slots.
    pub tc_occupancy: f64,
    /// Output tiles or systolic folds.
    pub tiles: u64,
    /// Waves of tiles over the units.
    pub waves: u64,
    /// DRAM bytes read and written.
    pub dram_bytes: f64,
    /// Stored weight metadata bytes.
    pub metadata_bytes: f64,
    /// Stored weight value bytes.
    pub value_bytes: f64,
    /// `metadata_bytes / value_bytes` (DESIGN.md §2 metric).
    pub metadata_overhead: f64,
    /// Dense-equivalent FLOP (2·M·N·K).
    pub dense_flops: f64,
    /// Dense-equivalent FLOP / DRAM byte.
    pub arithmetic_intensity: f64,
    /// Clock factor after the power limit (1 = not throttled).
    pub clock_factor: f64,
    /// Average power over the layer, watts.
    pub power_w: f64,
    /// Where the time goes.
    pub bottleneck: Bottleneck,
}

impl LayerReport {
    /// Dense-equivalent TFLOP/s achieved.
    pub fn effective_tflops(&self) -> f64 {
        self.dense_flops / self.latency_s / 1e12
    }

    /// The numbers that justify the bottleneck class, in one sentence.
    pub fn explain(&self) -> String {
        match self.bottleneck {
            Bottleneck::Fallback => match self.path {
                SimPath::Fallback { reason } => format!("dense fallback: {reason}"),
                _ => "dense fallback".into(),
            },
            Bottleneck::Thermal => format!(
                "power {:.0} W over the limit: clock throttled to {:.1}%",
                self.power_w,
                self.clock_factor * 100.0
            ),
            Bottleneck::Synchronization => format!(
                "launch/synchronisation overhead dominates a {:.2e} s layer",
                self.latency_s
            ),
            Bottleneck::MemoryBandwidth => format!(
                "memory {} cycles > compute {} cycles (intensity {:.1} FLOP/B)",
                self.memory_cycles, self.compute_cycles, self.arithmetic_intensity
            ),
            Bottleneck::Metadata => format!(
                "sparse index handling: metadata {:.0} B of {:.0} B stored weight ({:.1}%), memory {} vs compute {} cycles",
                self.metadata_bytes,
                self.metadata_bytes + self.value_bytes,
                100.0 * self.metadata_overhead,
                self.memory_cycles,
                self.compute_cycles
            ),
            Bottleneck::Occupancy => format!(
                "tc_occupancy {:.1}% ({} tiles in {} waves)",
                self.tc_occupancy * 100.0,
                self.tiles,
                self.waves
            ),
            Bottleneck::Compute => format!(
                "compute {} cycles ≥ memory {} cycles, tc_occupancy {:.1}%",
                self.compute_cycles,
                self.memory_cycles,
                self.tc_occupancy * 100.0
            ),
        }
    }
}

/// Evaluate one GEMM on `preset`.
pub fn evaluate(preset: &Preset, layer: &Layer) -> Result<LayerReport, SimError> {
    let (m, n, k) = (layer.m, layer.n, layer.k);
    if m == 0 || n == 0 || k == 0 || m > MAX_DIM || n > MAX_DIM || k > MAX_DIM {
        return Err(SimError::BadLayer {
            message: format!("GEMM dimensions must be in 1..={MAX_DIM}, got {m}x{n}x{k}"),
        });
    }
    let precision = layer.precision;
    let unsupported = || SimError::UnsupportedPrecision {
        arch: preset.name.clone(),
        precision: precision.as_str().to_owned(),
    };
    let peak_rate = preset.peak_macs_per_cycle(precision).ok_or_else(unsupported)?;
    let mac_pj = preset.energy.mac_pj.get(precision).ok_or_else(unsupported)?;
    let path = select(preset, layer.sparsity, precision, k);
    let w_density = layer.sparsity.density();
    let a_density = layer.activation_density.clamp(0.0, 1.0);
    let bytes = precision.bytes();

    // Reduction length the math units walk.
    let k_eff = match path {
        SimPath::Structured { hw_n, hw_m } => ceil_div(k, u64::from(hw_m)) * u64::from(hw_n),
        _ => k,
    };
    let dense_macs = m as f64 * n as f64 * k as f64;
    let sparse_kernel = matches!(path, SimPath::Structured { .. } | SimPath::Unstructured { .. });

    // Schedule and compute cycles.
    let (schedule, eff_compute, eff_memory) = match &preset.compute {
        Compute::TensorCore(tc) => {
            let rate = tc
                .macs_per_cycle_per_unit
                .get(precision)
                .ok_or_else(unsupported)?;
            let e = tc.efficiency_for(precision);
            let (ec, em) = if sparse_kernel {
                (e.sparse_compute, e.sparse_memory)
            } else {
                (e.dense_compute, e.dense_memory)
            };
            (tiling::tensor_core(tc, rate, m, n, k_eff), ec, em)
        }
        Compute::Systolic(s) => (tiling::systolic(s, m, n, k_eff), 1.0, 1.0),
    };
    let mut actions = Actions::default();
    let mut ideal = schedule.cycles;
    match path {
        SimPath::Unstructured { action, .. } => {
            let Some(u) = preset.sparse.unstructured else {
                return Err(SimError::BadPreset {
                    origin: preset.name.clone(),
                    message: "unstructured path without sparse.unstructured".into(),
                });
            };
            let effectual = dense_macs * w_density * a_density;
            actions.macs_effectual = effectual;
            let payload_bits = (bytes * 8) as f64;
            let index_bits = f64::from(u.metadata_bits);
            // A compressed activation operand is streamed too (Sparseloop Fig. 1 compresses both).
            let both = a_density < 1.0;
            match action {
                SparseAction::Gating => {
                    // Every slot is kept: its bitmask bits are read; the input value is read
                    // where the weight is nonzero, the weight value where both are.
                    actions.macs_gated = dense_macs - effectual;
                    actions.index_bits_read = dense_macs * if both { 2.0 } else { 1.0 };
                    actions.payload_reads = dense_macs * w_density + effectual;
                }
                SparseAction::Skipping => {
                    // Only nonzeros are visited: each walked entry costs its payload and its
                    // index. The weight walk sets the time (the operands sit in separate
                    // banks and are walked in parallel).
                    let weight_walk = dense_macs * w_density;
                    let walked = weight_walk + if both { dense_macs * a_density } else { 0.0 };
                    actions.entries_walked = walked;
                    actions.payload_reads = walked;
                    actions.index_bits_read = walked * index_bits;
                    let walk = weight_walk * (payload_bits + index_bits)
                        / u.buffer_bits_per_cycle
                        / f64::from(units(preset));
                    let math = effectual / peak_rate;
                    ideal = walk.max(math).ceil() as u64;
                }
            }
        }
        SimPath::Structured { .. } => {
            actions.macs_effectual = m as f64 * n as f64 * k_eff as f64;
            actions.macs_skipped = dense_macs - actions.macs_effectual;
        }
        SimPath::Dense | SimPath::Fallback { .. } => actions.macs_effectual = dense_macs,
    }
    let drain =
        (preset.overhead.drain_cycles_per_output * m as f64 * n as f64 / f64::from(units(preset))).ceil();
    ideal += drain as u64;
    let compute_cycles = (ideal as f64 / eff_compute).ceil() as u64;

    // Traffic and the memory roofline.
    let weight = weight_bytes(preset, path, n, k_eff, k, w_density, bytes);
    let t = traffic(preset, m, n, k, bytes, weight);
    let dram_bytes = t.dram_read_bytes + t.dram_write_bytes;
    let clock_hz = preset.clock_ghz * 1e9;
    let memory_cycles = (dram_bytes / (preset.memory.dram_gbps * 1e9 * eff_memory) * clock_hz).ceil() as u64;

    // Energy and power.
    let breakdown = energy(&preset.energy, mac_pj, &actions, &t, bytes as f64);
    let energy_j = breakdown.total_j();
    let busy_cycles = compute_cycles.max(memory_cycles).max(1);
    let busy_s = busy_cycles as f64 / clock_hz;
    let (clock_factor, power_w) = match preset.power {
        Some(p) => {
            let dynamic = energy_j / busy_s;
            let budget = p.limit_w - p.static_w;
            let f = if dynamic > budget { budget / dynamic } else { 1.0 };
            (f, p.static_w + dynamic * f)
        }
        None => (1.0, energy_j / busy_s),
    };
    // Throttling slows the clock: compute cycles take longer, DRAM time does not change.
    let throttled_compute_s = compute_cycles as f64 / (clock_hz * clock_factor);
    let memory_s = memory_cycles as f64 / clock_hz;
    let run_s = throttled_compute_s.max(memory_s);
    let cycles = (run_s * clock_hz).ceil() as u64;
    let fixed_s = preset.overhead.launch_s
        + match &preset.compute {
            Compute::TensorCore(tc) if sparse_kernel => tc.sparse_overhead_s(precision),
            _ => 0.0,
        };
    let latency_s = run_s + fixed_s;

    let fallback = path.is_fallback();
    let metadata_share = if dram_bytes > 0.0 {
        t.dram_metadata_bytes / dram_bytes
    } else {
        0.0
    };
    let walk_bound = matches!(
        path,
        SimPath::Unstructured {
            action: SparseAction::Skipping,
            ..
        }
    ) && ideal as f64 > (actions.macs_effectual / peak_rate).ceil() + drain;
    let bottleneck = if fallback {
        Bottleneck::Fallback
    } else if clock_factor < THROTTLE_LIMIT && throttled_compute_s >= memory_s {
        Bottleneck::Thermal
    } else if fixed_s > LAUNCH_SHARE_LIMIT * latency_s {
        Bottleneck::Synchronization
    } else if memory_cycles > compute_cycles {
        if metadata_share > METADATA_SHARE_LIMIT {
            Bottleneck::Metadata
        } else {
            Bottleneck::MemoryBandwidth
        }
    } else if walk_bound {
        Bottleneck::Metadata
    } else if schedule.occupancy < OCCUPANCY_LIMIT {
        Bottleneck::Occupancy
    } else {
        Bottleneck::Compute
    };
    let dense_flops = 2.0 * dense_macs;
    Ok(LayerReport {
        path,
        fallback,
        cycles,
        compute_cycles,
        ideal_compute_cycles: ideal,
        memory_cycles,
        latency_s,
        energy_j,
        energy: breakdown,
        actions,
        tc_occupancy: schedule.occupancy,
        tiles: schedule.tiles,
        waves: schedule.waves,
        dram_bytes,
        metadata_bytes: t.metadata_bytes,
        value_bytes: t.weight_value_bytes,
        metadata_overhead: if t.weight_value_bytes > 0.0 {
            t.metadata_bytes / t.weight_value_bytes
        } else {
            0.0
        },
        dense_flops,
        arithmetic_intensity: dense_flops / dram_bytes,
        clock_factor,
        power_w,
        bottleneck,
    })
}

fn units(preset: &Preset) -> u32 {
    match &preset.compute {
        Compute::TensorCore(tc) => tc.units,
        Compute::Systolic(_) => 1,
    }
}
