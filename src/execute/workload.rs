//! One slice's workload, prepared for timing: inputs generated from the slice seed, weights
//! pruned and compressed where the plan chose the sparse path, output buffers allocated once.
//!
//! Both sides of the comparison live here. The *candidate* runs each op on its planned path;
//! the *comparator* runs the dense kernel on the same (pruned) weights, so the only thing the
//! speedup measures is the kernel, never a difference in data.
//!
//! Precisions: fp16 and bf16 round the weights and activations to the storage type, and the
//! accumulation is f32. Both run the 16-bit kernels ([`DenseBf16`]/[`DenseF16`] as the
//! comparator and for dense ops, [`TwoOfFourBf16`]/[`TwoOfFourF16`] for 2:4 ops: on the
//! stored operands where the CPU runs them, `vdpbf16ps` for bf16 and in-register widening for
//! f16, else widened inside the kernel), and unstructured ops run 16-bit CSR ([`CsrBf16`]/
//! [`CsrF16`]: 16-bit values and columns, widened in registers) where the CPU runs it; the
//! other 16-bit sparse formats widen: the weights
//! to f32 panels once (weight-stationary), the stored activations on every pass before the
//! f32 kernel runs. int8 quantises the weights per output channel and the activations with
//! one scale, multiplies into exact i32 sums ([`super::kernels::precision`]) and dequantises;
//! the check then requires the candidate's i32 sums to equal the comparator's exactly.

use super::error::{ExecError, PrepareError};
use super::evidence::OpFidelity;
use super::kernels::dense::{DenseWeights, gemm_f32};
use super::kernels::precision::{
    self, BlockBf16, CsrBf16, CsrF16, DenseBf16, DenseF16, DenseI8, Half, HalfBuf, Int8Scales, SparseI8,
    TwoOfFourBf16, TwoOfFourF16,
};
use super::kernels::{KernelError, SparseWeights};
use crate::domain::{GemmOp, Precision, Sparsity};
use crate::ingress::checkpoint::Checkpoint;
use crate::ingress::{Slice, WeightDistribution};
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
    /// Dense weights as the comparator sees them: pruned for sparse ops, laid out once for
    /// the dense kernel as the sparse ones are for theirs.
    dense_w: DenseKernel,
    /// The compressed weights when the op takes the sparse path (f32 values; an op on a
    /// 16-bit sparse kernel holds `sparse_half` instead).
    sparse: Option<SparseWeights>,
    /// The 16-bit sparse weights when a bf16 or fp16 op's format has a 16-bit kernel here.
    sparse_half: Option<SparseHalf>,
    x: Vec<f32>,
    y_candidate: Vec<f32>,
    y_comparator: Vec<f32>,
    schedule: CpuSchedule,
    /// The stored activations for fp16/bf16: widened into `x` on every pass.
    x_store: Option<HalfBuf>,
    /// The fp32 dense output of the unpruned weights on the unrounded inputs: the reference
    /// of the op's numerical fidelity ([`OpFidelity`]).
    reference: Vec<f32>,
    /// The int8 operands for an int8 slice.
    int8: Option<Int8Op>,
}

/// The dense kernel of an op: f32 weights (fp32, and the int8 slices' f32 copy) or 16-bit
/// weights on the 16-bit kernels.
enum DenseKernel {
    F32(DenseWeights),
    Bf16(DenseBf16),
    F16(DenseF16),
}

impl DenseKernel {
    fn value_bytes(&self) -> usize {
        match self {
            DenseKernel::F32(d) => d.value_bytes(),
            DenseKernel::Bf16(d) => d.value_bytes(),
            DenseKernel::F16(d) => d.value_bytes(),
        }
    }
}

/// Sparse weights in a 16-bit format of the op's precision, on a 16-bit kernel: 2:4 in
/// the compact form (bf16, fp16), blocks as bf16 pairs, unstructured as 16-bit CSR.
enum SparseHalf {
    Bf16(TwoOfFourBf16),
    F16(TwoOfFourF16),
    Bf16Blocks(BlockBf16),
    Bf16Csr(CsrBf16),
    F16Csr(CsrF16),
}

impl SparseHalf {
    /// The 16-bit form of compressed weights for the op's precision where a 16-bit kernel
    /// runs it (`None` otherwise: the f32 form stays), on the fastest kernel for products
    /// of `tokens` tokens.
    fn new(a: &SparseWeights, precision: Precision, tokens: usize) -> Option<SparseHalf> {
        match (a, precision) {
            (SparseWeights::Nm(a), Precision::Bf16) => {
                TwoOfFourBf16::from_two_of_four(a, tokens).map(SparseHalf::Bf16)
            }
            (SparseWeights::Nm(a), Precision::Fp16) => {
                TwoOfFourF16::from_two_of_four(a, tokens).map(SparseHalf::F16)
            }
            (SparseWeights::Bsr(a), Precision::Bf16) => {
                BlockBf16::from_bsr(a, tokens).map(SparseHalf::Bf16Blocks)
            }
            (SparseWeights::Csr(a), Precision::Bf16) => CsrBf16::from_csr(a).map(SparseHalf::Bf16Csr),
            (SparseWeights::Csr(a), Precision::Fp16) => CsrF16::from_csr(a).map(SparseHalf::F16Csr),
            _ => None,
        }
    }

    /// The product on the stored activations (of the same storage type, by construction).
    fn spmm(&self, threads: usize, x: &HalfBuf, y: &mut [f32], m: usize) -> Result<(), KernelError> {
        match (self, x) {
            (SparseHalf::Bf16(a), HalfBuf::Bf16(x)) => a.spmm(threads, x, y, m),
            (SparseHalf::F16(a), HalfBuf::F16(x)) => a.spmm(threads, x, y, m),
            (SparseHalf::Bf16Blocks(a), HalfBuf::Bf16(x)) => a.spmm(threads, x, y, m),
            (SparseHalf::Bf16Csr(a), HalfBuf::Bf16(x)) => a.spmm(threads, x, y, m),
            (SparseHalf::F16Csr(a), HalfBuf::F16(x)) => a.spmm(threads, x, y, m),
            (SparseHalf::Bf16(a), _) => a.spmm(threads, &[], y, m),
            (SparseHalf::F16(a), _) => a.spmm(threads, &[], y, m),
            (SparseHalf::Bf16Blocks(a), _) => a.spmm(threads, &[], y, m),
            (SparseHalf::Bf16Csr(a), _) => a.spmm(threads, &[], y, m),
            (SparseHalf::F16Csr(a), _) => a.spmm(threads, &[], y, m),
        }
    }

    fn bytes(&self) -> (usize, usize) {
        match self {
            SparseHalf::Bf16(a) => (a.value_bytes(), a.metadata_bytes()),
            SparseHalf::F16(a) => (a.value_bytes(), a.metadata_bytes()),
            SparseHalf::Bf16Blocks(a) => (a.value_bytes(), a.metadata_bytes()),
            SparseHalf::Bf16Csr(a) => (a.value_bytes(), a.metadata_bytes()),
            SparseHalf::F16Csr(a) => (a.value_bytes(), a.metadata_bytes()),
        }
    }
}

impl PreparedOp {
    /// Widen the stored fp16/bf16 activations into `x`, as every pass of an f32 kernel does
    /// (nothing to do for fp32 and int8).
    fn widen_activations(&mut self) -> Result<(), KernelError> {
        match &self.x_store {
            Some(store) => store.to_f32_into(&mut self.x),
            None => Ok(()),
        }
    }

    /// The dense product into the candidate's output or the comparator's: 16-bit on the
    /// stored activations, f32 on the widened ones.
    fn run_dense(&mut self, threads: usize, candidate: bool) -> Result<(), KernelError> {
        if let DenseKernel::F32(_) = self.dense_w {
            self.widen_activations()?;
        }
        let m = self.op.m;
        let y = if candidate {
            &mut self.y_candidate
        } else {
            &mut self.y_comparator
        };
        match (&self.dense_w, &self.x_store) {
            (DenseKernel::Bf16(d), Some(HalfBuf::Bf16(x))) => d.gemm(threads, x, y, m),
            (DenseKernel::Bf16(d), _) => d.gemm(threads, &[], y, m),
            (DenseKernel::F16(d), Some(HalfBuf::F16(x))) => d.gemm(threads, x, y, m),
            (DenseKernel::F16(d), _) => d.gemm(threads, &[], y, m),
            (DenseKernel::F32(d), _) => d.gemm(threads, &self.x, y, m),
        }
    }
}

/// int8 operands and i32 accumulators.
struct Int8Op {
    /// The dense comparator's weights, laid out once like the sparse candidate's.
    dense: DenseI8,
    w_scale: Vec<f32>,
    x: Vec<i8>,
    x_scale: f32,
    /// The kept entries when the op takes the sparse path.
    sparse: Option<SparseI8>,
    /// The exact sums, taken by the correctness check (the timed products store f32).
    acc_candidate: Vec<i32>,
    acc_comparator: Vec<i32>,
}

impl Int8Op {
    /// The scales its products' f32 outputs take.
    fn scales(&self) -> Int8Scales<'_> {
        Int8Scales {
            w_scale: &self.w_scale,
            x_scale: self.x_scale,
        }
    }
}

impl Workload {
    /// Generate inputs and prepare every op; an error says which op could not be prepared.
    pub(crate) fn prepare(slice: &Slice, plan: &Plan) -> Result<Workload, ExecError> {
        let mut rng = ChaCha8Rng::seed_from_u64(slice.seed);
        let threads = slice.threads.max(1);
        let ops = plan
            .ops
            .iter()
            .map(|p| {
                prepare_op(
                    &p.op,
                    p.path,
                    (slice.sparsity, slice.precision),
                    WeightSource::of(slice),
                    threads,
                    &mut rng,
                )
                .map_err(|problem| ExecError::Prepare {
                    op: p.op.name.clone(),
                    problem,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Workload { ops, threads })
    }

    /// Run every op on its planned path.
    pub(crate) fn run_candidate(&mut self) -> Result<(), KernelError> {
        (0..self.ops.len()).try_for_each(|i| self.run_candidate_op(i))
    }

    /// Run every op on the dense kernel.
    pub(crate) fn run_comparator(&mut self) -> Result<(), KernelError> {
        (0..self.ops.len()).try_for_each(|i| self.run_comparator_op(i))
    }

    /// Names of the ops, in plan order.
    pub(crate) fn op_names(&self) -> impl Iterator<Item = &str> {
        self.ops.iter().map(|p| p.op.name.as_str())
    }

    /// Op `index`'s last candidate output against its unpruned fp32 reference (`None` past
    /// the last op).
    pub(crate) fn fidelity(&self, index: usize) -> Option<OpFidelity> {
        let p = self.ops.get(index)?;
        Some(OpFidelity::of(&p.y_candidate, &p.reference))
    }

    /// Run op `index` on its planned path (an index past the last op does nothing), the
    /// other workers kept awake for the next product ([`super::linger`]).
    pub(crate) fn run_candidate_op(&mut self, index: usize) -> Result<(), KernelError> {
        super::linger::product_starts();
        let done = self.candidate_op(index);
        super::linger::product_done(self.threads);
        done
    }

    fn candidate_op(&mut self, index: usize) -> Result<(), KernelError> {
        let threads = self.threads;
        let Some(p) = self.ops.get_mut(index) else {
            return Ok(());
        };
        let m = p.op.m;
        if let Some(q) = &p.int8 {
            let scales = q.scales();
            return match &q.sparse {
                Some(a) => a.spmm_scaled(threads, &q.x, scales, &mut p.y_candidate, m),
                None => q.dense.gemm_scaled(threads, &q.x, scales, &mut p.y_candidate, m),
            };
        }
        if let (Some(a), Some(x)) = (&p.sparse_half, &p.x_store) {
            return a.spmm(threads, x, &mut p.y_candidate, m);
        }
        if p.sparse.is_none() {
            return p.run_dense(threads, true);
        }
        p.widen_activations()?;
        match &p.sparse {
            Some(a) => a.spmm_scheduled(&p.schedule, &p.x, &mut p.y_candidate, m),
            None => Ok(()),
        }
    }

    /// Run op `index` on the dense kernel (an index past the last op does nothing), the
    /// other workers kept awake for the next product ([`super::linger`]).
    pub(crate) fn run_comparator_op(&mut self, index: usize) -> Result<(), KernelError> {
        super::linger::product_starts();
        let done = self.comparator_op(index);
        super::linger::product_done(self.threads);
        done
    }

    fn comparator_op(&mut self, index: usize) -> Result<(), KernelError> {
        let threads = self.threads;
        let Some(p) = self.ops.get_mut(index) else {
            return Ok(());
        };
        let m = p.op.m;
        if let Some(q) = &p.int8 {
            return q
                .dense
                .gemm_scaled(threads, &q.x, q.scales(), &mut p.y_comparator, m);
        }
        p.run_dense(threads, false)
    }

    /// Bytes one candidate pass moves at the least, all ops: the weights as stored (values
    /// and metadata on the sparse path, the dense matrix otherwise), the activations at their
    /// storage precision, and the f32 outputs — each read or written once. The denominator
    /// of the roofline's arithmetic intensity.
    pub(crate) fn bytes_moved(&self, activation_bytes: usize) -> usize {
        let io: usize = self
            .ops
            .iter()
            .map(|p| p.op.m * p.op.k * activation_bytes + p.op.m * p.op.n * 4)
            .sum();
        self.weight_bytes() + io
    }

    /// Compare the last candidate outputs with the last comparator outputs, op by op. An
    /// int8 op's sums are taken once more, as i32, and must be equal; the last outputs,
    /// which the kernels scaled as they stored them, must be those sums dequantized, bit
    /// for bit.
    pub(crate) fn check(&mut self) -> Result<(), ExecError> {
        let threads = self.threads;
        for p in &mut self.ops {
            let m = p.op.m;
            if let Some(q) = &mut p.int8 {
                match &q.sparse {
                    Some(a) => a.spmm(threads, &q.x, &mut q.acc_candidate, m)?,
                    None => q.dense.gemm(threads, &q.x, &mut q.acc_candidate, m)?,
                }
                q.dense.gemm(threads, &q.x, &mut q.acc_comparator, m)?;
                if let Some(i) = q
                    .acc_candidate
                    .iter()
                    .zip(&q.acc_comparator)
                    .position(|(a, b)| a != b)
                {
                    return Err(ExecError::Int8Mismatch {
                        op: p.op.name.clone(),
                        candidate: q.acc_candidate[i],
                        comparator: q.acc_comparator[i],
                        element: i,
                    });
                }
                let mut want = vec![0.0f32; q.acc_comparator.len()];
                precision::dequantize(threads, &q.acc_comparator, &q.w_scale, q.x_scale, &mut want, m)?;
                for (side, y) in [("candidate", &p.y_candidate), ("comparator", &p.y_comparator)] {
                    if let Some(i) = y.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits()) {
                        return Err(ExecError::Int8Scaling {
                            op: p.op.name.clone(),
                            side,
                            element: i,
                            stored: y[i],
                            expected: want[i],
                        });
                    }
                }
                continue;
            }
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
                return Err(ExecError::OutputMismatch {
                    op: p.op.name.clone(),
                    deviation: err,
                    allowed,
                    tolerance_per_k: TOLERANCE_PER_K,
                });
            }
        }
        Ok(())
    }

    /// Bytes of weights the candidate streams per pass, all ops.
    pub(crate) fn weight_bytes(&self) -> usize {
        self.ops
            .iter()
            .map(|p| match (&p.int8, &p.sparse) {
                (Some(q), _) => q
                    .sparse
                    .as_ref()
                    .map_or(q.dense.value_bytes(), |a| a.value_bytes() + a.metadata_bytes()),
                (None, Some(a)) => a.value_bytes() + a.metadata_bytes(),
                (None, None) => p
                    .sparse_half
                    .as_ref()
                    .map_or(p.dense_w.value_bytes(), |a| a.bytes().0 + a.bytes().1),
            })
            .sum()
    }

    /// `(value_bytes, metadata_bytes)` over the ops on the sparse path.
    pub(crate) fn sparse_bytes(&self) -> (usize, usize) {
        self.ops
            .iter()
            .filter_map(|p| match &p.int8 {
                Some(q) => q.sparse.as_ref().map(|a| (a.value_bytes(), a.metadata_bytes())),
                None => p
                    .sparse
                    .as_ref()
                    .map(|a| (a.value_bytes(), a.metadata_bytes()))
                    .or_else(|| p.sparse_half.as_ref().map(SparseHalf::bytes)),
            })
            .fold((0, 0), |(v, m), (a, b)| (v + a, m + b))
    }
}

/// Where an op's weights come from: the shipped checkpoint's tensor of the op's name, or
/// drawn from the slice seed.
#[derive(Clone, Copy)]
enum WeightSource<'a> {
    Checkpoint(&'a Checkpoint),
    Drawn(WeightDistribution),
}

impl<'a> WeightSource<'a> {
    fn of(slice: &'a Slice) -> WeightSource<'a> {
        match &slice.checkpoint {
            Some(w) => WeightSource::Checkpoint(&w.checkpoint),
            None => WeightSource::Drawn(slice.backend.weights()),
        }
    }

    /// The `n × k` weights of `op`.
    fn weights(self, op: &GemmOp, rng: &mut ChaCha8Rng) -> Result<Vec<f32>, PrepareError> {
        let fail = |problem: String| PrepareError::Checkpoint {
            tensor: crate::ingress::checkpoint::tensor_of(&op.name).to_owned(),
            problem,
        };
        match self {
            WeightSource::Drawn(d) => weights_for(rng, d, op.n, op.k),
            WeightSource::Checkpoint(c) => {
                let tensor = c
                    .tensor(crate::ingress::checkpoint::tensor_of(&op.name))
                    .ok_or_else(|| fail("not in the checkpoint".into()))?;
                c.read_f32(tensor)
                    .map_err(|e| fail(e.to_string()))?
                    .ok_or_else(|| {
                        fail(format!(
                            "dtype {} is not one the CPU kernels run",
                            tensor.dtype.name()
                        ))
                    })
            }
        }
    }
}

/// Prepare one op; the caller names the op in the error.
fn prepare_op(
    op: &GemmOp,
    path: KernelPath,
    (sparsity, precision): (Sparsity, Precision),
    source: WeightSource<'_>,
    threads: usize,
    rng: &mut ChaCha8Rng,
) -> Result<PreparedOp, PrepareError> {
    let GemmOp { m, n, k, .. } = *op;
    let mut dense_w = source.weights(op, rng)?;
    let mut x = random(rng, k, m, 1.0)?;
    let mut reference = zeros(n, m)?;
    gemm_f32(threads, &dense_w, &x, &mut reference, n, k, m).map_err(PrepareError::Reference)?;
    let half = match precision {
        Precision::Fp16 => Some(Half::F16),
        Precision::Bf16 => Some(Half::Bf16),
        Precision::Fp32 | Precision::Int8 => None,
    };
    let mut x_store = None;
    if let Some(kind) = half {
        // Round to the storage type first, so the compressed values are the stored ones.
        dense_w = HalfBuf::from_f32(kind, &dense_w).to_f32();
        let store = HalfBuf::from_f32(kind, &x);
        x = store.to_f32();
        x_store = Some(store);
    }
    let sparse = match path {
        KernelPath::Sparse => {
            let a = super::prune_and_compress(&mut dense_w, n, k, sparsity)
                .map_err(|source| PrepareError::Compress { sparsity, source })?;
            if a.is_none() {
                return Err(PrepareError::NoSparseKernel(sparsity));
            }
            a
        }
        _ => None,
    };
    let mut int8 = None;
    let mut sparse = sparse;
    if precision == Precision::Int8 {
        let fail = PrepareError::Int8;
        let (w, w_scale) = precision::quantize_per_channel(&dense_w, n, k).map_err(fail)?;
        let (xq, x_scale) = precision::quantize_per_channel(&x, 1, x.len()).map_err(fail)?;
        // N:M keeps its pattern, so 2:4 (and 1:2) can take the compact int8 form; blocks
        // keep theirs (quantisation keeps zeros), so they can take the int8 block form.
        let kept = match (sparse.take(), sparsity) {
            (Some(_), Sparsity::NOfM { n: keep, m: group }) => {
                Some(SparseI8::compress_nm_for(&w, n, k, (keep as usize, group as usize), m).map_err(fail)?)
            }
            (Some(_), Sparsity::Block { rows, cols, .. }) => Some(
                SparseI8::compress_blocks_for(&w, n, k, (rows as usize, cols as usize), m).map_err(fail)?,
            ),
            (Some(_), _) => Some(SparseI8::compress(&w, n, k).map_err(fail)?),
            (None, _) => None,
        };
        let acc = || zeros(n, m).map(|v| v.into_iter().map(|_| 0i32).collect::<Vec<_>>());
        int8 = Some(Int8Op {
            acc_candidate: acc()?,
            acc_comparator: acc()?,
            dense: DenseI8::for_tokens(&w, n, k, m).map_err(fail)?,
            w_scale,
            x: xq,
            x_scale: x_scale[0],
            sparse: kept,
        });
    }
    // bf16, fp16: the 16-bit kernels on the stored values (exact: the weights were rounded
    // above); a 2:4 op's candidate is the compact 16-bit form of its compressed weights, a
    // bf16 block op's its blocks as bf16 pairs.
    let sparse_half = sparse.as_ref().and_then(|a| SparseHalf::new(a, precision, op.m));
    if sparse_half.is_some() {
        sparse = None;
    }
    let layout = PrepareError::DenseLayout;
    let dense_w = match precision {
        Precision::Bf16 => {
            let stored: Vec<half::bf16> = dense_w.iter().map(|&v| half::bf16::from_f32(v)).collect();
            DenseKernel::Bf16(DenseBf16::for_tokens(&stored, n, k, op.m).map_err(layout)?)
        }
        Precision::Fp16 => {
            let stored: Vec<half::f16> = dense_w.iter().map(|&v| half::f16::from_f32(v)).collect();
            DenseKernel::F16(DenseF16::for_tokens(&stored, n, k, op.m).map_err(layout)?)
        }
        Precision::Fp32 | Precision::Int8 => {
            DenseKernel::F32(DenseWeights::new(dense_w, n, k).map_err(layout)?)
        }
    };
    Ok(PreparedOp {
        op: op.clone(),
        dense_w,
        sparse,
        sparse_half,
        x,
        y_candidate: zeros(n, m)?,
        y_comparator: zeros(n, m)?,
        schedule: schedule_cpu(op, threads),
        x_store,
        reference,
        int8,
    })
}

fn zeros(rows: usize, cols: usize) -> Result<Vec<f32>, PrepareError> {
    let len = rows
        .checked_mul(cols)
        .ok_or(PrepareError::Overflow { rows, cols })?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|source| PrepareError::Alloc { rows, cols, source })?;
    v.resize(len, 0.0);
    Ok(v)
}

/// Weights with variance 1/K, so outputs stay O(1) at any K: uniform ±√(3/K) by default, or
/// normal with σ = 1/√K and a seeded fraction of outliers at ±scale·σ·[1, 2).
pub(crate) fn weights_for(
    rng: &mut ChaCha8Rng,
    weights: WeightDistribution,
    n: usize,
    k: usize,
) -> Result<Vec<f32>, PrepareError> {
    let k_f = k.max(1) as f32;
    match weights {
        WeightDistribution::Uniform => random(rng, n, k, (3.0 / k_f).sqrt()),
        WeightDistribution::GaussianOutliers { fraction, scale } => {
            let sigma = 1.0 / k_f.sqrt();
            let mut v = zeros(n, k)?;
            let unit = Uniform::new(0.0f64, 1.0).map_err(PrepareError::Distribution)?;
            for e in &mut v {
                if unit.sample(rng) < fraction {
                    let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                    *e = (sign * scale * (1.0 + unit.sample(rng)) * f64::from(sigma)) as f32;
                } else {
                    // Box-Muller: one standard normal from two uniforms.
                    let u1 = 1.0 - unit.sample(rng);
                    let u2 = unit.sample(rng);
                    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                    *e = (z * f64::from(sigma)) as f32;
                }
            }
            Ok(v)
        }
    }
}

fn random(rng: &mut impl Rng, rows: usize, cols: usize, bound: f32) -> Result<Vec<f32>, PrepareError> {
    let mut v = zeros(rows, cols)?;
    let dist = Uniform::new_inclusive(-bound, bound).map_err(PrepareError::Distribution)?;
    v.iter_mut().for_each(|e| *e = dist.sample(rng));
    Ok(v)
}

#[cfg(test)]
mod weight_tests {
    use super::*;

    #[test]
    fn issue_7_gaussian_outliers_have_the_requested_fraction_and_are_seeded() {
        let dist = WeightDistribution::GaussianOutliers {
            fraction: 0.01,
            scale: 20.0,
        };
        let (n, k) = (256, 1024);
        let draw = |seed| weights_for(&mut ChaCha8Rng::seed_from_u64(seed), dist, n, k).unwrap();
        let w = draw(3);
        assert_eq!(w, draw(3), "same seed, same weights");
        assert_ne!(w, draw(4));
        let sigma = 1.0 / (k as f32).sqrt();
        // Outliers sit at ≥ 20σ; a standard normal passes 10σ with probability ~1e-23.
        let outliers = w.iter().filter(|v| v.abs() > 10.0 * sigma).count();
        let fraction = outliers as f64 / w.len() as f64;
        // 262,144 draws at p = 0.01: 2,621 expected, sd ≈ 51.
        assert!((fraction - 0.01).abs() < 0.001, "{fraction}");
        assert!(w.iter().all(|v| v.abs() < 40.0 * sigma));
        let inliers: Vec<f64> = w
            .iter()
            .filter(|v| v.abs() <= 10.0 * sigma)
            .map(|&v| f64::from(v / sigma))
            .collect();
        let var = inliers.iter().map(|z| z * z).sum::<f64>() / inliers.len() as f64;
        assert!((var - 1.0).abs() < 0.02, "inlier variance {var}");
    }

    #[test]
    fn uniform_default_is_unchanged() {
        let (n, k) = (8, 12);
        let a = weights_for(
            &mut ChaCha8Rng::seed_from_u64(1),
            WeightDistribution::Uniform,
            n,
            k,
        )
        .unwrap();
        let b = random(&mut ChaCha8Rng::seed_from_u64(1), n, k, (3.0f32 / 12.0).sqrt()).unwrap();
        assert_eq!(a, b);
    }
}

#[cfg(test)]
mod half_tests {
    use super::*;
    use crate::execute::kernels::isa::{Form, IsaPath, Operands, isa_path, isa_path_at};

    /// A 16-bit op prepared and run on both sides, with the check the runs make.
    fn run_half(sparsity: Sparsity, path: KernelPath, precision: Precision) -> Workload {
        run_half_shape(sparsity, path, precision, (40, 68))
    }

    /// [`run_half`] for `n × k` weights.
    fn run_half_shape(
        sparsity: Sparsity,
        path: KernelPath,
        precision: Precision,
        (n, k): (usize, usize),
    ) -> Workload {
        let op = GemmOp {
            name: "w".into(),
            m: 9,
            n,
            k,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let p = prepare_op(
            &op,
            path,
            (sparsity, precision),
            WeightSource::Drawn(WeightDistribution::Uniform),
            2,
            &mut rng,
        )
        .unwrap();
        let mut w = Workload {
            ops: vec![p],
            threads: 2,
        };
        w.run_candidate().unwrap();
        w.run_comparator().unwrap();
        w.check().unwrap();
        w
    }

    #[test]
    fn issue_20_16_bit_ops_run_the_16_bit_kernels_on_stored_values() {
        let (n, k) = (40, 68);
        for (precision, operands) in [
            (Precision::Bf16, Operands::Bf16),
            (Precision::Fp16, Operands::F16),
        ] {
            let dense = run_half(Sparsity::Dense, KernelPath::Dense, precision);
            let p = &dense.ops[0];
            assert_eq!(
                dense.weight_bytes(),
                n * k * 2,
                "{precision:?} weights, as stored"
            );
            let path = match &p.dense_w {
                DenseKernel::Bf16(d) if precision == Precision::Bf16 => d.isa_path(),
                DenseKernel::F16(d) if precision == Precision::Fp16 => d.isa_path(),
                _ => panic!("{precision:?} on the wrong dense kernel"),
            };
            // At 9 tokens: f16 takes the tiles only from `F16_TILES_FROM_TOKENS`.
            assert_eq!(path, isa_path_at(operands, Form::Dense, 9));
            // The comparator's product is the f32 product of the stored operands.
            let (w, x) = (p.dense_w_f32(), p.x_store.as_ref().unwrap().to_f32());
            let mut want = vec![0.0; n * 9];
            gemm_f32(1, &w, &x, &mut want, n, k, 9).unwrap();
            let err = want
                .iter()
                .zip(&p.y_comparator)
                .fold(0.0f32, |e, (a, b)| e.max((a - b).abs()));
            assert!(err < 1e-5, "{precision:?}: {err}");

            let nm = run_half(Sparsity::NOfM { n: 2, m: 4 }, KernelPath::Sparse, precision);
            let p = &nm.ops[0];
            assert!(p.sparse.is_none() && p.sparse_half.is_some(), "{precision:?}");
            // A nibble per group of four, each row on a byte (K = 68: 17 nibbles, 9 bytes);
            // on AMX tiles, 32 bytes of kept values and a 32-bit mask per row of a 16-row
            // panel and 32-wide K step, padded to whole panels and steps.
            let expected = if isa_path(operands, Form::TwoOfFour) == IsaPath::AmxBf16 {
                let (rows, steps) = (n.div_ceil(16) * 16, k.div_ceil(32));
                (rows * steps * 32, rows * steps * 4)
            } else {
                (n * k, n * k.div_ceil(8))
            };
            assert_eq!(nm.sparse_bytes(), expected, "{precision:?} values and indices");
            assert_eq!(nm.weight_bytes(), expected.0 + expected.1);

            // Unstructured runs as 16-bit CSR wherever the CPU runs it: 16-bit values and
            // columns, a u32 pointer per row and one more (issue 20).
            let csr = run_half(
                Sparsity::Unstructured { density: 0.5 },
                KernelPath::Sparse,
                precision,
            );
            let p = &csr.ops[0];
            let on_16_bits = isa_path(operands, Form::Unstructured { k }) != IsaPath::WidenF32;
            assert_eq!(
                (p.sparse.is_none(), p.sparse_half.is_some()),
                (on_16_bits, on_16_bits),
                "{precision:?}"
            );
            if on_16_bits {
                let (values, metadata) = csr.sparse_bytes();
                assert_eq!(metadata, values + (n + 1) * 4, "{precision:?}");
            }
            // Other patterns keep the widened f32 kernels against the 16-bit comparator.
            let other = run_half(Sparsity::NOfM { n: 1, m: 4 }, KernelPath::Sparse, precision);
            assert!(other.ops[0].sparse.is_some() && other.ops[0].sparse_half.is_none());
            assert!(
                !matches!(other.ops[0].dense_w, DenseKernel::F32(_)),
                "{precision:?}"
            );
        }
    }

    /// Issue 20: int8 blocks run sparse (the run's check held: i32 sums equal to the dense
    /// comparator's), as blocks (a u32 column per block and per block row) where VNNI runs
    /// them, else as kept entries.
    #[test]
    fn int8_blocks_run_sparse_and_exact() {
        let block = Sparsity::Block {
            rows: 32,
            cols: 16,
            density: 0.5,
        };
        let w = run_half_shape(block, KernelPath::Sparse, Precision::Int8, (64, 96));
        let q = w.ops[0].int8.as_ref().unwrap();
        assert!(q.sparse.is_some());
        let vnni = isa_path(Operands::I8, Form::Block { rows: 32, cols: 16 })
            == crate::execute::kernels::isa::IsaPath::Avx512Vnni;
        if vnni {
            assert_eq!(w.sparse_bytes(), (6 * 32 * 16, (6 + 3) * 4));
        }
    }

    /// Issue 20: bf16 blocks of whole panels and pairs run as bf16 pairs wherever the
    /// comparator runs `vdpbf16ps`, and on AMX tiles wherever those are granted (the run's
    /// check held above), and their bytes are the bf16 blocks' (or the kept tiles'); other
    /// block shapes, and fp16, keep the widened f32 kernel.
    #[test]
    fn bf16_blocks_take_the_dot_product_kernel_where_the_comparator_does() {
        let block = |rows, cols| Sparsity::Block {
            rows,
            cols,
            density: 0.5,
        };
        // run_half_shape's ops have 9 tokens.
        let path = isa_path_at(Operands::Bf16, Form::Block { rows: 32, cols: 16 }, 9);
        let bf16 = matches!(path, IsaPath::Avx512Bf16 | IsaPath::AmxBf16);
        let w = run_half_shape(block(32, 16), KernelPath::Sparse, Precision::Bf16, (64, 96));
        let p = &w.ops[0];
        assert_eq!(p.sparse_half.is_some(), bf16);
        assert_eq!(p.sparse.is_some(), !bf16);
        let (values, metadata) = w.sparse_bytes();
        if path == IsaPath::Avx512Bf16 {
            // Half the 2 × 6 blocks kept, 32 × 16 bf16 each; a u32 per block and row pointer.
            assert_eq!((values, metadata), (6 * 32 * 16 * 2, (6 + 3) * 4));
        }
        if path == IsaPath::AmxBf16 {
            // Whole 1 KiB tiles (16 rows × 32 k): at least the kept blocks, at most all 12.
            assert!(values % 1024 == 0 && (6 * 32 * 16 * 2..=12 * 1024).contains(&values));
            assert!(metadata > 0);
        }
        for (sparsity, precision) in [(block(8, 16), Precision::Bf16), (block(32, 16), Precision::Fp16)] {
            let w = run_half_shape(sparsity, KernelPath::Sparse, precision, (64, 96));
            assert!(w.ops[0].sparse.is_some() && w.ops[0].sparse_half.is_none());
        }
    }

    impl PreparedOp {
        /// The comparator's weights, widened (for the test's own product).
        fn dense_w_f32(&self) -> Vec<f32> {
            let (n, k) = (self.op.n, self.op.k);
            let eye = |one: f32| -> Vec<f32> {
                (0..k * k)
                    .map(|i| if i % (k + 1) == 0 { one } else { 0.0 })
                    .collect()
            };
            let mut w = vec![0.0; n * k];
            match &self.dense_w {
                DenseKernel::Bf16(d) => {
                    let e: Vec<half::bf16> = eye(1.0).into_iter().map(half::bf16::from_f32).collect();
                    d.gemm(1, &e, &mut w, k).unwrap()
                }
                DenseKernel::F16(d) => {
                    let e: Vec<half::f16> = eye(1.0).into_iter().map(half::f16::from_f32).collect();
                    d.gemm(1, &e, &mut w, k).unwrap()
                }
                DenseKernel::F32(_) => unreachable!("a 16-bit op"),
            }
            w
        }
    }
}
