//! The built-in CPU kernels: the dense comparator and the sparse kernels under test.
//!
//! Every kernel computes `Yᵀ[N×M] = W[N×K] · Xᵀ[K×M]` on row-major f32 buffers: `w` has N rows
//! of K weights, `x` holds the activations transposed (row `k` is feature `k` of every token)
//! and `y` has N rows of M outputs. Keeping tokens contiguous lets the sparse kernels vectorise
//! along M and broadcast each kept weight, so they never need a gather.

pub mod dense;
mod error;
pub mod nm;
pub mod reference;

pub use error::KernelError;
