//! Real model shapes as GEMM lists (research §E), so a whole forward pass can be simulated:
//! per-layer linear GEMMs repeated over the layer count. Attention score/value matmuls and
//! non-GEMM ops (softmax, layernorm, embedding, elementwise) are not modelled yet.

use super::{Layer, LayerReport, Preset, SimError, evaluate};
use crate::ingress::{Precision, Sparsity};
use serde::Serialize;

/// A transformer whose linear layers the research file tabulates (§E).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// BERT-base: hidden 768, FFN 3072, 12 layers.
    BertBase,
    /// BERT-large: hidden 1024, FFN 4096, 24 layers.
    BertLarge,
    /// GPT-2 small: the BERT-base shapes.
    Gpt2Small,
    /// LLaMA-2-7B: hidden 4096, SwiGLU FFN 11008, 32 layers.
    Llama2_7b,
    /// OPT-175B: hidden 12288, FFN 49152, 96 layers.
    Opt175b,
}

impl Model {
    /// Layer count and the per-layer linear GEMMs as (name, N out, K in) (research §E).
    pub fn layers(self) -> (u32, &'static [(&'static str, u64, u64)]) {
        match self {
            Model::BertBase | Model::Gpt2Small => (
                12,
                &[
                    ("qkv", 2304, 768),
                    ("out", 768, 768),
                    ("ffn1", 3072, 768),
                    ("ffn2", 768, 3072),
                ],
            ),
            Model::BertLarge => (
                24,
                &[
                    ("qkv", 3072, 1024),
                    ("out", 1024, 1024),
                    ("ffn1", 4096, 1024),
                    ("ffn2", 1024, 4096),
                ],
            ),
            Model::Llama2_7b => (
                32,
                &[
                    ("qkv", 12288, 4096),
                    ("o", 4096, 4096),
                    ("gate", 11008, 4096),
                    ("up", 11008, 4096),
                    ("down", 4096, 11008),
                ],
            ),
            Model::Opt175b => (
                96,
                &[
                    ("qkv", 36864, 12288),
                    ("out", 12288, 12288),
                    ("fc1", 49152, 12288),
                    ("fc2", 12288, 49152),
                ],
            ),
        }
    }
}

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
    /// Share of GEMMs that fell back to dense.
    pub fallback_rate: f64,
}

/// Simulate every linear GEMM of `model` at `tokens` tokens (batch × sequence).
pub fn evaluate_model(
    preset: &Preset,
    model: Model,
    tokens: u64,
    sparsity: Sparsity,
    precision: Precision,
) -> Result<ModelReport, SimError> {
    let (count, gemms) = model.layers();
    let per_layer: Vec<LayerReport> = gemms
        .iter()
        .map(|&(_, n, k)| evaluate(preset, &Layer::new(tokens, n, k, sparsity, precision)))
        .collect::<Result<_, _>>()?;
    let mut r = ModelReport::default();
    let mut fallbacks = 0u64;
    // The layers repeat: evaluate one, sum it `count` times in a fixed order.
    for _ in 0..count {
        for l in &per_layer {
            r.gemms += 1;
            r.latency_s += l.latency_s;
            r.energy_j += l.energy_j;
            r.dram_bytes += l.dram_bytes;
            fallbacks += u64::from(l.fallback);
        }
    }
    r.fallback_rate = fallbacks as f64 / r.gemms.max(1) as f64;
    Ok(r)
}
