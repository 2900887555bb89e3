//! Precision policies on a model (issue 7): the MLP's inference with each layer in the
//! format its policy names, built from the kernels' own 16-bit and int8 machinery, and the
//! drift of every layer's output from the fp32 dense reference.
//!
//! int8 layers quantise weights symmetrically per output channel and activations with one
//! per-tensor scale calibrated on the validation split (the largest magnitude the fp32 model
//! feeds that layer there), so the test split never informs its own quantisation. fp16 and
//! bf16 layers round weights and activations to 16 bits and accumulate in f32. Biases and
//! the ReLU stay f32. Everything runs single-threaded: the numbers are bit-reproducible.

use super::dataset::Dataset;
use super::mlp::{Mlp, add_bias_relu, argmax_columns, inputs_transposed};
use crate::domain::Precision;
use crate::execute::evidence::LayerDrift;
use crate::execute::kernels::KernelError;
use crate::execute::kernels::dense::gemm_f32;
use crate::execute::kernels::precision::{
    Half, HalfBuf, dequantize, gemm_half, gemm_i8, quantize_per_channel,
};
use crate::ingress::pack::PrecisionPolicy;

/// Per-tensor activation scales of the two layers' inputs, for int8 layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Calibration {
    input_scale: [f32; 2],
}

impl Calibration {
    /// Scales `max|x| / 127` of each layer's input as the fp32 `model` sees it on `indices`
    /// (the validation split).
    pub(crate) fn on(model: &Mlp, data: &Dataset, indices: &[usize]) -> Result<Calibration, KernelError> {
        let xt = inputs_transposed(data, indices);
        let [hidden, _] = forward(model, &xt, indices.len(), [Precision::Fp32; 2], None)?;
        Ok(Calibration {
            input_scale: [abs_max_scale(&xt), abs_max_scale(&hidden)],
        })
    }
}

fn abs_max_scale(v: &[f32]) -> f32 {
    let max = v.iter().fold(0.0f32, |a, &e| a.max(e.abs()));
    if max > 0.0 && max.is_finite() {
        max / 127.0
    } else {
        1.0
    }
}

/// Each layer's output (after bias, and ReLU for `fc1`) on the activations `xt`
/// (`features × m`), with layer `i` in `precisions[i]`. `calibration` is needed only when a
/// layer is int8.
pub(crate) fn forward(
    model: &Mlp,
    xt: &[f32],
    m: usize,
    precisions: [Precision; 2],
    calibration: Option<&Calibration>,
) -> Result<[Vec<f32>; 2], KernelError> {
    let scale = |i: usize| calibration.map_or(1.0, |c| c.input_scale[i]);
    let mut hidden = linear(
        precisions[0],
        &model.w1,
        xt,
        (model.hidden, model.features, m),
        scale(0),
    )?;
    add_bias_relu(&mut hidden, &model.b1, m, true);
    let mut logits = linear(
        precisions[1],
        &model.w2,
        &hidden,
        (model.classes, model.hidden, m),
        scale(1),
    )?;
    add_bias_relu(&mut logits, &model.b2, m, false);
    Ok([hidden, logits])
}

/// `w[n×k] · x[k×m]` in `precision`; for int8, `x_scale` is the calibrated activation scale
/// (values beyond it saturate, as on int8 hardware).
fn linear(
    precision: Precision,
    w: &[f32],
    x: &[f32],
    (n, k, m): (usize, usize, usize),
    x_scale: f32,
) -> Result<Vec<f32>, KernelError> {
    let mut y = vec![0.0f32; n * m];
    match precision {
        Precision::Fp32 => gemm_f32(1, w, x, &mut y, n, k, m)?,
        Precision::Fp16 | Precision::Bf16 => {
            let kind = if precision == Precision::Fp16 {
                Half::F16
            } else {
                Half::Bf16
            };
            let (wh, xh) = (HalfBuf::from_f32(kind, w), HalfBuf::from_f32(kind, x));
            let (mut wp, mut xp) = (vec![0.0f32; w.len()], vec![0.0f32; x.len()]);
            gemm_half(1, &wh, &xh, (&mut wp, &mut xp), &mut y, n, k, m)?;
        }
        Precision::Int8 => {
            let (qw, w_scale) = quantize_per_channel(w, n, k)?;
            let qx: Vec<i8> = x
                .iter()
                // In [-127, 127] by the clamp; `as` saturates NaN to 0.
                .map(|&v| (v / x_scale).round().clamp(-127.0, 127.0) as i8)
                .collect();
            let mut acc = vec![0i32; n * m];
            gemm_i8(1, &qw, &qx, &mut acc, n, k, m)?;
            dequantize(1, &acc, &w_scale, x_scale, &mut y, m)?;
        }
    }
    Ok(y)
}

/// The policy's precision of each MLP layer, in execution order.
pub(crate) fn layer_precisions(policy: &PrecisionPolicy) -> [Precision; 2] {
    crate::ingress::MLP_LAYERS.map(|layer| policy.precision_of(layer))
}

/// The model's predictions on `test` under `policy`, and each layer's drift from the fp32
/// `reference` model's output on the same samples (and from the model's own fp32 output).
pub(crate) fn evaluate(
    model: &Mlp,
    reference: &Mlp,
    policy: &PrecisionPolicy,
    data: &Dataset,
    (validation, test): (&[usize], &[usize]),
) -> Result<(Vec<u8>, Vec<LayerDrift>), KernelError> {
    let precisions = layer_precisions(policy);
    let calibration = Calibration::on(model, data, validation)?;
    let xt = inputs_transposed(data, test);
    let m = test.len();
    let outputs = forward(model, &xt, m, precisions, Some(&calibration))?;
    let reference_outputs = forward(reference, &xt, m, [Precision::Fp32; 2], None)?;
    let fp32_outputs = forward(model, &xt, m, [Precision::Fp32; 2], None)?;
    let drift = crate::ingress::MLP_LAYERS
        .iter()
        .zip(precisions)
        .zip(outputs.iter().zip(&reference_outputs).zip(&fp32_outputs))
        .map(|((layer, precision), ((y, y_ref), y_fp32))| {
            let (relative_error, cosine) = drift(y, y_ref);
            LayerDrift {
                layer: (*layer).to_owned(),
                precision,
                relative_error,
                cosine,
                precision_relative_error: drift(y, y_fp32).0,
            }
        })
        .collect();
    let predictions = argmax_columns(&outputs[1], model.classes, m);
    Ok((predictions, drift))
}

/// `(‖y − y_ref‖ / ‖y_ref‖, cos(y, y_ref))` over all elements, accumulated in f64. Identical
/// outputs give exactly `(0, 1)`. With a zero reference the relative error is `‖y‖` (the
/// absolute error) and the cosine is 0, so neither is ever NaN.
pub(crate) fn drift(y: &[f32], y_ref: &[f32]) -> (f64, f64) {
    let (mut diff, mut norm_ref, mut norm_y, mut dot) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (&a, &b) in y.iter().zip(y_ref) {
        let (a, b) = (f64::from(a), f64::from(b));
        diff += (a - b) * (a - b);
        norm_ref += b * b;
        norm_y += a * a;
        dot += a * b;
    }
    let (diff, norm_ref, norm_y) = (diff.sqrt(), norm_ref.sqrt(), norm_y.sqrt());
    let relative = if norm_ref > 0.0 { diff / norm_ref } else { diff };
    let cosine = if diff == 0.0 {
        // Identical outputs: exactly 1, not 1 ± an ulp from the three sums.
        1.0
    } else if norm_ref > 0.0 && norm_y > 0.0 {
        dot / (norm_ref * norm_y)
    } else if norm_ref == 0.0 && norm_y == 0.0 {
        1.0
    } else {
        0.0
    };
    (relative, cosine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_7_drift_matches_a_hand_computed_case() {
        // y_ref = (3, 4): ‖y_ref‖ = 5; y = (3, 5): ‖y − y_ref‖ = 1 → 0.2;
        // cos = (9 + 20) / (5 · √34) = 0.994_692...
        let (rel, cos) = drift(&[3.0, 5.0], &[3.0, 4.0]);
        assert!((rel - 0.2).abs() < 1e-12, "{rel}");
        assert!((cos - 29.0 / (5.0 * 34f64.sqrt())).abs() < 1e-12, "{cos}");
        assert!((cos - 0.994_692).abs() < 1e-6);
        assert_eq!(drift(&[1.0, 2.0], &[1.0, 2.0]), (0.0, 1.0));
        // Opposite direction: error 2‖y_ref‖, cosine −1.
        let (rel, cos) = drift(&[-1.0, -2.0], &[1.0, 2.0]);
        assert!((rel - 2.0).abs() < 1e-12 && (cos + 1.0).abs() < 1e-12);
        assert_eq!(drift(&[0.0, 0.0], &[0.0, 0.0]), (0.0, 1.0));
        assert_eq!(drift(&[3.0, 4.0], &[0.0, 0.0]), (5.0, 0.0));
    }

    fn tiny() -> Mlp {
        // 2 features → 2 hidden → 2 classes, weights that int8 cannot represent exactly.
        Mlp {
            features: 2,
            hidden: 2,
            classes: 2,
            w1: vec![1.0, 0.003, -0.5, 0.25],
            b1: vec![0.0, 0.1],
            w2: vec![1.0, -1.0, 0.3337, 0.5],
            b2: vec![0.0, 0.0],
        }
    }

    #[test]
    fn issue_7_fp32_policy_is_the_reference_forward_and_int8_is_per_channel() {
        let model = tiny();
        let xt = vec![1.0, 2.0, 0.5, -1.0]; // features × m = 2 × 2
        let [h, z] = forward(&model, &xt, 2, [Precision::Fp32; 2], None).unwrap();
        // hidden[0] = 1·x0 + 0.003·x1; hidden[1] = relu(−0.5·x0 + 0.25·x1 + 0.1).
        let expect_h = [1.0 + 0.003 * 0.5, 2.0 - 0.003, 0.0, 0.0];
        for (a, b) in h.iter().zip(expect_h) {
            assert!((a - b).abs() < 1e-6, "{h:?}");
        }
        assert!((z[0] - h[0]).abs() < 1e-6 && (z[2] - 0.3337 * h[0]).abs() < 1e-6);
        // int8 on fc1 with activation scale 1/32 (every input exact): row 0's weight scale is
        // 1/127, so 0.003 rounds to 0 (0.381 steps) and hidden[0] loses exactly 0.003·x1.
        let calibration = Calibration {
            input_scale: [1.0 / 32.0, 1.0],
        };
        let [h8, _] = forward(
            &model,
            &xt,
            2,
            [Precision::Int8, Precision::Fp32],
            Some(&calibration),
        )
        .unwrap();
        assert!((h8[0] - 1.0).abs() < 1e-6 && (h8[1] - 2.0).abs() < 1e-6, "{h8:?}");
        let (rel, cos) = drift(&h8, &h);
        assert!(
            rel > 0.0 && rel < 0.01 && cos > 0.9999 && cos < 1.0,
            "{rel} {cos}"
        );
        // bf16 keeps 8 significant bits: 0.3337 becomes 0.333984375.
        let [_, zb] = forward(&model, &xt, 2, [Precision::Fp32, Precision::Bf16], None).unwrap();
        let hb = half::bf16::from_f32(h[0]).to_f32();
        assert!((zb[2] - 0.333_984_4 * hb).abs() < 1e-6, "{zb:?}");
    }
}
