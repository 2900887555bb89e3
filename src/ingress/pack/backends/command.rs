//! `backend: command`: the user's own benchmark command and its optional comparator, which
//! print their metrics as JSON lines (docs/command-backend.md).

use super::{At, Block, Metric, Rules, SliceBackend, SliceSpec, pack_dir};
use crate::ingress::{CommandInvocation, CommandSlice};

pub(super) const RULES: Rules = Rules {
    name: "command",
    runs_workload: false,
    block: Some(Block::map("command", |spec| spec.command.is_some(), example)),
    // Whatever metrics it prints (a missing one fails the slice at execution); only the
    // counters derived from a lowered plan are out of reach.
    measures: |metric| !matches!(metric, Metric::FallbackRate | Metric::MetadataOverhead),
    // The user's benchmark owns its precision; the field is not used.
    supports_precision: |_| true,
    has_comparator: |spec| spec.command.as_ref().is_some_and(|c| c.comparator.is_some()),
    resolve: |spec, at| check_command(spec, at).map(SliceBackend::Command),
};

fn example() -> String {
    "`command: {argv: [sh, bench.sh], timeout_s: 60}`, optionally with `comparator: {argv: [...]}` \
     and `baseline: {argv: [...]}` (see docs/command-backend.md)"
        .into()
}

/// Check a `command` slice's block and resolve it against the pack's directory.
fn check_command(spec: &SliceSpec, at: At<'_>) -> Option<CommandSlice> {
    let At { base, loc, diags } = at;
    let c = spec.command.as_ref()?;
    let dir = pack_dir(&loc.file);
    let mut ok = true;
    let mut resolve_cwd = |cwd: &Option<String>, pointer: &str| -> std::path::PathBuf {
        let path = cwd.as_ref().map_or_else(|| dir.clone(), |c| dir.join(c));
        if !path.is_dir() {
            ok = false;
            diags.push(loc.at_value(
                pointer,
                format!("working directory `{}` does not exist", path.display()),
                Some("`cwd` is relative to the pack's directory".into()),
            ));
        }
        path
    };
    let cwd = resolve_cwd(&c.cwd, &format!("{base}/command/cwd"));
    let comparator_cwd = c.comparator.as_ref().map(|k| match &k.cwd {
        Some(_) => resolve_cwd(&k.cwd, &format!("{base}/command/comparator/cwd")),
        None => cwd.clone(),
    });
    let baseline_cwd = c.baseline.as_ref().map(|k| match &k.cwd {
        Some(_) => resolve_cwd(&k.cwd, &format!("{base}/command/baseline/cwd")),
        None => cwd.clone(),
    });
    let sides = [("comparator", &c.comparator), ("baseline", &c.baseline)];
    let others = sides.iter().filter_map(|(name, side)| {
        side.as_ref()
            .map(|k| (&k.argv, format!("{base}/command/{name}/argv")))
    });
    for (argv, pointer) in std::iter::once((&c.argv, format!("{base}/command/argv"))).chain(others) {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            ok = false;
            diags.push(loc.at_value(
                &pointer,
                "the command has no program to run",
                Some(
                    "`argv` lists the program and then its arguments, e.g. `[sh, bench.sh, \"4000\"]`".into(),
                ),
            ));
        }
    }
    if !(c.timeout_s.is_finite() && c.timeout_s > 0.0) {
        ok = false;
        diags.push(loc.at_value(
            &format!("{base}/command/timeout_s"),
            format!("timeout_s {} is not a positive number of seconds", c.timeout_s),
            Some("give each invocation a limit such as `timeout_s: 60`".into()),
        ));
    }
    let candidate = CommandInvocation {
        argv: c.argv.clone(),
        cwd,
        env: c.env.clone(),
    };
    let comparator = c
        .comparator
        .as_ref()
        .zip(comparator_cwd)
        .map(|(k, cwd)| CommandInvocation {
            argv: k.argv.clone(),
            cwd,
            env: k.env.clone().unwrap_or_else(|| c.env.clone()),
        });
    let baseline = c
        .baseline
        .as_ref()
        .zip(baseline_cwd)
        .map(|(k, cwd)| CommandInvocation {
            argv: k.argv.clone(),
            cwd,
            env: k.env.clone().unwrap_or_else(|| c.env.clone()),
        });
    ok.then_some(CommandSlice {
        candidate,
        comparator,
        baseline,
        timeout_s: c.timeout_s,
    })
}
