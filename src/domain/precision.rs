//! Numeric precisions of a slice's operands.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Numeric precision of a slice's operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// IEEE binary32 storage and arithmetic.
    Fp32,
    /// IEEE binary16 storage, f32 accumulation.
    Fp16,
    /// bfloat16 storage, f32 accumulation.
    Bf16,
    /// int8 × int8 → i32.
    Int8,
}

impl Precision {
    /// The lowercase name used in packs and slice ids.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        }
    }

    /// Bytes per stored element.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16 | Precision::Bf16 => 2,
            Precision::Int8 => 1,
        }
    }
}
