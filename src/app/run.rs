//! `run`: lower and execute every slice of the packs, collecting evidence. `gate` and
//! `bless` run slices through [`run_under`] too.

use super::outputs::write_output_set;
use super::{Options, Progress, all_slices, capture_environment};
use crate::domain::OfSlice;
use crate::error::Result;
use crate::execute::children::{launch_baseline_run, launch_child_run};
use crate::execute::dispatch::{pack_evidence, place_roofs};
use crate::execute::{BaselineLaunch, Evidence, LaunchRun, RunProgress, SliceEvidence, execute_slice_on};
use crate::files::to_json;
use crate::ingress::bf16_pick::{PinOutcome, pin_from_baselines};
use crate::ingress::pack::SamplePolicy;
use crate::ingress::{Environment, LoadedPack, Slice};
use crate::lower::lower;
use crate::validate::baselines::recorded_bf16_paths;
use crate::validate::golden::Baselines;
use crate::validate::{RunPlan, interim_look};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Run every slice of `packs` (the `run` command): lower, execute, collect evidence. The
/// bf16 kernel is pinned to the golden baselines' first, as `gate` pins it: a shard is
/// merged and compared with them later, and a per-process pick that flipped was refused
/// there as a kernel mismatch.
pub fn run(
    packs: &[LoadedPack],
    options: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Evidence> {
    pin_baselines_bf16_kernel(packs, &options.golden_dir);
    let environment = capture_environment(packs, &options.work_dir)?;
    Ok(run_under(packs, environment, None, &[], options, progress))
}

/// Write the evidence of a `run` to `out_dir/evidence.json`, and its digest to
/// `out_dir/run-manifest.json`, as one set ([`super::outputs`]).
pub fn write_evidence(evidence: &Evidence, out_dir: &Path) -> Result<PathBuf> {
    let mut paths = write_output_set(out_dir, &[("evidence.json", to_json(evidence))])?;
    Ok(paths.swap_remove(0))
}

/// Pin this process's bf16 kernel (and so its child runs') to the one the golden baselines
/// of the packs' bf16 slices were blessed on (issue 22): a timing probe picks per process,
/// and on a loaded runner it picked differently at bless and at gate, so a bf16 slice was
/// refused although this CPU runs the baseline's kernel. Where the user chose with
/// `SPARSEGATE_BF16_KERNEL`, the CPU lacks the kernel, or the baselines disagree, nothing
/// is pinned and loading the baselines refuses the mismatch, saying which it is. The
/// environment then records the pick and how it was made. `run` pins the same way, so the
/// shards a `merge` later compares with the baselines ran their kernel too.
pub(super) fn pin_baselines_bf16_kernel(packs: &[LoadedPack], golden_dir: &Path) {
    let threads = packs.first().map_or(1, |p| crate::ingress::pack_threads(&p.file));
    let class = Environment::runner_class_here(threads);
    let recorded = recorded_bf16_paths(packs, golden_dir, &class);
    // The outcome shows in the environment's `bf16_pick`; a kernel not pinned is refused,
    // with the reason, where a baseline needs it.
    let _: PinOutcome = pin_from_baselines(recorded.iter().map(String::as_str));
}

/// `slice` with the run count validate planned for it, if it planned one.
pub(super) fn planned_slice<'a>(slice: &'a Slice, plans: &[RunPlan]) -> Cow<'a, Slice> {
    match plans.iter().find(|p| p.same_slice(slice)) {
        Some(plan) => Cow::Owned(Slice {
            samples: SamplePolicy {
                runs: plan.runs,
                ..slice.samples.clone()
            },
            ..slice.clone()
        }),
        None => Cow::Borrowed(slice),
    }
}

/// Execute every slice of `packs` under `environment`, each for the runs `plans` give it
/// (else its pack's); with `baselines`, sequential sampling stops a slice as soon as
/// validate's interim look decides it.
pub(super) fn run_under(
    packs: &[LoadedPack],
    mut environment: Environment,
    baselines: Option<&Baselines>,
    plans: &[RunPlan],
    options: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Evidence {
    place_roofs(&mut environment, all_slices(packs));
    let total = all_slices(packs).count();
    let mut slices = Vec::with_capacity(total);
    let with_pack = packs.iter().flat_map(|p| p.slices.iter().map(move |s| (p, s)));
    for (i, (pack, slice)) in with_pack.enumerate() {
        let slice = &*planned_slice(slice, plans);
        progress(Progress::SliceStarted {
            slice,
            index: i + 1,
            total,
        });
        let plan = lower(slice);
        let environment = &environment;
        let launch = options
            .run_launcher
            .as_deref()
            .map(|launcher| move |run: u32| launch_child_run(launcher, pack, slice, run, environment));
        let launch = launch.as_ref().map(|l| l as &LaunchRun<'_>);
        let base = options.baseline_build.as_ref().map(|b| {
            let launcher = &*b.launcher;
            let launch = move |run: u32| launch_baseline_run(launcher, pack, slice, run, environment);
            (launch, b.source.clone())
        });
        let base_launch = base.as_ref().map(|(l, source)| BaselineLaunch {
            launch: l as &LaunchRun<'_>,
            source: source.clone(),
        });
        // Sequential sampling: execution asks validate's interim check after each run.
        let baseline = baselines.and_then(|b| b.get(&slice.slice_key()));
        let stop = |ev: &SliceEvidence| interim_look(slice, ev, baseline);
        let mut running = |at: RunProgress| progress(Progress::SliceRunning { slice, at });
        let evidence = execute_slice_on(
            slice,
            &plan,
            launch,
            base_launch.as_ref(),
            Some(&stop),
            Some(&mut running),
        );
        progress(Progress::SliceFinished { evidence: &evidence });
        slices.push(evidence);
    }
    pack_evidence(packs, environment, slices)
}
