//! The one error type of the kernels: every refusal is typed so that the execution stage can
//! report *why* an op could not run instead of panicking on a user's shape.

use thiserror::Error;

/// Why a kernel refused its inputs.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KernelError {
    /// A buffer does not have the length its shape implies.
    #[error("{what} has {actual} elements, but its shape needs {expected}")]
    Length {
        /// Which buffer (`w`, `x`, `y`).
        what: &'static str,
        /// Elements the shape implies.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A shape whose element count does not fit in memory addressing.
    #[error("shape {rows}×{cols} overflows the address space")]
    Overflow {
        /// Rows of the offending matrix.
        rows: usize,
        /// Columns of the offending matrix.
        cols: usize,
    },
    /// The N:M pattern itself is invalid (needs `0 < n < m ≤ 256`).
    #[error("invalid {n}:{m} pattern: need 0 < n < m <= 256")]
    Pattern {
        /// Kept per group.
        n: usize,
        /// Group size.
        m: usize,
    },
    /// K is not a whole number of groups.
    #[error("K = {k} is not a multiple of the group size {m}")]
    GroupSize {
        /// Reduction length.
        k: usize,
        /// Group size.
        m: usize,
    },
    /// A group has more non-zeros than the pattern keeps: the weights were not pruned.
    #[error("row {row}, group {group} has {nonzeros} non-zeros, more than the {n} an {n}:{m} pattern keeps")]
    Overfull {
        /// Row of the group.
        row: usize,
        /// Group index along K.
        group: usize,
        /// Non-zeros found.
        nonzeros: usize,
        /// Kept per group.
        n: usize,
        /// Group size.
        m: usize,
    },
    /// A block shape that does not tile the matrix (or is empty).
    #[error("{br}×{bc} blocks do not tile a {rows}×{k} weight matrix")]
    BlockShape {
        /// Weight rows (N).
        rows: usize,
        /// Reduction length (K).
        k: usize,
        /// Block height.
        br: usize,
        /// Block width.
        bc: usize,
    },
}

/// `rows × cols`, or a typed error when it overflows.
pub(crate) fn elements(rows: usize, cols: usize) -> Result<usize, KernelError> {
    rows.checked_mul(cols).ok_or(KernelError::Overflow { rows, cols })
}

/// Check the lengths of a dense product's operands: `w` is `n × k`, `x` is `k × m`, `y` is
/// `n × m`.
pub(crate) fn check_gemm(
    w: usize,
    x: usize,
    y: usize,
    n: usize,
    k: usize,
    m: usize,
) -> Result<(), KernelError> {
    check_len("w", w, n, k)?;
    check_len("x", x, k, m)?;
    check_len("y", y, n, m)
}

/// Check that `buf` holds exactly `rows × cols` elements.
pub(crate) fn check_len(what: &'static str, len: usize, rows: usize, cols: usize) -> Result<(), KernelError> {
    let expected = elements(rows, cols)?;
    if len == expected {
        Ok(())
    } else {
        Err(KernelError::Length {
            what,
            expected,
            actual: len,
        })
    }
}
