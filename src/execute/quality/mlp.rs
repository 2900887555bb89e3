//! A one-hidden-layer MLP (`features → hidden → ReLU → classes`), trained with seeded
//! mini-batch SGD with momentum, every GEMM on the built-in dense kernel.
//!
//! Bit-reproducibility: initialisation and sample order come from one seeded ChaCha
//! generator, and every training GEMM runs single-threaded (`gemm_f32` with one worker, a
//! fixed reduction order), so the same seed and recipe give the same weights whatever the
//! slice's thread count. Only inference is timed, and it may use the slice's workers.

use super::dataset::Dataset;
use crate::domain::digest::sha256_hex;
use crate::execute::kernels::KernelError;
use crate::execute::kernels::dense::gemm_f32;
use rand::distr::{Distribution, Uniform};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Momentum of the SGD update.
const MOMENTUM: f32 = 0.9;

/// Weights and biases of the MLP. `w1` is `hidden × features`, `w2` is `classes × hidden`
/// (row-major, out × in: the kernels' weight layout).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mlp {
    pub(crate) features: usize,
    pub(crate) hidden: usize,
    pub(crate) classes: usize,
    pub(crate) w1: Vec<f32>,
    pub(crate) b1: Vec<f32>,
    pub(crate) w2: Vec<f32>,
    pub(crate) b2: Vec<f32>,
}

/// Which weights may be non-zero while fine-tuning a pruned model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Masks {
    pub(crate) w1: Vec<bool>,
    pub(crate) w2: Vec<bool>,
}

impl Masks {
    /// The non-zero pattern of the model's weights.
    pub(crate) fn of(mlp: &Mlp) -> Masks {
        Masks {
            w1: mlp.w1.iter().map(|&v| v != 0.0).collect(),
            w2: mlp.w2.iter().map(|&v| v != 0.0).collect(),
        }
    }
}

/// SGD hyper-parameters and the momentum buffers they act on.
pub(crate) struct Sgd {
    pub(crate) learning_rate: f32,
    pub(crate) batch: usize,
    v1: Vec<f32>,
    vb1: Vec<f32>,
    v2: Vec<f32>,
    vb2: Vec<f32>,
}

impl Sgd {
    pub(crate) fn new(mlp: &Mlp, learning_rate: f32, batch: usize) -> Sgd {
        Sgd {
            learning_rate,
            batch: batch.max(1),
            v1: vec![0.0; mlp.w1.len()],
            vb1: vec![0.0; mlp.b1.len()],
            v2: vec![0.0; mlp.w2.len()],
            vb2: vec![0.0; mlp.b2.len()],
        }
    }
}

impl Mlp {
    /// He-uniform initialisation (±√(6/fan_in)), biases zero, drawn from `rng`.
    pub(crate) fn init(features: usize, hidden: usize, classes: usize, rng: &mut ChaCha8Rng) -> Mlp {
        let mut draw = |rows: usize, fan_in: usize| -> Vec<f32> {
            let bound = (6.0 / fan_in.max(1) as f32).sqrt();
            // Bounds are finite and ordered, so the distribution always exists.
            let dist = Uniform::new_inclusive(-bound, bound).expect("finite, ordered bounds");
            (0..rows * fan_in).map(|_| dist.sample(rng)).collect()
        };
        let w1 = draw(hidden, features);
        let w2 = draw(classes, hidden);
        Mlp {
            features,
            hidden,
            classes,
            w1,
            b1: vec![0.0; hidden],
            w2,
            b2: vec![0.0; classes],
        }
    }

    /// `sha256:<hex>` of all parameters (little-endian f32: w1, b1, w2, b2).
    pub(crate) fn digest(&self) -> String {
        let mut bytes =
            Vec::with_capacity(4 * (self.w1.len() + self.b1.len() + self.w2.len() + self.b2.len()));
        for v in [&self.w1, &self.b1, &self.w2, &self.b2] {
            bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        }
        sha256_hex(&bytes)
    }

    /// Fraction of weights (not biases) that are zero.
    pub(crate) fn sparsity(&self) -> f64 {
        let zeros = self.w1.iter().chain(&self.w2).filter(|&&v| v == 0.0).count();
        zeros as f64 / (self.w1.len() + self.w2.len()) as f64
    }

    /// One epoch of SGD over `train` in an order shuffled by `rng`; with `masks`, pruned
    /// weights (and their momentum) stay exactly zero.
    pub(crate) fn train_epoch(
        &mut self,
        data: &Dataset,
        train: &[usize],
        sgd: &mut Sgd,
        masks: Option<&Masks>,
        rng: &mut ChaCha8Rng,
    ) -> Result<(), KernelError> {
        let mut order = train.to_vec();
        order.shuffle(rng);
        for batch in order.chunks(sgd.batch) {
            self.step(data, batch, sgd, masks)?;
        }
        Ok(())
    }

    /// Forward, backward and update on one mini-batch.
    fn step(
        &mut self,
        data: &Dataset,
        batch: &[usize],
        sgd: &mut Sgd,
        masks: Option<&Masks>,
    ) -> Result<(), KernelError> {
        let (f, h, c, b) = (self.features, self.hidden, self.classes, batch.len());
        // x_rows: b × f (samples as rows); xt: f × b (the kernels' activation layout).
        let x_rows: Vec<f32> = batch
            .iter()
            .flat_map(|&i| data.x[i * f..(i + 1) * f].iter().copied())
            .collect();
        let xt = transpose(&x_rows, b, f);
        let mut hid = vec![0.0; h * b];
        gemm_f32(1, &self.w1, &xt, &mut hid, h, f, b)?;
        add_bias_relu(&mut hid, &self.b1, b, true);
        let mut z = vec![0.0; c * b];
        gemm_f32(1, &self.w2, &hid, &mut z, c, h, b)?;
        add_bias_relu(&mut z, &self.b2, b, false);
        // dz = (softmax − one-hot) / b, column by column.
        let scale = 1.0 / b as f32;
        for (j, &i) in batch.iter().enumerate() {
            let max = (0..c).map(|r| z[r * b + j]).fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for r in 0..c {
                let e = (z[r * b + j] - max).exp();
                z[r * b + j] = e;
                sum += e;
            }
            for r in 0..c {
                let target = if usize::from(data.y[i]) == r { 1.0 } else { 0.0 };
                z[r * b + j] = (z[r * b + j] / sum - target) * scale;
            }
        }
        let dz = z;
        // dW2 = dz · hidᵀ; dhid = W2ᵀ · dz, masked by the ReLU.
        let mut dw2 = vec![0.0; c * h];
        gemm_f32(1, &dz, &transpose(&hid, h, b), &mut dw2, c, b, h)?;
        let mut dhid = vec![0.0; h * b];
        gemm_f32(1, &transpose(&self.w2, c, h), &dz, &mut dhid, h, c, b)?;
        for (d, &a) in dhid.iter_mut().zip(&hid) {
            if a <= 0.0 {
                *d = 0.0;
            }
        }
        // dW1 = dhid · x_rows.
        let mut dw1 = vec![0.0; h * f];
        gemm_f32(1, &dhid, &x_rows, &mut dw1, h, b, f)?;
        let (db1, db2) = (row_sums(&dhid, b), row_sums(&dz, b));
        let lr = sgd.learning_rate;
        // Pruned weights (and their momentum) are held at zero after each step.
        let (mask1, mask2) = (masks.map(|m| m.w1.as_slice()), masks.map(|m| m.w2.as_slice()));
        update(&mut self.w1, &mut sgd.v1, &dw1, lr, mask1);
        update(&mut self.b1, &mut sgd.vb1, &db1, lr, None);
        update(&mut self.w2, &mut sgd.v2, &dw2, lr, mask2);
        update(&mut self.b2, &mut sgd.vb2, &db2, lr, None);
        Ok(())
    }

    /// Predicted class of each sample in `indices` (dense kernel, one worker).
    pub(crate) fn predict(&self, data: &Dataset, indices: &[usize]) -> Result<Vec<u8>, KernelError> {
        let xt = inputs_transposed(data, indices);
        let m = indices.len();
        let mut hid = vec![0.0; self.hidden * m];
        gemm_f32(1, &self.w1, &xt, &mut hid, self.hidden, self.features, m)?;
        add_bias_relu(&mut hid, &self.b1, m, true);
        let mut z = vec![0.0; self.classes * m];
        gemm_f32(1, &self.w2, &hid, &mut z, self.classes, self.hidden, m)?;
        add_bias_relu(&mut z, &self.b2, m, false);
        Ok(argmax_columns(&z, self.classes, m))
    }
}

/// Accuracy of `predictions` against the labels of `indices`.
pub(crate) fn accuracy(data: &Dataset, indices: &[usize], predictions: &[u8]) -> f64 {
    correct(data, indices, predictions) as f64 / indices.len().max(1) as f64
}

/// How many `predictions` match the labels of `indices`.
pub(crate) fn correct(data: &Dataset, indices: &[usize], predictions: &[u8]) -> u64 {
    indices
        .iter()
        .zip(predictions)
        .filter(|&(&i, &p)| data.y[i] == p)
        .count() as u64
}

/// The samples `indices` as the kernels' activation operand: `features × m`.
pub(crate) fn inputs_transposed(data: &Dataset, indices: &[usize]) -> Vec<f32> {
    let f = data.info.features;
    let rows: Vec<f32> = indices
        .iter()
        .flat_map(|&i| data.x[i * f..(i + 1) * f].iter().copied())
        .collect();
    transpose(&rows, indices.len(), f)
}

/// `y[r][j] += bias[r]` over `rows × cols`, then ReLU when `relu`.
pub(crate) fn add_bias_relu(y: &mut [f32], bias: &[f32], cols: usize, relu: bool) {
    for (row, &b) in y.chunks_exact_mut(cols.max(1)).zip(bias) {
        for v in row {
            *v += b;
            if relu && *v < 0.0 {
                *v = 0.0;
            }
        }
    }
}

/// Per column of `rows × cols` logits, the row of the largest value (ties to the lower).
pub(crate) fn argmax_columns(z: &[f32], rows: usize, cols: usize) -> Vec<u8> {
    (0..cols)
        .map(|j| {
            let mut best = 0;
            for r in 1..rows {
                if z[r * cols + j] > z[best * cols + j] {
                    best = r;
                }
            }
            u8::try_from(best).unwrap_or(u8::MAX)
        })
        .collect()
}

fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}

fn row_sums(a: &[f32], cols: usize) -> Vec<f32> {
    a.chunks_exact(cols.max(1)).map(|r| r.iter().sum()).collect()
}

fn update(w: &mut [f32], v: &mut [f32], g: &[f32], lr: f32, mask: Option<&[bool]>) {
    for i in 0..w.len() {
        v[i] = MOMENTUM * v[i] + g[i];
        w[i] -= lr * v[i];
    }
    if let Some(mask) = mask {
        for ((w, v), &keep) in w.iter_mut().zip(v.iter_mut()).zip(mask) {
            if !keep {
                *w = 0.0;
                *v = 0.0;
            }
        }
    }
}
