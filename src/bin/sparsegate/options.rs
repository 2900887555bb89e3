//! Library settings from the command line and the process: the working directory, the
//! history database (flag, else `SPARSEGATE_HISTORY`, else the default), the launcher
//! of `process`-mode runs, the supervisor of `command` invocations, and the variables that
//! choose kernels.

use crate::cli::{DecideArgs, RecordArgs, RunArgs};
use sparsegate::app::{self, Options};
use sparsegate::execute::{CHILD_RUN_PROTOCOL, ChildProcessLauncher, RunLauncher, probe_protocol};
use sparsegate::release::MemoLink;
use sparsegate::release::history::{HISTORY_ENV, HistoryLocation};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Refuse a variable that chooses kernels but names none (`SPARSEGATE_MAX_ISA`,
/// `SPARSEGATE_BF16_KERNEL`): ignoring it would measure kernels the user ruled out.
pub fn check_kernel_variables() -> sparsegate::Result<()> {
    use sparsegate_kernels::{cpu, isa};
    if let Err(e) = cpu::max_isa() {
        return Err(sparsegate::Error::Usage {
            message: e.to_string(),
            hint: format!(
                "set {}=avx2 to run as an AVX2-only CPU would, or unset it to use all this CPU has",
                cpu::MAX_ISA_ENV
            ),
        });
    }
    match std::env::var(isa::BF16_KERNEL_ENV) {
        Ok(v) if isa::Bf16Kernel::from_name(&v).is_none() => Err(sparsegate::Error::Usage {
            message: format!(
                "{}={v:?} names no bf16 kernel; expected `dot` or `widen`",
                isa::BF16_KERNEL_ENV
            ),
            hint: format!("unset {} to let the probe choose", isa::BF16_KERNEL_ENV),
        }),
        _ => Ok(()),
    }
}

/// The current directory, else `.`.
pub fn work_dir() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| ".".into())
}

/// Options of the commands that run slices.
pub fn options(run: &RunArgs, allow_env_drift: bool) -> Options {
    Options {
        golden_dir: run.golden.clone(),
        allow_env_drift,
        work_dir: work_dir(),
        run_launcher: run_launcher(),
        history: None,
        baseline_build: None,
        pr_comment: None,
        focus: Default::default(),
    }
}

/// The history for `history` and `trend`: the flag, else the environment, else the default
/// location. A `postgres://` or `postgresql://` URL selects PostgreSQL, anything else is an
/// SQLite file.
pub fn history_location(flag: Option<PathBuf>) -> HistoryLocation {
    HistoryLocation::new(
        flag.or_else(|| std::env::var_os(HISTORY_ENV).map(Into::into))
            .unwrap_or_else(|| app::default_history_path(&work_dir())),
    )
}

/// Where `gate`/`merge` record: nowhere with `--no-history`, else as [`history_location`].
pub fn record_location(args: &RecordArgs, work_dir: &Path) -> Option<HistoryLocation> {
    if args.no_history {
        return None;
    }
    Some(HistoryLocation::new(
        args.history
            .clone()
            .or_else(|| std::env::var_os(HISTORY_ENV).map(Into::into))
            .unwrap_or_else(|| app::default_history_path(work_dir)),
    ))
}

/// The baseline build at `path` (`gate --baseline-bin`), refused (exit 2) unless it
/// answers this build's child-run protocol handshake.
pub fn baseline_build(path: &Path) -> sparsegate::Result<app::BaselineBuild> {
    let hello = probe_protocol(path, &["__child-protocol"]).map_err(|e| sparsegate::Error::Usage {
        message: e.to_string(),
        hint: format!(
            "`--baseline-bin` takes a sparsegate binary that speaks child-run protocol {CHILD_RUN_PROTOCOL}: \
             build the base revision with this version or later (scripts/gate-against-base.sh does it), or \
             gate without `--baseline-bin` against the golden baselines"
        ),
    })?;
    let program = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    Ok(app::BaselineBuild {
        source: format!(
            "baseline binary {} (sparsegate {})",
            program.display(),
            hello.tool_version
        ),
        launcher: Arc::new(ChildProcessLauncher::new(program, ["__run-slice"])),
    })
}

/// `process`-mode runs start this very executable with the hidden `__run-slice` command,
/// so parent and children are the same build (and share the environment lock). When the
/// executable cannot be located, runs stay in process and the evidence says so.
fn run_launcher() -> Option<Arc<dyn RunLauncher>> {
    let exe = std::env::current_exe().ok()?;
    Some(Arc::new(ChildProcessLauncher::new(exe, ["__run-slice"])))
}

/// `command` slices run under this very executable's hidden `__contain` command, a child
/// subreaper that kills whatever the command leaves behind (issue 23). When the executable
/// cannot be located, they run in a process group of their own, killed as a group.
pub fn contain_commands() {
    if let Ok(exe) = std::env::current_exe() {
        sparsegate::execute::contain_commands_with(sparsegate::execute::Supervisor {
            program: exe,
            args: vec!["__contain".into(), "--".into()],
        });
    }
}

/// The PR comment `gate`/`merge` write (`--pr-comment`), linking to `--memo-url`, else to
/// the CI job (GitHub Actions' run page, GitLab's `CI_JOB_URL`), else naming the memo file.
/// A `--memo-url` that would break the Markdown link is refused (exit 2); one from the
/// environment is skipped with a warning.
pub fn pr_comment(decide: &DecideArgs) -> sparsegate::Result<Option<app::PrCommentTarget>> {
    let Some(path) = decide.pr_comment.clone() else {
        return Ok(None);
    };
    let link = match &decide.memo_url {
        Some(url) => Some(MemoLink::url(url).map_err(|e| sparsegate::Error::Usage {
            message: format!("--memo-url: {e}"),
            hint: "pass the http(s) address of the CI job or artifact that holds memo.md, percent-encoded".into(),
        })?),
        None => ci_job_url().and_then(|url| {
            MemoLink::url(&url)
                .inspect_err(|e| eprintln!("warning: the PR comment names the memo file: the CI job URL {url:?} was not used: {e}"))
                .ok()
        }),
    };
    Ok(Some(app::PrCommentTarget { path, link }))
}

/// The page of this CI job, from the variables GitHub Actions and GitLab CI set.
fn ci_job_url() -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let (Some(server), Some(repo), Some(run)) = (
        var("GITHUB_SERVER_URL"),
        var("GITHUB_REPOSITORY"),
        var("GITHUB_RUN_ID"),
    ) {
        return Some(format!("{server}/{repo}/actions/runs/{run}"));
    }
    var("CI_JOB_URL")
}
