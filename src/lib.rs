//! sparsegate: a release gate for sparse and mixed-precision tensor compute.
//!
//! The library follows the six pipeline stages of `DESIGN.md`; data flows one way:
//!
//! ```text
//! pack.yaml ─► ingress ─► lower ─► schedule ─► execute ─► validate ─► release
//!             (Pack)     (Plan)   (blocking)  (Evidence) (Assessment) (Decision)
//! ```
//!
//! [`app`] strings the stages together into the commands; it has no CLI knowledge, so the
//! binary only parses arguments and renders errors.
//!
//! No `unsafe` here: every SIMD kernel, with its `unsafe`, lives in the kernels crate
//! (`crates/kernels`, re-exported as [`execute::kernels`]), which has lints of its own.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod app;
pub mod domain;
pub mod error;
pub mod execute;
pub mod files;
pub mod ingress;
pub mod lower;
pub mod release;
pub mod schedule;
pub mod schema;
pub mod sim;
pub mod stats;
pub mod validate;

pub use domain::{digest, metric, stage, verdict};

pub use error::{Error, Result};
