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
        /// Print the changes as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Signing and verifying closure memos.
#[derive(Debug, Subcommand)]
pub enum MemoCommand {
    /// Sign DIR/memo.json for a role with your SSH ed25519 key: writes memo.json.ROLE.sig
    /// (SSHSIG, checkable with `ssh-keygen -Y verify -n sparsegate-memo`) and adds your
    /// signature to the in-toto DSSE envelope memo.intoto.json.
    Sign {
        /// The gate's output directory.
        #[arg(default_value = "out")]
        dir: PathBuf,
        /// OpenSSH ed25519 private key.
        #[arg(long, value_name = "PATH")]
        key: PathBuf,
        /// The owner role you sign for; needed when the memo has more than one role.
        #[arg(long)]
        role: Option<String>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Check every signature, that each required role signed with a key allowed_signers
    /// binds to an owner with that role, and that every file the memo vouches for is unchanged.
    Verify {
        /// The gate's output directory.
        #[arg(default_value = "out")]
        dir: PathBuf,
        /// OpenSSH allowed_signers file (`email ssh-ed25519 AAAA…` per line).
        #[arg(long, value_name = "FILE")]
        allowed_signers: PathBuf,
        /// Print the result as JSON on stdout.
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
