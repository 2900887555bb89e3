//! Quality on the artifact (issue 21): the classifier head a shipped checkpoint defines,
//! run on the pack's labelled dataset with the checkpoint's own (pruned) weights and with
//! the same head from the dense reference checkpoint. The predictions become the same
//! [`QualityEvidence`] a trained model slice records, so `accuracy` and `quality_delta` are
//! judged with the same intervals (Wilson; Newcombe's paired interval with McNemar's p).
//!
//! The candidate runs each head layer the slice puts on a sparse kernel (its weight is one of
//! the slice's ops, lowered to the sparse path, and holds the slice's pattern with no
//! violating group) on that sparse kernel, compressed from the stored weights without
//! re-pruning; every other layer, and the whole reference, run on the built-in dense f32
//! kernel. One worker, so the predictions are bit-reproducible.

use super::latency::compress;
use super::mlp::{add_bias_relu, argmax_columns};
use crate::domain::{GemmOp, Metric, Sparsity};
use crate::execute::evidence::{ArtifactQuality, ModelScore, QualityEvidence, SliceEvidence};
use crate::execute::kernels::dense::gemm_f32;
use crate::ingress::PruningPlan;
use crate::ingress::checkpoint::eval::Evaluation;
use crate::ingress::checkpoint::{Checkpoint, CheckpointWorkload};

/// Why an artifact evaluation could not run (its inputs were checked at ingress: this is
/// the file changing underneath, or a kernel refusing a shape).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArtifactEvalError {
    /// A head tensor could not be read.
    #[error("head tensor `{tensor}`: {source}")]
    Read {
        /// The tensor.
        tensor: String,
        /// Why.
        source: crate::ingress::checkpoint::CheckpointError,
    },
    /// The dense kernel refused a layer.
    #[error("head layer `{module}`: {source}")]
    Kernel {
        /// The module.
        module: String,
        /// Why.
        source: crate::execute::kernels::KernelError,
    },
}

/// One layer's parameters as f32, and its compressed form when it runs sparse.
struct Layer {
    weight: Vec<f32>,
    bias: Vec<f32>,
    sparse: Option<crate::execute::kernels::SparseWeights>,
}

/// The head layers (by weight tensor) the candidate runs sparse, and in which format.
struct SparseHead<'a> {
    sparsity: Sparsity,
    weights: &'a [String],
}

/// Evaluate `w`'s head (when the pack names an `eval`) and record `accuracy`,
/// `quality_delta` and the quality evidence in `evidence`; a failure fails the slice at
/// execution.
pub(crate) fn evaluate_artifact(
    w: &CheckpointWorkload,
    sparsity: Sparsity,
    plan: &crate::lower::Plan,
    evidence: &mut SliceEvidence,
) {
    let Some(eval) = &w.eval else { return };
    let sparse_weights: Vec<String> = eval
        .head
        .iter()
        .map(|l| l.weight())
        .filter(|name| {
            let mut ops = plan
                .ops
                .iter()
                .filter(|p| crate::ingress::checkpoint::tensor_of(&p.op.name) == name)
                .peekable();
            let on_sparse = ops.peek().is_some() && ops.all(|p| p.path == crate::lower::KernelPath::Sparse);
            let holds = evidence
                .structure
                .iter()
                .any(|s| &s.tensor == name && s.violations == 0 && s.left_dense.is_none());
            sparsity != Sparsity::Dense && on_sparse && holds
        })
        .collect();
    let sparse = SparseHead {
        sparsity,
        weights: &sparse_weights,
    };
    match measure(&w.checkpoint, eval, &sparse) {
        Ok(q) => {
            let total = q.candidate.total.max(1) as f64;
            evidence
                .counters
                .insert(Metric::Accuracy, q.candidate.correct as f64 / total);
            evidence.counters.insert(
                Metric::QualityDelta,
                (q.candidate.correct as f64 - q.dense.correct as f64) / total,
            );
            evidence.quality = Some(q);
        }
        Err(e) => {
            evidence.failure = Some(crate::execute::SliceFailure {
                stage: crate::domain::Stage::Execution,
                message: format!("checkpoint evaluation: {e}"),
            });
        }
    }
}

fn measure(
    checkpoint: &Checkpoint,
    eval: &Evaluation,
    sparse: &SparseHead<'_>,
) -> Result<QualityEvidence, ArtifactEvalError> {
    let candidate = score(checkpoint, eval, Some(sparse))?;
    let dense = score(&eval.reference, eval, None)?;
    Ok(QualityEvidence {
        dataset: eval.dataset.name.clone(),
        dataset_digest: eval.dataset.digest.clone(),
        split: [0, 0, eval.samples],
        epochs: 0,
        labels: eval.y.clone(),
        dense,
        candidate,
        schedule: PruningPlan {
            steps: 0,
            finetune_epochs: 0,
            ..PruningPlan::from_spec(None)
        },
        steps: Vec::new(),
        equal_latency: None,
        precision: None,
        artifact: Some(ArtifactQuality {
            head: eval.head.iter().map(|l| l.module.clone()).collect(),
            reference: eval.reference.files.iter().map(|f| f.name.clone()).collect(),
            sparse_layers: sparse.weights.to_vec(),
        }),
    })
}

/// The head of `checkpoint` run over the whole dataset, scored against its labels.
fn score(
    checkpoint: &Checkpoint,
    eval: &Evaluation,
    sparse: Option<&SparseHead<'_>>,
) -> Result<ModelScore, ArtifactEvalError> {
    let layers = eval
        .head
        .iter()
        .map(|l| {
            let weight = read(checkpoint, &l.weight())?;
            let compressed = match sparse {
                Some(s) if s.weights.contains(&l.weight()) => {
                    compress(&weight, l.out_features, l.in_features, s.sparsity).map_err(|source| {
                        ArtifactEvalError::Kernel {
                            module: l.module.clone(),
                            source,
                        }
                    })?
                }
                _ => None,
            };
            Ok(Layer {
                weight,
                bias: read(checkpoint, &l.bias())?,
                sparse: compressed,
            })
        })
        .collect::<Result<Vec<_>, ArtifactEvalError>>()?;
    let predictions = predict(eval, &layers)?;
    let correct = predictions.iter().zip(&eval.y).filter(|(p, y)| p == y).count() as u64;
    let weights: Vec<&f32> = layers.iter().flat_map(|l| &l.weight).collect();
    let zeros = weights.iter().filter(|&&&v| v == 0.0).count();
    let mut bytes = Vec::new();
    for l in &layers {
        bytes.extend(l.weight.iter().chain(&l.bias).flat_map(|v| v.to_le_bytes()));
    }
    Ok(ModelScore {
        hidden: eval.head[0].out_features,
        weights_digest: crate::domain::digest::sha256_hex(&bytes),
        sparsity: zeros as f64 / weights.len().max(1) as f64,
        correct,
        total: eval.samples as u64,
        predictions,
    })
}

fn read(checkpoint: &Checkpoint, name: &str) -> Result<Vec<f32>, ArtifactEvalError> {
    let failed = |source| ArtifactEvalError::Read {
        tensor: name.to_owned(),
        source,
    };
    let entry = checkpoint.tensor(name).ok_or_else(|| {
        failed(crate::ingress::checkpoint::CheckpointError::Tensor {
            file: checkpoint
                .files
                .first()
                .map_or_else(String::new, |f| f.name.clone()),
            tensor: name.to_owned(),
            problem: "no longer in the checkpoint".into(),
        })
    })?;
    Ok(checkpoint.read_f32(entry).map_err(failed)?.unwrap_or_default())
}

/// Class of every sample: `x` through each layer (`W · x + b`, ReLU between layers), then
/// the argmax of the logits (ties to the lower class).
fn predict(eval: &Evaluation, layers: &[Layer]) -> Result<Vec<u8>, ArtifactEvalError> {
    let m = eval.samples;
    // The kernels' activation layout: features × samples.
    let mut act = vec![0.0f32; eval.features * m];
    for (s, row) in eval.x.chunks_exact(eval.features).enumerate() {
        for (f, &v) in row.iter().enumerate() {
            act[f * m + s] = v;
        }
    }
    let last = layers.len() - 1;
    for (i, (layer, shape)) in layers.iter().zip(&eval.head).enumerate() {
        let mut out = vec![0.0f32; shape.out_features * m];
        let failed = |source| ArtifactEvalError::Kernel {
            module: shape.module.clone(),
            source,
        };
        match &layer.sparse {
            Some(a) => {
                let op = GemmOp {
                    name: shape.module.clone(),
                    m,
                    n: shape.out_features,
                    k: shape.in_features,
                };
                a.spmm_scheduled(&crate::schedule::schedule_cpu(&op, 1), &act, &mut out, m)
                    .map_err(failed)?;
            }
            None => gemm_f32(
                1,
                &layer.weight,
                &act,
                &mut out,
                shape.out_features,
                shape.in_features,
                m,
            )
            .map_err(failed)?,
        }
        add_bias_relu(&mut out, &layer.bias, m, i != last);
        act = out;
    }
    Ok(argmax_columns(&act, eval.classes, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::checkpoint::ArtifactFile;
    use crate::ingress::checkpoint::eval::HeadLayer;

    fn evaluation(x: Vec<f32>, y: Vec<u8>, head: Vec<HeadLayer>) -> Evaluation {
        let features = head[0].in_features;
        Evaluation {
            dataset: ArtifactFile {
                name: "eval.safetensors".into(),
                path: "eval.safetensors".into(),
                bytes: 0,
                digest: "sha256:00".into(),
            },
            reference: Checkpoint {
                files: Vec::new(),
                tensors: Vec::new(),
                graph: None,
                config: None,
            },
            samples: x.len() / features,
            features,
            classes: head[head.len() - 1].out_features,
            head,
            x,
            y,
        }
    }

    fn layer(module: &str, out_features: usize, in_features: usize) -> HeadLayer {
        HeadLayer {
            module: module.into(),
            out_features,
            in_features,
        }
    }

    /// Two samples through a 2-2-2 head by hand: the hidden ReLU clips, the bias counts, and
    /// a zero (pruned) weight contributes nothing.
    #[test]
    fn issue_21_the_head_runs_linear_relu_linear_then_argmax() {
        let e = evaluation(
            vec![1.0, 2.0, 3.0, -1.0],
            vec![0, 1],
            vec![layer("fc1", 2, 2), layer("fc2", 2, 2)],
        );
        // fc1: h0 = x0 − x1, h1 = 0·x0 + x1 + 0.5, ReLU.
        // sample 0: h = (−1 → 0, 2.5); sample 1: h = (4, −0.5 → 0).
        // fc2: z0 = h0, z1 = h1 − 1 → sample 0: (0, 1.5) → 1; sample 1: (4, −1) → 0.
        let layers = [
            Layer {
                weight: vec![1.0, -1.0, 0.0, 1.0],
                bias: vec![0.0, 0.5],
                sparse: None,
            },
            Layer {
                weight: vec![1.0, 0.0, 0.0, 1.0],
                bias: vec![0.0, -1.0],
                sparse: None,
            },
        ];
        assert_eq!(predict(&e, &layers).unwrap(), [1, 0]);
    }

    #[test]
    fn issue_21_the_fixture_head_scores_what_numpy_scored() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoint");
        let open =
            |name| Checkpoint::open(&dir, crate::ingress::checkpoint::Source::Weights(name), None).unwrap();
        let checkpoint = open("classifier.safetensors");
        let spec = crate::ingress::pack::EvalSpec {
            dataset: "eval.safetensors".into(),
            head: vec!["classifier.fc1".into(), "classifier.fc2".into()],
            reference: "classifier-dense.safetensors".into(),
        };
        let eval = crate::ingress::checkpoint::eval::open(&dir, &spec, &checkpoint).unwrap();
        // fc1 on the 2:4 kernel (it holds the pattern), fc2 dense: the counts numpy found.
        let fc1 = ["classifier.fc1.weight".to_owned()];
        let sparse = SparseHead {
            sparsity: Sparsity::NOfM { n: 2, m: 4 },
            weights: &fc1,
        };
        let q = measure(&checkpoint, &eval, &sparse).unwrap();
        let all_dense = measure(
            &checkpoint,
            &eval,
            &SparseHead {
                weights: &[],
                ..sparse
            },
        )
        .unwrap();
        assert_eq!(q.candidate.predictions, all_dense.candidate.predictions);
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
        let table = &expected["eval"]["table"];
        let count = |k: &str| table[k].as_u64().unwrap();
        assert_eq!(q.candidate.correct, count("both") + count("only_candidate"));
        assert_eq!(q.dense.correct, count("both") + count("only_reference"));
        assert_eq!(q.labels.len(), 400);
        assert_ne!(q.candidate.weights_digest, q.dense.weights_digest);
        assert_eq!((q.epochs, q.schedule.steps, q.split), (0, 0, [0, 0, 400]));
    }
}
