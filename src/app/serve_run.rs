//! The hidden `__run-slice` command: the child's side of a `process`-mode run.

use super::Options;
use crate::error::{Error, Result};
use crate::execute::{RunReply, RunRequest, measure_run};
use crate::ingress::{Environment, load_pack};
use crate::lower::lower;

/// Reload the pack (refusing one that changed since the gate loaded it), capture this
/// process's environment and refuse a lock that differs from the gate's, then measure one
/// run of the slice in this fresh process.
pub fn serve_run(request: &RunRequest, options: &Options) -> Result<RunReply> {
    let pack = load_pack(&request.pack_path).map_err(Error::from)?;
    if pack.digest != request.pack_digest {
        return Err(Error::Usage {
            message: format!(
                "pack {} changed after the gate loaded it",
                request.pack_path.display()
            ),
            hint: "do not edit packs while a gate is running; run the gate again".into(),
        });
    }
    let slice = pack
        .slices
        .iter()
        .find(|s| s.id == request.slice)
        .ok_or_else(|| Error::Usage {
            message: format!(
                "pack {} has no slice `{}`",
                request.pack_path.display(),
                request.slice
            ),
            hint: "`__run-slice` is started by the gate; do not call it by hand".into(),
        })?;
    let environment = Environment::capture(slice.threads, &options.work_dir);
    let mut fields = environment.lock_diff(&request.environment);
    // A baseline build's run differs from the gate's build by design (issue 22).
    if request.baseline {
        fields.retain(|f| !crate::execute::BUILD_LOCK_FIELDS.contains(&f.field.as_str()));
    }
    if !fields.is_empty() {
        let diffs: Vec<String> = fields
            .iter()
            .map(|f| format!("{}: gate `{}`, child `{}`", f.field, f.baseline, f.current))
            .collect();
        return Err(Error::Usage {
            message: format!(
                "this run's process has a different environment lock than the gate's ({})",
                diffs.join("; ")
            ),
            hint: "runs of one gate must share the lock; start the gate and its runs the same way".into(),
        });
    }
    let record = measure_run(slice, &lower(slice)).map_err(|message| Error::Usage {
        message: format!("run {} of slice `{}`: {message}", request.run, slice.id),
        hint: "the gate reports this as an execution failure of the slice".into(),
    })?;
    Ok(RunReply { environment, record })
}
