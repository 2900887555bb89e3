//! The parent's side of a `process`-mode run: one run of a slice in a fresh child process,
//! under a finite timeout, refused when the child measured under another lock.

use super::{ChildError, RunLauncher, RunRecord, RunRequest};
use crate::ingress::{Environment, LoadedPack, Slice};
use std::time::Duration;

/// How long one child run may take before it is killed: generous (a slice's runs are
/// bounded by its time budget, but `samples.min` may outlast it on a slow kernel), yet
/// finite, so a wedged child can never hang the gate.
pub fn child_timeout(slice: &Slice) -> Duration {
    Duration::from_secs_f64(300.0 + 10.0 * slice.samples.time_budget_s)
}

/// Run `run` of `slice` (of `pack`) through `launcher` and return its record, or why not:
/// the launcher's error (a crash quotes the child's stderr), or a reply measured under an
/// environment lock other than `environment`.
pub fn launch_child_run(
    launcher: &dyn RunLauncher,
    pack: &LoadedPack,
    slice: &Slice,
    run: u32,
    environment: &Environment,
) -> Result<RunRecord, ChildError> {
    launch(launcher, pack, slice, run, environment, false)
}

/// [`launch_child_run`] for a run of the baseline build (issue 22): its launcher starts
/// the baseline binary, which may differ from the gate in the lock fields that name the
/// build ([`super::child::BUILD_LOCK_FIELDS`]) but not in the machine's.
pub fn launch_baseline_run(
    launcher: &dyn RunLauncher,
    pack: &LoadedPack,
    slice: &Slice,
    run: u32,
    environment: &Environment,
) -> Result<RunRecord, ChildError> {
    launch(launcher, pack, slice, run, environment, true)
}

fn launch(
    launcher: &dyn RunLauncher,
    pack: &LoadedPack,
    slice: &Slice,
    run: u32,
    environment: &Environment,
    baseline: bool,
) -> Result<RunRecord, ChildError> {
    let request = RunRequest {
        pack_path: pack.path.clone(),
        pack_digest: pack.digest.clone(),
        slice: slice.id.clone(),
        run,
        environment: environment.clone(),
        baseline,
    };
    let reply = launcher.launch(&request, child_timeout(slice))?;
    let mut fields = environment.lock_diff(&reply.environment);
    if baseline {
        fields.retain(|f| !super::child::BUILD_LOCK_FIELDS.contains(&f.field.as_str()));
    }
    if !fields.is_empty() {
        return Err(ChildError::LockMismatch {
            fields: fields.into_iter().map(|f| f.field).collect(),
        });
    }
    Ok(reply.record)
}
