//! The command-line surface, defined once: these doc comments are the `--help` text.

use clap::{Args, Parser, Subcommand};
use sparsegate::ingress::shard::Shard;
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
        /// Run only shard K of N (a stable partition by slice id); combine with `merge`.
        #[arg(long, value_name = "K/N")]
        shard: Option<Shard>,
        /// Print a per-slice summary as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Combine the evidence of `run --shard K/N` jobs into one gate decision; writes the same
    /// files as `gate`. Refuses shards from different locks or pack versions, and gaps.
    Merge {
        /// The output directory of every shard.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Output directory.
        #[arg(long, value_name = "DIR", default_value = "out")]
        out: PathBuf,
        /// Directory of golden baselines.
        #[arg(long, value_name = "DIR", default_value = "golden")]
        golden: PathBuf,
        #[command(flatten)]
        decide: DecideArgs,
    },
    /// Run, validate against guardrails and golden baselines, and decide; writes
    /// verdict.json, evidence.json, memo.md, memo.html and junit.xml into DIR.
    Gate {
        #[command(flatten)]
        run: RunArgs,
        /// Output directory.
        #[arg(long, value_name = "DIR", default_value = "out")]
        out: PathBuf,
        /// A baseline build: another sparsegate binary (e.g. built from the merge base).
        /// Its runs of the built-in kernels' slices are interleaved with this build's in
        /// the same session, and `regress_at_most` on latency is decided on the per-pair
        /// ratios; golden baselines become history. It must speak this build's child-run
        /// protocol. (`backend: command` slices name theirs in the pack:
        /// `command: {baseline: {argv: [...]}}`.)
        #[arg(long, value_name = "PATH")]
        baseline_bin: Option<PathBuf>,
        #[command(flatten)]
        focus: FocusArgs,
        #[command(flatten)]
        decide: DecideArgs,
    },
    /// List the gate and merge runs recorded in the run history, newest first.
    History {
        /// Only runs that gated this pack (by name).
        #[arg(long)]
        pack: Option<String>,
        /// Show at most this many runs.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// The run history: an SQLite file, or a PostgreSQL URL
        /// (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE) a team shares (default:
        /// $SPARSEGATE_HISTORY, else .sparsegate/history.db at the git work-tree root or the
        /// current directory).
        #[arg(long, value_name = "PATH|URL")]
        history: Option<PathBuf>,
        /// Print the runs as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// One slice's metric over the recorded runs, with the change points E-divisive means
    /// finds (permutation test, seeded). Works for any recorded metric or counter, and for
    /// guardrail values such as quality_delta or accuracy.
    Trend(TrendArgs),
    /// Sign closure memos with SSH keys, or verify them.
    #[command(subcommand)]
    Memo(MemoCommand),
    /// Measure the packs and record (or update) their golden baselines, printing what changed.
    Bless {
        #[command(flatten)]
        run: RunArgs,
        /// Bless only these slice ids (repeatable).
        #[arg(long = "slice", value_name = "ID")]
        slices: Vec<String>,
        /// Make the new baselines expire this many days from now (`gate` then refuses them).
        #[arg(long, value_name = "DAYS")]
        expires_in_days: Option<u32>,
        /// Keep the baselines for this kind of runner only: under golden/runners/<class>/,
        /// the class named from the CPU model and features, ISA paths, CPUs and threads.
        /// `gate` prefers its own class's baselines and falls back to golden/<pack>/.
        #[arg(long)]
        per_runner: bool,
        /// Print the changes as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Statistics on files of numbers, without a pack (the engine the gate uses).
    Stats {
        #[command(subcommand)]
        command: StatsCommand,
    },
    /// Internal: measure one run of a slice in this fresh process for a gate that runs
    /// slices in `process` mode. Reads the run request (JSON) on stdin, writes the run's
    /// timings (JSON) on stdout.
    #[command(name = "__run-slice", hide = true)]
    RunSlice,
    /// Internal: print the child-run protocol this build speaks (JSON), so a gate can
    /// check a `--baseline-bin` before starting its runs.
    #[command(name = "__child-protocol", hide = true)]
    ChildProtocol,
    /// Internal: run one invocation of a `command` slice contained (issue 23): as a child
    /// subreaper that kills every process the command left behind, and everything when the
    /// gate closes this process's stdin. Exits with the command's status.
    #[command(name = "__contain", hide = true)]
    Contain {
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "ARGV")]
        argv: Vec<std::ffi::OsString>,
    },
    /// Micro-benchmark one built-in kernel against its dense comparator, interleaved in one
    /// process: median times, GFLOP/s (dense-equivalent and useful), speedup with its interval.
    Bench(BenchArgs),
    /// Simulate one GEMM layer on an accelerator preset: cycles, latency, energy,
    /// tensor-core occupancy, DRAM and metadata bytes, fallback and bottleneck class.
    Sim(SimArgs),
}

/// `sparsegate stats ...`
#[derive(Debug, Subcommand)]
pub enum StatsCommand {
    /// Compare two samples like ministat: medians, Mann–Whitney U, Hodges–Lehmann shift,
    /// Welch's t, ratio of medians with a bootstrap interval, and a verdict for a margin.
    ///
    /// Files hold one number per line (`#` comments allowed), a JSON array, or a JSON array
    /// of arrays (one inner array per run: the run-aware method is used). Exit codes: 0 pass,
    /// 1 fail (regression beyond the margin), 3 inconclusive, 2 bad input.
    Compare {
        /// The reference sample.
        #[arg(long, value_name = "FILE")]
        baseline: PathBuf,
        /// The sample under test.
        #[arg(long, value_name = "FILE")]
        candidate: PathBuf,
        /// Tolerated regression of the median, e.g. `5%` or `0.05`.
        #[arg(long, default_value = "5%", value_parser = parse_fraction)]
        margin: f64,
        /// Confidence of every interval, e.g. `0.95` or `95%`.
        #[arg(long, default_value = "0.95", value_parser = parse_fraction)]
        confidence: f64,
        /// Larger values are better (throughput, speedup); by default larger is worse (time).
        #[arg(long)]
        higher_is_better: bool,
        /// Bootstrap resamples.
        #[arg(long, default_value_t = 10_000)]
        resamples: usize,
        /// Bootstrap seed (same seed, same data: same interval).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// `5%` → 0.05, `0.05` → 0.05.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.trim().strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s.trim(), 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number or percentage"))?;
    let v = v * scale;
    if v.is_finite() && (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("`{s}` must lie in [0, 1) (or [0%, 100%))"))
    }
}

/// Signing and verifying closure memos.
#[derive(Debug, Subcommand)]
pub enum MemoCommand {
    /// Sign the gate's outputs in DIR for a role with your SSH ed25519 key. What is signed is
    /// the statement memo.statement.json: the sha256 of every output, pack, baseline and
    /// artifact, the verdict, and the roles the packs' owners hold. Writes
    /// memo.statement.json.ROLE.sig (SSHSIG, checkable with `ssh-keygen -Y verify -n
    /// sparsegate-memo`) and adds your signature to the DSSE envelope memo.intoto.json.
    /// Refused unless the allowed-signers file binds your key to an owner the pack gives the
    /// role; never overwrites another signer's signature. Signing a memo whose gate did not
    /// pass is allowed (it records the failure) and warns.
    Sign {
        /// The gate's output directory.
        #[arg(default_value = "out")]
        dir: PathBuf,
        /// OpenSSH ed25519 private key.
        #[arg(long, value_name = "PATH")]
        key: PathBuf,
        /// The owner role you sign for; needed when the packs have more than one role.
        #[arg(long)]
        role: Option<String>,
        /// OpenSSH allowed_signers file (`email ssh-ed25519 AAAA…` per line): it must bind
        /// your key to an owner holding the role.
        #[arg(long, value_name = "FILE")]
        allowed_signers: PathBuf,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Check that every role the (unchanged) packs name signed the statement, in both forms,
    /// with a key allowed_signers binds to an owner holding that role, and that every file
    /// the statement names is unchanged; print the signed verdict. Exit 0 when the
    /// signatures hold (whatever the verdict, unless --require-pass), 2 when they do not.
    Verify {
        /// The gate's output directory.
        #[arg(default_value = "out")]
        dir: PathBuf,
        /// OpenSSH allowed_signers file (`email ssh-ed25519 AAAA…` per line).
        #[arg(long, value_name = "FILE")]
        allowed_signers: PathBuf,
        /// Also fail unless the signed gate passed (verdict pass or warn, the gate's exit 0):
        /// exits with the gate's own code (1 fail, 3 inconclusive), so
        /// `memo verify --require-pass && deploy` never ships a failed gate.
        #[arg(long)]
        require_pass: bool,
        /// The pack(s) the memo must be for (e.g. the pack on the protected branch): a memo
        /// gated on any other pack is refused. Repeat for several packs.
        #[arg(long = "pack", value_name = "PACK")]
        packs: Vec<PathBuf>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `sparsegate bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The GEMM as MxNxK: M tokens, N output features, K input features.
    #[arg(long, value_name = "MxNxK", value_parser = parse_gemm)]
    pub gemm: (usize, usize, usize),
    /// Benchmark the N×K weights at each of these token counts instead of M (e.g.
    /// 1,8,16,128,512) and report the break-even: below how many tokens the kernel beats its
    /// dense comparator on this CPU.
    #[arg(long, value_name = "M,M,...", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub sweep_tokens: Vec<u32>,
    /// Weight sparsity: dense, N:M (e.g. 2:4), unstructured:sparsity=90% (or density=10%),
    /// or block:16x16:density=25% (or sparsity=75%). Density is the share kept.
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

/// What `gate` and `merge` share: how they compare, print and record.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// Compare with baselines taken under a different environment lock (the memo says so).
    #[arg(long)]
    pub allow_env_drift: bool,
    /// Print verdict.json on stdout instead of the text summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub history: RecordArgs,
    /// Also write a short Markdown for a pull-request comment here (at most 60 lines): the
    /// verdict, the guardrails that failed, stayed undecided, warned or moved against
    /// their baseline with their intervals, and a link to the full memo.
    #[arg(long, value_name = "FILE")]
    pub pr_comment: Option<PathBuf>,
    /// The page the PR comment links to for the full memo (default: the CI job, from
    /// GITHUB_SERVER_URL/GITHUB_REPOSITORY/GITHUB_RUN_ID or GitLab's CI_JOB_URL; else the
    /// comment names DIR/memo.md).
    #[arg(long, value_name = "URL", requires = "pr_comment")]
    pub memo_url: Option<String>,
}

/// Narrowing a gate to reproduce one failure: the command the memo prints beside each
/// failing slice (issue 22).
#[derive(Debug, Args)]
pub struct FocusArgs {
    /// Gate only this slice (the expanded id, as the memo writes it); repeatable.
    #[arg(long = "slice", value_name = "ID")]
    pub slices: Vec<String>,
    /// Take exactly this many runs per slice (instead of `samples.runs`, the run count
    /// planned from the baseline, or sequential looks).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: Option<u32>,
    /// Refuse the pack unless its sha256 is this (`sha256:<hex>`, the memo's digest);
    /// once per pack, in pack order.
    #[arg(long = "pack-digest", value_name = "DIGEST")]
    pub pack_digests: Vec<String>,
}

/// Where `gate` and `merge` record the run.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Record the run in this history: an SQLite file, or a PostgreSQL URL
    /// (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE) a team shares (default:
    /// $SPARSEGATE_HISTORY, else .sparsegate/history.db at the git work-tree root or the
    /// current directory).
    #[arg(long, value_name = "PATH|URL")]
    pub history: Option<PathBuf>,
    /// Record nothing in the run history.
    #[arg(long, conflicts_with = "history")]
    pub no_history: bool,
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

/// Arguments of `sparsegate trend`.
#[derive(Debug, Args)]
pub struct TrendArgs {
    /// The metric, counter or guardrail metric, e.g. latency, effective_speedup,
    /// fallback_rate, quality_delta.
    #[arg(long)]
    pub metric: String,
    /// The slice id.
    #[arg(long)]
    pub slice: String,
    /// The pack (needed when several packs have a slice of that id).
    #[arg(long)]
    pub pack: Option<String>,
    /// A change point is reported when its permutation p-value is at most this.
    #[arg(long, default_value = "0.05", value_parser = parse_fraction)]
    pub pvalue: f64,
    /// Compare the latest run with this many runs before it (a rolling window of history).
    #[arg(long, default_value_t = sparsegate::release::trend::DEFAULT_WINDOW as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub window: u32,
    /// Permutations per candidate change point.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub permutations: u32,
    /// Seed of the permutations (same history, same seed: same change points).
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// The run history, a file or a PostgreSQL URL (default as for `history`).
    #[arg(long, value_name = "PATH|URL")]
    pub history: Option<PathBuf>,
    /// Print the series and change points as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `sparsegate sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// A built-in preset (a100, h100, h200, sparseloop-stc, systolic-32-os, ...) or the
    /// path of a preset YAML file.
    #[arg(long, value_name = "NAME_OR_FILE")]
    pub arch: String,
    /// The GEMM as MxNxK: M tokens, N output features, K reduction.
    #[arg(long, value_name = "MxNxK", required_unless_present = "measured")]
    pub gemm: Option<String>,
    /// Instead of one layer: put the preset's predictions beside a real GPU's measured
    /// dense and 2:4 times (a grid written by benches/gpu/h200_measure.py), cell by cell.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["gemm", "traffic"])]
    pub measured: Option<std::path::PathBuf>,
    /// Weight sparsity: dense, N:M (e.g. 2:4) or unstructured:sparsity=90% (or density=10%).
    #[arg(long, default_value = "dense")]
    pub sparsity: String,
    /// Operand precision: fp32, fp16, bf16 or int8.
    #[arg(long, default_value = "fp16")]
    pub precision: String,
    /// Serve requests of this layer under load: steady:RATE, poisson:RATE or
    /// bursts:RATE:SIZE (requests/s); reports p50/p95/p99 latency.
    #[arg(long, value_name = "PATTERN")]
    pub traffic: Option<String>,
    /// Requests to simulate under --traffic (a p99 claim needs at least 662, MLPerf
    /// LoadGen's early-stopping minimum). At most 10 million: each request is held in
    /// memory (issue 23: a u64-sized count overflowed the allocation).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub requests: u64,
    /// Seed of the arrival process.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Print the full result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}
