//! The `sparsegate` binary: parse the arguments, make one `app` call per verb, print its
//! result, and decide the exit code (0 pass, 1 fail, 2 bad input or error, 3 inconclusive).

mod bench;
mod bless;
mod cli;
mod dispatch;
mod errors;
mod gate;
mod history;
mod memo;
mod merge;
mod options;
mod progress;
mod report;
mod run;
mod run_slice;
mod sim;
mod stats;
mod trend;
mod validate;

fn main() -> std::process::ExitCode {
    errors::install_hook();
    let code = dispatch::dispatch(clap::Parser::parse()).unwrap_or_else(errors::report);
    std::process::ExitCode::from(code.code() as u8)
}
