//! Model metadata for quality workloads: what ingress needs to know about an embedded
//! dataset and a model to expand a slice into ops, without loading or running anything.

use super::pack::{DatasetName, MlpSpec, PrecisionPolicy, PruningScheduleKind, PruningScope, PruningSpec};
use serde::{Deserialize, Serialize};

/// Shape facts of an embedded dataset, fixed by the committed file (the execute stage
/// checks the file against them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatasetInfo {
    /// Samples in the file.
    pub samples: usize,
    /// Features per sample.
    pub features: usize,
    /// Classes (labels are `0..classes`).
    pub classes: usize,
    /// Samples per class, in label order.
    pub class_counts: &'static [usize],
}

/// The 8×8 digits: class counts of scikit-learn's `load_digits()`.
pub const DIGITS: DatasetInfo = DatasetInfo {
    samples: 1797,
    features: 64,
    classes: 10,
    class_counts: &[178, 182, 177, 183, 181, 182, 181, 179, 174, 180],
};

impl DatasetName {
    /// The dataset's shape facts.
    pub fn info(self) -> DatasetInfo {
        match self {
            DatasetName::Digits => DIGITS,
        }
    }

    /// The name used in packs and the memo.
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetName::Digits => "digits",
        }
    }
}

/// Share of every class held out for validation, and again for test (stratified split).
pub const HOLDOUT_PERCENT: usize = 20;

/// Validation (and test) samples taken from a class of `count`: 20%, rounded half up, so
/// the split sizes depend only on the class counts, never on the seed.
pub fn holdout_per_class(count: usize) -> usize {
    (count * HOLDOUT_PERCENT * 2 + 100) / 200
}

impl DatasetInfo {
    /// `(train, validation, test)` sizes of the stratified split.
    pub fn split_sizes(&self) -> (usize, usize, usize) {
        let held: usize = self.class_counts.iter().map(|&c| holdout_per_class(c)).sum();
        (self.samples - 2 * held, held, held)
    }
}

/// A model workload after ingress: the MLP and its pruning schedule with defaults resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTask {
    /// Seed of the split, the initialisation and the sample order: derived from the pack
    /// seed and the slice spec's id (not the expanded id), so the dense reference model is
    /// the same in every sparsity of the spec.
    pub seed: u64,
    /// The model and its training recipe.
    pub mlp: MlpSpec,
    /// How the slice's sparsity is reached.
    pub pruning: PruningPlan,
    /// The precision each layer is evaluated in; `None`: fp32 throughout, no drift record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<PrecisionPolicy>,
}

/// Names of the MLP's layers, in execution order: what a precision policy may name.
pub const MLP_LAYERS: [&str; 2] = ["fc1", "fc2"];

/// A pruning schedule with its defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PruningPlan {
    /// One shot or gradual.
    pub schedule: PruningScheduleKind,
    /// Pruning steps (1 for one shot).
    pub steps: u32,
    /// Fine-tuning epochs after each step, mask fixed.
    pub finetune_epochs: u32,
    /// Per-row or global competition for unstructured sparsity.
    pub scope: PruningScope,
}

impl PruningPlan {
    /// Resolve a pack's `pruning:` block (absent: one shot, one fine-tuning epoch).
    pub fn from_spec(spec: Option<&PruningSpec>) -> PruningPlan {
        match spec {
            None => PruningPlan {
                schedule: PruningScheduleKind::OneShot,
                steps: 1,
                finetune_epochs: 1,
                scope: PruningScope::PerRow,
            },
            Some(p) => PruningPlan {
                schedule: p.schedule,
                steps: match p.schedule {
                    PruningScheduleKind::OneShot => 1,
                    PruningScheduleKind::Gradual => p.steps.unwrap_or(1),
                },
                finetune_epochs: p.finetune_epochs,
                scope: p.scope,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_split_sizes_are_fixed_by_class_counts() {
        assert_eq!(DIGITS.class_counts.iter().sum::<usize>(), DIGITS.samples);
        // 20% of each class rounded half up: 36+36+35+37+36+36+36+36+35+36.
        assert_eq!(DIGITS.split_sizes(), (1797 - 2 * 359, 359, 359));
        assert_eq!(holdout_per_class(178), 36);
        assert_eq!(holdout_per_class(174), 35);
        assert_eq!(holdout_per_class(5), 1);
    }
}
