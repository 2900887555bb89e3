//! Runs in fresh child processes (issue 9): the gate's process speed mode (memory layout,
//! frequency, scheduler placement) lasts the whole process, so runs that must be able to
//! differ as processes do are each measured by a new process.
//!
//! The library does not know the command line that starts such a child: the binary
//! injects a [`RunLauncher`] (in practice a [`ChildProcessLauncher`] for
//! `sparsegate __run-slice`). The parent writes a [`RunRequest`] as JSON to the child's
//! stdin; the child answers with a [`RunReply`] as JSON on stdout. Anything else — a
//! crash, a non-zero exit, output that is not a reply, a child that outlives its time —
//! is an error carrying the tail of the child's stderr, and never a hang.

use super::capture::{Drained, spawn_drains};
use super::error::{ChildError, StderrTail};
use super::run::RunRecord;
use crate::ingress::Environment;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a child needs to measure one run: the pack (path and digest, so a pack edited
/// after the gate loaded it is refused), the slice id, the run index, and the parent's
/// environment, whose lock the child must share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The pack file, as the parent loaded it.
    pub pack_path: PathBuf,
    /// `sha256:<hex>` of the pack file when the parent loaded it.
    pub pack_digest: String,
    /// The slice id.
    pub slice: String,
    /// The run index (0-based).
    pub run: u32,
    /// The parent's environment: the child refuses to measure under a different lock.
    pub environment: Environment,
    /// This run is the baseline build's (issue 22): another version of sparsegate, so
    /// the lock fields that name the build ([`BUILD_LOCK_FIELDS`]) may differ; the
    /// machine's may not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
}

/// The version of the child-run protocol (request on stdin, reply on stdout, the
/// `__child-protocol` handshake) this build speaks. A baseline binary must speak the same
/// one; builds from before the handshake (version 1) cannot answer it and are refused.
pub const CHILD_RUN_PROTOCOL: u32 = 2;

/// Lock fields that describe the build rather than the machine: a baseline build differs
/// in them by design.
pub const BUILD_LOCK_FIELDS: &[&str] = &["tool_version", "kernel_libs"];

/// What `sparsegate __child-protocol` prints: the protocol it speaks and its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolHello {
    /// The child-run protocol version, [`CHILD_RUN_PROTOCOL`] for this build.
    pub child_run_protocol: u32,
    /// The sparsegate version of the build.
    pub tool_version: String,
}

impl ProtocolHello {
    /// This build's answer.
    pub fn this_build() -> ProtocolHello {
        ProtocolHello {
            child_run_protocol: CHILD_RUN_PROTOCOL,
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// Why a program cannot serve as a baseline build.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// It could not be started.
    #[error("cannot start baseline binary {}: {source}", program.display())]
    Start {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It did not answer the handshake: not sparsegate, or one too old to have it.
    #[error(
        "baseline binary {} does not answer the child-run protocol handshake ({status}{stderr}); it is not \
         sparsegate, or one older than child-run protocol {CHILD_RUN_PROTOCOL}",
        program.display()
    )]
    NoAnswer {
        /// The program.
        program: PathBuf,
        /// How it ended, or what it printed instead.
        status: String,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// It speaks another version of the protocol.
    #[error(
        "baseline binary {} (sparsegate {}) speaks child-run protocol {}, this build speaks {CHILD_RUN_PROTOCOL}",
        program.display(), hello.tool_version, hello.child_run_protocol
    )]
    Mismatch {
        /// The program.
        program: PathBuf,
        /// Its answer.
        hello: ProtocolHello,
    },
}

/// Ask `program args…` which child-run protocol it speaks (within 30 s), and refuse it
/// unless it is this build's.
pub fn probe_protocol(program: &std::path::Path, args: &[&str]) -> Result<ProtocolHello, ProtocolError> {
    let out = run_with_stdin(program, args, b"", Duration::from_secs(30)).map_err(|e| match e {
        ChildError::Start { source, .. } => ProtocolError::Start {
            program: program.to_owned(),
            source,
        },
        other => ProtocolError::NoAnswer {
            program: program.to_owned(),
            status: other.to_string(),
            stderr: StderrTail(String::new()),
        },
    })?;
    let no_answer = |status: String| ProtocolError::NoAnswer {
        program: program.to_owned(),
        status,
        stderr: out.stderr.clone(),
    };
    if !out.status.success() {
        return Err(no_answer(out.status.to_string()));
    }
    let hello: ProtocolHello = serde_json::from_slice(&out.stdout)
        .map_err(|e| no_answer(format!("its answer is not a protocol hello: {e}")))?;
    if hello.child_run_protocol != CHILD_RUN_PROTOCOL {
        return Err(ProtocolError::Mismatch {
            program: program.to_owned(),
            hello,
        });
    }
    Ok(hello)
}

/// A child's answer: its own environment (the parent checks the lock again) and the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReply {
    /// The environment the child measured under.
    pub environment: Environment,
    /// The run's timings.
    pub record: RunRecord,
}

/// Measures one run somewhere other than the gate's process.
pub trait RunLauncher: std::fmt::Debug + Send + Sync {
    /// Measure the requested run, giving up after `timeout`.
    fn launch(&self, request: &RunRequest, timeout: Duration) -> Result<RunReply, ChildError>;
}

/// Starts `program args…` once per run, request on stdin, reply on stdout.
#[derive(Debug, Clone)]
pub struct ChildProcessLauncher {
    program: PathBuf,
    args: Vec<OsString>,
}

/// How much of a failed child's stderr an error quotes.
const STDERR_TAIL_BYTES: usize = 2000;
/// The most a child run may print on stdout (issue 23). A reply is one run's timings and
/// environment, a few KB to a few MB for a long run; past this it is not one, and the
/// child is killed rather than read on without end.
const STDOUT_LIMIT: usize = 64 << 20;
/// Bytes of a child's stderr kept while its pipe is drained: the end of it, from which
/// [`STDERR_TAIL_BYTES`] are quoted.
const STDERR_KEEP_BYTES: usize = 64 << 10;
/// How long to wait for the pipes to close after the child exited or was killed.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// How often a running child is checked on.
const POLL: Duration = Duration::from_millis(2);

impl ChildProcessLauncher {
    /// A launcher for `program` with `args` before the request (e.g. the running
    /// executable and `["__run-slice"]`).
    pub fn new(program: impl Into<PathBuf>, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        ChildProcessLauncher {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }
}

impl RunLauncher for ChildProcessLauncher {
    fn launch(&self, request: &RunRequest, timeout: Duration) -> Result<RunReply, ChildError> {
        let request_json = serde_json::to_vec(request).map_err(ChildError::Encode)?;
        let out = run_with_stdin(&self.program, &self.args, &request_json, timeout)?;
        if !out.status.success() {
            return Err(ChildError::Failed {
                status: out.status,
                stderr: out.stderr,
            });
        }
        serde_json::from_slice(&out.stdout).map_err(|source| ChildError::BadReply {
            source,
            stderr: out.stderr,
        })
    }
}

/// What a finished child left.
struct ChildOutput {
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: StderrTail,
}

/// Run `program args…` with `input` on stdin until it exits (killed at `timeout`).
fn run_with_stdin(
    program: &std::path::Path,
    args: &[impl AsRef<std::ffi::OsStr>],
    input: &[u8],
    timeout: Duration,
) -> Result<ChildOutput, ChildError> {
    // A child run measures nothing the gate decided already: the bf16 kernel the gate's
    // process chose is pinned for it, so the runs of one gate share it (and its lock).
    let (bf16_env, bf16_kernel) = super::kernels::isa::bf16_kernel_pin();
    let mut child = Command::new(program)
        .args(args)
        .env(bf16_env, bf16_kernel)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ChildError::Start {
            program: program.to_owned(),
            source,
        })?;
    // Drain both pipes on their own threads so a chatty child can never block on a full
    // pipe while we wait for it to exit, through bounded sinks so an endless one cannot
    // exhaust memory (issue 23).
    let (stdout, stderr) = spawn_drains(&mut child, STDOUT_LIMIT, STDERR_KEEP_BYTES);
    // A child that exits without reading its request closes the pipe: not our error
    // to report (its exit status and stderr say more). Written on a thread, so one that
    // never reads cannot hold us past its timeout.
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let start = Instant::now();
    let mut stdout_done: Option<Drained> = None;
    let mut overflowed = false;
    let status = loop {
        if stdout_done.is_none()
            && let Some(d) = stdout.as_ref().and_then(|rx| rx.try_recv().ok())
        {
            if d.overflowed {
                overflowed = true;
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            stdout_done = Some(d);
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ChildError::Wait(e));
            }
        }
    };
    // A grandchild holding the pipes open (the child is our own binary, which starts
    // none) cuts the wait short rather than holding the gate.
    let collect = |rx: Option<mpsc::Receiver<Drained>>| {
        rx.and_then(|rx| rx.recv_timeout(PIPE_GRACE).ok())
            .unwrap_or_default()
    };
    let stdout = stdout_done.unwrap_or_else(|| collect(stdout));
    let stderr = StderrTail(tail(&collect(stderr).bytes));
    if overflowed || stdout.overflowed {
        return Err(ChildError::StdoutOverflow {
            limit: STDOUT_LIMIT,
            stderr,
        });
    }
    let Some(status) = status else {
        return Err(ChildError::TimedOut { timeout, stderr });
    };
    let stdout = stdout.bytes;
    Ok(ChildOutput {
        status,
        stdout,
        stderr,
    })
}

/// The last [`STDERR_TAIL_BYTES`] of a child's stderr, as trimmed text.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let cut = text.len().saturating_sub(STDERR_TAIL_BYTES);
    let start = (cut..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let prefix = if start > 0 { "…" } else { "" };
    format!("{prefix}{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RunRequest {
        RunRequest {
            pack_path: "pack.yaml".into(),
            pack_digest: "sha256:00".into(),
            slice: "s".into(),
            run: 0,
            environment: Environment::capture(1, std::path::Path::new(".")),
            baseline: false,
        }
    }

    fn sh(script: &str) -> ChildProcessLauncher {
        ChildProcessLauncher::new("/bin/sh", ["-c", script])
    }

    /// The error text of a child running `script` with `timeout`.
    fn launch_error(script: &str, timeout: Duration) -> String {
        sh(script).launch(&request(), timeout).unwrap_err().to_string()
    }

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn issue_9_a_crashing_child_is_an_error_with_its_stderr() {
        let err = launch_error("echo 'kernel exploded' >&2; kill -SEGV $$", LONG);
        assert!(err.contains("failed"), "{err}");
        assert!(err.contains("kernel exploded"), "{err}");
    }

    #[test]
    fn issue_9_a_non_zero_exit_is_an_error() {
        let err = launch_error("cat >/dev/null; echo nope >&2; exit 3", LONG);
        assert!(err.contains("exit status: 3") && err.contains("nope"), "{err}");
    }

    #[test]
    fn issue_9_malformed_output_is_an_error() {
        let err = launch_error("cat >/dev/null; echo '{\"not\": \"a reply\"}'", LONG);
        assert!(err.contains("not a run reply"), "{err}");
    }

    #[test]
    fn issue_9_a_child_that_hangs_is_killed_at_its_timeout() {
        let err = launch_error("sleep 30", Duration::from_millis(200));
        assert!(err.contains("killed"), "{err}");
    }

    #[test]
    fn issue_9_the_request_reaches_the_child_and_its_reply_comes_back() {
        // The child echoes a reply built from its request: proves the stdin/stdout round trip.
        let environment = serde_json::to_string(&request().environment).unwrap();
        let script = format!(
            "cat >/dev/null; printf '%s' '{{\"environment\": {environment}, \"record\": {{\"pid\": 42, \
             \"warmup_iterations\": 1, \"candidate\": [1.0], \"comparator\": [2.0], \"calibration\": [0.5], \
             \"counters\": {{}}}}}}'"
        );
        let reply = sh(&script).launch(&request(), LONG).unwrap();
        assert_eq!(reply.record.pid, Some(42));
        assert_eq!(reply.environment, request().environment);
    }

    #[test]
    fn issue_22_a_program_without_the_handshake_is_refused_as_a_baseline() {
        let sh = std::path::Path::new("/bin/sh");
        let err = probe_protocol(sh, &["-c", "echo 'unrecognized subcommand' >&2; exit 2"]).unwrap_err();
        assert!(matches!(err, ProtocolError::NoAnswer { .. }), "{err}");
        assert!(err.to_string().contains("unrecognized subcommand"), "{err}");
        let old = r#"printf '{"child_run_protocol": 1, "tool_version": "0.2.0"}'"#;
        let err = probe_protocol(sh, &["-c", old]).unwrap_err();
        assert!(err.to_string().contains("speaks child-run protocol 1"), "{err}");
        let hello = serde_json::to_string(&ProtocolHello::this_build()).unwrap();
        let ok = probe_protocol(sh, &["-c", &format!("printf '%s' '{hello}'")]).unwrap();
        assert_eq!(ok, ProtocolHello::this_build());
    }

    #[test]
    fn issue_23_a_child_with_an_endless_stdout_is_killed_at_its_cap() {
        let started = Instant::now();
        let err = sh("cat >/dev/null; yes 'no reply'; echo 'never reached' >&2")
            .launch(&request(), LONG)
            .unwrap_err();
        assert!(matches!(err, ChildError::StdoutOverflow { .. }), "{err}");
        assert!(
            err.to_string().contains("more than 67108864 bytes on stdout"),
            "{err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn stderr_tail_keeps_the_end() {
        let long = "x".repeat(5000) + "the end";
        let t = tail(long.as_bytes());
        assert!(t.ends_with("the end") && t.starts_with('…'));
        assert!(t.len() <= STDERR_TAIL_BYTES + '…'.len_utf8());
    }
}
