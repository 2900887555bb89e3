//! Energy per action, Accelergy style: count the actions of each component (MACs by
//! state, words read and written at each storage level), multiply by the preset's ERT.
//! The counts are kept beside the joules so a reader can check either.

use super::preset::{EnergyTable, StorageLevel};
use super::traffic::Traffic;
use serde::Serialize;

/// Action counts of one GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, schemars::JsonSchema)]
pub struct Actions {
    /// MACs on nonzero operands (full energy).
    pub macs_effectual: f64,
    /// MAC slots gated (time kept, little energy).
    pub macs_gated: f64,
    /// MAC slots skipped (neither time nor energy beyond idle).
    pub macs_skipped: f64,
    /// Entries of compressed operands walked by a skipping design (payload + index each).
    pub entries_walked: f64,
    /// Operand values an unstructured design streams from the buffer.
    pub payload_reads: f64,
    /// Index bits (bitmask or coordinates) an unstructured design streams from the buffer.
    pub index_bits_read: f64,
}

/// Joules per component.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, schemars::JsonSchema)]
pub struct EnergyBreakdown {
    /// Multiply-accumulate units.
    pub mac_j: f64,
    /// DRAM reads and writes.
    pub dram_j: f64,
    /// On-chip buffer (SMEM / global buffer) fills and reads, metadata included.
    pub buffer_j: f64,
    /// Register files.
    pub rf_j: f64,
    /// Per-PE local registers.
    pub lrf_j: f64,
}

impl EnergyBreakdown {
    /// Sum over components.
    pub fn total_j(&self) -> f64 {
        self.mac_j + self.dram_j + self.buffer_j + self.rf_j + self.lrf_j
    }
}

const PJ: f64 = 1e-12;

fn words(bytes: f64, level: &StorageLevel) -> f64 {
    bytes / level.word_bytes
}

fn meta_words(bytes: f64, level: &StorageLevel) -> f64 {
    bytes / level.metadata_word_bytes.unwrap_or(level.word_bytes)
}

/// Energy of one GEMM from its action counts and traffic.
///
/// Unstructured designs stream their compressed operands through the buffer: the layer
/// model counts the values (`payload_reads`, `payload_bytes` each) and index bits read, so
/// gating and skipping differ only in those counts (research §B.1, Sparseloop's SAFs).
pub fn energy(
    ert: &EnergyTable,
    mac_pj: f64,
    actions: &Actions,
    traffic: &Traffic,
    payload_bytes: f64,
) -> EnergyBreakdown {
    let mac_j = (actions.macs_effectual * mac_pj
        + actions.macs_gated * ert.mac_gated_pj
        + actions.macs_skipped * ert.mac_skipped_pj)
        * PJ;
    let dram_j = (words(traffic.dram_read_bytes, &ert.dram) * ert.dram.read_pj
        + words(traffic.dram_write_bytes, &ert.dram) * ert.dram.write_pj)
        * PJ;
    let b = &ert.buffer;
    let meta_read = b.metadata_read_pj.unwrap_or(b.read_pj);
    let meta_write = b.metadata_write_pj.unwrap_or(b.write_pj);
    let fills = traffic.dram_read_bytes - traffic.dram_metadata_bytes;
    let buffer_pj = words(fills, b) * b.write_pj
        + meta_words(traffic.dram_metadata_bytes, b) * meta_write
        + words(traffic.buffer_read_bytes, b) * b.read_pj
        + meta_words(traffic.buffer_metadata_read_bytes, b) * meta_read
        + words(actions.payload_reads * payload_bytes, b) * b.read_pj
        + meta_words(actions.index_bits_read / 8.0, b) * meta_read;
    let rf_j = (words(traffic.buffer_read_bytes, &ert.rf) * ert.rf.write_pj
        + actions.macs_effectual * ert.reuse.rf_reads_per_mac * ert.rf.read_pj)
        * PJ;
    let lrf_j = actions.macs_effectual * ert.reuse.lrf_accesses_per_mac * ert.lrf_pj * PJ;
    EnergyBreakdown {
        mac_j,
        dram_j,
        buffer_j: buffer_pj * PJ,
        rf_j,
        lrf_j,
    }
}
