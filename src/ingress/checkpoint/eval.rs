//! The evaluation a pack names for a checkpoint (issue 21, quality on the artifact): a
//! labelled dataset file and the checkpoint's classifier head, plus a dense reference
//! checkpoint holding the same head before pruning.
//!
//! The dataset is a safetensors file (`x`: F32 `[samples, features]`, `y`: U8 `[samples]`),
//! so it goes through the same header checks, confinement, bounded reads and digest as a
//! checkpoint; it is read whole here (at most [`MAX_DATASET_BYTES`]) and checked (finite
//! features, labels inside the head's classes), so a malformed one is bad input before
//! anything runs. The head's weights are read at execution, one tensor at a time.

use super::{ArtifactFile, Checkpoint, CheckpointError, Dtype, Source, shown};
use crate::ingress::pack::EvalSpec;
use serde::Serialize;
use std::path::Path;

/// Largest dataset file read: 64 MiB (a million 16-feature samples; the digits test split
/// is 359 × 64).
pub const MAX_DATASET_BYTES: u64 = 64 << 20;

/// One Linear layer of a classifier head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeadLayer {
    /// The module, e.g. `classifier.fc1`: its tensors are `<module>.weight` and
    /// `<module>.bias`.
    pub module: String,
    /// Output features (rows of the weight).
    pub out_features: usize,
    /// Input features (columns of the weight).
    pub in_features: usize,
}

impl HeadLayer {
    /// The weight tensor's name.
    pub fn weight(&self) -> String {
        format!("{}.weight", self.module)
    }
    /// The bias tensor's name.
    pub fn bias(&self) -> String {
        format!("{}.bias", self.module)
    }
}

/// An evaluation whose files and tensors passed every check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    /// The dataset file, digested.
    pub dataset: ArtifactFile,
    /// The reference checkpoint: its file(s) digested, its head checked against the
    /// candidate's shapes.
    pub reference: Checkpoint,
    /// The head's layers, in execution order (shapes chained and checked).
    pub head: Vec<HeadLayer>,
    /// Samples in the dataset.
    pub samples: usize,
    /// Features per sample (the first layer's inputs).
    pub features: usize,
    /// Classes (the last layer's outputs).
    pub classes: usize,
    /// Features, row-major `samples × features`.
    #[serde(skip)]
    pub x: Vec<f32>,
    /// Labels, one per sample, each below `classes`.
    #[serde(skip)]
    pub y: Vec<u8>,
}

/// Which key of the `eval` block a problem belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalKey {
    /// `dataset`.
    Dataset,
    /// `head[i]`.
    Head(usize),
    /// `reference`.
    Reference,
}

/// Why an evaluation cannot run. Each names the file and the tensor or module.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The dataset or the reference file is not a readable safetensors file.
    #[error("{0}")]
    File(CheckpointError, EvalKey),
    /// The dataset file is over [`MAX_DATASET_BYTES`].
    #[error("{file}: {bytes} bytes is over the {limit}-byte limit for an evaluation dataset")]
    TooLarge {
        /// The file.
        file: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A dataset tensor is missing or has the wrong dtype, shape or values.
    #[error("{file}: {problem}")]
    Dataset {
        /// The file.
        file: String,
        /// What was expected and what was found (never the values).
        problem: String,
    },
    /// A head module's tensors are missing, or their shapes do not chain.
    #[error("{file}: head module `{module}`: {problem}")]
    Head {
        /// Position in `head`.
        index: usize,
        /// The module.
        module: String,
        /// The checkpoint (or reference) file.
        file: String,
        /// What is wrong.
        problem: String,
        /// Whether the problem is in the reference checkpoint.
        in_reference: bool,
    },
    /// A head tensor is integer (int8 or uint8): its stored values are quantized codes, not
    /// the weights, and the scales that would make them weights are a quantization scheme's
    /// (compressed-tensors `weight_scale`, per tensor or per channel), which the gate does
    /// not guess.
    #[error(
        "{file}: head module `{module}`: `{tensor}` is {dtype}: quantized codes, not weights; the head can only be evaluated from floating-point weights"
    )]
    QuantizedHead {
        /// Position in `head`.
        index: usize,
        /// The module.
        module: String,
        /// The tensor.
        tensor: String,
        /// Its dtype, e.g. `I8`.
        dtype: String,
        /// The checkpoint (or reference) file.
        file: String,
        /// Whether the problem is in the reference checkpoint.
        in_reference: bool,
    },
}

impl EvalError {
    /// The key of the `eval` block to point at.
    pub fn key(&self) -> EvalKey {
        match self {
            EvalError::File(_, key) => *key,
            EvalError::TooLarge { .. } | EvalError::Dataset { .. } => EvalKey::Dataset,
            EvalError::Head {
                in_reference: true, ..
            }
            | EvalError::QuantizedHead {
                in_reference: true, ..
            } => EvalKey::Reference,
            EvalError::Head { index, .. } | EvalError::QuantizedHead { index, .. } => EvalKey::Head(*index),
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            EvalError::File(e, _) => e.hint(),
            EvalError::TooLarge { .. } => {
                "evaluate on a held-out sample of at most 64 MiB (e.g. a few thousand rows)"
            }
            EvalError::Dataset { .. } => {
                "write the dataset with safetensors: `x` float32 [samples, features], `y` uint8 [samples] class labels"
            }
            EvalError::Head {
                in_reference: true, ..
            } => "the reference must hold the same head (same module names and shapes) before pruning",
            EvalError::QuantizedHead { .. } => {
                "evaluate the head as exported before quantization (f32, f16 or bf16 `<module>.weight` and `.bias`); the int8 checkpoint's own layers are still verified and timed"
            }
            EvalError::Head { .. } => {
                "list the head's Linear modules in order; each needs `<module>.weight` [out, in] and `<module>.bias` [out] (f32, f16 or bf16), each layer's in = the previous layer's out"
            }
        }
    }
}

/// Open and check the evaluation `spec` of `checkpoint`, relative to the pack directory
/// `dir`.
pub fn open(dir: &Path, spec: &EvalSpec, checkpoint: &Checkpoint) -> Result<Evaluation, EvalError> {
    let data = Checkpoint::open(dir, Source::Weights(&spec.dataset), None)
        .map_err(|e| EvalError::File(e, EvalKey::Dataset))?;
    let file = data.files[0].clone();
    if file.bytes > MAX_DATASET_BYTES {
        return Err(EvalError::TooLarge {
            file: file.name,
            bytes: file.bytes,
            limit: MAX_DATASET_BYTES,
        });
    }
    let main_file = checkpoint
        .files
        .first()
        .map_or_else(String::new, |f| f.name.clone());
    let head = head_of(checkpoint, &spec.head, &main_file, false)?;
    let reference = Checkpoint::open(dir, Source::Weights(&spec.reference), None)
        .map_err(|e| EvalError::File(e, EvalKey::Reference))?;
    let reference_head = head_of(&reference, &spec.head, &spec.reference, true)?;
    for (index, (c, r)) in head.iter().zip(&reference_head).enumerate() {
        if (c.out_features, c.in_features) != (r.out_features, r.in_features) {
            return Err(EvalError::Head {
                index,
                module: shown(&c.module),
                file: spec.reference.clone(),
                problem: format!(
                    "the reference's weight is {}×{}, the checkpoint's {}×{}",
                    r.out_features, r.in_features, c.out_features, c.in_features
                ),
                in_reference: true,
            });
        }
    }
    let (features, classes) = (head[0].in_features, head[head.len() - 1].out_features);
    let dataset_problem = |problem: String| EvalError::Dataset {
        file: file.name.clone(),
        problem,
    };
    let x_entry = data
        .tensor("x")
        .ok_or_else(|| dataset_problem("no tensor `x` (the features)".into()))?;
    let y_entry = data
        .tensor("y")
        .ok_or_else(|| dataset_problem("no tensor `y` (the labels)".into()))?;
    if x_entry.dtype != Dtype::F32 || x_entry.shape.len() != 2 || x_entry.shape[1] != features as u64 {
        return Err(dataset_problem(format!(
            "`x` is {} {:?}, expected F32 [samples, {features}] (the head's first layer takes {features} features)",
            x_entry.dtype.name(),
            x_entry.shape
        )));
    }
    let samples = x_entry.shape[0];
    if y_entry.dtype != Dtype::U8 || y_entry.shape != [samples] {
        return Err(dataset_problem(format!(
            "`y` is {} {:?}, expected U8 [{samples}] (one label per row of `x`)",
            y_entry.dtype.name(),
            y_entry.shape
        )));
    }
    if samples == 0 {
        return Err(dataset_problem("`x` has no samples".into()));
    }
    let read = |t| data.read_f32(t).map_err(|e| EvalError::File(e, EvalKey::Dataset));
    let x = read(x_entry)?.unwrap_or_default();
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(dataset_problem(format!(
            "`x` holds a non-finite value at [{}, {}]",
            i / features,
            i % features
        )));
    }
    let y = data
        .read_tensor(y_entry)
        .map_err(|e| EvalError::File(e, EvalKey::Dataset))?;
    if let Some(i) = y.iter().position(|&l| usize::from(l) >= classes) {
        return Err(dataset_problem(format!(
            "label {} at `y`[{i}] is not one of the head's {classes} classes (0..{})",
            y[i],
            classes - 1
        )));
    }
    Ok(Evaluation {
        dataset: file,
        reference,
        head,
        samples: samples as usize,
        features,
        classes,
        x,
        y,
    })
}

/// The head's layers as `checkpoint` holds them: every weight 2-D, every bias 1-D of the
/// weight's rows, floating point, each layer taking the previous layer's outputs, at most
/// 256 classes (labels are bytes).
fn head_of(
    checkpoint: &Checkpoint,
    modules: &[String],
    file: &str,
    in_reference: bool,
) -> Result<Vec<HeadLayer>, EvalError> {
    let mut layers: Vec<HeadLayer> = Vec::with_capacity(modules.len());
    for (index, module) in modules.iter().enumerate() {
        let problem = |problem: String| EvalError::Head {
            index,
            module: shown(module),
            file: file.to_owned(),
            problem,
            in_reference,
        };
        let float = |d: Dtype| matches!(d, Dtype::F32 | Dtype::F16 | Dtype::Bf16);
        let weight = checkpoint
            .tensor(&format!("{module}.weight"))
            .ok_or_else(|| problem(format!("no tensor `{}.weight`", shown(module))))?;
        let bias = checkpoint
            .tensor(&format!("{module}.bias"))
            .ok_or_else(|| problem(format!("no tensor `{}.bias`", shown(module))))?;
        for t in [weight, bias] {
            if matches!(t.dtype, Dtype::I8 | Dtype::U8) {
                return Err(EvalError::QuantizedHead {
                    index,
                    module: shown(module),
                    tensor: shown(&t.name),
                    dtype: t.dtype.name(),
                    file: file.to_owned(),
                    in_reference,
                });
            }
        }
        if weight.shape.len() != 2 || !float(weight.dtype) || weight.shape.contains(&0) {
            return Err(problem(format!(
                "the weight is {} {:?}, expected a non-empty 2-D f32, f16 or bf16 [out, in]",
                weight.dtype.name(),
                weight.shape
            )));
        }
        let (out, inp) = (weight.shape[0], weight.shape[1]);
        if bias.shape != [out] || !float(bias.dtype) {
            return Err(problem(format!(
                "the bias is {} {:?}, expected f32, f16 or bf16 [{out}]",
                bias.dtype.name(),
                bias.shape
            )));
        }
        if let Some(prev) = layers.last()
            && prev.out_features as u64 != inp
        {
            return Err(problem(format!(
                "takes {inp} inputs, but `{}` gives {}",
                prev.module, prev.out_features
            )));
        }
        let too_big = |n: u64| usize::try_from(n).map_err(|_| problem(format!("{n} features do not fit")));
        layers.push(HeadLayer {
            module: module.clone(),
            out_features: too_big(out)?,
            in_features: too_big(inp)?,
        });
    }
    let classes = layers.last().map_or(0, |l| l.out_features);
    if classes > 256 {
        return Err(EvalError::Head {
            index: layers.len() - 1,
            module: shown(&layers[layers.len() - 1].module),
            file: file.to_owned(),
            problem: format!("{classes} classes; labels are bytes, so at most 256"),
            in_reference,
        });
    }
    Ok(layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoint")
    }

    fn spec(dataset: &str, head: &[&str], reference: &str) -> EvalSpec {
        EvalSpec {
            dataset: dataset.into(),
            head: head.iter().map(|&h| h.to_owned()).collect(),
            reference: reference.into(),
        }
    }

    fn open_with(s: &EvalSpec) -> Result<Evaluation, EvalError> {
        let dir = fixtures();
        let checkpoint = Checkpoint::open(&dir, Source::Weights("classifier.safetensors"), None).unwrap();
        open(&dir, s, &checkpoint)
    }

    const HEAD: &[&str] = &["classifier.fc1", "classifier.fc2"];

    #[test]
    fn issue_21_the_fixture_head_chains_16_32_4_over_400_labelled_samples() {
        let e = open_with(&spec("eval.safetensors", HEAD, "classifier-dense.safetensors")).unwrap();
        assert_eq!((e.samples, e.features, e.classes), (400, 16, 4));
        let shapes: Vec<_> = e.head.iter().map(|l| (l.out_features, l.in_features)).collect();
        assert_eq!(shapes, [(32, 16), (4, 32)]);
        assert_eq!((e.x.len(), e.y.len()), (400 * 16, 400));
        assert!(e.y.iter().all(|&l| l < 4));
        assert_eq!(e.dataset.name, "eval.safetensors");
        assert!(e.dataset.digest.starts_with("sha256:"));
    }

    #[test]
    fn issue_21_each_eval_problem_points_at_its_own_key() {
        let cases = [
            (
                spec(
                    "bad/eval-no-labels.safetensors",
                    HEAD,
                    "classifier-dense.safetensors",
                ),
                EvalKey::Dataset,
            ),
            (
                spec(
                    "bad/eval-bad-label.safetensors",
                    HEAD,
                    "classifier-dense.safetensors",
                ),
                EvalKey::Dataset,
            ),
            // The features of `eval` are 16, the labels 4: a dataset file that is a checkpoint
            // has neither `x` nor `y`.
            (
                spec("classifier.safetensors", HEAD, "classifier-dense.safetensors"),
                EvalKey::Dataset,
            ),
            (
                spec(
                    "eval.safetensors",
                    &["classifier.fc1", "classifier.fc9"],
                    "classifier-dense.safetensors",
                ),
                EvalKey::Head(1),
            ),
            (
                spec(
                    "eval.safetensors",
                    &["classifier.fc2"],
                    "classifier-dense.safetensors",
                ),
                EvalKey::Dataset,
            ),
            (
                spec("eval.safetensors", HEAD, "eval.safetensors"),
                EvalKey::Reference,
            ),
            (
                spec(
                    "eval.safetensors",
                    HEAD,
                    "../checkpoint/classifier-dense.safetensors",
                ),
                EvalKey::Reference,
            ),
            (
                spec("missing.safetensors", HEAD, "classifier-dense.safetensors"),
                EvalKey::Dataset,
            ),
        ];
        for (s, key) in cases {
            let err = open_with(&s).expect_err("refused");
            assert_eq!(err.key(), key, "{s:?}: {err}");
            assert!(!err.hint().is_empty());
        }
        // An int8 head (quantized codes, no scales) is refused at the head's first module.
        let dir = fixtures();
        let int8 = Checkpoint::open(&dir, Source::Weights("classifier-int8.safetensors"), None).unwrap();
        let err = open(
            &dir,
            &spec("eval.safetensors", HEAD, "classifier-dense.safetensors"),
            &int8,
        )
        .unwrap_err();
        assert_eq!(err.key(), EvalKey::Head(0));
        assert_eq!(
            err.to_string(),
            "classifier-int8.safetensors: head module `classifier.fc1`: `classifier.fc1.weight` is I8: quantized codes, not weights; the head can only be evaluated from floating-point weights"
        );
        assert!(err.hint().contains("before quantization"));
        // A head whose layers do not chain names the layer and both widths.
        let err = open_with(&spec(
            "eval.safetensors",
            &["classifier.fc2", "classifier.fc1"],
            "classifier-dense.safetensors",
        ))
        .unwrap_err();
        assert_eq!(err.key(), EvalKey::Head(1));
        assert_eq!(
            err.to_string(),
            "classifier.safetensors: head module `classifier.fc1`: takes 16 inputs, but `classifier.fc2` gives 4"
        );
    }
}
