//! The hidden `__run-slice` command, the child's side of a `process`-mode run: request on
//! stdin, reply on stdout. Errors go to stderr (rendered like any other) with exit code 2;
//! the gate quotes their tail. Also the other hidden commands the gate starts:
//! `__child-protocol` and `__contain`.

use crate::options::work_dir;
use sparsegate::app::{self, Options};
use sparsegate::execute::RunRequest;
use sparsegate::files::FileError;
use sparsegate::release::ExitCode;
use sparsegate::{Error, Result};

pub fn run() -> Result<ExitCode> {
    // A run request is a pack path, a digest and an environment: a few KB. Read at most
    // this much, so a stray stream on stdin cannot exhaust memory.
    const MAX_REQUEST_BYTES: u64 = 16 << 20;
    let mut input = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(std::io::stdin(), MAX_REQUEST_BYTES),
        &mut input,
    )
    .map_err(|source| FileError::Read {
        path: "<stdin>".into(),
        source,
    })?;
    let request: RunRequest = serde_json::from_str(&input).map_err(|e| Error::Usage {
        message: format!("the run request on stdin is not valid: {e}"),
        hint: "`__run-slice` is started by `sparsegate gate`/`run`/`bless`; do not call it by hand".into(),
    })?;
    let options = Options {
        golden_dir: "golden".into(),
        allow_env_drift: false,
        work_dir: work_dir(),
        run_launcher: None,
        history: None,
        baseline_build: None,
        pr_comment: None,
        focus: Default::default(),
    };
    let reply = app::serve_run(&request, &options)?;
    print!("{}", app::to_json(&reply));
    Ok(ExitCode::Pass)
}

/// The hidden `__child-protocol` command: this build's child-run protocol, for a gate
/// that was given this binary as its `--baseline-bin`.
pub fn protocol() -> Result<ExitCode> {
    print!(
        "{}",
        app::to_json(&sparsegate::execute::ProtocolHello::this_build())
    );
    Ok(ExitCode::Pass)
}

/// The hidden `__contain` command: the supervisor of one `command` invocation
/// (`sparsegate::execute::supervise`). It exits with the command's own status, which is
/// no verdict, so it leaves the process here rather than through an [`ExitCode`].
#[cfg(target_os = "linux")]
pub fn contain(argv: &[std::ffi::OsString]) -> Result<ExitCode> {
    let code = sparsegate::execute::supervise(argv);
    std::process::exit(code)
}

/// Without subreapers the gate never starts a supervisor (`contain_commands_with` ignores it).
#[cfg(not(target_os = "linux"))]
pub fn contain(_argv: &[std::ffi::OsString]) -> Result<ExitCode> {
    Err(Error::Usage {
        message: "`__contain` needs Linux (child subreapers)".into(),
        hint: "`__contain` is started by the gate; do not call it by hand".into(),
    })
}
