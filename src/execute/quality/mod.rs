//! Quality workloads (issue 7): a small MLP trained deterministically on an embedded real
//! dataset, pruned to the slice's sparsity along the pack's schedule, and measured for both
//! speed (its inference on the test split, sparse kernels against the dense kernel,
//! interleaved as for any slice) and quality (paired test-split predictions of the pruned
//! model and the dense reference). With `equal_latency`, the widest dense model that fits
//! the sparse model's measured latency is found and trained too.
//!
//! Everything here produces evidence; intervals and verdicts are validation's.

mod artifact;
mod dataset;
mod latency;
mod mlp;
mod precision;
mod schedule;

use super::error::{ExecError, ModelError};
use super::evidence::{ModelScore, PrecisionEvidence, QualityEvidence, SliceEvidence};
use super::run::{OnProgress, Phase, RunProgress, measure_pair, worker_pool};
use crate::domain::Sparsity;
use crate::domain::{Counter, Metric};
use crate::ingress::{ModelTask, Slice};
use crate::lower::Plan;
use dataset::{Dataset, Split};
use mlp::{Mlp, Sgd};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) use artifact::evaluate_artifact;
pub use schedule::final_sparsity;

/// Measure a model slice: train (or reuse) the dense model, prune it along the schedule,
/// time its inference against the dense kernel and record quality evidence; `on_progress`
/// hears the training epochs, pruning steps, timing runs and equal-latency probes as they
/// finish. Never panics on a user's pack: a failure comes back as
/// [`SliceEvidence::failure`].
pub fn execute_model_slice(
    slice: &Slice,
    task: &ModelTask,
    plan: &Plan,
    mut on_progress: Option<&mut OnProgress<'_>>,
) -> SliceEvidence {
    let start = Instant::now();
    let mut evidence = SliceEvidence::of_plan(slice, plan);
    let mut tell = |phase| {
        if let Some(tell) = on_progress.as_deref_mut() {
            tell(RunProgress {
                phase,
                elapsed_s: start.elapsed().as_secs_f64(),
            });
        }
    };
    let outcome = measure(slice, task, plan, plan.dense_flops(), (&mut evidence, &mut tell));
    evidence.finish(outcome, start)
}

fn measure(
    slice: &Slice,
    task: &ModelTask,
    plan: &Plan,
    dense_flops: f64,
    (evidence, tell): (&mut SliceEvidence, &mut dyn FnMut(Phase)),
) -> Result<(), ExecError> {
    let data = dataset::load(task.mlp.dataset)?;
    let split = dataset::split(&data, task.seed);
    let dense = trained_dense(&data, &split, task, task.mlp.hidden as usize, tell)?;
    let mut model = (*dense).clone();
    let steps = schedule::prune_along(&mut model, &data, &split, task, slice.sparsity, tell)?;

    let pool = worker_pool(slice)?;
    let mut pair = latency::InferencePair::new(
        (&model, slice.sparsity, latency::sparse_paths(plan)),
        &model,
        mlp::inputs_transposed(&data, &split.test),
        split.test.len(),
        slice.threads,
        true,
    )?;
    let (value_bytes, metadata_bytes) = pair.sparse_bytes();
    let counters = &mut evidence.counters;
    counters.insert(Counter::ValueBytes, value_bytes as f64);
    counters.insert(Counter::MetadataBytes, metadata_bytes as f64);
    let overhead = if value_bytes == 0 {
        0.0
    } else {
        metadata_bytes as f64 / value_bytes as f64
    };
    counters.insert(Metric::MetadataOverhead, overhead);
    // The candidate's predictions come from the slice's own kernels (sparse where the plan
    // chose them); `check` has confirmed them against the dense kernel on the same weights.
    let mut candidate_predictions = pool.install(|| pair.candidate_predictions())?;
    // Under a precision policy the quality evidence is the model evaluated in the policy's
    // formats (the timed kernels stay fp32 and sparse: the policy is a quality decision).
    let precision_evidence = match &task.precision {
        Some(policy) => {
            let (predictions, layers) =
                precision::evaluate(&model, &dense, policy, &data, (&split.validation, &split.test))?;
            candidate_predictions = predictions;
            Some(PrecisionEvidence {
                policy: policy.clone(),
                layers,
            })
        }
        None => None,
    };
    measure_pair(slice, &pool, &mut pair, dense_flops, (evidence, tell))?;

    let dense_score = score(&dense, &data, &split.test, dense.predict(&data, &split.test)?);
    let candidate = score(&model, &data, &split.test, candidate_predictions);
    let equal_latency = if task.mlp.equal_latency && slice.sparsity != Sparsity::Dense {
        Some(latency::equal_latency(
            &pool,
            (&model, slice.sparsity, plan),
            &data,
            &split,
            task,
            (slice.threads, tell),
        )?)
    } else {
        None
    };
    let total = candidate.total.max(1) as f64;
    let accuracy = candidate.correct as f64 / total;
    evidence.counters.insert(Metric::Accuracy, accuracy);
    evidence.counters.insert(
        Metric::QualityDelta,
        (candidate.correct as f64 - dense_score.correct as f64) / total,
    );
    evidence.quality = Some(QualityEvidence {
        dataset: task.mlp.dataset.as_str().into(),
        dataset_digest: data.digest.clone(),
        split: [split.train.len(), split.validation.len(), split.test.len()],
        epochs: task.mlp.epochs,
        labels: split.test.iter().map(|&i| data.y[i]).collect(),
        dense: dense_score,
        candidate,
        schedule: task.pruning,
        steps,
        equal_latency,
        precision: precision_evidence,
        artifact: None,
    });
    Ok(())
}

fn score(model: &Mlp, data: &Dataset, test: &[usize], predictions: Vec<u8>) -> ModelScore {
    ModelScore {
        hidden: model.hidden,
        weights_digest: model.digest(),
        sparsity: model.sparsity(),
        correct: mlp::correct(data, test, &predictions),
        total: test.len() as u64,
        predictions,
    }
}

/// Seed of the training generator (initialisation, then sample order), from the model seed.
fn training_seed(task: &ModelTask) -> u64 {
    task.seed ^ 0x7261_696e_5f6d_6c70
}

/// Dense models already trained in this process, by recipe: every sparsity of a spec
/// starts from the same dense model, so it is trained once. A cache of a pure function
/// (same key, same bits), so it never changes a result.
static TRAINED: Mutex<BTreeMap<String, Arc<Mlp>>> = Mutex::new(BTreeMap::new());

/// The dense MLP of `hidden` width trained by the task's recipe (`tell` hears its epochs
/// when it is trained here rather than found trained).
fn trained_dense(
    data: &Dataset,
    split: &Split,
    task: &ModelTask,
    hidden: usize,
    tell: &mut dyn FnMut(Phase),
) -> Result<Arc<Mlp>, ModelError> {
    let m = &task.mlp;
    let key = format!(
        "{}|{}|{hidden}|{}|{}|{:016x}",
        data.digest,
        task.seed,
        m.epochs,
        m.batch,
        m.learning_rate.to_bits()
    );
    if let Some(hit) = TRAINED.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(hit);
    }
    let model = Arc::new(train(data, split, task, hidden, tell)?);
    if let Ok(mut cache) = TRAINED.lock() {
        cache.insert(key, Arc::clone(&model));
    }
    Ok(model)
}

/// Train a dense model from scratch: seeded init, seeded sample order, single-threaded
/// GEMMs (bit-reproducible).
fn train(
    data: &Dataset,
    split: &Split,
    task: &ModelTask,
    hidden: usize,
    tell: &mut dyn FnMut(Phase),
) -> Result<Mlp, ModelError> {
    let mut rng = ChaCha8Rng::seed_from_u64(training_seed(task));
    let info = data.info;
    let mut model = Mlp::init(info.features, hidden, info.classes, &mut rng);
    let mut sgd = Sgd::new(&model, task.mlp.learning_rate as f32, task.mlp.batch as usize);
    for epoch in 1..=task.mlp.epochs {
        model
            .train_epoch(data, &split.train, &mut sgd, None, &mut rng)
            .map_err(ModelError::Training)?;
        tell(Phase::Training {
            hidden: hidden as u32,
            epoch,
            epochs: task.mlp.epochs,
        });
    }
    if model.w1.iter().chain(&model.w2).any(|v| !v.is_finite()) {
        return Err(ModelError::Diverged {
            learning_rate: task.mlp.learning_rate,
        });
    }
    Ok(model)
}

#[cfg(test)]
mod tests;
