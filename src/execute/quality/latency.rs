//! Timing a model's inference, and the equal-latency dense model.
//!
//! [`InferencePair`] runs the MLP's two layers on the whole test split: the candidate on
//! the slice's planned kernels (sparse where lowering chose them), the comparator on the
//! dense kernel. For the slice's evidence both hold the same pruned weights (the usual
//! fair comparator); for the equal-latency search the comparator is a dense model of
//! another width, and only the ratio of their times matters.

use super::dataset::{Dataset, Split};
use super::mlp::{Mlp, add_bias_relu, argmax_columns, inputs_transposed};
use super::{score, trained_dense};
use crate::domain::{GemmOp, Sparsity};
use crate::execute::error::{ExecError, ModelError};
use crate::execute::evidence::EqualLatency;
use crate::execute::kernels::dense::DenseWeights;
use crate::execute::kernels::{KernelError, SparseWeights, bsr, csr, nm};
use crate::execute::run::{Phase, TimedPair, median_paired_ratio};
use crate::ingress::ModelTask;
use crate::ingress::pack::{RunMode, SamplePolicy};
use crate::lower::{KernelPath, Plan};
use crate::schedule::{CpuSchedule, schedule_cpu};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Relative tolerance of the candidate's logits against the comparator's, per unit of K
/// (as in the GEMM workloads' check).
const TOLERANCE_PER_K: f64 = 1e-6;

/// The sampling of one equal-latency probe: short, because a probe decides a search step,
/// not a verdict; the ratio is paired, so machine drift cancels.
fn probe_policy() -> SamplePolicy {
    SamplePolicy {
        warmup: 3,
        min: 15,
        max: 200,
        time_budget_s: 0.15,
        drop_outliers: false,
        runs: 1,
        run_mode: Some(RunMode::InProcess),
        ..SamplePolicy::default()
    }
}

/// One linear layer ready to run.
struct Layer {
    op: GemmOp,
    w: DenseWeights,
    b: Vec<f32>,
    sparse: Option<SparseWeights>,
    schedule: CpuSchedule,
}

/// A two-layer network with its activation buffers.
struct Net {
    layers: [Layer; 2],
    hidden: Vec<f32>,
    out: Vec<f32>,
}

impl Net {
    /// `sparse_paths`: which layers run on a sparse kernel (compressed from `model`'s zeros
    /// in `sparsity`'s format).
    fn new(
        model: &Mlp,
        sparsity: Sparsity,
        sparse_paths: [bool; 2],
        m: usize,
        threads: usize,
    ) -> Result<Net, KernelError> {
        let shapes = [
            ("fc1", &model.w1, &model.b1, model.hidden, model.features),
            ("fc2", &model.w2, &model.b2, model.classes, model.hidden),
        ];
        let mut built = Vec::with_capacity(2);
        for ((name, w, b, n, k), sparse) in shapes.into_iter().zip(sparse_paths) {
            let op = GemmOp {
                name: name.into(),
                m,
                n,
                k,
            };
            let compressed = if sparse {
                compress(w, n, k, sparsity)?
            } else {
                None
            };
            built.push(Layer {
                schedule: schedule_cpu(&op, threads),
                op,
                w: DenseWeights::new(w.clone(), n, k)?,
                b: b.clone(),
                sparse: compressed,
            });
        }
        let [l1, l2]: [Layer; 2] = built
            .try_into()
            .map_err(|_| KernelError::Overflow { rows: 2, cols: 0 })?;
        Ok(Net {
            hidden: vec![0.0; l1.op.n * m],
            out: vec![0.0; l2.op.n * m],
            layers: [l1, l2],
        })
    }

    fn run(&mut self, threads: usize, x: &[f32]) -> Result<(), KernelError> {
        let [l1, l2] = &self.layers;
        forward(l1, threads, x, &mut self.hidden, true)?;
        forward(l2, threads, &self.hidden, &mut self.out, false)
    }
}

fn forward(l: &Layer, threads: usize, x: &[f32], y: &mut [f32], relu: bool) -> Result<(), KernelError> {
    let m = l.op.m;
    match &l.sparse {
        Some(a) => a.spmm_scheduled(&l.schedule, x, y, m)?,
        None => l.w.gemm(threads, x, y, m)?,
    }
    add_bias_relu(y, &l.b, m, relu);
    Ok(())
}

/// Compress already-pruned weights in the format of `sparsity` (no re-pruning: a global
/// schedule's uneven rows are kept as they are).
pub(super) fn compress(
    w: &[f32],
    rows: usize,
    k: usize,
    sparsity: Sparsity,
) -> Result<Option<SparseWeights>, KernelError> {
    Ok(match sparsity {
        Sparsity::Dense => None,
        Sparsity::NOfM { n, m } => Some(SparseWeights::Nm(nm::NmMatrix::compress(
            w, rows, k, n as usize, m as usize,
        )?)),
        Sparsity::Unstructured { .. } => Some(SparseWeights::Csr(csr::CsrMatrix::compress(w, rows, k)?)),
        Sparsity::Block {
            rows: br, cols: bc, ..
        } => Some(SparseWeights::Bsr(bsr::BsrMatrix::compress(
            w,
            rows,
            k,
            br as usize,
            bc as usize,
        )?)),
    })
}

/// The candidate model on its planned kernels against a dense model on the dense kernel,
/// both on the test split.
pub(crate) struct InferencePair {
    x: Vec<f32>,
    m: usize,
    threads: usize,
    candidate: Net,
    comparator: Net,
    /// Whether both sides hold the same weights, so their outputs must agree.
    same_model: bool,
}

impl InferencePair {
    /// `candidate` runs `sparsity` on the layers where `sparse_paths` is set; `x` is the
    /// test split as the kernels' activation operand (`features × m`).
    pub(crate) fn new(
        (candidate, sparsity, sparse_paths): (&Mlp, Sparsity, [bool; 2]),
        comparator: &Mlp,
        x: Vec<f32>,
        m: usize,
        threads: usize,
        same_model: bool,
    ) -> Result<InferencePair, KernelError> {
        Ok(InferencePair {
            x,
            m,
            threads,
            candidate: Net::new(candidate, sparsity, sparse_paths, m, threads)?,
            comparator: Net::new(comparator, Sparsity::Dense, [false, false], m, threads)?,
            same_model,
        })
    }

    /// `(value_bytes, metadata_bytes)` of the candidate's sparse layers.
    pub(crate) fn sparse_bytes(&self) -> (usize, usize) {
        self.candidate
            .layers
            .iter()
            .filter_map(|l| l.sparse.as_ref().map(|a| (a.value_bytes(), a.metadata_bytes())))
            .fold((0, 0), |(v, m), (a, b)| (v + a, m + b))
    }

    /// One candidate pass, then its predicted class per test sample.
    pub(crate) fn candidate_predictions(&mut self) -> Result<Vec<u8>, KernelError> {
        self.candidate.run(self.threads, &self.x)?;
        Ok(argmax_columns(
            &self.candidate.out,
            self.candidate.layers[1].op.n,
            self.m,
        ))
    }
}

/// Which of the MLP's two layers the plan put on a sparse kernel.
pub(crate) fn sparse_paths(plan: &Plan) -> [bool; 2] {
    let sparse = |i: usize| plan.ops.get(i).is_some_and(|p| p.path == KernelPath::Sparse);
    [sparse(0), sparse(1)]
}

impl TimedPair for InferencePair {
    fn run_candidate(&mut self) -> Result<(), KernelError> {
        self.candidate.run(self.threads, &self.x)
    }

    fn run_comparator(&mut self) -> Result<(), KernelError> {
        self.comparator.run(self.threads, &self.x)
    }

    fn check(&mut self) -> Result<(), ExecError> {
        if !self.same_model {
            return Ok(());
        }
        let (a, b) = (&self.candidate.out, &self.comparator.out);
        let scale = b.iter().fold(0.0f64, |s, &v| s.max(f64::from(v).abs()));
        let err = a
            .iter()
            .zip(b)
            .fold(0.0f64, |e, (&x, &y)| e.max(f64::from(x - y).abs()));
        let k = self.candidate.layers[1].op.k.max(self.candidate.layers[0].op.k);
        let allowed = TOLERANCE_PER_K * (k.max(100) as f64) * scale.max(1.0);
        if err.is_nan() || err > allowed {
            return Err(ModelError::LogitsMismatch {
                deviation: err,
                allowed,
            }
            .into());
        }
        Ok(())
    }
}

/// Widths the search may pick: multiples of 8 (of 4 below 16) up to the model's width.
fn width_grid(hidden: usize) -> Vec<usize> {
    let step = if hidden >= 16 { 8 } else { 4.min(hidden) };
    let mut grid: Vec<usize> = (1..=hidden / step).map(|i| i * step).collect();
    if grid.last() != Some(&hidden) {
        grid.push(hidden);
    }
    grid
}

/// Find the widest dense model whose inference is no slower than the candidate's (paired
/// ratio dense/candidate ≤ 1, by bisection over [`width_grid`], assuming time grows with
/// width), train it with the task's recipe and score it on the test split. When even the
/// full-width dense model fits, the sparse model bought no latency and the answer is the
/// full width; when not even the narrowest fits, it is the narrowest.
pub(crate) fn equal_latency(
    pool: &rayon::ThreadPool,
    (candidate, sparsity, plan): (&Mlp, Sparsity, &Plan),
    data: &Dataset,
    split: &Split,
    task: &ModelTask,
    (threads, tell): (usize, &mut dyn FnMut(Phase)),
) -> Result<EqualLatency, ExecError> {
    let grid = width_grid(candidate.hidden);
    let policy = probe_policy();
    let mut probes: Vec<(usize, f64)> = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(task.seed ^ 0x6571_6c61_7465_6e63);
    let mut probe = |width: usize, probes: &mut Vec<(usize, f64)>| -> Result<f64, ExecError> {
        // Timing does not depend on the values: an untrained model of that width will do.
        let dense = Mlp::init(candidate.features, width, candidate.classes, &mut rng);
        let x = inputs_transposed(data, &split.test);
        let mut p = InferencePair::new(
            (candidate, sparsity, sparse_paths(plan)),
            &dense,
            x,
            split.test.len(),
            threads,
            false,
        )
        .map_err(|source| ModelError::EqualLatencyProbe { width, source })?;
        let ratio = median_paired_ratio(pool, &policy, &mut p)?;
        probes.push((width, ratio));
        tell(Phase::EqualLatency {
            probes: probes.len() as u32,
        });
        Ok(ratio)
    };
    let last = grid.len() - 1;
    let chosen = if probe(grid[last], &mut probes)? <= 1.0 {
        last
    } else if probe(grid[0], &mut probes)? > 1.0 {
        0
    } else {
        // Invariant: grid[lo] fits, grid[hi] does not.
        let (mut lo, mut hi) = (0, last);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if probe(grid[mid], &mut probes)? <= 1.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let width = grid[chosen];
    let latency_ratio = probes
        .iter()
        .rev()
        .find(|(w, _)| *w == width)
        .map_or(f64::NAN, |p| p.1);
    let model = trained_dense(data, split, task, width, tell)?;
    let predictions = model
        .predict(data, &split.test)
        .map_err(ModelError::EqualLatencyModel)?;
    Ok(EqualLatency {
        dense: score(&model, data, &split.test, predictions),
        latency_ratio,
        probes,
    })
}
