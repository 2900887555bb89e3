//! One slice's workload, prepared for timing: inputs generated from the slice seed, weights
//! pruned and compressed where the plan chose the sparse path, output buffers allocated once.
//!
//! Both sides of the comparison live here. The *candidate* runs each op on its planned path;
//! the *comparator* runs the dense kernel on the same (pruned) weights, so the only thing the
//! speedup measures is the kernel, never a difference in data.

use super::kernels::{KernelError, SparseWeights, dense::gemm_f32};
use crate::ingress::{GemmOp, Slice, Sparsity};
use crate::lower::{KernelPath, Plan};
use crate::schedule::{CpuSchedule, schedule_cpu};
use rand::distr::{Distribution, Uniform};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Relative error allowed per unit of K, against the largest comparator output: f32 sums of
/// K products drift by about K·ε in the worst case, and a wrong index errs by O(1).
const TOLERANCE_PER_K: f64 = 1e-6;

/// All ops of a slice, ready to run.
pub(crate) struct Workload {
    ops: Vec<PreparedOp>,
    threads: usize,
}

struct PreparedOp {
    op: GemmOp,
    /// Dense weights as the comparator sees them: pruned for sparse ops.
    dense_w: Vec<f32>,
    /// The compressed weights when the op takes the sparse path.
    sparse: Option<SparseWeights>,
    x: Vec<f32>,
    y_candidate: Vec<f32>,
    y_comparator: Vec<f32>,
    schedule: CpuSchedule,
}

impl Workload {
    /// Generate inputs and prepare every op; an error says which op could not be prepared.
    pub(crate) fn prepare(slice: &Slice, plan: &Plan) -> Result<Workload, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(slice.seed);
        let threads = slice.threads.max(1);
        let ops = plan
            .ops
            .iter()
            .map(|p| prepare_op(&p.op, p.path, slice.sparsity, threads, &mut rng))
            .collect::<Result<_, _>>()?;
        Ok(Workload { ops, threads })
    }

    /// Run every op on its planned path.
    pub(crate) fn run_candidate(&mut self) -> Result<(), KernelError> {
        for p in &mut self.ops {
            let GemmOp { m, n, k, .. } = p.op;
            match &p.sparse {
                Some(a) => a.spmm_scheduled(&p.schedule, &p.x, &mut p.y_candidate, m)?,
                None => gemm_f32(self.threads, &p.dense_w, &p.x, &mut p.y_candidate, n, k, m)?,
            }
        }
        Ok(())
    }

    /// Run every op on the dense kernel.
    pub(crate) fn run_comparator(&mut self) -> Result<(), KernelError> {
        for p in &mut self.ops {
            let GemmOp { m, n, k, .. } = p.op;
            gemm_f32(self.threads, &p.dense_w, &p.x, &mut p.y_comparator, n, k, m)?;
        }
        Ok(())
    }

    /// Compare the last candidate outputs with the last comparator outputs, op by op.
    pub(crate) fn check(&self) -> Result<(), String> {
        for p in &self.ops {
            let scale = p
                .y_comparator
                .iter()
                .fold(0.0f64, |s, &v| s.max(f64::from(v).abs()));
            let err = p
                .y_candidate
                .iter()
                .zip(&p.y_comparator)
                .fold(0.0f64, |e, (&a, &b)| e.max(f64::from(a - b).abs()));
            let allowed = TOLERANCE_PER_K * (p.op.k.max(100) as f64) * scale;
            if err.is_nan() || err > allowed {
                return Err(format!(
                    "op `{}`: candidate output differs from the dense comparator by {err:e} \
                     (allowed {allowed:e} = {TOLERANCE_PER_K:e}·max(K,100)·max|y|)",
                    p.op.name
                ));
            }
        }
        Ok(())
    }

    /// Bytes of weights the candidate streams per pass, all ops.
    pub(crate) fn weight_bytes(&self) -> usize {
        self.ops
            .iter()
            .map(|p| match &p.sparse {
                Some(a) => a.value_bytes() + a.metadata_bytes(),
                None => p.dense_w.len() * 4,
            })
            .sum()
    }

    /// `(value_bytes, metadata_bytes)` over the ops on the sparse path.
    pub(crate) fn sparse_bytes(&self) -> (usize, usize) {
        self.ops
            .iter()
            .filter_map(|p| p.sparse.as_ref())
            .fold((0, 0), |(v, m), a| (v + a.value_bytes(), m + a.metadata_bytes()))
    }
}

fn prepare_op(
    op: &GemmOp,
    path: KernelPath,
    sparsity: Sparsity,
    threads: usize,
    rng: &mut ChaCha8Rng,
) -> Result<PreparedOp, String> {
    let GemmOp { m, n, k, .. } = *op;
    // Weights with variance 1/K (uniform ±√(3/K)), so outputs stay O(1) at any K.
    let bound = if k == 0 { 1.0 } else { (3.0 / k as f32).sqrt() };
    let mut dense_w = random(rng, n, k, bound, &op.name)?;
    let x = random(rng, k, m, 1.0, &op.name)?;
    let sparse = match path {
        KernelPath::Sparse => {
            let a = SparseWeights::prune_and_compress(&mut dense_w, n, k, sparsity)
                .map_err(|e| format!("op `{}`: cannot compress to {sparsity}: {e}", op.name))?;
            if a.is_none() {
                return Err(format!(
                    "op `{}`: the plan chose a sparse kernel, but there is none for {sparsity}",
                    op.name
                ));
            }
            a
        }
        _ => None,
    };
    Ok(PreparedOp {
        op: op.clone(),
        dense_w,
        sparse,
        x,
        y_candidate: zeros(n, m, &op.name)?,
        y_comparator: zeros(n, m, &op.name)?,
        schedule: schedule_cpu(op, threads),
    })
}

fn zeros(rows: usize, cols: usize, name: &str) -> Result<Vec<f32>, String> {
    let len = rows
        .checked_mul(cols)
        .ok_or_else(|| format!("op `{name}`: {rows}×{cols} overflows"))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|e| format!("op `{name}`: cannot allocate {rows}×{cols} f32: {e}"))?;
    v.resize(len, 0.0);
    Ok(v)
}

fn random(rng: &mut impl Rng, rows: usize, cols: usize, bound: f32, name: &str) -> Result<Vec<f32>, String> {
    let mut v = zeros(rows, cols, name)?;
    let dist = Uniform::new_inclusive(-bound, bound).map_err(|e| format!("op `{name}`: {e}"))?;
    v.iter_mut().for_each(|e| *e = dist.sample(rng));
    Ok(v)
}
