//! A preset checked against a real GPU's measurements (issue 25).
//!
//! `benches/gpu/h200_measure.py` times dense cuBLAS against 2:4 semi-structured GEMMs
//! (cuSPARSELt, CUTLASS) on a real part and writes a [`MeasuredGrid`]. [`compare`] puts the
//! preset's predicted dense and 2:4 latencies beside every measured cell, and says, per
//! layer and precision, whether the model puts the decode-size crossover (where 2:4 stops
//! or starts paying) on the same side as the chip. The simulator is then judged by the
//! criterion the issue sets: speedup within a tolerance on compute-bound shapes, and the
//! crossover on the right side. A user with another GPU runs the same script and checks
//! their own preset the same way (`sparsegate sim --arch FILE --measured GRID`).
//!
//! The comparison never fits anything: a miss is reported as a miss, with the measured and
//! predicted numbers side by side, so a preset's `sources` can say why.

use super::preset::{Calibration, Compute, PerPrecision};
use super::{Layer, Preset, SimError, evaluate};
use crate::domain::{Precision, Sparsity};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The file format's name, in every grid's `format` field.
pub const FORMAT: &str = "sparsegate-gpu-measurement";

/// The format version this build reads.
pub const VERSION: u32 = 1;

/// What the measurement script wrote: the device, its software stack, how it timed, and one
/// cell per (layer, tokens, dtype).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasuredGrid {
    /// Always `sparsegate-gpu-measurement`.
    pub format: String,
    /// Format version (1).
    pub version: u32,
    /// The part measured.
    pub device: MeasuredDevice,
    /// Driver, CUDA, torch, cuSPARSELt versions, as the script read them.
    #[serde(default)]
    pub stack: BTreeMap<String, String>,
    /// Achieved device-to-device copy bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_copy: Option<MemoryCopy>,
    /// Dense bf16 throughput at 8192³.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_dense: Option<PeakDense>,
    /// GPU seconds the measurement took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_seconds: Option<f64>,
    /// The measured cells.
    pub cells: Vec<MeasuredCell>,
}

/// The measured part, as torch reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasuredDevice {
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Compute capability, e.g. `9.0`.
    #[serde(default)]
    pub compute_capability: String,
}

/// Device-to-device copy: read + write bytes over the median time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryCopy {
    /// Bytes read plus written per copy.
    pub bytes_moved: f64,
    /// Achieved GB/s.
    pub gbps: f64,
}

/// Dense throughput on a large square GEMM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeakDense {
    /// Precision of the run (`bf16`).
    pub dtype: String,
    /// Achieved TFLOP/s.
    pub tflops: f64,
}

/// One GEMM: M tokens × N outputs × K reduction, in one dtype, dense and 2:4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasuredCell {
    /// The layer's name in the script's grid (`llama2-7b.mlp_up_gate`).
    pub layer: String,
    /// Tokens.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction (the 2:4 axis).
    pub k: u64,
    /// `fp16`, `bf16`, `int8` or `fp8`.
    pub dtype: String,
    /// What the script had to do differently for this cell (padding, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Dense cuBLAS timing.
    pub dense: Timing,
    /// 2:4 on cuSPARSELt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_cusparselt: Option<Timing>,
    /// 2:4 on CUTLASS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_cutlass: Option<Timing>,
    /// The same paths replayed from CUDA graphs: the kernels' own time per call, without
    /// the host's dispatch gap that the eager timings above include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphTimings>,
}

/// The CUDA-graph pass of one cell: `inner` calls captured in one graph, each replay timed
/// with CUDA events, per-call time = replay / `inner`. A path that could not be captured
/// keeps its error; a cell the pass never reached has only `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphTimings {
    /// Calls per captured graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<u32>,
    /// Dense, per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense: Option<Timing>,
    /// 2:4 on cuSPARSELt, per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_cusparselt: Option<Timing>,
    /// 2:4 on CUTLASS, per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_cutlass: Option<Timing>,
    /// Why the cell has no graph timings at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Which of a cell's timings a comparison used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimingSource {
    /// CUDA-graph replays: kernel time, what the simulator predicts. Preferred.
    Graph,
    /// Each call alone, host dispatch included: used only where the grid has no graph
    /// timing for both sides.
    Eager,
}

/// The faster 2:4 backend with its time, where one was measured.
fn fastest(cusparselt: Option<&Timing>, cutlass: Option<&Timing>) -> Option<(&'static str, f64)> {
    [("cusparselt", cusparselt), ("cutlass", cutlass)]
        .into_iter()
        .filter_map(|(name, t)| t.and_then(Timing::median_s).map(|s| (name, s)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// A timed path, or why it could not run on that stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Timing {
    /// CUDA-event times of the interleaved calls, in microseconds.
    Measured {
        /// Median.
        median_us: f64,
        /// 10th percentile.
        p10_us: f64,
        /// 90th percentile.
        p90_us: f64,
        /// Timed calls.
        reps: u32,
    },
    /// The stack refused the call (shape or dtype unsupported, …).
    Failed {
        /// The error, as the framework said it.
        error: String,
    },
}

impl Timing {
    fn median_s(&self) -> Option<f64> {
        match self {
            Timing::Measured { median_us, .. } if *median_us > 0.0 && median_us.is_finite() => {
                Some(median_us * 1e-6)
            }
            _ => None,
        }
    }
}

/// How far a predicted speedup may be from the measured one on a compute-bound shape
/// before it counts as a miss: the issue's goal, 10%.
pub const SPEEDUP_TOLERANCE: f64 = 0.10;

/// Measured speedups this close to 1 count as a tie: either side of the crossover agrees.
pub const TIE_BAND: f64 = 0.03;

/// One cell with the model's prediction beside the measurement.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CellAgreement {
    /// Layer name from the grid.
    pub layer: String,
    /// Tokens.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction.
    pub k: u64,
    /// Precision.
    pub precision: Precision,
    /// The faster measured 2:4 backend (`cusparselt` or `cutlass`).
    pub sparse_backend: String,
    /// Whether the times are CUDA-graph replays (kernel time) or eager calls.
    pub timing: TimingSource,
    /// Measured dense seconds (median).
    pub measured_dense_s: f64,
    /// Measured 2:4 seconds (median).
    pub measured_sparse_s: f64,
    /// Measured dense / 2:4.
    pub measured_speedup: f64,
    /// The preset's dense seconds.
    pub predicted_dense_s: f64,
    /// The preset's 2:4 seconds.
    pub predicted_sparse_s: f64,
    /// The preset's dense / 2:4.
    pub predicted_speedup: f64,
    /// predicted / measured speedup − 1.
    pub speedup_error: f64,
    /// Whether the preset puts the dense GEMM on the compute roof (compute cycles at least
    /// the memory cycles): the shapes the speedup tolerance applies to.
    pub compute_bound: bool,
}

/// A measured cell the model cannot speak to, and why.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SkippedCell {
    /// Layer name from the grid.
    pub layer: String,
    /// Tokens.
    pub m: u64,
    /// Precision as the grid spells it.
    pub dtype: String,
    /// Why it is not compared.
    pub reason: String,
}

/// Where 2:4 starts to pay, per layer and precision, on the chip and in the model.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Crossover {
    /// Layer name from the grid.
    pub layer: String,
    /// Precision.
    pub precision: Precision,
    /// The smallest token count measured for this layer (the decode size).
    pub decode_tokens: u64,
    /// Measured speedup at the decode size.
    pub measured_decode_speedup: f64,
    /// Predicted speedup at the decode size.
    pub predicted_decode_speedup: f64,
    /// Whether both say the same about 2:4 at decode (win or lose), a measured tie
    /// within [`TIE_BAND`] agreeing with either.
    pub decode_side_agrees: bool,
    /// Smallest measured token count from which 2:4 wins at every larger count measured.
    pub measured_wins_from: Option<u64>,
    /// The same, from the model.
    pub predicted_wins_from: Option<u64>,
}

/// The preset against a measured grid.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Agreement {
    /// Preset name.
    pub preset: String,
    /// Measured device name.
    pub device: String,
    /// Every compared cell.
    pub cells: Vec<CellAgreement>,
    /// Cells not compared, with the reason.
    pub skipped: Vec<SkippedCell>,
    /// Per layer and precision.
    pub crossovers: Vec<Crossover>,
    /// Compute-bound cells whose speedup is within [`SPEEDUP_TOLERANCE`].
    pub compute_bound_within: usize,
    /// Compute-bound cells compared.
    pub compute_bound_total: usize,
    /// Crossovers whose decode side agrees.
    pub decode_sides_agreeing: usize,
}

/// Why a grid cannot be compared at all.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MeasuredError {
    /// Not this format, or a version this build does not read.
    #[error(
        "not a `{FORMAT}` version {VERSION} file (format `{format}`, version {version}); make it with benches/gpu/h200_measure.py"
    )]
    Format {
        /// The file's `format`.
        format: String,
        /// The file's `version`.
        version: u32,
    },
    /// A cell's shape the model refuses.
    #[error("cell {layer} at {m} tokens: {source}")]
    Layer {
        /// Layer name.
        layer: String,
        /// Tokens.
        m: u64,
        /// The model's refusal.
        source: SimError,
    },
}

fn precision_of(dtype: &str) -> Option<Precision> {
    match dtype {
        "fp16" => Some(Precision::Fp16),
        "bf16" => Some(Precision::Bf16),
        "int8" => Some(Precision::Int8),
        "fp32" => Some(Precision::Fp32),
        _ => None,
    }
}

/// Put `preset`'s prediction beside every cell of `grid`.
pub fn compare(preset: &Preset, grid: &MeasuredGrid) -> Result<Agreement, MeasuredError> {
    if grid.format != FORMAT || grid.version != VERSION {
        return Err(MeasuredError::Format {
            format: grid.format.clone(),
            version: grid.version,
        });
    }
    let mut cells = Vec::new();
    let mut skipped = Vec::new();
    for c in &grid.cells {
        let skip = |reason: String| SkippedCell {
            layer: c.layer.clone(),
            m: c.m,
            dtype: c.dtype.clone(),
            reason,
        };
        let Some(precision) = precision_of(&c.dtype) else {
            skipped.push(skip(format!("the simulator has no {} precision", c.dtype)));
            continue;
        };
        let CellTimes {
            timing,
            dense_s,
            backend,
            sparse_s,
        } = match cell_times(c) {
            Ok(t) => t,
            Err(reason) => {
                skipped.push(skip(reason.to_string()));
                continue;
            }
        };
        let layer = Layer::new(c.m, c.n, c.k, Sparsity::NOfM { n: 2, m: 4 }, precision);
        let err = |source| MeasuredError::Layer {
            layer: c.layer.clone(),
            m: c.m,
            source,
        };
        let sparse = evaluate(preset, &layer).map_err(err)?;
        let dense = evaluate(
            preset,
            &Layer {
                sparsity: Sparsity::Dense,
                ..layer
            },
        )
        .map_err(err)?;
        let measured_speedup = dense_s / sparse_s;
        let predicted_speedup = dense.latency_s / sparse.latency_s;
        cells.push(CellAgreement {
            layer: c.layer.clone(),
            m: c.m,
            n: c.n,
            k: c.k,
            precision,
            sparse_backend: backend.to_owned(),
            timing,
            measured_dense_s: dense_s,
            measured_sparse_s: sparse_s,
            measured_speedup,
            predicted_dense_s: dense.latency_s,
            predicted_sparse_s: sparse.latency_s,
            predicted_speedup,
            speedup_error: predicted_speedup / measured_speedup - 1.0,
            compute_bound: dense.compute_cycles >= dense.memory_cycles,
        });
    }
    let crossovers = crossovers(&cells);
    let bound: Vec<&CellAgreement> = cells.iter().filter(|c| c.compute_bound).collect();
    Ok(Agreement {
        preset: preset.name.clone(),
        device: grid.device.name.clone(),
        compute_bound_within: bound
            .iter()
            .filter(|c| c.speedup_error.abs() <= SPEEDUP_TOLERANCE)
            .count(),
        compute_bound_total: bound.len(),
        decode_sides_agreeing: crossovers.iter().filter(|c| c.decode_side_agrees).count(),
        crossovers,
        cells,
        skipped,
    })
}

/// A cell's timings as the comparison uses them.
struct CellTimes {
    timing: TimingSource,
    dense_s: f64,
    backend: &'static str,
    sparse_s: f64,
}

/// Why a cell has no dense / 2:4 pair to compare.
#[derive(Debug, thiserror::Error)]
enum NoPair {
    #[error("dense did not run: {0}")]
    DenseFailed(String),
    #[error("dense time is not a positive number")]
    DenseNotPositive,
    #[error("no 2:4 timing")]
    NoSparse,
    #[error("no 2:4 backend ran: {}", .0.join("; "))]
    SparseFailed(Vec<String>),
}

/// A cell's dense time and its faster 2:4 backend's: kernel time where the graph pass
/// measured both sides, else the eager calls.
fn cell_times(c: &MeasuredCell) -> Result<CellTimes, NoPair> {
    if let Some(g) = &c.graph
        && let Some(dense_s) = g.dense.as_ref().and_then(Timing::median_s)
        && let Some((backend, sparse_s)) = fastest(g.sparse_cusparselt.as_ref(), g.sparse_cutlass.as_ref())
    {
        return Ok(CellTimes {
            timing: TimingSource::Graph,
            dense_s,
            backend,
            sparse_s,
        });
    }
    let dense_s = c.dense.median_s().ok_or_else(|| match &c.dense {
        Timing::Failed { error } => NoPair::DenseFailed(first_line(error)),
        Timing::Measured { .. } => NoPair::DenseNotPositive,
    })?;
    let Some((backend, sparse_s)) = fastest(c.sparse_cusparselt.as_ref(), c.sparse_cutlass.as_ref()) else {
        let why: Vec<String> = [&c.sparse_cusparselt, &c.sparse_cutlass]
            .into_iter()
            .flatten()
            .filter_map(|t| match t {
                Timing::Failed { error } => Some(first_line(error)),
                Timing::Measured { .. } => None,
            })
            .collect();
        return Err(if why.is_empty() {
            NoPair::NoSparse
        } else {
            NoPair::SparseFailed(why)
        });
    };
    Ok(CellTimes {
        timing: TimingSource::Eager,
        dense_s,
        backend,
        sparse_s,
    })
}

/// Steps the fit walks: efficiencies by 0.01, the sparse overhead by 0.25 µs up to 40 µs.
const FIT_EFFICIENCIES: std::ops::RangeInclusive<u32> = 1..=100;
const FIT_OVERHEAD_STEPS: std::ops::RangeInclusive<u32> = 0..=160;

/// The per-precision corrections under which `preset` best predicts the cells of `layers`
/// in `grid` (issue 25: calibrate on half the grid, check on the other half). Least squares
/// on log latency, dense and 2:4 separately: `dense_compute` and `dense_memory` from the
/// dense times, `sparse_compute`, `sparse_memory` and `sparse_overhead_s` from the 2:4
/// times; coordinate descent over fixed steps from the preset's own values, so the result
/// is deterministic and a preset file can quote it exactly.
pub fn fit(
    preset: &Preset,
    grid: &MeasuredGrid,
    layers: &[&str],
) -> Result<PerPrecision<Calibration>, MeasuredError> {
    let Compute::TensorCore(base) = &preset.compute else {
        return Ok(PerPrecision::default());
    };
    let mut out = PerPrecision::default();
    for precision in [Precision::Fp16, Precision::Bf16, Precision::Int8, Precision::Fp32] {
        let cells: Vec<(Layer, f64, f64, &str)> = grid
            .cells
            .iter()
            .filter(|c| layers.contains(&c.layer.as_str()) && precision_of(&c.dtype) == Some(precision))
            .filter_map(|c| {
                let CellTimes {
                    dense_s: d,
                    sparse_s: s,
                    ..
                } = cell_times(c).ok()?;
                let layer = Layer::new(c.m, c.n, c.k, Sparsity::NOfM { n: 2, m: 4 }, precision);
                Some((layer, d, s, c.layer.as_str()))
            })
            .collect();
        if cells.is_empty() {
            continue;
        }
        let e = base.efficiency_for(precision);
        let round = |v: f64| (v * 100.0).round().clamp(1.0, 100.0) / 100.0;
        let mut cal = Calibration {
            dense_compute: Some(round(e.dense_compute)),
            sparse_compute: Some(round(e.sparse_compute)),
            dense_memory: Some(round(e.dense_memory)),
            sparse_memory: Some(round(e.sparse_memory)),
            sparse_overhead_s: Some(0.0),
        };
        let cost = |cal: &Calibration, sparse: bool| -> Result<f64, MeasuredError> {
            let mut p = preset.clone();
            if let Compute::TensorCore(tc) = &mut p.compute {
                tc.per_precision.set(precision, Some(*cal));
            }
            let mut sum = 0.0;
            for (layer, d, s, name) in &cells {
                let l = Layer {
                    sparsity: if sparse { layer.sparsity } else { Sparsity::Dense },
                    ..*layer
                };
                let r = evaluate(&p, &l).map_err(|source| MeasuredError::Layer {
                    layer: (*name).to_owned(),
                    m: layer.m,
                    source,
                })?;
                sum += (r.latency_s / if sparse { *s } else { *d }).ln().powi(2);
            }
            Ok(sum)
        };
        type Field = fn(&mut Calibration) -> &mut Option<f64>;
        let fields: [(Field, bool, bool); 5] = [
            (|c| &mut c.dense_compute, false, false),
            (|c| &mut c.dense_memory, false, false),
            (|c| &mut c.sparse_compute, true, false),
            (|c| &mut c.sparse_memory, true, false),
            (|c| &mut c.sparse_overhead_s, true, true),
        ];
        for _sweep in 0..10 {
            let before = cal;
            for (field, sparse, overhead) in fields {
                let values: Vec<f64> = if overhead {
                    FIT_OVERHEAD_STEPS.map(|i| f64::from(i) / 4e6).collect()
                } else {
                    FIT_EFFICIENCIES.map(|i| f64::from(i) / 100.0).collect()
                };
                let mut best = (cost(&cal, sparse)?, *field(&mut cal));
                for v in values {
                    let mut trial = cal;
                    *field(&mut trial) = Some(v);
                    let c = cost(&trial, sparse)?;
                    if c < best.0 - 1e-12 {
                        best = (c, Some(v));
                    }
                }
                *field(&mut cal) = best.1;
            }
            if cal == before {
                break;
            }
        }
        out.set(precision, Some(cal));
    }
    Ok(out)
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(160).collect()
}

/// Group the cells by (layer, precision) in grid order and find where 2:4 pays.
fn crossovers(cells: &[CellAgreement]) -> Vec<Crossover> {
    let mut groups: Vec<((&str, Precision), Vec<&CellAgreement>)> = Vec::new();
    for c in cells {
        let key = (c.layer.as_str(), c.precision);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    groups
        .into_iter()
        .map(|((layer, precision), mut v)| {
            v.sort_by_key(|c| c.m);
            let decode = v[0];
            let m_side = decode.measured_speedup >= 1.0;
            let p_side = decode.predicted_speedup >= 1.0;
            Crossover {
                layer: layer.to_owned(),
                precision,
                decode_tokens: decode.m,
                measured_decode_speedup: decode.measured_speedup,
                predicted_decode_speedup: decode.predicted_speedup,
                decode_side_agrees: m_side == p_side || (decode.measured_speedup - 1.0).abs() <= TIE_BAND,
                measured_wins_from: wins_from(&v, |c| c.measured_speedup),
                predicted_wins_from: wins_from(&v, |c| c.predicted_speedup),
            }
        })
        .collect()
}

/// The smallest token count from which every larger measured count wins (speedup > 1).
fn wins_from(sorted: &[&CellAgreement], speedup: impl Fn(&CellAgreement) -> f64) -> Option<u64> {
    let mut from = None;
    for c in sorted.iter().rev() {
        if speedup(c) > 1.0 {
            from = Some(c.m);
        } else {
            break;
        }
    }
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> Preset {
        Preset::resolve("h200").unwrap()
    }

    fn measured(us: f64) -> Timing {
        Timing::Measured {
            median_us: us,
            p10_us: us * 0.98,
            p90_us: us * 1.02,
            reps: 30,
        }
    }

    /// A grid whose "measurements" are the preset's own predictions scaled by `skew` on
    /// the 2:4 side: a test input for the comparison, not a measurement.
    fn grid_from_model(preset: &Preset, skew: f64, tokens: &[u64]) -> MeasuredGrid {
        let mut cells = Vec::new();
        for &(layer, n, k) in &[("up", 11008, 4096), ("sq", 8192, 8192)] {
            for &m in tokens {
                let l = Layer::new(m, n, k, Sparsity::NOfM { n: 2, m: 4 }, Precision::Fp16);
                let s = evaluate(preset, &l).unwrap().latency_s;
                let d = evaluate(
                    preset,
                    &Layer {
                        sparsity: Sparsity::Dense,
                        ..l
                    },
                )
                .unwrap()
                .latency_s;
                cells.push(MeasuredCell {
                    layer: layer.into(),
                    m,
                    n,
                    k,
                    dtype: "fp16".into(),
                    note: None,
                    dense: measured(d * 1e6),
                    sparse_cusparselt: Some(measured(s * skew * 1e6)),
                    sparse_cutlass: Some(Timing::Failed {
                        error: "RuntimeError: CUTLASS 2:4 needs sm8x\nmore".into(),
                    }),
                    graph: None,
                });
            }
        }
        MeasuredGrid {
            format: FORMAT.into(),
            version: VERSION,
            device: MeasuredDevice {
                name: "test grid".into(),
                sm_count: 132,
                compute_capability: "9.0".into(),
            },
            stack: BTreeMap::new(),
            memory_copy: None,
            peak_dense: None,
            gpu_seconds: None,
            cells,
        }
    }

    #[test]
    fn a_grid_the_model_predicts_exactly_agrees_everywhere() {
        let p = h200();
        let a = compare(&p, &grid_from_model(&p, 1.0, &[1, 16, 512, 8192])).unwrap();
        assert_eq!(a.cells.len(), 8);
        assert!(a.cells.iter().all(|c| c.speedup_error.abs() < 1e-12));
        assert!(a.compute_bound_total > 0, "8192 tokens is compute-bound");
        assert_eq!(a.compute_bound_within, a.compute_bound_total);
        assert_eq!(a.decode_sides_agreeing, a.crossovers.len());
        assert!(a.cells.iter().all(|c| c.sparse_backend == "cusparselt"));
    }

    #[test]
    fn a_sparse_path_slower_than_predicted_is_a_miss_on_compute_bound_shapes() {
        let p = h200();
        // 2:4 measured 25% slower than the model says: every speedup is 20% lower.
        let a = compare(&p, &grid_from_model(&p, 1.25, &[512, 8192])).unwrap();
        assert!(a.compute_bound_total > 0);
        assert_eq!(a.compute_bound_within, 0);
        for c in &a.cells {
            assert!((c.speedup_error - 0.25).abs() < 1e-9, "{c:?}");
        }
    }

    #[test]
    fn the_decode_crossover_on_the_wrong_side_is_reported() {
        let p = h200();
        let mut g = grid_from_model(&p, 1.0, &[1, 8192]);
        // On the chip 2:4 loses clearly at 1 token where the model says otherwise, or wins
        // where the model says it loses: flip the measured decode side of the first layer.
        let first = &mut g.cells[0];
        let (d, s) = (
            first.dense.median_s().unwrap(),
            first.sparse_cusparselt.as_ref().unwrap().median_s().unwrap(),
        );
        let predicted = d / s;
        let flipped = if predicted >= 1.0 { 0.8 } else { 1.3 };
        first.sparse_cusparselt = Some(measured(d / flipped * 1e6));
        let a = compare(&p, &g).unwrap();
        let up = a.crossovers.iter().find(|c| c.layer == "up").unwrap();
        assert!(!up.decode_side_agrees, "{up:?}");
        assert_eq!(a.decode_sides_agreeing, a.crossovers.len() - 1);
    }

    #[test]
    fn cells_the_model_cannot_speak_to_are_skipped_with_the_reason() {
        let p = h200();
        let mut g = grid_from_model(&p, 1.0, &[16]);
        g.cells[0].dtype = "fp8".into();
        g.cells[1].sparse_cusparselt = Some(Timing::Failed {
            error: "RuntimeError: shape not supported\ntraceback".into(),
        });
        let a = compare(&p, &g).unwrap();
        assert!(a.cells.is_empty());
        assert_eq!(a.skipped.len(), 2);
        assert_eq!(a.skipped[0].reason, "the simulator has no fp8 precision");
        assert_eq!(
            a.skipped[1].reason,
            "no 2:4 backend ran: RuntimeError: shape not supported; RuntimeError: CUTLASS 2:4 needs sm8x"
        );
    }

    #[test]
    fn wins_from_is_the_start_of_the_last_winning_run() {
        let p = h200();
        let mut g = grid_from_model(&p, 1.0, &[1, 16, 512, 8192]);
        // Measured: lose at 1 and 16, win at 512 and 8192, on the first layer.
        for (cell, speedup) in g.cells.iter_mut().take(4).zip([0.9, 0.95, 1.1, 1.2]) {
            let d = cell.dense.median_s().unwrap();
            cell.sparse_cusparselt = Some(measured(d / speedup * 1e6));
        }
        let a = compare(&p, &g).unwrap();
        let up = a.crossovers.iter().find(|c| c.layer == "up").unwrap();
        assert_eq!(up.measured_wins_from, Some(512));
        assert_eq!(up.decode_tokens, 1);
    }

    #[test]
    fn graph_replays_are_preferred_over_eager_calls_where_both_sides_have_them() {
        let p = h200();
        let mut g = grid_from_model(&p, 1.0, &[16, 8192]);
        // Eager: a host dispatch gap of 500 us on the 2:4 side swamps the kernel.
        for c in &mut g.cells {
            let (d, s) = (
                c.dense.median_s().unwrap(),
                c.sparse_cusparselt.as_ref().unwrap().median_s().unwrap(),
            );
            c.graph = Some(GraphTimings {
                inner: Some(10),
                dense: Some(measured(d * 1e6)),
                sparse_cusparselt: Some(measured(s * 1e6)),
                sparse_cutlass: None,
                error: None,
            });
            c.sparse_cusparselt = Some(measured(s * 1e6 + 500.0));
        }
        // One cell whose graph pass failed on the 2:4 side falls back to its eager times.
        g.cells[0].graph.as_mut().unwrap().sparse_cusparselt = Some(Timing::Failed {
            error: "capture failed".into(),
        });
        let a = compare(&p, &g).unwrap();
        assert_eq!(a.cells[0].timing, TimingSource::Eager);
        assert!(a.cells[0].speedup_error > 1.0, "{:?}", a.cells[0]);
        for c in &a.cells[1..] {
            assert_eq!(c.timing, TimingSource::Graph);
            assert!(c.speedup_error.abs() < 1e-9, "{c:?}");
        }
    }

    #[test]
    fn another_format_is_refused() {
        let p = h200();
        let mut g = grid_from_model(&p, 1.0, &[16]);
        g.version = 2;
        assert!(matches!(
            compare(&p, &g),
            Err(MeasuredError::Format { version: 2, .. })
        ));
    }

    #[test]
    fn the_script_output_shape_parses() {
        // The keys benches/gpu/h200_measure.py writes, including ones this reader ignores.
        let text = r#"{"format": "sparsegate-gpu-measurement", "version": 1,
          "device": {"name": "NVIDIA H200", "sm_count": 132, "memory_gib": 139.8, "compute_capability": "9.0"},
          "stack": {"torch": "2.5.1", "cuda": "12.4"},
          "method": {"timer": "cuda_event"}, "clocks_before": {"clocks.sm": "1980"},
          "memory_copy": {"bytes_moved": 2147483648, "median_s": 0.0005, "gbps": 4100.0},
          "peak_dense": {"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "median_s": 0.0015, "tflops": 730.0},
          "cells": [{"layer": "l", "m": 16, "n": 4096, "k": 4096, "dtype": "fp16",
                     "dense": {"median_us": 20.0, "p10_us": 19.0, "p90_us": 21.0, "reps": 30},
                     "sparse_cusparselt": {"median_us": 18.0, "p10_us": 17.5, "p90_us": 19.0, "reps": 30},
                     "sparse_cutlass": {"error": "RuntimeError: no"},
                     "graph": {"inner": 10, "dense": {"median_us": 9.0, "p10_us": 8.9, "p90_us": 9.2, "reps": 30},
                               "sparse_cusparselt": {"error": "capture failed"}}},
                    {"layer": "l", "m": 8192, "n": 4096, "k": 4096, "dtype": "fp8",
                     "dense": {"error": "not measured"}, "graph": {"error": "not reached"}}],
          "gpu_seconds": 200.5, "trace": "torch_trace_h200.json"}"#;
        let g: MeasuredGrid = serde_json::from_str(text).unwrap();
        assert!((g.cells[0].dense.median_s().unwrap() - 20e-6).abs() < 1e-15);
        assert!(matches!(g.cells[0].sparse_cutlass, Some(Timing::Failed { .. })));
        assert_eq!(g.memory_copy.unwrap().gbps, 4100.0);
        let graph = g.cells[0].graph.as_ref().unwrap();
        assert_eq!(graph.inner, Some(10));
        assert!(matches!(graph.sparse_cusparselt, Some(Timing::Failed { .. })));
        assert_eq!(
            g.cells[1].graph.as_ref().unwrap().error.as_deref(),
            Some("not reached")
        );
    }
}
