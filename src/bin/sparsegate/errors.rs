//! Errors as the user sees them: rendered by miette on stderr, with their exit code.

use sparsegate::Error;
use sparsegate::release::ExitCode;

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

/// Print `err` on stderr and return its exit code.
pub fn report(err: Error) -> ExitCode {
    let code = err.exit_code();
    eprint(err);
    code
}

/// Print `err` on stderr as a diagnostic.
pub fn eprint(err: Error) {
    eprintln!("{:?}", miette::Report::new(err));
}
