//! Structure verification of a shipped checkpoint (issue 21): for each tensor, its actual
//! density and whether it holds the slice's sparsity pattern along the axis the kernels
//! reduce over, with the count and the first locations of the groups that break it.
//!
//! A Linear weight is stored `[out_features, in_features]`, row-major; the GEMM reduces
//! over `in_features`, so an N:M group is M consecutive elements of one row, starting at a
//! multiple of M (a row whose length is not a multiple of M ends in a shorter group, which
//! may keep at most N). A block pattern's blocks tile the matrix from the top-left corner.
//! A value is zero when it is ±0 in its dtype.

use crate::domain::Sparsity;
use crate::ingress::checkpoint::{Dtype, TensorEntry};
use serde::{Deserialize, Serialize};

/// Locations of the first violating groups kept per tensor.
const FIRST_VIOLATIONS: usize = 8;

/// What one tensor of the checkpoint holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TensorStructure {
    /// Tensor name.
    pub tensor: String,
    /// safetensors dtype, e.g. `BF16`.
    pub dtype: String,
    /// `[out_features, in_features]`.
    pub shape: Vec<u64>,
    /// Non-zero fraction of its values.
    pub density: f64,
    /// What was checked: the slice's sparsity tag, e.g. `2of4`.
    pub pattern: String,
    /// Groups (N:M) or blocks checked; for unstructured, the elements.
    pub groups: u64,
    /// Groups or blocks that break the pattern (for unstructured: 1 if the density is over
    /// the pattern's, else 0).
    pub violations: u64,
    /// The first violating groups, `[row, first column]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_violations: Vec<[u64; 2]>,
    /// Why the tensor is not run sparse, if it is not: left dense by the config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_dense: Option<String>,
    /// Whether real stacks would run it on their 2:4 path, with why (issue 21).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<super::eligibility::StackEligibility>,
    /// The config's `sparsity_structure`, checked on this tensor when it is one the claim
    /// covers (in its targets, not ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimCheck>,
}

/// A tensor checked against what the checkpoint's config claims it holds (issue 21: a
/// checkpoint whose config says `2:4` must hold 2:4 in every tensor the claim covers,
/// whatever pattern the slice tests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClaimCheck {
    /// The claimed structure, e.g. `2:4` or `unstructured`.
    pub structure: String,
    /// Where the config claims it, `file:line:col`.
    pub at: String,
    /// Groups checked; 0 when the claim names no per-group structure (`unstructured`).
    pub groups: u64,
    /// Groups keeping more weights than the claim allows.
    pub violations: u64,
    /// The first of them, `[row, first column]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_violations: Vec<[u64; 2]>,
}

/// Whether each element of `data` (of `dtype`) is non-zero.
fn nonzeros(dtype: Dtype, data: &[u8]) -> Option<Vec<bool>> {
    Some(match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff != 0)
            .collect(),
        Dtype::F16 | Dtype::Bf16 => data
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7fff != 0)
            .collect(),
        Dtype::I8 | Dtype::U8 => data.iter().map(|&b| b != 0).collect(),
        Dtype::Other(_) => return None,
    })
}

/// Verify the 2-D `tensor`, whose bytes are `data`, against `pattern`. `None` for a dtype
/// whose zeros are not read here.
pub fn verify(tensor: &TensorEntry, data: &[u8], pattern: Sparsity) -> Option<TensorStructure> {
    let nz = nonzeros(tensor.dtype, data)?;
    let (rows, cols) = (tensor.shape[0] as usize, tensor.shape[1] as usize);
    let kept = nz.iter().filter(|&&b| b).count();
    let mut out = TensorStructure {
        tensor: tensor.name.clone(),
        dtype: tensor.dtype.name(),
        shape: tensor.shape.clone(),
        density: kept as f64 / nz.len().max(1) as f64,
        pattern: pattern.tag(),
        groups: 0,
        violations: 0,
        first_violations: Vec::new(),
        left_dense: None,
        stacks: Vec::new(),
        claim: None,
    };
    let flag = |out: &mut TensorStructure, row: usize, col: usize| {
        out.violations += 1;
        if out.first_violations.len() < FIRST_VIOLATIONS {
            out.first_violations.push([row as u64, col as u64]);
        }
    };
    match pattern {
        Sparsity::Dense => out.groups = nz.len() as u64,
        Sparsity::NOfM { n, m } => {
            let (n, m) = (n as usize, m as usize);
            for (r, row) in nz.chunks_exact(cols).enumerate() {
                for (g, group) in row.chunks(m).enumerate() {
                    out.groups += 1;
                    if group.iter().filter(|&&b| b).count() > n {
                        flag(&mut out, r, g * m);
                    }
                }
            }
        }
        Sparsity::Unstructured { density } => {
            out.groups = nz.len() as u64;
            // One weight of slack per row for the rounding of `density · cols`.
            if kept as f64 > (density * cols as f64).ceil() * rows as f64 {
                out.violations = 1;
            }
        }
        Sparsity::Block {
            rows: br,
            cols: bc,
            density,
        } => {
            let (br, bc) = (br as usize, bc as usize);
            let mut kept_blocks = 0u64;
            for r0 in (0..rows).step_by(br) {
                for c0 in (0..cols).step_by(bc) {
                    out.groups += 1;
                    let any = (r0..(r0 + br).min(rows))
                        .any(|r| nz[r * cols + c0..r * cols + (c0 + bc).min(cols)].contains(&true));
                    kept_blocks += u64::from(any);
                }
            }
            if kept_blocks as f64 > (density * out.groups as f64).ceil() {
                out.violations = 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dtype: Dtype, rows: u64, cols: u64) -> TensorEntry {
        TensorEntry {
            name: "w.weight".into(),
            dtype,
            shape: vec![rows, cols],
            file: 0,
            offset: 0,
            len: 0,
            held: None,
        }
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_2of4_tensor_holds_and_a_planted_third_weight_is_located() {
        let mut w = vec![
            1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 0.0, -0.0, 4.0, 5.0, 0.0, 0.0, 0.0, 0.0, 6.0, 7.0,
        ];
        let two_of_four = Sparsity::NOfM { n: 2, m: 4 };
        let ok = verify(&entry(Dtype::F32, 2, 8), &f32_bytes(&w), two_of_four).unwrap();
        assert_eq!((ok.groups, ok.violations), (4, 0));
        assert_eq!(ok.density, 7.0 / 16.0);
        w[13] = 8.0; // row 1, group at column 4 now keeps 3
        let bad = verify(&entry(Dtype::F32, 2, 8), &f32_bytes(&w), two_of_four).unwrap();
        assert_eq!(bad.violations, 1);
        assert_eq!(bad.first_violations, vec![[1, 4]]);
    }

    #[test]
    fn negative_zero_is_zero_in_every_dtype() {
        let bf16: Vec<u8> = [0x8000u16, 0x3f80, 0x0000, 0x8000]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let s = verify(&entry(Dtype::Bf16, 1, 4), &bf16, Sparsity::NOfM { n: 1, m: 4 }).unwrap();
        assert_eq!((s.density, s.violations), (0.25, 0));
        let i8s = [0u8, 3, 0, 0xff];
        let s = verify(&entry(Dtype::I8, 1, 4), &i8s, Sparsity::NOfM { n: 1, m: 4 }).unwrap();
        assert_eq!(s.violations, 1);
    }

    #[test]
    fn blocks_count_kept_blocks_against_the_density() {
        // 4×4 in 2×2 blocks: only the top-left block holds values.
        let mut w = vec![0.0f32; 16];
        w[0] = 1.0;
        w[5] = 1.0;
        let block = |density| Sparsity::Block {
            rows: 2,
            cols: 2,
            density,
        };
        let s = verify(&entry(Dtype::F32, 4, 4), &f32_bytes(&w), block(0.25)).unwrap();
        assert_eq!((s.groups, s.violations), (4, 0));
        w[15] = 1.0;
        let s = verify(&entry(Dtype::F32, 4, 4), &f32_bytes(&w), block(0.25)).unwrap();
        assert_eq!(s.violations, 1);
    }
}
