//! Errors as the user sees them: the exit code is decided here (every library error is
//! exit 2: bad input, refused environment or internal error), and a hint gains the flag or
//! environment variable that answers it, which the library does not know about.

use sparsegate::Error;
use sparsegate::release::ExitCode;
use sparsegate::release::history::HISTORY_ENV;
use sparsegate::sim::SimError;
use std::fmt;

/// Never wrap diagnostics: CI logs and editors look for `file:line:col` on one line.
pub fn install_hook() {
    let _ = miette::set_hook(Box::new(|_| {
        Box::new(
            miette::MietteHandlerOpts::new()
                .wrap_lines(false)
                .terminal_links(false)
                .build(),
        )
    }));
}

/// The exit code of a command that stopped with `err`.
pub fn exit_code(_err: &Error) -> ExitCode {
    ExitCode::Error
}

/// Print `err` on stderr and return its exit code.
pub fn report(err: Error) -> ExitCode {
    let code = exit_code(&err);
    eprint(err);
    code
}

/// Print `err` on stderr as a diagnostic, its hint naming the flags that apply.
pub fn eprint(err: Error) {
    let report = match cli_help(&err) {
        Some(help) => miette::Report::new(WithHelp { error: err, help }),
        None => miette::Report::new(err),
    };
    eprintln!("{report:?}");
}

/// The hint of `err` as the command line answers it, where that differs from the library's.
fn cli_help(err: &Error) -> Option<String> {
    let library = || miette::Diagnostic::help(err).map(|h| h.to_string());
    match err {
        Error::EnvironmentDrift { .. } => Some(format!(
            "{}, or pass --allow-env-drift to compare anyway (the memo will say so)",
            library()?
        )),
        Error::History(_) => Some(format!(
            "pass another history with --history PATH|URL (or {HISTORY_ENV}), or {}",
            library()?
        )),
        Error::Sim {
            problem: SimError::BadLayer { .. },
            ..
        } => Some("e.g. --gemm 2048x4096x4096 --sparsity 2:4 --precision fp16".to_owned()),
        Error::Sim {
            problem: SimError::BadTraffic { .. },
            ..
        } => Some("e.g. --traffic poisson:200 --requests 1000 (or steady:RATE, bursts:RATE:SIZE)".to_owned()),
        Error::NoHistory { .. } => Some(format!(
            "`sparsegate gate` records one; point at another with --history PATH or {HISTORY_ENV}"
        )),
        Error::AmbiguousSlice { .. } => Some("choose one with --pack NAME".to_owned()),
        Error::AmbiguousRole { roles } => Some(format!("pass --role with one of: {}", roles.join(", "))),
        Error::ExpiredBaseline(_) => Some(
            "re-measure and review it with `sparsegate bless <pack> --slice <id> --expires-in-days N`, then commit it"
                .to_owned(),
        ),
        Error::OverlappingShards(_) => Some("give each shard a distinct --shard K/N with the same N".to_owned()),
        _ => None,
    }
}

/// A library error with the binary's hint; everything else is the error's own.
struct WithHelp {
    error: Error,
    help: String,
}

impl fmt::Debug for WithHelp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

impl fmt::Display for WithHelp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for WithHelp {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl miette::Diagnostic for WithHelp {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.error.code()
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.error.severity()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(&self.help))
    }
    fn url<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.error.url()
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.error.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.error.labels()
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        self.error.related()
    }
    fn diagnostic_source(&self) -> Option<&dyn miette::Diagnostic> {
        self.error.diagnostic_source()
    }
}
