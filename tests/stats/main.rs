//! The statistics engine against outside oracles (scipy, MongoDB's e-divisive), its
//! properties, and its false-alarm rates on real and simulated noise: one test binary, so
//! the suite links the library once for all of them.

#[path = "../common/mod.rs"]
mod common;

mod bench;
mod corpus;
mod edivisive;
mod paired_power;
mod props;
mod scipy;
mod sequential;
