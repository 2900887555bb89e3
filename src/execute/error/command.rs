//! Why a `command` slice produced no (or partial) evidence (`execute/command.rs` runs it).

use crate::domain::metric::Metric;
use std::path::PathBuf;
use std::time::Duration;

/// Why a `command` slice produced no (or partial) evidence: the command could not run, it
/// failed, or it did not print what its guardrails need.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The invocation's argv is empty.
    #[error("the command has no program to run")]
    NoProgram,
    /// The program could not be started.
    #[error("cannot start command `{command}` in `{}`: {source}", cwd.display())]
    Start {
        /// The invocation, as shown to the user.
        command: String,
        /// Its working directory.
        cwd: PathBuf,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// Waiting on the running program failed (its group was killed).
    #[error("cannot wait for command `{command}`: {source}")]
    Wait {
        /// The invocation.
        command: String,
        /// Why the wait failed.
        source: std::io::Error,
    },
    /// The program outlived the slice's `timeout_s`; its process group was killed.
    #[error(
        "command `{command}` timed out after {:.3} s (timeout_s); its process group was killed{stderr}",
        timeout.as_secs_f64()
    )]
    TimedOut {
        /// The invocation.
        command: String,
        /// The timeout it ran past.
        timeout: Duration,
        /// The end of its stderr.
        stderr: CommandStderr,
    },
    /// The program printed more on stdout than one invocation may (issue 23); it was
    /// killed there rather than read on without end.
    #[error(
        "command `{command}` printed more than {limit} bytes on stdout (the most one invocation may print); \
         it was killed{stderr}"
    )]
    StdoutOverflow {
        /// The invocation.
        command: String,
        /// The most bytes of stdout kept.
        limit: usize,
        /// The end of its stderr.
        stderr: CommandStderr,
    },
    /// The program exited with a non-zero status.
    #[error("command `{command}` exited with status {code} after {wall_s:.3} s{stderr}")]
    Exited {
        /// The invocation.
        command: String,
        /// Its exit status.
        code: i32,
        /// How long it ran, seconds.
        wall_s: f64,
        /// The end of its stderr.
        stderr: CommandStderr,
    },
    /// The program was killed by a signal.
    #[error("command `{command}` was killed by signal {signal} after {wall_s:.3} s{stderr}")]
    Signalled {
        /// The invocation.
        command: String,
        /// The signal (0 when the platform did not say).
        signal: i32,
        /// How long it ran, seconds.
        wall_s: f64,
        /// The end of its stderr.
        stderr: CommandStderr,
    },
    /// The program printed a record that breaks the contract.
    #[error("command `{command}`: {source}")]
    Records {
        /// The invocation.
        command: String,
        /// The offending line.
        source: RecordError,
    },
    /// `effective_speedup` needs a `latency` record from both sides of a pair.
    #[error(
        "`effective_speedup` pairs `latency` records, but {silent} printed none (command `{command}`, \
         comparator `{comparator}`)"
    )]
    NoLatencyToPair {
        /// The side that printed no latency.
        silent: PairSide,
        /// The candidate invocation.
        command: String,
        /// The comparator invocation.
        comparator: String,
    },
    /// A pair with the baseline build needs a `latency` record from both sides (issue 22).
    #[error(
        "paired baseline runs compare `latency` records, but {silent} printed none (command `{command}`, \
         baseline `{baseline}`)"
    )]
    NoBaselineLatency {
        /// The side that printed no latency.
        silent: PairSide,
        /// The candidate invocation.
        command: String,
        /// The baseline invocation.
        baseline: String,
    },
    /// A guardrail judges a metric the command never printed.
    #[error(
        "command `{command}` printed no `{}` records, but a guardrail on `{}` needs them",
        needed.name(),
        guardrail.name()
    )]
    MissingMetric {
        /// The candidate invocation.
        command: String,
        /// The metric whose records are missing.
        needed: Metric,
        /// The guardrail's metric (a percentile needs `latency`).
        guardrail: Metric,
    },
}

/// One side of an interleaved pair of invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairSide {
    /// The slice's own command.
    Command,
    /// The comparator command.
    Comparator,
    /// The baseline build's command.
    Baseline,
}

impl std::fmt::Display for PairSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PairSide::Command => "the command",
            PairSide::Comparator => "the comparator",
            PairSide::Baseline => "the baseline",
        })
    }
}

/// The end of a command's stderr on one line (lines joined by ` ⏎ `, its last few hundred
/// bytes, `…` where it was cut; empty when it printed nothing): shown at the
/// end of a [`CommandError`]'s message and so in the memo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandStderr(pub String);

impl std::fmt::Display for CommandStderr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        super::write_tail(f, &self.0, "; stderr was empty", "; stderr tail: ")
    }
}

/// A line of stdout that does not follow the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stdout line {line}: {message}; expected {EXPECTED}")]
pub struct RecordError {
    /// 1-based line number in the command's stdout.
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

const EXPECTED: &str = "one JSON object per line such as \
    {\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"s\", \"value\": 0.0123} \
    (or \"samples\": [...] instead of \"value\")";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_errors_read_as_the_messages_the_evidence_stores() {
        let cases = [
            (
                CommandError::Exited {
                    command: "sh -c x".into(),
                    code: 3,
                    wall_s: 0.01234,
                    stderr: CommandStderr("boom".into()),
                },
                "command `sh -c x` exited with status 3 after 0.012 s; stderr tail: boom",
            ),
            (
                CommandError::TimedOut {
                    command: "c".into(),
                    timeout: Duration::from_millis(1500),
                    stderr: CommandStderr(String::new()),
                },
                "command `c` timed out after 1.500 s (timeout_s); its process group was killed; stderr was empty",
            ),
            (
                CommandError::Signalled {
                    command: "c".into(),
                    signal: 9,
                    wall_s: 2.0,
                    stderr: CommandStderr("…a ⏎ b".into()),
                },
                "command `c` was killed by signal 9 after 2.000 s; stderr tail: …a ⏎ b",
            ),
            (
                CommandError::StdoutOverflow {
                    command: "yes".into(),
                    limit: 16 << 20,
                    stderr: CommandStderr(String::new()),
                },
                "command `yes` printed more than 16777216 bytes on stdout (the most one invocation may print); it \
                 was killed; stderr was empty",
            ),
            (
                CommandError::NoLatencyToPair {
                    silent: PairSide::Comparator,
                    command: "a".into(),
                    comparator: "b".into(),
                },
                "`effective_speedup` pairs `latency` records, but the comparator printed none (command `a`, \
                 comparator `b`)",
            ),
            (
                CommandError::MissingMetric {
                    command: "a".into(),
                    needed: Metric::Latency,
                    guardrail: Metric::LatencyP99,
                },
                "command `a` printed no `latency` records, but a guardrail on `latency_p99` needs them",
            ),
            (
                CommandError::Records {
                    command: "a".into(),
                    source: RecordError {
                        line: 2,
                        message: "bad".into(),
                    },
                },
                "command `a`: stdout line 2: bad; expected one JSON object per line such as {\"sparsegate\": 1, \
                 \"metric\": \"latency\", \"unit\": \"s\", \"value\": 0.0123} (or \"samples\": [...] instead of \
                 \"value\")",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
