//! Bytes moved per GEMM: the compressed weight and its metadata, the dense input, the
//! output, and how often each is re-fetched into DRAM-backed and on-chip levels under the
//! preset's fixed reuse (its "mapping").

use super::preset::{Preset, SparseFormat};
use super::sparse::SimPath;
use super::tiling::ceil_div;

/// Operand sizes and traffic of one GEMM, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Traffic {
    /// Weight values as stored (compressed for a sparse path).
    pub weight_value_bytes: f64,
    /// Weight index metadata as stored.
    pub metadata_bytes: f64,
    /// Input activations.
    pub input_bytes: f64,
    /// Output.
    pub output_bytes: f64,
    /// DRAM reads (values + metadata + input, with re-fetches).
    pub dram_read_bytes: f64,
    /// DRAM writes (the output once).
    pub dram_write_bytes: f64,
    /// Metadata share of the DRAM reads.
    pub dram_metadata_bytes: f64,
    /// Reads from the on-chip buffer into the register files (values and input).
    pub buffer_read_bytes: f64,
    /// Metadata reads from the on-chip buffer.
    pub buffer_metadata_read_bytes: f64,
}

/// Stored weight values and metadata for `path`.
///
/// - structured `n:m` (hardware pattern): `N·K·n/m` values and `metadata_bits_per_value`
///   bits per kept value (2 for 2:4; research §A.1: 9/16 of dense for fp16, 10/16 for int8);
/// - unstructured: `nnz = N·K·density` values, plus a bitmask (one bit per coordinate), a
///   coordinate list (`metadata_bits` per nonzero) or CSR (the same, plus a 32-bit row
///   pointer per row);
/// - dense and fallback: the dense weight, no metadata.
pub fn weight_bytes(
    preset: &Preset,
    path: SimPath,
    n: u64,
    k_eff: u64,
    k: u64,
    density: f64,
    bytes: u64,
) -> (f64, f64) {
    let dense = n as f64 * k as f64 * bytes as f64;
    match path {
        SimPath::Dense | SimPath::Fallback { .. } => (dense, 0.0),
        SimPath::Structured { .. } => {
            let kept = n as f64 * k_eff as f64;
            (
                kept * bytes as f64,
                kept * f64::from(preset.sparse.metadata_bits_per_value) / 8.0,
            )
        }
        SimPath::Unstructured { format, .. } => {
            let nnz = n as f64 * k as f64 * density;
            let bits = preset
                .sparse
                .unstructured
                .map_or(0.0, |u| f64::from(u.metadata_bits));
            let meta = match format {
                SparseFormat::Bitmask => n as f64 * k as f64 / 8.0,
                SparseFormat::CoordinateList => nnz * bits / 8.0,
                SparseFormat::Csr => nnz * bits / 8.0 + (n as f64 + 1.0) * 4.0,
            };
            (nnz * bytes as f64, meta)
        }
    }
}

/// Traffic for a GEMM `Y[m×n] = X[m×k] · Wᵀ` with the given stored weight.
///
/// DRAM: when weight, input and output together fit the on-chip capacity every operand is
/// read once; otherwise the weight is re-read once per `buffer_tile.m` tokens and the input
/// once per `buffer_tile.n` output features. The on-chip buffer feeds the register files
/// under the same rule with `rf_tile`.
pub fn traffic(preset: &Preset, m: u64, n: u64, k: u64, bytes: u64, weight: (f64, f64)) -> Traffic {
    let (wv, meta) = weight;
    let input = m as f64 * k as f64 * bytes as f64;
    let output = m as f64 * n as f64 * bytes as f64;
    let reuse = preset.energy.reuse;
    let fits = wv + meta + input + output <= preset.memory.onchip_bytes as f64;
    let (w_reload, x_reload) = if fits {
        (1.0, 1.0)
    } else {
        (
            ceil_div(m, reuse.buffer_tile.m) as f64,
            ceil_div(n, reuse.buffer_tile.n) as f64,
        )
    };
    let rf_w = ceil_div(m, reuse.rf_tile.m) as f64;
    let rf_x = ceil_div(n, reuse.rf_tile.n) as f64;
    Traffic {
        weight_value_bytes: wv,
        metadata_bytes: meta,
        input_bytes: input,
        output_bytes: output,
        dram_read_bytes: (wv + meta) * w_reload + input * x_reload,
        dram_write_bytes: output,
        dram_metadata_bytes: meta * w_reload,
        buffer_read_bytes: wv * rf_w + input * rf_x,
        buffer_metadata_read_bytes: meta * rf_w,
    }
}
