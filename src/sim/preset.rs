//! Accelerator presets: the YAML description of a simulated part, as serde types.
//!
//! The types *are* the format: `schemas/accelerator-preset.schema.json` is derived from them
//! (schemars) and drift-checked, and `deny_unknown_fields` everywhere makes a misspelt key an
//! error instead of a silently ignored default. Built-in presets live under
//! `scenarios/presets/` and are embedded in the binary, so `--arch h100` works from any
//! directory; a path to a user's own YAML file works the same way.

use super::SimError;
use crate::domain::Precision;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// "unknown field `k`" or "missing field `k`" from a parse error, when `k` is a plain
/// identifier: a key name helps and discloses nothing; any other text of the file is not
/// repeated.
fn field_problem(message: &str) -> Option<String> {
    ["unknown field `", "missing field `"].iter().find_map(|lead| {
        let start = message.find(lead)? + lead.len();
        let key = message[start..].split('`').next()?;
        let plain =
            !key.is_empty() && key.len() <= 40 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        plain.then(|| format!("{}{key}`", lead))
    })
}

/// Largest preset file read: the built-ins are ~1 KB each.
pub const MAX_PRESET_BYTES: u64 = 1 << 20;

/// A simulated accelerator: compute fabric, memory system, sparse features, energy table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Short name, used in evidence and the memo (e.g. `h100`).
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// What part this models and how faithful it is.
    #[serde(default)]
    pub description: String,
    /// Where each number comes from (research-file sections, papers); a number that is a
    /// calibrated model assumption rather than a published spec must say so here.
    #[serde(default)]
    pub sources: Vec<String>,
    /// Clock in GHz at which the published peak rates hold.
    #[schemars(range(min = 0.001, max = 100.0))]
    pub clock_ghz: f64,
    /// The compute fabric.
    pub compute: Compute,
    /// The memory system.
    pub memory: Memory,
    /// Which sparsity the hardware can exploit; anything else falls back to dense.
    #[serde(default)]
    pub sparse: SparseSupport,
    /// Energy per action (an Accelergy-style ERT) and the reuse assumptions that turn
    /// operand sizes into action counts.
    pub energy: EnergyTable,
    /// Fixed costs per kernel.
    #[serde(default)]
    pub overhead: Overhead,
    /// Sustained power limit; when the modelled power exceeds it the clock throttles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<Power>,
}

/// The compute fabric: a tensor-core GPU (units × tiles × waves) or one systolic array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Compute {
    /// Streaming multiprocessors with tensor cores; a GEMM is cut into output tiles that run
    /// in waves of `units` tiles.
    TensorCore(Box<TensorCore>),
    /// A rows × cols systolic array with a fixed dataflow, timed with SCALE-Sim's compute
    /// model.
    Systolic(Systolic),
}

/// A tensor-core GPU (or a single tensor-core-like engine when `units` is 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorCore {
    /// Independent compute units (SMs) that each take one output tile at a time.
    #[schemars(range(min = 1, max = 100000))]
    pub units: u32,
    /// Dense multiply-accumulates per cycle per unit, by precision; a precision left out
    /// cannot run on this part. `fp32` means TF32 tensor-core math.
    pub macs_per_cycle_per_unit: PerPrecision<u64>,
    /// Output tiles (tokens × output features) the kernel library offers; like a BLAS
    /// heuristic, the model picks the one that finishes first (skinny tiles for decode,
    /// large ones for big GEMMs).
    #[schemars(length(min = 1))]
    pub tiles: Vec<Tile>,
    /// Kernel efficiency: the fraction of peak real kernels reach (1 = ideal).
    #[serde(default)]
    pub efficiency: Efficiency,
    /// Per-precision corrections to `efficiency`, fitted to measurements: a kernel library
    /// reaches a different fraction of peak in each precision (on an H200, cuSPARSELt 0.8's
    /// fp16 2:4 kernels reach half the sparse peak at 8192³ and its bf16 ones 0.38).
    #[serde(default, skip_serializing_if = "PerPrecision::is_empty")]
    pub per_precision: PerPrecision<Calibration>,
}

impl TensorCore {
    /// `efficiency` with this precision's corrections applied.
    pub fn efficiency_for(&self, p: Precision) -> Efficiency {
        let base = self.efficiency;
        match self.per_precision.get(p) {
            Some(c) => Efficiency {
                dense_compute: c.dense_compute.unwrap_or(base.dense_compute),
                sparse_compute: c.sparse_compute.unwrap_or(base.sparse_compute),
                dense_memory: c.dense_memory.unwrap_or(base.dense_memory),
                sparse_memory: c.sparse_memory.unwrap_or(base.sparse_memory),
            },
            None => base,
        }
    }

    /// Seconds a sparse kernel costs in this precision beyond a dense one's launch.
    pub fn sparse_overhead_s(&self, p: Precision) -> f64 {
        self.per_precision
            .get(p)
            .and_then(|c| c.sparse_overhead_s)
            .unwrap_or(0.0)
    }
}

/// One precision's fitted corrections; a field left out keeps the preset's `efficiency`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Dense kernels: achieved / peak tensor-core throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub dense_compute: Option<f64>,
    /// Sparse kernels: achieved / peak sparse throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub sparse_compute: Option<f64>,
    /// Dense kernels: achieved / peak DRAM bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub dense_memory: Option<f64>,
    /// Sparse kernels: achieved / peak DRAM bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub sparse_memory: Option<f64>,
    /// A sparse kernel's fixed cost beyond the dense launch, seconds: the floor small 2:4
    /// GEMMs hit (metadata set-up, a deeper pipeline to fill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub sparse_overhead_s: Option<f64>,
}

/// A systolic array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Systolic {
    /// PE rows.
    #[schemars(range(min = 1, max = 65536))]
    pub rows: u32,
    /// PE columns.
    #[schemars(range(min = 1, max = 65536))]
    pub cols: u32,
    /// Which operand stays in the PEs.
    pub dataflow: Dataflow,
    /// Precisions the PEs support (one MAC per PE per cycle).
    #[schemars(length(min = 1))]
    pub precisions: Vec<Precision>,
}

/// Systolic-array dataflow (SCALE-Sim's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dataflow {
    /// Output stationary: each PE accumulates one output.
    Os,
    /// Weight stationary: weights are pinned, inputs stream.
    Ws,
    /// Input stationary: inputs are pinned, weights stream.
    Is,
}

impl Dataflow {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dataflow::Os => "os",
            Dataflow::Ws => "ws",
            Dataflow::Is => "is",
        }
    }
}

/// A value per precision; `None` means "not supported".
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerPrecision<T> {
    /// IEEE binary32 (TF32 on tensor cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<T>,
    /// IEEE binary16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16: Option<T>,
    /// bfloat16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16: Option<T>,
    /// int8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int8: Option<T>,
}

impl<T> PerPrecision<T> {
    /// No precision has a value.
    pub fn is_empty(&self) -> bool {
        self.fp32.is_none() && self.fp16.is_none() && self.bf16.is_none() && self.int8.is_none()
    }
}

impl<T: Copy> PerPrecision<T> {
    /// Replace the value for `p`.
    pub fn set(&mut self, p: Precision, value: Option<T>) {
        match p {
            Precision::Fp32 => self.fp32 = value,
            Precision::Fp16 => self.fp16 = value,
            Precision::Bf16 => self.bf16 = value,
            Precision::Int8 => self.int8 = value,
        }
    }

    /// The value for `p`, if the precision is supported.
    pub fn get(&self, p: Precision) -> Option<T> {
        match p {
            Precision::Fp32 => self.fp32,
            Precision::Fp16 => self.fp16,
            Precision::Bf16 => self.bf16,
            Precision::Int8 => self.int8,
        }
    }
}

/// A two-dimensional tile over the output (tokens × output features).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tile {
    /// Tokens (rows of the output).
    #[schemars(range(min = 1))]
    pub m: u64,
    /// Output features (rows of the weight).
    #[schemars(range(min = 1))]
    pub n: u64,
}

/// Fractions of peak that real kernels reach. They are model calibrations, not published
/// specs; a preset's `sources` must say what they were fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Dense kernels: achieved / peak tensor-core throughput in full waves.
    #[serde(default = "one")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub dense_compute: f64,
    /// Sparse kernels: achieved / peak *sparse* throughput in full waves.
    #[serde(default = "one")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub sparse_compute: f64,
    /// Dense kernels: achieved / peak DRAM bandwidth.
    #[serde(default = "one")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub dense_memory: f64,
    /// Sparse kernels: achieved / peak DRAM bandwidth.
    #[serde(default = "one")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub sparse_memory: f64,
}

fn one() -> f64 {
    1.0
}

impl Default for Efficiency {
    fn default() -> Self {
        Efficiency {
            dense_compute: 1.0,
            sparse_compute: 1.0,
            dense_memory: 1.0,
            sparse_memory: 1.0,
        }
    }
}

/// The memory system, for the roofline and for traffic counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Peak DRAM (HBM) bandwidth in GB/s (10⁹ B/s).
    #[schemars(range(min = 0.001))]
    pub dram_gbps: f64,
    /// Last-level on-chip capacity (L2 or global buffer) in bytes: operand panels that fit
    /// are read from DRAM once.
    #[schemars(range(min = 1))]
    pub onchip_bytes: u64,
    /// Shared memory (scratchpad) per unit in bytes; a tile's K-slice must fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smem_bytes_per_unit: Option<u64>,
}

/// The sparsity the hardware exploits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SparseSupport {
    /// Structured N:M patterns the math units skip (e.g. 2:4 for fp16/bf16/int8, 1:2 for
    /// tf32). A requested pattern that is a special case of one of these (1:4 or 2:8 are
    /// valid 2:4) runs at the hardware pattern's rate: no gain below it.
    #[serde(default)]
    pub structured: Vec<NmPattern>,
    /// Systolic arrays only: any N:M with M dividing `any_nm_block` is compressed along the
    /// reduction (SCALE-Sim's ellpack-block sparse mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_nm_block: Option<u32>,
    /// Bits of index metadata per kept value of a structured pattern (2 for 2:4).
    #[serde(default = "two")]
    #[schemars(range(min = 0, max = 64))]
    pub metadata_bits_per_value: u32,
    /// Unstructured sparsity support; absent means it runs dense (a counted fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstructured: Option<Unstructured>,
}

fn two() -> u32 {
    2
}

/// One hardware N:M pattern and the precisions it applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NmPattern {
    /// Kept values per group.
    #[schemars(range(min = 1, max = 32))]
    pub n: u32,
    /// Group size along K.
    #[schemars(range(min = 2, max = 32))]
    pub m: u32,
    /// Precisions whose sparse math units support it.
    #[schemars(length(min = 1))]
    pub precisions: Vec<Precision>,
}

/// How zeros of an unstructured operand are exploited (Sparseloop's SAF taxonomy).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Unstructured {
    /// Gating keeps the slot (no time saved, less energy); skipping removes it.
    pub action: SparseAction,
    /// The compressed format of the sparse operand.
    pub format: SparseFormat,
    /// Index bits per stored entry (coordinate list, CSR column index) or per coordinate
    /// (bitmask: 1).
    #[schemars(range(min = 1, max = 64))]
    pub metadata_bits: u32,
    /// Bits per cycle the operand buffer delivers to the datapath; a skipping design is
    /// bound by walking the compressed operand through it.
    #[schemars(range(min = 1.0))]
    pub buffer_bits_per_cycle: f64,
}

/// Gating or skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SparseAction {
    /// The slot is kept and costs gated energy.
    Gating,
    /// The slot is removed: time and energy saved, index walk paid.
    Skipping,
}

/// Compressed formats for unstructured operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SparseFormat {
    /// One bit per coordinate, zero or not.
    Bitmask,
    /// One index per nonzero.
    CoordinateList,
    /// One column index per nonzero plus one row pointer per row.
    Csr,
}

/// Energy per action, in picojoules (Accelergy ERT style), plus reuse assumptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnergyTable {
    /// Technology node and origin of the numbers, for the memo.
    pub technology: String,
    /// One effectual MAC, by precision.
    pub mac_pj: PerPrecision<f64>,
    /// A gated MAC slot.
    pub mac_gated_pj: f64,
    /// A skipped (or idle) MAC slot.
    pub mac_skipped_pj: f64,
    /// DRAM.
    pub dram: StorageLevel,
    /// The on-chip buffer operands are staged in (SMEM / global buffer).
    pub buffer: StorageLevel,
    /// The register file feeding the MACs.
    pub rf: StorageLevel,
    /// Per-PE local registers, per access.
    #[serde(default)]
    pub lrf_pj: f64,
    /// How operands are reused between levels.
    pub reuse: Reuse,
}

/// One storage level's ERT entries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StorageLevel {
    /// Bytes per access (word width).
    #[schemars(range(min = 0.125))]
    pub word_bytes: f64,
    /// Read energy per word.
    pub read_pj: f64,
    /// Write energy per word.
    pub write_pj: f64,
    /// Metadata read energy per word (defaults to `read_pj`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_read_pj: Option<f64>,
    /// Metadata write energy per word (defaults to `write_pj`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_write_pj: Option<f64>,
    /// Metadata word width in bytes (defaults to `word_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_word_bytes: Option<f64>,
}

/// Reuse assumptions: how many times each operand is fetched into a level (Timeloop's
/// "mapping", fixed per preset rather than searched).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reuse {
    /// Output tile held per pass through on-chip memory when the operands do not fit it:
    /// the weight is re-read from DRAM once per `buffer_tile.m` tokens, the input once per
    /// `buffer_tile.n` output features.
    pub buffer_tile: Tile,
    /// Output tile held per pass through the buffer: the weight is re-read from the
    /// buffer into the RF once per `rf_tile.m` tokens, the input once per `rf_tile.n`
    /// output features.
    pub rf_tile: Tile,
    /// RF reads per effectual MAC (operand broadcast across PEs lowers it).
    pub rf_reads_per_mac: f64,
    /// Local-register accesses per effectual MAC.
    #[serde(default)]
    pub lrf_accesses_per_mac: f64,
}

/// Fixed per-kernel costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Overhead {
    /// Kernel launch and synchronisation, seconds per GEMM.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub launch_s: f64,
    /// Cycles per output element to drain accumulators (1 on a single-MAC design).
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub drain_cycles_per_output: f64,
}

/// Sustained power model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Power {
    /// Sustained power limit (TDP) in watts.
    #[schemars(range(min = 0.001))]
    pub limit_w: f64,
    /// Static power drawn regardless of activity, in watts.
    #[serde(default)]
    pub static_w: f64,
}

/// Built-in presets: name and embedded YAML text.
pub const BUILTIN: &[(&str, &str)] = &[
    ("a100", include_str!("../../scenarios/presets/a100.yaml")),
    ("h100", include_str!("../../scenarios/presets/h100.yaml")),
    ("h200", include_str!("../../scenarios/presets/h200.yaml")),
    (
        "sparseloop-stc",
        include_str!("../../scenarios/presets/sparseloop-stc.yaml"),
    ),
    (
        "sparseloop-tc",
        include_str!("../../scenarios/presets/sparseloop-tc.yaml"),
    ),
    (
        "sparseloop-fig1-bitmask",
        include_str!("../../scenarios/presets/sparseloop-fig1-bitmask.yaml"),
    ),
    (
        "sparseloop-fig1-coordlist",
        include_str!("../../scenarios/presets/sparseloop-fig1-coordlist.yaml"),
    ),
    (
        "systolic-32-os",
        include_str!("../../scenarios/presets/systolic-32-os.yaml"),
    ),
    (
        "systolic-32-ws",
        include_str!("../../scenarios/presets/systolic-32-ws.yaml"),
    ),
    (
        "systolic-32-is",
        include_str!("../../scenarios/presets/systolic-32-is.yaml"),
    ),
    (
        "tpu-v1-like",
        include_str!("../../scenarios/presets/tpu-v1-like.yaml"),
    ),
];

/// The names of the built-in presets, for hints.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

impl Preset {
    /// `sha256:<hex>` of the preset's canonical JSON: the memo records it so a result can be
    /// tied to the exact hardware description it came from.
    pub fn digest(&self) -> String {
        let value = serde_json::to_value(self).expect("presets serialize");
        crate::domain::digest::sha256_hex(value.to_string().as_bytes())
    }

    /// Parse a preset from YAML text; `origin` names it in errors. A preset that does not
    /// parse is located (`origin:line:col`) but its text is never quoted: a preset path may
    /// name a file that is not a preset at all, and its bytes must not reach a CI log
    /// (issue 23: `/proc/self/environ` leaked a token this way).
    pub fn from_yaml(text: &str, origin: &str) -> Result<Preset, SimError> {
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        options.reject_unsupported_tags = true;
        let preset: Preset =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| SimError::BadPreset {
                origin: e.location().map_or_else(
                    || origin.to_owned(),
                    |l| format!("{origin}:{}:{}", l.line().max(1), l.column().max(1)),
                ),
                message: field_problem(&e.to_string()).unwrap_or_else(|| {
                    "not a valid accelerator preset (the file's text is not shown; \
                     check it against schemas/accelerator-preset.schema.json)"
                        .to_owned()
                }),
            })?;
        preset.check(origin)?;
        Ok(preset)
    }

    /// A built-in preset by name, or a YAML file by path. A name that is neither is an
    /// [`SimError::UnknownPreset`] listing the built-ins. Files are read bounded
    /// ([`MAX_PRESET_BYTES`]); FIFOs, devices and directories are refused.
    pub fn resolve(name_or_file: &str) -> Result<Preset, SimError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_file) {
            return Preset::from_yaml(text, name_or_file);
        }
        let path = Path::new(name_or_file);
        let looks_like_path = name_or_file.ends_with(".yaml")
            || name_or_file.ends_with(".yml")
            || name_or_file.contains(std::path::MAIN_SEPARATOR)
            || name_or_file.contains('/');
        if path.exists() || looks_like_path {
            let text =
                crate::files::read_bounded(path, MAX_PRESET_BYTES).map_err(|e| SimError::ReadPreset {
                    path: path.to_path_buf(),
                    message: match e {
                        crate::files::FileError::NotAFile { .. } => {
                            "not a regular file (a directory, FIFO, socket or device)".to_owned()
                        }
                        crate::files::FileError::TooLarge { limit, .. } => {
                            format!("over the {limit}-byte limit for a preset")
                        }
                        crate::files::FileError::Read { source, .. } => source.to_string(),
                        other => other.to_string(),
                    },
                })?;
            return Preset::from_yaml(&text, &path.display().to_string());
        }
        Err(SimError::UnknownPreset {
            name: name_or_file.to_owned(),
            known: builtin_names().join(", "),
        })
    }

    /// Peak dense MACs per cycle of the whole part at precision `p`.
    pub fn peak_macs_per_cycle(&self, p: Precision) -> Option<f64> {
        match &self.compute {
            Compute::TensorCore(tc) => tc
                .macs_per_cycle_per_unit
                .get(p)
                .map(|r| r as f64 * f64::from(tc.units)),
            Compute::Systolic(s) => s
                .precisions
                .contains(&p)
                .then(|| f64::from(s.rows) * f64::from(s.cols)),
        }
    }

    /// Value checks the types cannot express; every number the model divides by must be
    /// positive and finite.
    fn check(&self, origin: &str) -> Result<(), SimError> {
        let bad = |what: &str| SimError::BadPreset {
            origin: origin.to_owned(),
            message: format!("{what} must be a positive, finite number"),
        };
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.clock_ghz) {
            return Err(bad("clock_ghz"));
        }
        if !pos(self.memory.dram_gbps) {
            return Err(bad("memory.dram_gbps"));
        }
        if self.memory.onchip_bytes == 0 {
            return Err(bad("memory.onchip_bytes"));
        }
        match &self.compute {
            Compute::TensorCore(tc) => {
                if tc.units == 0 || tc.tiles.is_empty() || tc.tiles.iter().any(|t| t.m == 0 || t.n == 0) {
                    return Err(bad("compute.tensor_core units and tile"));
                }
                for p in [Precision::Fp32, Precision::Fp16, Precision::Bf16, Precision::Int8] {
                    let e = tc.efficiency_for(p);
                    for (v, what) in [
                        (e.dense_compute, "efficiency.dense_compute"),
                        (e.sparse_compute, "efficiency.sparse_compute"),
                        (e.dense_memory, "efficiency.dense_memory"),
                        (e.sparse_memory, "efficiency.sparse_memory"),
                    ] {
                        if !pos(v) || v > 1.0 {
                            return Err(bad(what));
                        }
                    }
                    let o = tc.sparse_overhead_s(p);
                    if !o.is_finite() || !(0.0..1.0).contains(&o) {
                        return Err(bad("per_precision.sparse_overhead_s"));
                    }
                }
                for p in [Precision::Fp32, Precision::Fp16, Precision::Bf16, Precision::Int8] {
                    if tc.macs_per_cycle_per_unit.get(p) == Some(0) {
                        return Err(bad("macs_per_cycle_per_unit"));
                    }
                }
            }
            Compute::Systolic(s) => {
                if s.rows == 0 || s.cols == 0 {
                    return Err(bad("compute.systolic rows and cols"));
                }
            }
        }
        for p in &self.sparse.structured {
            if p.n == 0 || p.n >= p.m {
                return Err(SimError::BadPreset {
                    origin: origin.to_owned(),
                    message: format!("sparse pattern {}:{} needs 0 < n < m", p.n, p.m),
                });
            }
        }
        if let Some(u) = self.sparse.unstructured
            && !pos(u.buffer_bits_per_cycle)
        {
            return Err(bad("sparse.unstructured.buffer_bits_per_cycle"));
        }
        let e = &self.energy;
        for l in [e.dram, e.buffer, e.rf] {
            if !pos(l.word_bytes) || l.metadata_word_bytes.is_some_and(|w| !pos(w)) {
                return Err(bad("energy word_bytes"));
            }
        }
        if e.reuse.rf_tile.m == 0
            || e.reuse.rf_tile.n == 0
            || e.reuse.buffer_tile.m == 0
            || e.reuse.buffer_tile.n == 0
        {
            return Err(bad("energy.reuse.rf_tile"));
        }
        if let Some(p) = self.power
            && (!pos(p.limit_w) || p.static_w < 0.0 || p.static_w >= p.limit_w)
        {
            return Err(bad("power.limit_w (above static_w)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200_with(per_precision: &str) -> Result<Preset, SimError> {
        let text = include_str!("../../scenarios/presets/h200.yaml");
        let start = text
            .find("    per_precision:")
            .expect("h200.yaml has per_precision");
        let end = text[start..]
            .find("\nmemory:")
            .map(|i| start + i + 1)
            .expect("memory follows");
        Preset::from_yaml(
            &format!("{}{per_precision}\n{}", &text[..start], &text[end..]),
            "test",
        )
    }

    #[test]
    fn issue_25_per_precision_corrections_apply_only_to_their_precision() {
        let p = h200_with("    per_precision:\n      int8: {sparse_memory: 0.5, sparse_overhead_s: 2.0e-6}")
            .unwrap();
        let Compute::TensorCore(tc) = &p.compute else {
            panic!()
        };
        assert_eq!(tc.efficiency_for(Precision::Int8).sparse_memory, 0.5);
        assert_eq!(
            tc.efficiency_for(Precision::Int8).dense_compute,
            tc.efficiency.dense_compute
        );
        assert_eq!(tc.efficiency_for(Precision::Fp16), tc.efficiency);
        assert_eq!(tc.sparse_overhead_s(Precision::Int8), 2.0e-6);
        assert_eq!(tc.sparse_overhead_s(Precision::Fp16), 0.0);
    }

    #[test]
    fn issue_25_an_out_of_range_correction_is_refused_with_its_field() {
        let err = h200_with("    per_precision:\n      bf16: {sparse_memory: 1.5}").unwrap_err();
        assert!(err.to_string().contains("sparse_memory"), "{err}");
        let err = h200_with("    per_precision:\n      bf16: {sparse_overhead_s: -1.0e-6}").unwrap_err();
        assert!(err.to_string().contains("sparse_overhead_s"), "{err}");
        let err = h200_with("    per_precision:\n      bf16: {sparse_speed: 0.5}").unwrap_err();
        assert!(err.to_string().contains("sparse_speed"), "{err}");
    }
}
