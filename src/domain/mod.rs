//! The floor every stage stands on: the shared vocabulary of sparse and mixed-precision
//! compute (sparsity patterns, precisions, GEMM ops, model shapes, arrival processes), the
//! metric and counter names packs, evidence and reports use, verdicts, pipeline stages and digests.
//!
//! Every stage may import from here; nothing here imports a stage. A test
//! (`tests/architecture.rs`) enforces it.

pub mod arrivals;
pub mod by_name;
pub mod concern;
pub mod counter;
pub mod digest;
pub mod gemm;
pub mod keyed_map;
pub mod metric;
pub mod precision;
pub mod schema;
pub mod shapes;
pub mod slice_key;
pub mod sparsity;
pub mod stage;
pub mod verdict;

pub use arrivals::Arrivals;
pub use concern::Concern;
pub use counter::Counter;
pub use gemm::GemmOp;
pub use keyed_map::KeyedMap;
pub use metric::{Metric, Series};

/// Counters by key, as evidence and baselines store them.
pub type Counters = KeyedMap<Counter, f64>;
pub use precision::Precision;
pub use shapes::{ModelName, Transformer};
pub use slice_key::{OfSlice, SliceKey};
pub use sparsity::{Sparsity, SparsityError};
pub use stage::Stage;
pub use verdict::{Bottleneck, Verdict};
