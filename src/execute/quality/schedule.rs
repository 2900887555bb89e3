//! Pruning schedules: one shot, or the cubic ramp of Zhu & Gupta (2017) with fine-tuning
//! after every step and the mask held fixed; every step recorded for the memo.

use super::dataset::{Dataset, Split};
use super::mlp::{self, Masks, Mlp, Sgd};
use crate::domain::Sparsity;
use crate::execute::error::ModelError;
use crate::execute::evidence::PruneStep;
use crate::execute::kernels::nm::prune_magnitude_in_place;
use crate::execute::kernels::prune::{
    cubic_sparsity, prune_blocks, prune_unstructured_global, prune_unstructured_per_row,
};
use crate::execute::run::Phase;
use crate::ingress::ModelTask;
use crate::ingress::pack::PruningScope;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The fraction of weights a sparsity pattern prunes.
pub fn final_sparsity(sparsity: Sparsity) -> f64 {
    1.0 - sparsity.density()
}

/// Prune `model` to `sparsity` along the task's schedule: at step s of S the target is
/// `cubic_sparsity(s, 0, S, 0, final)` (S = 1 jumps to the target), followed by the
/// schedule's fine-tuning epochs with the mask fixed. N:M ramps as per-row unstructured
/// sparsity and takes its N:M form at the last step; blocks ramp their block density.
/// A dense slice is not pruned and records no step.
pub(crate) fn prune_along(
    model: &mut Mlp,
    data: &Dataset,
    split: &Split,
    task: &ModelTask,
    sparsity: Sparsity,
    tell: &mut dyn FnMut(Phase),
) -> Result<Vec<PruneStep>, ModelError> {
    if sparsity == Sparsity::Dense {
        return Ok(vec![]);
    }
    let plan = task.pruning;
    let target = final_sparsity(sparsity);
    let mut rng = ChaCha8Rng::seed_from_u64(task.seed ^ 0x6669_6e65_7475_6e65);
    let mut sgd = Sgd::new(model, task.mlp.learning_rate as f32, task.mlp.batch as usize);
    let steps = plan.steps.max(1);
    let mut records = Vec::with_capacity(steps as usize);
    for step in 1..=steps {
        let goal = cubic_sparsity(u64::from(step), 0, u64::from(steps), 0.0, target);
        prune_to(model, sparsity, goal, step == steps, plan.scope);
        let masks = Masks::of(model);
        for _ in 0..plan.finetune_epochs {
            model
                .train_epoch(data, &split.train, &mut sgd, Some(&masks), &mut rng)
                .map_err(ModelError::FineTuning)?;
        }
        let predictions = model
            .predict(data, &split.validation)
            .map_err(ModelError::Validation)?;
        records.push(PruneStep {
            step,
            target_sparsity: goal,
            achieved_sparsity: model.sparsity(),
            finetune_epochs: plan.finetune_epochs,
            validation_accuracy: mlp::accuracy(data, &split.validation, &predictions),
        });
        tell(Phase::Pruning { step, steps });
    }
    Ok(records)
}

/// Prune both layers to `goal` (fraction pruned) by magnitude, in `sparsity`'s pattern.
pub(crate) fn prune_to(model: &mut Mlp, sparsity: Sparsity, goal: f64, last: bool, scope: PruningScope) {
    let density = 1.0 - goal;
    let (f, h, c) = (model.features, model.hidden, model.classes);
    for (w, rows, k) in [(&mut model.w1, h, f), (&mut model.w2, c, h)] {
        match sparsity {
            Sparsity::Dense => {}
            Sparsity::NOfM { n, m } if last => prune_magnitude_in_place(w, rows, k, n as usize, m as usize),
            Sparsity::NOfM { .. } => prune_unstructured_per_row(w, rows, k, density),
            Sparsity::Unstructured { .. } => match scope {
                PruningScope::PerRow => prune_unstructured_per_row(w, rows, k, density),
                PruningScope::Global => prune_unstructured_global(w, density),
            },
            Sparsity::Block {
                rows: br, cols: bc, ..
            } => prune_blocks(w, rows, k, br as usize, bc as usize, density),
        }
    }
}
