//! CLI tests: the binary's contract (exit codes, files written, located errors), exercised
//! the way CI and people use it. One test binary, one module per concern.

mod bench;
mod bless;
mod browser;
mod cdp;
mod checkpoint;
mod checkpoint_config;
mod checkpoint_eval;
mod ci;
mod command;
mod containment;
mod decidable;
mod docs;
mod exit_codes;
mod first_screen;
mod forgery;
mod history;
mod hostile;
mod import;
mod isa_cap;
mod load;
mod malformed;
mod memo;
mod onnx;
mod output_set;
mod paired;
// Scratch PostgreSQL databases, shared with the library's history tests (issue 22); the CLI
// tests use only part of it.
#[allow(dead_code)]
#[path = "../../src/release/history/pg_scratch.rs"]
mod pg_scratch;
mod progress;
mod quality;
mod reports;
mod repro;
mod runs;
mod shapes;
mod shard;
mod sim;
mod stats;
mod support;
