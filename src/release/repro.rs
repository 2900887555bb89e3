//! The command that reproduces a failing slice (issue 22, and the seeds' "one reproducible
//! failing workload and one stable comparator run"): `gate` narrowed to that slice of that
//! pack, pinned to the pack's bytes by digest (which fixes the seed and every sample
//! setting), with the run count the failing gate took, against the same golden directory.
//! The lock is stated beside it: a gate under another lock is refused against its baseline
//! (exit 2), so a reproduction on the wrong machine says so instead of passing.

use crate::domain::verdict::Verdict;
use crate::execute::SliceEvidence;
use crate::ingress::{Environment, LoadedPack, Slice};
use crate::validate::GuardrailOutcome;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How to run one failing slice again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Repro {
    /// The command (POSIX shell quoting), to run from the directory the gate ran in.
    pub command: String,
    /// The slice's seed: derived from the pack's `seed` and the slice id, so fixed by the
    /// pack digest the command checks.
    pub seed: u64,
    /// Runs the failing gate took (planned, sequential or the pack's), given as `--runs`.
    pub runs: usize,
    /// The lock fields the measurement needs, as `field=value`: the machine and the build.
    pub lock: String,
    /// What the command cannot carry: the baseline build this gate was paired with.
    #[serde(default)]
    pub note: Option<String>,
}

/// Whether a slice needs a reproduction: a guardrail of it did not pass (failed, stayed
/// undecided or warned), or it did not run.
pub(crate) fn needs_repro(ev: &SliceEvidence, outcomes: &[GuardrailOutcome]) -> bool {
    ev.failure.is_some()
        || outcomes
            .iter()
            .any(|o| o.pack == ev.pack && o.slice == ev.slice && o.verdict != Verdict::Pass)
}

/// The reproduction of `slice` of `pack`, measured as `ev` under `environment`, compared
/// against `golden_dir` (with `--allow-env-drift` when `drift`).
pub(crate) fn repro(
    pack: &LoadedPack,
    slice: &Slice,
    ev: &SliceEvidence,
    environment: &Environment,
    golden_dir: &Path,
    drift: bool,
) -> Repro {
    let runs = ev.runs.len().max(1);
    let mut command = format!(
        "sparsegate gate {} --pack-digest {} --slice {} --runs {runs} --golden {} --out {}",
        shell_quote(&pack.path.display().to_string()),
        shell_quote(&pack.digest),
        shell_quote(&slice.id),
        shell_quote(&golden_dir.display().to_string()),
        shell_quote(&format!("repro-{}", slice.id)),
    );
    if drift {
        command.push_str(" --allow-env-drift");
    }
    let lock = ["tool_version", "cpu_model", "threads"]
        .iter()
        .filter_map(|field| environment.lock().get(*field).map(|v| format!("{field}={v}")))
        .collect::<Vec<_>>()
        .join(", ");
    Repro {
        command,
        seed: slice.seed,
        runs,
        lock,
        note: ev.baseline_build.as_ref().map(|b| {
            format!(
                "this gate paired the slice with {}: add `--baseline-bin` with that build",
                b.source
            )
        }),
    }
}

/// `s` as one POSIX shell word: unchanged when it holds only characters no shell treats
/// specially, else in single quotes (a `'` inside written `'\''`).
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn words_a_shell_would_split_or_expand_are_quoted() {
        assert_eq!(
            shell_quote("scenarios/quickstart.yaml"),
            "scenarios/quickstart.yaml"
        );
        assert_eq!(shell_quote("sha256:0a1b"), "sha256:0a1b");
        assert_eq!(shell_quote("my packs/p.yaml"), "'my packs/p.yaml'");
        assert_eq!(shell_quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
