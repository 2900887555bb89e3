//! Why another tool's results cannot be read (`execute/import.rs` reads them).

use serde_json::Value;
use std::path::PathBuf;

/// Why another tool's results cannot be read as samples.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The result file cannot be opened.
    #[error("cannot open: {0}")]
    Open(#[source] std::io::Error),
    /// The result file is larger than the readers accept.
    #[error("{bytes} bytes is over the {limit}-byte limit")]
    TooLarge {
        /// The file's size.
        bytes: u64,
        /// The largest size read.
        limit: u64,
    },
    /// The result file is not JSON.
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// The top-level list of results is missing: not an export of the tool named.
    #[error("no `{key}` array (was it written with {written_with}?)")]
    NotAnExport {
        /// The list the format keeps its results in.
        key: &'static str,
        /// The tool's option that writes this format.
        written_with: &'static str,
    },
    /// No entry has the name asked for.
    #[error("no benchmark `{name}`; entries in the file: {}", known.join(", "))]
    UnknownEntry {
        /// The name asked for.
        name: String,
        /// The names the file holds.
        known: Vec<String>,
    },
    /// A Google Benchmark entry reported an error instead of timings.
    #[error("benchmark `{name}` reported an error: {message}")]
    BenchmarkFailed {
        /// The benchmark.
        name: String,
        /// Its `error_message`.
        message: String,
    },
    /// A Google Benchmark `time_unit` this reader does not know.
    #[error("unknown time_unit `{0}`")]
    UnknownUnit(String),
    /// A Google Benchmark entry without a numeric `real_time`.
    #[error("an entry of `{name}` has no numeric `real_time`")]
    NoRealTime {
        /// The benchmark.
        name: String,
    },
    /// A hyperfine command failed in at least one run.
    #[error("command `{name}` exited with {code} in at least one run")]
    NonZeroExit {
        /// The command name.
        name: String,
        /// The first non-zero exit code, as the file holds it.
        code: Value,
    },
    /// A pytest-benchmark entry saved without its raw rounds.
    #[error(
        "benchmark `{name}` has summary statistics only; rerun pytest with --benchmark-save-data \
         so the raw rounds are kept"
    )]
    SummaryOnly {
        /// The benchmark.
        name: String,
    },
    /// No criterion `sample.json` for the id asked for.
    #[error("no `{}`; {}", file.display(), describe_criterion_ids(known))]
    NoCriterionSample {
        /// The file that was expected.
        file: PathBuf,
        /// The benchmark ids found below the directory.
        known: Vec<String>,
    },
    /// A criterion id that would leave the criterion directory (`..`, an absolute path or
    /// a link out: issue 23).
    #[error("criterion id `{id}` leaves the criterion directory (no `..`, absolute paths or links out)")]
    CriterionOutside {
        /// The id as given.
        id: String,
    },
    /// A criterion `sample.json` whose `iters` and `times` differ in length.
    #[error("`{}` has {iters} iteration counts for {times} times", file.display())]
    RaggedCriterionSample {
        /// The sample file.
        file: PathBuf,
        /// Iteration counts.
        iters: usize,
        /// Times.
        times: usize,
    },
    /// A list of numbers is missing.
    #[error("no `{0}` array")]
    NoNumbers(&'static str),
    /// A list of numbers holds something else.
    #[error("`{0}` holds a value that is not a number")]
    NotANumber(&'static str),
    /// The entry has no samples at all.
    #[error("entry `{0}` has no samples")]
    NoSamples(String),
    /// A GPU trace with more events than the reader keeps (memory stays bounded).
    #[error(
        "more than {limit} trace events; profile fewer steps (e.g. a `torch.profiler.schedule` with active=1..3, or `nsys --capture-range`)"
    )]
    TooManyEvents {
        /// The most events read.
        limit: u64,
    },
    /// A GPU trace event (or row) that cannot be a kernel or range.
    #[error("event {index} has {what}; was the trace written by the profiler and not edited?")]
    BadEvent {
        /// Its position among the events (or rows) read.
        index: u64,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A Chrome trace that is not valid JSON (the file's text is not repeated here).
    #[error("not valid JSON at line {line} column {column}: {what}; write it again with export_chrome_trace")]
    TraceJson {
        /// Line of the problem.
        line: usize,
        /// Column of the problem.
        column: usize,
        /// Which kind of problem.
        what: &'static str,
    },
    /// An SQLite export without a table the reader needs.
    #[error(
        "no `{table}` table; export with `nsys export --type sqlite` from a profile captured with CUDA tracing (`nsys profile -t cuda,nvtx`)"
    )]
    MissingTable {
        /// The table.
        table: &'static str,
    },
    /// The file cannot be read as an SQLite database.
    #[error("not a readable SQLite database ({0}); was it written with `nsys export --type sqlite`?")]
    Sqlite(String),
    /// No range of the trace matches the pack's `ranges`.
    #[error("no range matches `{pattern}`; ranges in the trace: {}", if known.is_empty() { "none (record_function / NVTX ranges)".to_owned() } else { known.join(", ") })]
    NoRange {
        /// The pack's pattern.
        pattern: String,
        /// Range names found (escaped, at most 20).
        known: Vec<String>,
    },
    /// A GPU trace without a single kernel.
    #[error(
        "the trace holds no GPU kernels; was the profile captured with CUDA activity (`ProfilerActivity.CUDA`, `nsys -t cuda`)?"
    )]
    NoKernels,
    /// The entry holds a time that is zero, negative or not finite.
    #[error("entry `{name}` holds a time that is not a positive number ({time})")]
    BadTime {
        /// The entry.
        name: String,
        /// The offending time, seconds.
        time: f64,
    },
}

fn describe_criterion_ids(known: &[String]) -> String {
    if known.is_empty() {
        "no criterion results below it (was `cargo bench` run, and is `file` the criterion directory?)"
            .to_owned()
    } else {
        format!("benchmark ids found: {}", known.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_errors_read_as_the_messages_the_evidence_stores() {
        let file = PathBuf::from("c/x/new/sample.json");
        let cases = [
            (
                ImportError::TooLarge {
                    bytes: 70_000_000,
                    limit: 64 << 20,
                },
                "70000000 bytes is over the 67108864-byte limit",
            ),
            (
                ImportError::NotAnExport {
                    key: "benchmarks",
                    written_with: "--benchmark_format=json",
                },
                "no `benchmarks` array (was it written with --benchmark_format=json?)",
            ),
            (
                ImportError::SummaryOnly { name: "t".into() },
                "benchmark `t` has summary statistics only; rerun pytest with --benchmark-save-data so the raw \
                 rounds are kept",
            ),
            (
                ImportError::NoCriterionSample {
                    file: file.clone(),
                    known: vec![],
                },
                "no `c/x/new/sample.json`; no criterion results below it (was `cargo bench` run, and is `file` the \
                 criterion directory?)",
            ),
            (
                ImportError::NoCriterionSample {
                    file: file.clone(),
                    known: vec!["a".into(), "b".into()],
                },
                "no `c/x/new/sample.json`; benchmark ids found: a, b",
            ),
            (
                ImportError::RaggedCriterionSample {
                    file,
                    iters: 3,
                    times: 2,
                },
                "`c/x/new/sample.json` has 3 iteration counts for 2 times",
            ),
            (
                ImportError::BadTime {
                    name: "e".into(),
                    time: -1.0,
                },
                "entry `e` holds a time that is not a positive number (-1)",
            ),
            (
                ImportError::NonZeroExit {
                    name: "c".into(),
                    code: serde_json::json!(2),
                },
                "command `c` exited with 2 in at least one run",
            ),
            (
                ImportError::UnknownEntry {
                    name: "n".into(),
                    known: vec!["a".into(), "b".into()],
                },
                "no benchmark `n`; entries in the file: a, b",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
