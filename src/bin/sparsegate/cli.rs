//! The command-line surface, defined once: these doc comments are the `--help` text.

use clap::{Args, Parser, Subcommand};
use sparsegate::ingress::{Precision, Sparsity};
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
    /// Micro-benchmark one built-in kernel against its dense comparator, interleaved in one
    /// process: median times, GFLOP/s (dense-equivalent and useful), speedup with its interval.
    Bench(BenchArgs),
}

/// Arguments of `sparsegate bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The GEMM as MxNxK: M tokens, N output features, K input features.
    #[arg(long, value_name = "MxNxK", value_parser = parse_gemm)]
    pub gemm: (usize, usize, usize),
    /// Weight sparsity: dense, N:M, unstructured:D or block:RxC:D (D = kept fraction).
    #[arg(long, default_value = "dense", value_parser = parse_sparsity)]
    pub sparsity: Sparsity,
    /// Precision: fp32, fp16, bf16 or int8.
    #[arg(long, default_value = "fp32", value_parser = parse_precision)]
    pub precision: Precision,
    /// Worker threads (default: every logical CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Paired samples to take at least.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(3..))]
    pub min_samples: u32,
    /// Paired samples to take at most.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(3..))]
    pub max_samples: u32,
    /// Seconds to keep sampling (past --min-samples, up to --max-samples).
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub time_budget: f64,
    /// Seed of the inputs and of the bootstrap.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_gemm(s: &str) -> Result<(usize, usize, usize), String> {
    let dims: Vec<&str> = s.split(['x', 'X']).collect();
    let bad = || format!("`{s}` is not MxNxK (three positive integers, e.g. 512x4096x4096)");
    let [m, n, k] = dims.as_slice() else {
        return Err(bad());
    };
    let dim = |d: &str| d.trim().parse::<usize>().ok().filter(|&v| v > 0).ok_or_else(bad);
    Ok((dim(m)?, dim(n)?, dim(k)?))
}

fn parse_sparsity(s: &str) -> Result<Sparsity, String> {
    s.parse::<Sparsity>().map_err(|e| e.to_string())
}

fn parse_precision(s: &str) -> Result<Precision, String> {
    [Precision::Fp32, Precision::Fp16, Precision::Bf16, Precision::Int8]
        .into_iter()
        .find(|p| p.as_str() == s)
        .ok_or_else(|| format!("unknown precision `{s}`: write fp32, fp16, bf16 or int8"))
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
