//! N:M structured sparsity: at most N non-zero weights in every group of M consecutive
//! weights along K (2:4 is what sparse tensor cores accelerate).
//!
//! [`NmMatrix`] stores only the kept values plus each one's packed position inside its group,
//! the same information the hardware format carries. Its fields are private so that the
//! invariant the fast kernel relies on (every index `< m`, exactly `n` per group) cannot be
//! broken from outside.

mod any_pattern;
mod feature_lanes;
mod indices;
mod microkernel;
mod prune;
mod spmm;
mod token_lanes;
mod two_of_four;

pub(crate) use microkernel::Isa;
pub use prune::{prune_magnitude, prune_magnitude_in_place};

use super::error::{KernelError, check_len, elements};

/// A row-major `rows × k` weight matrix compressed to an N:M pattern along K.
#[derive(Debug, Clone, PartialEq)]
pub struct NmMatrix {
    rows: usize,
    k: usize,
    n: usize,
    m: usize,
    /// `rows × (k/m·n)` kept values, row by row, groups in order, ascending index in a group.
    values: Vec<f32>,
    /// Packed in-group indices, `row_bytes` per row (see `indices.rs`).
    indices: Vec<u8>,
    bits: usize,
    row_bytes: usize,
    /// The feature-lane layout, built on the first AVX-512 product with few tokens (see
    /// `feature_lanes.rs`).
    lanes: LaneCache<feature_lanes::LaneLayout>,
    /// The token-lane layout, built on the first AVX-512 product with many tokens (see
    /// `token_lanes.rs`).
    tokens: LaneCache<token_lanes::TokenLayout>,
}

/// A lazily built execution-time copy of the matrix. It is derived from the other fields,
/// so it takes no part in equality, and a clone keeps whatever was built.
#[derive(Clone)]
struct LaneCache<L>(std::sync::OnceLock<L>);

impl<L> Default for LaneCache<L> {
    fn default() -> Self {
        LaneCache(std::sync::OnceLock::new())
    }
}

impl<L> PartialEq for LaneCache<L> {
    fn eq(&self, _: &LaneCache<L>) -> bool {
        true
    }
}

/// An execution-time copy that can say how much memory it holds.
trait Resident {
    fn resident_bytes(&self) -> usize;
}

impl Resident for feature_lanes::LaneLayout {
    fn resident_bytes(&self) -> usize {
        self.resident_bytes()
    }
}

impl Resident for token_lanes::TokenLayout {
    fn resident_bytes(&self) -> usize {
        self.resident_bytes()
    }
}

impl<L: Resident> LaneCache<L> {
    fn resident_bytes(&self) -> usize {
        self.0.get().map_or(0, L::resident_bytes)
    }
}

impl<L: Resident> std::fmt::Debug for LaneCache<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.get() {
            Some(l) => write!(f, "LaneCache({} resident bytes)", l.resident_bytes()),
            None => f.write_str("LaneCache(not built)"),
        }
    }
}

impl NmMatrix {
    /// Compress a row-major `rows × k` matrix that already satisfies `n:m` (e.g. the output of
    /// [`prune_magnitude`]). A group with fewer than `n` non-zeros keeps explicit zeros at its
    /// lowest free positions, so every group stores exactly `n` entries and the kernel needs no
    /// per-group counts.
    pub fn compress(w: &[f32], rows: usize, k: usize, n: usize, m: usize) -> Result<NmMatrix, KernelError> {
        if n == 0 || n >= m || m > 256 {
            return Err(KernelError::Pattern { n, m });
        }
        if !k.is_multiple_of(m) {
            return Err(KernelError::GroupSize { k, m });
        }
        check_len("w", w.len(), rows, k)?;
        let kept_per_row = k / m * n;
        let bits = indices::bits_per_index(m);
        let row_bytes = indices::row_bytes(kept_per_row, bits);
        let mut values = Vec::with_capacity(elements(rows, kept_per_row)?);
        let mut packed = vec![0u8; elements(rows, row_bytes)?];
        let mut keep = Vec::with_capacity(m);
        for (row, (weights, row_idx)) in w
            .chunks_exact(k.max(1))
            .zip(packed.chunks_exact_mut(row_bytes.max(1)))
            .enumerate()
        {
            for (group, g) in weights.chunks_exact(m).enumerate() {
                keep.clear();
                keep.extend((0..m).filter(|&i| g[i] != 0.0));
                if keep.len() > n {
                    return Err(KernelError::Overfull {
                        row,
                        group,
                        nonzeros: keep.len(),
                        n,
                        m,
                    });
                }
                let mut pad = (0..m).filter(|&i| g[i] == 0.0);
                while keep.len() < n {
                    keep.extend(pad.next());
                }
                keep.sort_unstable();
                for (t, &i) in keep.iter().enumerate() {
                    values.push(g[i]);
                    indices::put(row_idx, group * n + t, bits, i);
                }
            }
        }
        Ok(NmMatrix {
            rows,
            k,
            n,
            m,
            values,
            indices: packed,
            bits,
            row_bytes,
            lanes: LaneCache::default(),
            tokens: LaneCache::default(),
        })
    }

    /// The dense `rows × k` form: kept values at their positions, zeros elsewhere.
    pub fn decompress(&self) -> Vec<f32> {
        let mut w = vec![0.0; self.rows * self.k];
        for row in 0..self.rows {
            for e in 0..self.kept_per_row() {
                let col = e / self.n * self.m + self.index(row, e);
                w[row * self.k + col] = self.values[row * self.kept_per_row() + e];
            }
        }
        w
    }

    /// Output rows (N of the GEMM).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Reduction length (K of the GEMM).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The pattern, `(n, m)`.
    pub fn pattern(&self) -> (usize, usize) {
        (self.n, self.m)
    }

    /// Kept values, row by row.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The packed index bytes, row by row.
    pub fn indices(&self) -> &[u8] {
        &self.indices
    }

    /// Bits stored per kept value's index.
    pub fn bits_per_index(&self) -> usize {
        self.bits
    }

    /// Bytes of kept values the kernel streams (f32).
    pub fn value_bytes(&self) -> usize {
        self.values.len() * std::mem::size_of::<f32>()
    }

    /// Bytes of index metadata the kernel streams, padding included: the number the memo's
    /// metadata-overhead counter is built from.
    pub fn metadata_bytes(&self) -> usize {
        self.indices.len()
    }

    /// Whether the 2:4 kernels can run this matrix: 2:4 itself, and 1:2 with K a multiple of
    /// 4, which *is* a 2:4 matrix (each group of four keeps one weight in each half), so it
    /// gets the 2:4 kernels' 2-bit loops instead of the generic ones (at 1–8 tokens on 4096²
    /// the generic token lanes ran 0.9–1.5× dense; see `spmm.rs`).
    fn runs_as_two_of_four(&self) -> bool {
        match (self.n, self.m) {
            (2, 4) => true,
            (1, 2) => self.k.is_multiple_of(4),
            _ => false,
        }
    }

    /// The 2:4 index bytes the 2:4 kernels read ([`Self::runs_as_two_of_four`]): the stored
    /// ones for 2:4; for 1:2, each kept weight's position in its group of four (its pair's
    /// offset plus its 1-bit index), packed as 2:4 packs them. The stored form, and so
    /// `metadata_bytes`, stays 1:2's one bit per weight.
    fn two_of_four_indices(&self) -> std::borrow::Cow<'_, [u8]> {
        if (self.n, self.m) == (2, 4) {
            return std::borrow::Cow::Borrowed(&self.indices);
        }
        let kept = self.kept_per_row();
        let row_bytes = indices::row_bytes(kept, 2);
        let mut out = vec![0u8; self.rows * row_bytes];
        for (row, out) in out.chunks_exact_mut(row_bytes.max(1)).enumerate() {
            for e in 0..kept {
                indices::put(out, e, 2, 2 * (e % 2) + self.index(row, e));
            }
        }
        std::borrow::Cow::Owned(out)
    }

    /// The feature-lane layout, built on first use: 2:4's for a matrix that runs as 2:4, the
    /// general one for other patterns with `m ≤ 16`.
    fn lane_layout(&self) -> &feature_lanes::LaneLayout {
        self.lanes.0.get_or_init(|| {
            if self.runs_as_two_of_four() {
                let idx = self.two_of_four_indices();
                feature_lanes::LaneLayout::new(self.rows, self.k, &self.values, &idx, self.k.div_ceil(8))
            } else {
                feature_lanes::LaneLayout::any_pattern(
                    (self.rows, self.k),
                    (self.n, self.m),
                    &self.values,
                    (&self.indices, self.row_bytes, self.bits),
                )
            }
        })
    }

    /// The token-lane layout, built on first use (patterns with `m ≤ 64`).
    fn token_layout(&self) -> &token_lanes::TokenLayout {
        self.tokens.0.get_or_init(|| {
            if self.runs_as_two_of_four() {
                let idx = self.two_of_four_indices();
                token_lanes::TokenLayout::new(
                    (self.rows, self.k),
                    (2, 4),
                    &self.values,
                    (&idx, self.k.div_ceil(8), 2),
                )
            } else {
                token_lanes::TokenLayout::new(
                    (self.rows, self.k),
                    (self.n, self.m),
                    &self.values,
                    (&self.indices, self.row_bytes, self.bits),
                )
            }
        })
    }

    /// Bytes of the execution-time copies the AVX-512 kernels keep beside the stored form (the
    /// same values, rearranged and padded, with the 2-bit indices for 2:4 and, for other
    /// patterns, a row byte per kept weight in the token-lane copy and a nibble in the
    /// feature-lane one), 0 until the first such product. Reported so the memory they
    /// cost is not hidden.
    pub fn execution_copy_bytes(&self) -> usize {
        self.lanes.resident_bytes() + self.tokens.resident_bytes()
    }

    fn kept_per_row(&self) -> usize {
        self.k / self.m * self.n
    }

    fn index(&self, row: usize, entry: usize) -> usize {
        indices::get(
            &self.indices[row * self.row_bytes..(row + 1) * self.row_bytes],
            entry,
            self.bits,
        )
    }
}

#[cfg(test)]
mod tests;
