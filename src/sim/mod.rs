//! The simulated accelerator: an analytic, deterministic model of tensor-core GPUs and
//! systolic arrays in the spirit of Timeloop/Sparseloop and SCALE-Sim (DESIGN.md §5).
//!
//! One concept per file:
//! - [`preset`]: the YAML description of a part (built-ins embedded, user files accepted);
//! - [`sparse`]: which sparsity the hardware exploits, and the counted dense fallback;
//! - [`tiling`]: tiles and waves on tensor cores, folds on systolic arrays;
//! - [`traffic`]: stored bytes (values, metadata) and re-fetches per memory level;
//! - [`energy`]: action counts × ERT;
//! - [`layer`]: the per-GEMM cost model that strings them together, with the roofline,
//!   throttling and the bottleneck class.
//!
//! It is checked against what others published or built (Sparseloop's STC and Fig. 1
//! tables, SCALE-Sim runs, measured A100/H100 2:4 speedups): see `tests/sim_validation.rs`.
//! Every function is pure; f64 arithmetic runs in a fixed order and no hash-map order is
//! involved, so results are bit-identical across runs and thread counts.

pub mod energy;
pub mod layer;
pub mod measured;
pub mod model;
pub mod preset;
pub mod queue;
pub mod sparse;
pub mod tiling;
pub mod traffic;

pub use layer::{LayerReport, evaluate};
pub use preset::Preset;
pub use sparse::{FallbackReason, SimPath};

use crate::domain::{Precision, Sparsity};
use rayon::prelude::*;
use std::path::PathBuf;

/// One GEMM to simulate: `Y[m×n] = X[m×k] · Wᵀ`, the weight `W[n×k]` carrying the sparsity
/// (the pack convention: M tokens, N output features, K reduction).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layer {
    /// Tokens.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction.
    pub k: u64,
    /// Weight sparsity.
    pub sparsity: Sparsity,
    /// Operand precision.
    pub precision: Precision,
    /// Fraction of nonzero input activations, for designs that gate or skip on both
    /// operands (Sparseloop Fig. 1); 1 for dense activations.
    pub activation_density: f64,
}

impl Layer {
    /// A layer with dense activations.
    pub fn new(m: u64, n: u64, k: u64, sparsity: Sparsity, precision: Precision) -> Layer {
        Layer {
            m,
            n,
            k,
            sparsity,
            precision,
            activation_density: 1.0,
        }
    }
}

/// What can go wrong asking the simulator something; all are bad input (exit 2).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// `--arch` names neither a built-in preset nor a file.
    #[error("unknown accelerator preset `{name}` (built-in: {known})")]
    UnknownPreset {
        /// What was asked for.
        name: String,
        /// The built-in names.
        known: String,
    },
    /// A preset file could not be read.
    #[error("cannot read preset {}: {message}", path.display())]
    ReadPreset {
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// A preset does not parse or fails a value check.
    #[error("invalid preset {origin}: {message}")]
    BadPreset {
        /// The file or built-in name.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// The part cannot compute in this precision at all (not even dense).
    #[error("preset `{arch}` has no {precision} datapath")]
    UnsupportedPrecision {
        /// The preset.
        arch: String,
        /// The precision asked for.
        precision: String,
    },
    /// A GEMM shape string or value is malformed.
    #[error("{message}")]
    BadLayer {
        /// What is wrong.
        message: String,
    },
    /// The traffic to serve is malformed.
    #[error("{message}")]
    BadTraffic {
        /// What is wrong.
        message: String,
    },
}

/// Parse `MxNxK` (e.g. `2048x12288x12288`).
pub fn parse_gemm(text: &str) -> Result<(u64, u64, u64), SimError> {
    let bad = || SimError::BadLayer {
        message: format!("`{text}` is not a GEMM shape MxNxK with positive integers, e.g. 2048x4096x4096"),
    };
    let parts: Vec<&str> = text.split(['x', 'X']).collect();
    let [m, n, k] = parts.as_slice() else {
        return Err(bad());
    };
    let p = |s: &str| s.trim().parse::<u64>().ok().filter(|&v| v > 0).ok_or_else(bad);
    Ok((p(m)?, p(n)?, p(k)?))
}

/// Parse a precision name as packs write it (`fp32`, `fp16`, `bf16`, `int8`).
pub fn parse_precision(text: &str) -> Result<Precision, SimError> {
    match text {
        "fp32" => Ok(Precision::Fp32),
        "fp16" => Ok(Precision::Fp16),
        "bf16" => Ok(Precision::Bf16),
        "int8" => Ok(Precision::Int8),
        _ => Err(SimError::BadLayer {
            message: format!("unknown precision `{text}` (expected fp32, fp16, bf16 or int8)"),
        }),
    }
}

/// One simulated layer as `sparsegate sim` reports it: the request, the model's answer, the
/// justification of the bottleneck, and the dense comparator on the same part. The type is
/// the format of `sim --json` (`schemas/sim-report.schema.json`, drift-checked).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SimRun {
    /// Preset name.
    pub arch: String,
    /// Tokens.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction.
    pub k: u64,
    /// Weight sparsity as written (`2:4`).
    pub sparsity: String,
    /// Precision.
    pub precision: Precision,
    /// The model's answer.
    #[serde(flatten)]
    pub report: LayerReport,
    /// The numbers behind the bottleneck class, in words.
    pub bottleneck_reason: String,
    /// Latency of the same GEMM dense on the same part.
    pub dense_latency_s: f64,
    /// Dense latency / this latency.
    pub effective_speedup: f64,
    /// Tail latency with this layer as the service time under `--traffic`, if asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic: Option<queue::QueueReport>,
}

/// Load to put on a simulated layer: an arrival pattern string and a request count.
#[derive(Debug, Clone, Copy)]
pub struct TrafficRequest<'a> {
    /// `steady:RATE`, `poisson:RATE` or `bursts:RATE:SIZE`.
    pub arrivals: &'a str,
    /// Requests to simulate.
    pub requests: u64,
    /// Seed of the arrival process.
    pub seed: u64,
}

/// `sparsegate sim`: resolve the preset, parse the request, evaluate it and its dense
/// comparator.
pub fn simulate_one(
    arch: &str,
    gemm: &str,
    sparsity: &str,
    precision: &str,
    traffic: Option<TrafficRequest<'_>>,
) -> Result<SimRun, SimError> {
    let preset = Preset::resolve(arch)?;
    let (m, n, k) = parse_gemm(gemm)?;
    let sparsity: Sparsity =
        sparsity
            .parse()
            .map_err(|e: crate::domain::SparsityError| SimError::BadLayer {
                message: format!("sparsity `{sparsity}`: {e}"),
            })?;
    let precision = parse_precision(precision)?;
    let layer = Layer::new(m, n, k, sparsity, precision);
    let report = evaluate(&preset, &layer)?;
    let traffic = match traffic {
        None => None,
        Some(t) => {
            let arrivals = queue::parse_arrivals(t.arrivals).ok_or_else(|| SimError::BadTraffic {
                message: format!(
                    "traffic `{}` is not steady:RATE, poisson:RATE or bursts:RATE:SIZE",
                    t.arrivals
                ),
            })?;
            if t.requests == 0 {
                return Err(SimError::BadTraffic {
                    message: "the request count must be at least 1".into(),
                });
            }
            Some(queue::simulate(report.latency_s, arrivals, t.requests, t.seed))
        }
    };
    let dense = evaluate(
        &preset,
        &Layer {
            sparsity: Sparsity::Dense,
            ..layer
        },
    )?;
    Ok(SimRun {
        arch: preset.name.clone(),
        m,
        n,
        k,
        sparsity: sparsity.to_string(),
        precision,
        bottleneck_reason: report.explain(),
        dense_latency_s: dense.latency_s,
        effective_speedup: dense.latency_s / report.latency_s,
        traffic,
        report,
    })
}

/// Evaluate many layers in parallel; the result order is the input order and every value
/// is the same as a sequential [`evaluate`] (each layer is independent and pure).
pub fn sweep(preset: &Preset, layers: &[Layer]) -> Vec<Result<LayerReport, SimError>> {
    layers.par_iter().map(|l| evaluate(preset, l)).collect()
}

/// A slice's dense comparator and its effective speedup on the simulated part: the same
/// shape dense, divided by the slice's latency.
pub fn effective_speedup(preset: &Preset, layer: &Layer) -> Result<f64, SimError> {
    let sparse = evaluate(preset, layer)?;
    let dense = evaluate(
        preset,
        &Layer {
            sparsity: Sparsity::Dense,
            ..*layer
        },
    )?;
    Ok(dense.latency_s / sparse.latency_s)
}
