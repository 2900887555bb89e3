//! Real model shapes (research §E), so a whole forward pass can be simulated: per layer the
//! linear GEMMs (which take the slice's sparsity), the attention matmuls QKᵀ and PV (dense
//! by nature: both operands are activations), and the non-GEMM ops the sparse path cannot
//! take (two layernorms, two residual adds, the FFN activation, softmax), modelled as
//! memory-bound passes over their tensors plus a launch each. Embedding lookups and the LM
//! head are not modelled.

use super::{Layer, LayerReport, Preset, SimError, evaluate};
use crate::domain::{Precision, Sparsity};
use serde::Serialize;

/// The transformer tables live with the other production shapes in ingress.
pub use crate::domain::shapes::Transformer as Model;

/// Totals of a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct ModelReport {
    /// GEMMs evaluated.
    pub gemms: u64,
    /// Seconds.
    pub latency_s: f64,
    /// Joules.
    pub energy_j: f64,
    /// DRAM bytes.
    pub dram_bytes: f64,
    /// Share of linear GEMMs that fell back to dense.
    pub fallback_rate: f64,
    /// Seconds in the linear layers (the sparse-capable part).
    pub linear_s: f64,
    /// Seconds in the attention matmuls.
    pub attention_s: f64,
    /// Seconds in non-GEMM ops.
    pub non_gemm_s: f64,
}

/// Simulate a forward pass of `model` over `batch` sequences of `seq` tokens.
pub fn evaluate_model(
    preset: &Preset,
    model: Model,
    batch: u64,
    seq: u64,
    sparsity: Sparsity,
    precision: Precision,
) -> Result<ModelReport, SimError> {
    let tokens = batch * seq;
    let (count, gemms) = model.layers();
    let (heads, head_dim) = model.heads();
    let (hidden, ffn, gated) = model.widths();
    let per_layer: Vec<LayerReport> = gemms
        .iter()
        .map(|&(_, n, k)| evaluate(preset, &Layer::new(tokens, n, k, sparsity, precision)))
        .collect::<Result<_, _>>()?;
    // QKᵀ: [S×d]·[d×S] and PV: [S×S]·[S×d] per head, batched as one GEMM each.
    let bh = batch * heads;
    let attention = [
        evaluate(
            preset,
            &Layer::new(bh * seq, seq, head_dim, Sparsity::Dense, precision),
        )?,
        evaluate(
            preset,
            &Layer::new(bh * seq, head_dim, seq, Sparsity::Dense, precision),
        )?,
    ];
    // Non-GEMM passes: elements read + written.
    let b = precision.bytes() as f64;
    let (t, h, f) = (tokens as f64, hidden as f64, ffn as f64);
    let scores = (bh * seq * seq) as f64;
    let passes = [
        2.0 * (2.0 * t * h),                           // two layernorms
        2.0 * (3.0 * t * h),                           // two residual adds
        if gated { 3.0 * t * f } else { 2.0 * t * f }, // FFN activation (SwiGLU reads two)
        2.0 * scores,                                  // softmax
    ];
    let bw = preset.memory.dram_gbps * 1e9;
    let dram_pj = preset.energy.dram.read_pj / preset.energy.dram.word_bytes;
    let mut r = ModelReport::default();
    let mut fallbacks = 0u64;
    // The layers repeat: evaluate one, sum it `count` times in a fixed order.
    for _ in 0..count {
        for l in &per_layer {
            r.gemms += 1;
            r.linear_s += l.latency_s;
            r.energy_j += l.energy_j;
            r.dram_bytes += l.dram_bytes;
            fallbacks += u64::from(l.fallback);
        }
        for l in &attention {
            r.attention_s += l.latency_s;
            r.energy_j += l.energy_j;
            r.dram_bytes += l.dram_bytes;
        }
        for elements in passes {
            let bytes = elements * b;
            r.non_gemm_s += bytes / bw + preset.overhead.launch_s;
            r.energy_j += bytes * dram_pj * 1e-12;
            r.dram_bytes += bytes;
        }
    }
    r.latency_s = r.linear_s + r.attention_s + r.non_gemm_s;
    r.fallback_rate = fallbacks as f64 / r.gemms.max(1) as f64;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_4_llama_prefill_has_linear_attention_and_non_gemm_time() {
        let h100 = Preset::resolve("h100").unwrap();
        let prefill = |s| evaluate_model(&h100, Model::Llama2_7b, 1, 4096, s, Precision::Fp16).unwrap();
        let (dense, sparse) = (prefill(Sparsity::Dense), prefill(Sparsity::NOfM { n: 2, m: 4 }));
        assert_eq!(dense.gemms, 32 * 5);
        assert!(dense.attention_s > 0.0 && dense.non_gemm_s > 0.0);
        // Only the linear part speeds up: the end-to-end gain is below the GEMM gain.
        let gemm_gain = dense.linear_s / sparse.linear_s;
        let e2e = dense.latency_s / sparse.latency_s;
        assert!(gemm_gain > e2e && e2e > 1.0, "{gemm_gain} {e2e}");
        assert_eq!(sparse.attention_s, dense.attention_s);
        assert_eq!(sparse.non_gemm_s, dense.non_gemm_s);
    }
}
