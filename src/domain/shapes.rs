//! Production GEMM shapes of named models (research file `sparse-compute-anchors.md` §E), in
//! one place: ingress expands a pack's `workload: {model: ...}` into these ops, and the
//! simulator's whole-model graphs (`sim::model`) read the same transformer tables, so a pack
//! gating "BERT-base" and the simulator's BERT-base can never disagree on a shape.

use super::GemmOp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A transformer whose per-layer linear GEMMs the research file tabulates (§E).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transformer {
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

impl Transformer {
    /// Attention heads and head dimension (research §E).
    pub fn heads(self) -> (u64, u64) {
        match self {
            Transformer::BertBase | Transformer::Gpt2Small => (12, 64),
            Transformer::BertLarge => (16, 64),
            Transformer::Llama2_7b => (32, 128),
            Transformer::Opt175b => (96, 128),
        }
    }

    /// Hidden size and FFN width, and whether the FFN is gated (SwiGLU reads two inputs).
    pub fn widths(self) -> (u64, u64, bool) {
        match self {
            Transformer::BertBase | Transformer::Gpt2Small => (768, 3072, false),
            Transformer::BertLarge => (1024, 4096, false),
            Transformer::Llama2_7b => (4096, 11008, true),
            Transformer::Opt175b => (12288, 49152, false),
        }
    }

    /// Layer count and the per-layer linear GEMMs as (name, N out, K in) (research §E).
    pub fn layers(self) -> (u32, &'static [(&'static str, u64, u64)]) {
        match self {
            Transformer::BertBase | Transformer::Gpt2Small => (
                12,
                &[
                    ("qkv", 2304, 768),
                    ("out", 768, 768),
                    ("ffn1", 3072, 768),
                    ("ffn2", 768, 3072),
                ],
            ),
            Transformer::BertLarge => (
                24,
                &[
                    ("qkv", 3072, 1024),
                    ("out", 1024, 1024),
                    ("ffn1", 4096, 1024),
                    ("ffn2", 1024, 4096),
                ],
            ),
            Transformer::Llama2_7b => (
                32,
                &[
                    ("qkv", 12288, 4096),
                    ("o", 4096, 4096),
                    ("gate", 11008, 4096),
                    ("up", 11008, 4096),
                    ("down", 4096, 11008),
                ],
            ),
            Transformer::Opt175b => (
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

/// ResNet-50 v1.5 (torchvision) as im2col GEMMs, one row per distinct shape of the research
/// table (§E): (name, M per image, N output channels, K = Cin·R·S). Blocks that repeat a
/// shape appear once: gating a shape once gates every block that has it.
pub const RESNET50_GEMMS: [(&str, u64, u64, u64); 22] = [
    ("conv1", 12544, 64, 147),
    ("layer1_reduce_first", 3136, 64, 64),
    ("layer1_reduce", 3136, 64, 256),
    ("layer1_3x3", 3136, 64, 576),
    ("layer1_expand", 3136, 256, 64),
    ("layer1_downsample", 3136, 256, 64),
    ("layer2_reduce_first", 3136, 128, 256),
    ("layer2_reduce", 784, 128, 512),
    ("layer2_3x3", 784, 128, 1152),
    ("layer2_expand", 784, 512, 128),
    ("layer2_downsample", 784, 512, 256),
    ("layer3_reduce_first", 784, 256, 512),
    ("layer3_reduce", 196, 256, 1024),
    ("layer3_3x3", 196, 256, 2304),
    ("layer3_expand", 196, 1024, 256),
    ("layer3_downsample", 196, 1024, 512),
    ("layer4_reduce_first", 196, 512, 1024),
    ("layer4_reduce", 49, 512, 2048),
    ("layer4_3x3", 49, 512, 4608),
    ("layer4_expand", 49, 2048, 512),
    ("layer4_downsample", 49, 2048, 1024),
    ("fc", 1, 1000, 2048),
];

/// A model a pack can name in `workload: {model: {name: ...}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ModelName {
    /// BERT-base encoder layer: `qkv`, `out`, `ffn1`, `ffn2`.
    #[serde(rename = "bert-base")]
    BertBase,
    /// BERT-large encoder layer: `qkv`, `out`, `ffn1`, `ffn2`.
    #[serde(rename = "bert-large")]
    BertLarge,
    /// GPT-2 small decoder layer (the BERT-base shapes).
    #[serde(rename = "gpt2-small")]
    Gpt2Small,
    /// LLaMA-2-7B decoder layer: `qkv`, `o`, `gate`, `up`, `down`.
    #[serde(rename = "llama-2-7b")]
    Llama2_7b,
    /// OPT-175B decoder layer: `qkv`, `out`, `fc1`, `fc2`.
    #[serde(rename = "opt-175b")]
    Opt175b,
    /// ResNet-50 v1.5 convolutions as im2col GEMMs, one per distinct shape; `tokens` counts
    /// images (M = images × output pixels).
    #[serde(rename = "resnet-50")]
    Resnet50,
}

impl ModelName {
    /// The name used in packs.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelName::BertBase => "bert-base",
            ModelName::BertLarge => "bert-large",
            ModelName::Gpt2Small => "gpt2-small",
            ModelName::Llama2_7b => "llama-2-7b",
            ModelName::Opt175b => "opt-175b",
            ModelName::Resnet50 => "resnet-50",
        }
    }

    /// The transformer table behind this name, if it is one.
    pub fn transformer(self) -> Option<Transformer> {
        match self {
            ModelName::BertBase => Some(Transformer::BertBase),
            ModelName::BertLarge => Some(Transformer::BertLarge),
            ModelName::Gpt2Small => Some(Transformer::Gpt2Small),
            ModelName::Llama2_7b => Some(Transformer::Llama2_7b),
            ModelName::Opt175b => Some(Transformer::Opt175b),
            ModelName::Resnet50 => None,
        }
    }

    /// Every op of one layer (transformers) or of the whole network (ResNet-50) at `tokens`
    /// tokens (images for ResNet-50), in execution order.
    pub fn gemms(self, tokens: u64) -> Vec<GemmOp> {
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        match self.transformer() {
            Some(t) => t
                .layers()
                .1
                .iter()
                .map(|&(name, n, k)| GemmOp {
                    name: name.into(),
                    m: size(tokens),
                    n: size(n),
                    k: size(k),
                })
                .collect(),
            None => RESNET50_GEMMS
                .iter()
                .map(|&(name, m, n, k)| GemmOp {
                    name: name.into(),
                    m: size(m.saturating_mul(tokens)),
                    n: size(n),
                    k: size(k),
                })
                .collect(),
        }
    }

    /// The layer names a pack's `layers:` filter may use.
    pub fn layer_names(self) -> Vec<&'static str> {
        match self.transformer() {
            Some(t) => t.layers().1.iter().map(|l| l.0).collect(),
            None => RESNET50_GEMMS.iter().map(|l| l.0).collect(),
        }
    }

    /// The ops a workload names: every layer, or only those in `filter` (in model order).
    pub fn select(self, tokens: u64, filter: &[String]) -> Vec<GemmOp> {
        self.gemms(tokens)
            .into_iter()
            .filter(|op| filter.is_empty() || filter.contains(&op.name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linear FLOPs per token of one layer: 2·Σ K·N.
    fn gflop_per_token(model: ModelName) -> f64 {
        model.gemms(1).iter().map(|op| op.dense_flops()).sum::<f64>() / 1e9
    }

    #[test]
    fn issue_7_bert_base_layer_matches_research_table() {
        let ops = ModelName::BertBase.gemms(128);
        let shapes: Vec<(&str, usize, usize, usize)> =
            ops.iter().map(|o| (o.name.as_str(), o.m, o.n, o.k)).collect();
        assert_eq!(
            shapes,
            [
                ("qkv", 128, 2304, 768),
                ("out", 128, 768, 768),
                ("ffn1", 128, 3072, 768),
                ("ffn2", 128, 768, 3072)
            ]
        );
        // §E: 0.170 linear GFLOP per token over the whole model (12 layers).
        let per_model = gflop_per_token(ModelName::BertBase) * 12.0;
        assert!((per_model - 0.170).abs() < 0.001, "{per_model}");
    }

    #[test]
    fn issue_7_llama_2_7b_layer_matches_research_table() {
        let ops = ModelName::Llama2_7b.gemms(16);
        let shapes: Vec<(&str, usize, usize)> = ops.iter().map(|o| (o.name.as_str(), o.n, o.k)).collect();
        assert_eq!(
            shapes,
            [
                ("qkv", 12288, 4096),
                ("o", 4096, 4096),
                ("gate", 11008, 4096),
                ("up", 11008, 4096),
                ("down", 4096, 11008)
            ]
        );
        assert!(ops.iter().all(|o| o.m == 16));
        // §E: 12.95 linear GFLOP per token over 32 layers.
        let per_model = gflop_per_token(ModelName::Llama2_7b) * 32.0;
        assert!((per_model - 12.95).abs() < 0.01, "{per_model}");
    }

    #[test]
    fn issue_7_resnet_50_matches_research_table_total() {
        // §E: ≈4.09 GMAC per image, counting each row's repeats.
        let counts = [
            1u64, 1, 2, 3, 3, 1, 1, 3, 4, 4, 1, 1, 5, 6, 6, 1, 1, 2, 3, 3, 1, 1,
        ];
        let ops = ModelName::Resnet50.gemms(2);
        assert_eq!(ops.len(), counts.len());
        assert_eq!((ops[0].m, ops[0].n, ops[0].k), (2 * 12544, 64, 147));
        assert_eq!((ops[21].m, ops[21].n, ops[21].k), (2, 1000, 2048));
        let gmac: f64 = ops
            .iter()
            .zip(counts)
            .map(|(o, c)| (o.m * o.n * o.k) as f64 * c as f64)
            .sum::<f64>()
            / 2.0
            / 1e9;
        assert!((gmac - 4.09).abs() < 0.02, "{gmac}");
    }

    #[test]
    fn layer_filter_keeps_model_order() {
        let ops = ModelName::Llama2_7b.select(8, &["down".into(), "o".into()]);
        let names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["o", "down"]);
    }
}
