//! The floor every stage stands on: the shared vocabulary of sparse and mixed-precision
//! compute (sparsity patterns, precisions, GEMM ops, model shapes, arrival processes), the
//! metric names packs and reports use, verdicts, pipeline stages and digests.
//!
//! Every stage may import from here; nothing here imports a stage. A test
//! (`tests/architecture.rs`) enforces it.

pub mod arrivals;
pub mod digest;
pub mod gemm;
pub mod metric;
pub mod precision;
pub mod schema;
pub mod shapes;
pub mod slice_key;
pub mod sparsity;
pub mod stage;
pub mod verdict;

pub use arrivals::Arrivals;
pub use gemm::GemmOp;
pub use metric::Metric;
pub use precision::Precision;
pub use shapes::{ModelName, Transformer};
pub use slice_key::{OfSlice, SliceKey};
pub use sparsity::{Sparsity, SparsityError};
pub use stage::Stage;
pub use verdict::{Bottleneck, Verdict};
