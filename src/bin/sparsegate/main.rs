//! The `sparsegate` binary: parse arguments, call the library, render errors, exit with the
//! documented code (0 pass, 1 fail, 2 bad input or error, 3 inconclusive).

mod cli;
mod commands;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // Never wrap diagnostics: CI logs and editors look for `file:line:col` on one line.
    let _ = miette::set_hook(Box::new(|_| {
        Box::new(
            miette::MietteHandlerOpts::new()
                .wrap_lines(false)
                .terminal_links(false)
                .build(),
        )
    }));
    let cli = cli::Cli::parse();
    match commands::dispatch(cli) {
        Ok(code) => std::process::ExitCode::from(code.code() as u8),
        Err(err) => {
            let code = err.exit_code();
            eprintln!("{:?}", miette::Report::new(err));
            std::process::ExitCode::from(code.code() as u8)
        }
    }
}
