//! Why a run in a child process produced no record (`execute/child.rs` launches it).

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Why a run in a child process produced no record. Every variant that follows the
/// child's exit quotes the end of its stderr: the child's own error message is there.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// The request could not be serialised.
    #[error("cannot encode the run request: {0}")]
    Encode(#[source] serde_json::Error),
    /// The child process could not be started.
    #[error("cannot start {}: {source}", program.display())]
    Start {
        /// The program that was to run.
        program: PathBuf,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// Waiting on the running child failed (it was killed).
    #[error("lost track of the child process: {0}")]
    Wait(#[source] std::io::Error),
    /// The child outlived its timeout and was killed.
    #[error("the child process ran longer than {:.0} s and was killed{stderr}", timeout.as_secs_f64())]
    TimedOut {
        /// The timeout it ran past.
        timeout: Duration,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// The child exited unsuccessfully or was killed by a signal.
    #[error("the child process failed ({status}){stderr}")]
    Failed {
        /// How it ended.
        status: ExitStatus,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// The child printed more on stdout than any run reply holds (issue 23); it was
    /// killed there rather than read on without end.
    #[error(
        "the child process printed more than {limit} bytes on stdout, no run reply, and was killed{stderr}"
    )]
    StdoutOverflow {
        /// The most bytes of stdout kept.
        limit: usize,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// The child exited cleanly but did not print a run reply.
    #[error("the child process exited cleanly but its output is not a run reply ({source}){stderr}")]
    BadReply {
        /// Why its stdout does not parse as a reply.
        source: serde_json::Error,
        /// The end of its stderr.
        stderr: StderrTail,
    },
    /// The child measured under an environment lock other than the gate's.
    #[error("the child process measured under a different environment lock ({})", fields.join(", "))]
    LockMismatch {
        /// The lock fields that differ.
        fields: Vec<String>,
    },
}

/// The last bytes of a child's stderr, trimmed (empty when it printed nothing); shown as
/// the end of a [`ChildError`]'s message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StderrTail(pub String);

impl std::fmt::Display for StderrTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        super::write_tail(f, &self.0, " (no stderr)", "; its stderr ends: ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_errors_read_as_the_messages_the_evidence_stores() {
        use std::os::unix::process::ExitStatusExt;
        let tail = |s: &str| StderrTail(s.into());
        let cases = [
            (
                ChildError::TimedOut {
                    timeout: Duration::from_secs_f64(310.4),
                    stderr: tail(""),
                },
                "the child process ran longer than 310 s and was killed (no stderr)",
            ),
            (
                ChildError::Failed {
                    status: ExitStatus::from_raw(3 << 8),
                    stderr: tail("nope"),
                },
                "the child process failed (exit status: 3); its stderr ends: nope",
            ),
            (
                ChildError::LockMismatch {
                    fields: vec!["cpu_model".into(), "threads".into()],
                },
                "the child process measured under a different environment lock (cpu_model, threads)",
            ),
            (
                ChildError::Start {
                    program: "/no/such".into(),
                    source: std::io::ErrorKind::NotFound.into(),
                },
                "cannot start /no/such: entity not found",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
