//! The command-line surface, defined once: these doc comments are the `--help` text.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Release gate for sparse and mixed-precision tensor compute.
///
/// Exit codes: 0 pass (warnings allowed), 1 a blocking guardrail failed, 2 bad input,
/// refused environment or internal error, 3 inconclusive.
#[derive(Debug, Parser)]
#[command(name = "sparsegate", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check packs against the schema and the semantic rules; every problem as file:line:col.
    Validate {
        /// Scenario pack files.
        #[arg(required = true)]
        packs: Vec<PathBuf>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Execute the packs' slices and write DIR/evidence.json.
    Run {
        #[command(flatten)]
        run: RunArgs,
        /// Output directory.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Print a per-slice summary as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Run, validate against guardrails and golden baselines, and decide; writes
    /// verdict.json, evidence.json, memo.md, memo.html and junit.xml into DIR.
    Gate {
        #[command(flatten)]
        run: RunArgs,
        /// Output directory.
        #[arg(long, value_name = "DIR", default_value = "out")]
        out: PathBuf,
        /// Compare with baselines taken under a different environment lock (the memo says so).
        #[arg(long)]
        allow_env_drift: bool,
        /// Print verdict.json on stdout instead of the text summary.
        #[arg(long)]
        json: bool,
    },
    /// Measure the packs and record (or update) their golden baselines, printing what changed.
    Bless {
        #[command(flatten)]
        run: RunArgs,
        /// Bless only these slice ids (repeatable).
        #[arg(long = "slice", value_name = "ID")]
        slices: Vec<String>,
        /// Print the changes as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Simulate one GEMM layer on an accelerator preset: cycles, latency, energy,
    /// tensor-core occupancy, DRAM and metadata bytes, fallback and bottleneck class.
    Sim {
        /// A built-in preset (a100, h100, h200, sparseloop-stc, systolic-32-os, ...) or the
        /// path of a preset YAML file.
        #[arg(long, value_name = "NAME_OR_FILE")]
        arch: String,
        /// The GEMM as MxNxK: M tokens, N output features, K reduction.
        #[arg(long, value_name = "MxNxK")]
        gemm: String,
        /// Weight sparsity: dense, N:M (e.g. 2:4) or unstructured:D.
        #[arg(long, default_value = "dense")]
        sparsity: String,
        /// Operand precision: fp32, fp16, bf16 or int8.
        #[arg(long, default_value = "fp16")]
        precision: String,
        /// Serve requests of this layer under load: steady:RATE, poisson:RATE or
        /// bursts:RATE:SIZE (requests/s); reports p50/p95/p99 latency.
        #[arg(long, value_name = "PATTERN")]
        traffic: Option<String>,
        /// Requests to simulate under --traffic (a p99 claim needs at least 662, MLPerf
        /// LoadGen's early-stopping minimum).
        #[arg(long, default_value_t = 1000)]
        requests: u64,
        /// Seed of the arrival process.
        #[arg(long, default_value_t = 0x5eed)]
        seed: u64,
        /// Print the full result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments shared by the commands that run slices.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario pack files.
    #[arg(required = true)]
    pub packs: Vec<PathBuf>,
    /// Directory of golden baselines.
    #[arg(long, value_name = "DIR", default_value = "golden")]
    pub golden: PathBuf,
    /// Hide per-slice progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}
