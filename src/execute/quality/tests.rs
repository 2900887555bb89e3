//! Behaviour of the quality workload: deterministic training, exact pruning, recorded
//! schedules, and a model slice's evidence end to end.

use super::dataset::{self, Dataset, Split, split};
use super::mlp::{Masks, Mlp};
use super::schedule::{prune_along, prune_to};
use super::*;
use crate::domain::Metric;
use crate::domain::Precision;
use crate::execute::kernels::prune::kept_count;
use crate::ingress::pack::{DatasetName, MlpSpec, PruningScheduleKind, PruningScope, SamplePolicy};
use crate::ingress::{PruningPlan, SliceBackend};

fn task(hidden: u32, epochs: u32, schedule: PruningScheduleKind, steps: u32) -> ModelTask {
    ModelTask {
        seed: 11,
        mlp: MlpSpec {
            dataset: DatasetName::Digits,
            hidden,
            epochs,
            batch: 32,
            learning_rate: 0.05,
            equal_latency: false,
        },
        pruning: PruningPlan {
            schedule,
            steps,
            finetune_epochs: 1,
            scope: PruningScope::PerRow,
        },
        precision: None,
    }
}

fn model_slice(task: ModelTask, sparsity: Sparsity, threads: usize) -> Slice {
    Slice {
        pack: "p".into(),
        id: format!("mlp-{}-fp32", sparsity.tag()),
        ops: crate::ingress::expand_mlp_ops(&task.mlp),
        sparsity,
        precision: Precision::Fp32,
        backend: SliceBackend::Model(Box::new(task)),
        guardrails: vec![],
        not_applicable: vec![],
        samples: SamplePolicy {
            warmup: 1,
            min: 3,
            max: 5,
            time_budget_s: 0.01,
            ..SamplePolicy::default()
        },
        seed: 3,
        threads,
        checkpoint: None,
        load: None,
    }
}

/// The digits dataset, a [`task`] on it and the task's split.
fn digits_task(
    hidden: u32,
    epochs: u32,
    schedule: PruningScheduleKind,
    steps: u32,
) -> (Dataset, ModelTask, Split) {
    let data = dataset::load(DatasetName::Digits).unwrap();
    let t = task(hidden, epochs, schedule, steps);
    let s = split(&data, t.seed);
    (data, t, s)
}

#[test]
fn issue_7_training_is_bit_reproducible_from_the_seed() {
    let (data, t, s) = digits_task(32, 3, PruningScheduleKind::OneShot, 1);
    let a = train(&data, &s, &t, 32, &mut |_| ()).unwrap();
    let b = train(&data, &s, &t, 32, &mut |_| ()).unwrap();
    assert_eq!(a.digest(), b.digest());
    let mut other = t.clone();
    other.seed = 12;
    let c = train(&data, &split(&data, other.seed), &other, 32, &mut |_| ()).unwrap();
    assert_ne!(a.digest(), c.digest());
}

#[test]
fn issue_7_trained_mlp_classifies_digits() {
    let (data, t, s) = digits_task(64, 10, PruningScheduleKind::OneShot, 1);
    let m = train(&data, &s, &t, 64, &mut |_| ()).unwrap();
    let acc = mlp::accuracy(&data, &s.test, &m.predict(&data, &s.test).unwrap());
    assert!(acc > 0.9, "test accuracy {acc}");
}

fn random_mlp(hidden: usize) -> Mlp {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    Mlp::init(64, hidden, 10, &mut rng)
}

#[test]
fn issue_7_pruning_patterns_are_exact() {
    let mut m = random_mlp(32);
    prune_to(
        &mut m,
        Sparsity::NOfM { n: 2, m: 4 },
        0.5,
        true,
        PruningScope::PerRow,
    );
    for w in [&m.w1, &m.w2] {
        for group in w.chunks_exact(4) {
            assert!(group.iter().filter(|&&v| v != 0.0).count() <= 2);
        }
    }
    let mut m = random_mlp(40);
    let target = Sparsity::Unstructured { density: 0.1 };
    prune_to(&mut m, target, 0.9, true, PruningScope::PerRow);
    for row in m.w1.chunks_exact(64) {
        assert_eq!(row.iter().filter(|&&v| v != 0.0).count(), kept_count(64, 0.1));
    }
    let mut g = random_mlp(40);
    prune_to(&mut g, target, 0.9, true, PruningScope::Global);
    assert_eq!(
        g.w1.iter().filter(|&&v| v != 0.0).count(),
        kept_count(40 * 64, 0.1)
    );
}

#[test]
fn issue_7_gradual_schedule_records_every_step_and_keeps_the_mask() {
    let (data, t, s) = digits_task(32, 2, PruningScheduleKind::Gradual, 3);
    let mut m = train(&data, &s, &t, 32, &mut |_| ()).unwrap();
    let steps = prune_along(
        &mut m,
        &data,
        &s,
        &t,
        Sparsity::Unstructured { density: 0.1 },
        &mut |_| (),
    )
    .unwrap();
    assert_eq!(steps.len(), 3);
    assert!(
        steps
            .windows(2)
            .all(|w| w[0].target_sparsity < w[1].target_sparsity)
    );
    assert!((steps[2].target_sparsity - 0.9).abs() < 1e-12);
    for st in &steps {
        // Per-row rounding keeps at most a weight per row more than the target asks.
        assert!(st.achieved_sparsity >= st.target_sparsity - 1.0 / 32.0, "{st:?}");
        assert!((0.0..=1.0).contains(&st.validation_accuracy));
    }
    assert!((m.sparsity() - steps[2].achieved_sparsity).abs() < 1e-12);
    // Fine-tuning after the last step held the mask: pruning again to the same target
    // changes nothing.
    let before = Masks::of(&m);
    prune_to(
        &mut m,
        Sparsity::Unstructured { density: 0.1 },
        0.9,
        true,
        PruningScope::PerRow,
    );
    assert_eq!(Masks::of(&m), before);
    // N:M ramps unstructured and lands on 2:4 at the last step.
    let mut n = train(&data, &s, &t, 32, &mut |_| ()).unwrap();
    let nm_steps = prune_along(&mut n, &data, &s, &t, Sparsity::NOfM { n: 2, m: 4 }, &mut |_| ()).unwrap();
    assert!((nm_steps[2].target_sparsity - 0.5).abs() < 1e-12);
    assert!(
        n.w1.chunks_exact(4)
            .all(|g| g.iter().filter(|&&v| v != 0.0).count() <= 2)
    );
}

#[test]
fn issue_7_model_slice_evidence_is_the_same_across_thread_counts() {
    let t = task(32, 3, PruningScheduleKind::OneShot, 1);
    let sparsity = Sparsity::NOfM { n: 2, m: 4 };
    let one = model_slice(t.clone(), sparsity, 1);
    let two = model_slice(t, sparsity, 2);
    let (e1, e2) = (
        crate::execute::execute_slice_on(&one, &crate::lower::lower(&one), None, None, None, None),
        crate::execute::execute_slice_on(&two, &crate::lower::lower(&two), None, None, None, None),
    );
    assert!(e1.failure.is_none(), "{:?}", e1.failure);
    let (q1, q2) = (e1.quality.unwrap(), e2.quality.unwrap());
    assert_eq!(q1.dense.weights_digest, q2.dense.weights_digest);
    assert_eq!(q1.candidate.weights_digest, q2.candidate.weights_digest);
    assert_eq!(q1.candidate.predictions, q2.candidate.predictions);
    assert_eq!(q1.labels.len(), 359);
    assert!((q1.candidate.sparsity - 0.5).abs() < 0.01);
    assert!(e1.metrics.contains(Metric::EffectiveSpeedup));
}
