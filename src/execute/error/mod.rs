//! Why a slice's measurement stopped. A failed slice is evidence, not an error of the
//! command: [`SliceEvidence::finish`](super::SliceEvidence) renders an [`ExecError`] to the
//! text of its `SliceFailure` (the one place it becomes a string), so every variant's
//! message is the text evidence files and memos already hold, byte for byte.
//!
//! The backends' own failures have their own enums, one file each here ([`ChildError`],
//! [`CommandError`], [`ImportError`]): below the modules that raise them, so that `run`
//! can name a child's error and `child` a run's record without an import cycle inside the
//! stage. [`ExecError`] joins them with what the built-in workloads can hit: a kernel
//! refusing its inputs, an op that cannot be prepared, a check of the sparse result against
//! the dense comparator, a child's record that does not hold together, a model that cannot
//! be trained.

mod child;
mod command;
mod import;

pub use child::{ChildError, StderrTail};
pub use command::{CommandError, CommandStderr, PairSide, RecordError};
pub use import::ImportError;

use super::kernels::KernelError;
use crate::domain::Sparsity;
use crate::ingress::pack::{DatasetName, ImportFormat};
use crate::sim::SimError;
use std::path::PathBuf;

/// Why a slice produced no (or partial) evidence, as the execution stage saw it.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The plan has no ops: nothing to time.
    #[error("the slice has no ops to run")]
    NoOps,
    /// The slice's worker pool could not be started.
    #[error("cannot start {threads} worker threads: {source}")]
    WorkerPool {
        /// Threads the slice asked for.
        threads: usize,
        /// Why the pool did not start.
        source: rayon::ThreadPoolBuildError,
    },
    /// A kernel refused its inputs while the slice was timed.
    #[error("kernel refused its inputs: {0}")]
    Kernel(#[from] KernelError),
    /// An op's inputs or weights could not be prepared.
    #[error("op `{op}`: {problem}")]
    Prepare {
        /// The op's name.
        op: String,
        /// What went wrong.
        #[source]
        problem: PrepareError,
    },
    /// An int8 op's candidate sums differ from the dense comparator's (they must be equal:
    /// int8 products are exact in i32).
    #[error(
        "op `{op}`: int8 candidate sum {candidate} differs from the dense comparator's {comparator} at \
         element {element} (int8 products are exact in i32)"
    )]
    Int8Mismatch {
        /// The op's name.
        op: String,
        /// The candidate's sum.
        candidate: i32,
        /// The comparator's sum.
        comparator: i32,
        /// The first element that differs.
        element: usize,
    },
    /// An int8 op's output, scaled by its kernel as it was stored, is not its exact sum
    /// dequantized.
    #[error(
        "op `{op}`: the int8 {side}'s output {stored:e} at element {element} is not its sum dequantized \
         ({expected:e}); the kernel's scaling store is wrong"
    )]
    Int8Scaling {
        /// The op's name.
        op: String,
        /// Which product: candidate or comparator.
        side: &'static str,
        /// The first element that differs.
        element: usize,
        /// What the product stored.
        stored: f32,
        /// Its sum, dequantized.
        expected: f32,
    },
    /// An op's candidate output is further from the dense comparator's than f32 rounding
    /// explains.
    #[error(
        "op `{op}`: candidate output differs from the dense comparator by {deviation:e} (allowed {allowed:e} = \
         {tolerance_per_k:e}·max(K,100)·max|y|)"
    )]
    OutputMismatch {
        /// The op's name.
        op: String,
        /// The largest absolute difference (NaN when an output is NaN).
        deviation: f64,
        /// The largest difference allowed.
        allowed: f64,
        /// The allowance per unit of K, relative to the largest comparator output.
        tolerance_per_k: f64,
    },
    /// A run delegated to a child process produced no record.
    #[error("run {run} (child process): {source}")]
    Child {
        /// The run index.
        run: u32,
        /// Why.
        source: ChildError,
    },
    /// A run of the baseline build (issue 22), in a child process of the baseline
    /// binary, produced no record.
    #[error("baseline run {run} (child process of the baseline binary): {source}")]
    BaselineChild {
        /// The run index.
        run: u32,
        /// Why.
        source: ChildError,
    },
    /// A run's record holds different numbers of slice, comparator and calibration
    /// timings, or none.
    #[error(
        "run {run} sent {candidate} slice, {comparator} comparator and {calibration} calibration timings; \
         expected the same positive number of each"
    )]
    RaggedRun {
        /// The run index.
        run: usize,
        /// Slice timings.
        candidate: usize,
        /// Comparator timings.
        comparator: usize,
        /// Calibration timings.
        calibration: usize,
    },
    /// A run's record holds a timing that is zero, negative or not finite.
    #[error("run {run} sent a timing of {timing} s; timings must be positive and finite")]
    BadTiming {
        /// The run index.
        run: usize,
        /// The offending timing, seconds.
        timing: f64,
    },
    /// Under load, no request was served.
    #[error("every request was dropped")]
    AllDropped {
        /// Requests offered.
        requests: u64,
    },
    /// An `import` slice's results cannot be read.
    #[error("{} `{}`: {problem}", format.as_str(), path.display())]
    Import {
        /// The results' format.
        format: ImportFormat,
        /// The results file (or criterion directory).
        path: PathBuf,
        /// What is wrong.
        #[source]
        problem: ImportError,
    },
    /// A `command` slice's command failed or printed too little.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The simulator refused an op of a `sim` slice.
    #[error("op `{op}`: {source}")]
    Sim {
        /// The op's name.
        op: String,
        /// What the simulator refused.
        source: SimError,
    },
    /// A model slice's dataset, training or equal-latency search failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Why one op's workload (inputs, weights, compressed form, buffers) cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The fp32 reference product of the unpruned weights failed.
    #[error("reference: {0}")]
    Reference(#[source] KernelError),
    /// The weights cannot be pruned and compressed to the slice's pattern.
    #[error("cannot compress to {sparsity}: {source}")]
    Compress {
        /// The slice's pattern.
        sparsity: Sparsity,
        /// The kernels' refusal.
        source: KernelError,
    },
    /// The plan put the op on a sparse kernel, but the pattern has no compressed form.
    #[error("the plan chose a sparse kernel, but there is none for {0}")]
    NoSparseKernel(Sparsity),
    /// Quantising or compressing the int8 operands failed.
    #[error("int8: {0}")]
    Int8(#[source] KernelError),
    /// The checkpoint's tensor could not be read (the file changed after ingress, or its
    /// dtype is not one the CPU runs).
    #[error("checkpoint tensor `{tensor}`: {problem}")]
    Checkpoint {
        /// The tensor.
        tensor: String,
        /// What went wrong.
        problem: String,
    },
    /// The dense comparator's weight layout was refused.
    #[error(transparent)]
    DenseLayout(KernelError),
    /// A buffer's element count overflows `usize`.
    #[error("{rows}×{cols} overflows")]
    Overflow {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// A buffer cannot be allocated.
    #[error("cannot allocate {rows}×{cols} f32: {source}")]
    Alloc {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// The allocator's refusal.
        source: std::collections::TryReserveError,
    },
    /// The weight distribution's bounds are not a valid range.
    #[error(transparent)]
    Distribution(rand::distr::uniform::Error),
}

/// Why a model slice (`mlp:` workload) could not be trained, pruned or matched in latency.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The embedded dataset's size does not match its record layout.
    #[error("dataset `{}`: {bytes} bytes, expected {samples} records of {record}", dataset.as_str())]
    DatasetSize {
        /// The dataset.
        dataset: DatasetName,
        /// Bytes embedded.
        bytes: usize,
        /// Records expected.
        samples: usize,
        /// Bytes per record.
        record: usize,
    },
    /// An embedded record holds a label or pixel out of range.
    #[error("dataset `{}`: a record is out of range", .0.as_str())]
    DatasetRecord(DatasetName),
    /// The embedded labels do not have the class counts ingress relies on.
    #[error("dataset `{}`: class counts {counts:?} differ from the expected {expected:?}", dataset.as_str())]
    DatasetClasses {
        /// The dataset.
        dataset: DatasetName,
        /// Samples per class found.
        counts: Vec<usize>,
        /// Samples per class expected.
        expected: &'static [usize],
    },
    /// A training epoch of the dense model failed in a kernel.
    #[error("training: {0}")]
    Training(#[source] KernelError),
    /// Training produced non-finite weights.
    #[error("training diverged (non-finite weights) at learning_rate {learning_rate}; lower it")]
    Diverged {
        /// The recipe's learning rate.
        learning_rate: f64,
    },
    /// A fine-tuning epoch after a pruning step failed in a kernel.
    #[error("fine-tuning: {0}")]
    FineTuning(#[source] KernelError),
    /// Predicting the validation split after a pruning step failed in a kernel.
    #[error("validation: {0}")]
    Validation(#[source] KernelError),
    /// The model's logits on the sparse kernels differ from the dense kernel's on the same
    /// weights by more than f32 rounding explains.
    #[error(
        "model logits on the sparse kernels differ from the dense kernel's by {deviation:e} (allowed {allowed:e})"
    )]
    LogitsMismatch {
        /// The largest absolute difference (NaN when a logit is NaN).
        deviation: f64,
        /// The largest difference allowed.
        allowed: f64,
    },
    /// A dense model of one width of the equal-latency search could not be set up.
    #[error("equal-latency probe at width {width}: {source}")]
    EqualLatencyProbe {
        /// The hidden width probed.
        width: usize,
        /// The kernels' refusal.
        source: KernelError,
    },
    /// The equal-latency model's predictions failed in a kernel.
    #[error("equal-latency model: {0}")]
    EqualLatencyModel(#[source] KernelError),
}

/// The end of a process's stderr as its error message ends: `when_empty` when it printed
/// nothing, else `lead` and the text.
fn write_tail(f: &mut std::fmt::Formatter<'_>, text: &str, when_empty: &str, lead: &str) -> std::fmt::Result {
    if text.is_empty() {
        f.write_str(when_empty)
    } else {
        write!(f, "{lead}{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each message is the text the `format!` that built the failure before these types
    /// produced: evidence files and memos keep it byte for byte.
    #[test]
    fn execution_errors_read_as_the_messages_the_evidence_stores() {
        let group = || KernelError::GroupSize { k: 30, m: 4 };
        let prepare = |problem| ExecError::Prepare {
            op: "p".into(),
            problem,
        };
        let cases = [
            (ExecError::NoOps, "the slice has no ops to run"),
            (
                ExecError::Kernel(group()),
                "kernel refused its inputs: K = 30 is not a multiple of the group size 4",
            ),
            (
                prepare(PrepareError::NoSparseKernel(Sparsity::Dense)),
                "op `p`: the plan chose a sparse kernel, but there is none for dense",
            ),
            (
                prepare(PrepareError::Compress {
                    sparsity: Sparsity::NOfM { n: 2, m: 4 },
                    source: group(),
                }),
                "op `p`: cannot compress to 2:4: K = 30 is not a multiple of the group size 4",
            ),
            (
                prepare(PrepareError::Reference(group())),
                "op `p`: reference: K = 30 is not a multiple of the group size 4",
            ),
            (
                prepare(PrepareError::Int8(group())),
                "op `p`: int8: K = 30 is not a multiple of the group size 4",
            ),
            (
                prepare(PrepareError::DenseLayout(KernelError::Length {
                    what: "w",
                    expected: 12,
                    actual: 11,
                })),
                "op `p`: w has 11 elements, but its shape needs 12",
            ),
            (
                prepare(PrepareError::Overflow { rows: 3, cols: 4 }),
                "op `p`: 3×4 overflows",
            ),
            (
                ExecError::Int8Mismatch {
                    op: "p".into(),
                    candidate: 5,
                    comparator: 6,
                    element: 7,
                },
                "op `p`: int8 candidate sum 5 differs from the dense comparator's 6 at element 7 (int8 products \
                 are exact in i32)",
            ),
            (
                ExecError::Int8Scaling {
                    op: "p".into(),
                    side: "candidate",
                    element: 3,
                    stored: 0.5,
                    expected: 0.25,
                },
                "op `p`: the int8 candidate's output 5e-1 at element 3 is not its sum dequantized (2.5e-1); the \
                 kernel's scaling store is wrong",
            ),
            (
                ExecError::OutputMismatch {
                    op: "p".into(),
                    deviation: 0.5,
                    allowed: 3.2e-5,
                    tolerance_per_k: 1e-6,
                },
                "op `p`: candidate output differs from the dense comparator by 5e-1 (allowed 3.2e-5 = \
                 1e-6·max(K,100)·max|y|)",
            ),
            (
                ExecError::Child {
                    run: 1,
                    source: ChildError::LockMismatch {
                        fields: vec!["cpu_model".into()],
                    },
                },
                "run 1 (child process): the child process measured under a different environment lock (cpu_model)",
            ),
            (
                ExecError::RaggedRun {
                    run: 0,
                    candidate: 2,
                    comparator: 1,
                    calibration: 2,
                },
                "run 0 sent 2 slice, 1 comparator and 2 calibration timings; expected the same positive number \
                 of each",
            ),
            (
                ExecError::BadTiming { run: 1, timing: -1.0 },
                "run 1 sent a timing of -1 s; timings must be positive and finite",
            ),
            (
                ExecError::AllDropped { requests: 64 },
                "every request was dropped",
            ),
            (
                ExecError::Import {
                    format: ImportFormat::Hyperfine,
                    path: "h.json".into(),
                    problem: ImportError::NoNumbers("times"),
                },
                "hyperfine `h.json`: no `times` array",
            ),
            (
                ExecError::Sim {
                    op: "p".into(),
                    source: SimError::BadLayer {
                        message: "m must be positive".into(),
                    },
                },
                "op `p`: m must be positive",
            ),
            (
                ModelError::DatasetSize {
                    dataset: DatasetName::Digits,
                    bytes: 10,
                    samples: 1797,
                    record: 65,
                }
                .into(),
                "dataset `digits`: 10 bytes, expected 1797 records of 65",
            ),
            (
                ModelError::DatasetRecord(DatasetName::Digits).into(),
                "dataset `digits`: a record is out of range",
            ),
            (
                ModelError::DatasetClasses {
                    dataset: DatasetName::Digits,
                    counts: vec![1, 2],
                    expected: &[1, 3],
                }
                .into(),
                "dataset `digits`: class counts [1, 2] differ from the expected [1, 3]",
            ),
            (
                ModelError::Training(group()).into(),
                "training: K = 30 is not a multiple of the group size 4",
            ),
            (
                ModelError::Diverged { learning_rate: 0.5 }.into(),
                "training diverged (non-finite weights) at learning_rate 0.5; lower it",
            ),
            (
                ModelError::LogitsMismatch {
                    deviation: f64::NAN,
                    allowed: 1e-4,
                }
                .into(),
                "model logits on the sparse kernels differ from the dense kernel's by NaN (allowed 1e-4)",
            ),
            (
                ModelError::EqualLatencyProbe {
                    width: 8,
                    source: KernelError::Overflow { rows: 1, cols: 2 },
                }
                .into(),
                "equal-latency probe at width 8: shape 1×2 overflows the address space",
            ),
            (
                ModelError::EqualLatencyModel(group()).into(),
                "equal-latency model: K = 30 is not a multiple of the group size 4",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }
}
