//! The `sparsegate` binary: parse the arguments, make one `app` call per verb, print its
//! result, and decide the exit code (0 pass, 1 fail, 2 bad input or error, 3 inconclusive).

// Every `print!`/`println!` below goes through `stdout`, every `eprint!`/`eprintln!`
// through `stderr`: these shadow std's macros for the whole binary (defined before the
// modules that use them).
macro_rules! print {
    ($($arg:tt)*) => { $crate::stdout(format_args!($($arg)*), false) };
}
macro_rules! println {
    () => { $crate::stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::stdout(format_args!($($arg)*), true) };
}

macro_rules! eprint {
    ($($arg:tt)*) => { $crate::stderr(format_args!($($arg)*), false) };
}
macro_rules! eprintln {
    () => { $crate::stderr(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::stderr(format_args!($($arg)*), true) };
}

/// Large blocks (packed weights, activations) on transparent huge pages, as the vendor
/// library's numpy buffers are: see `huge_pages`.
#[global_allocator]
static ALLOCATOR: sparsegate_kernels::huge_pages::HugePages = sparsegate_kernels::huge_pages::HugePages;

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
    options::contain_commands();
    let code = dispatch::dispatch(clap::Parser::parse()).unwrap_or_else(errors::report);
    std::process::ExitCode::from(code.code() as u8)
}

/// Write to stdout. A reader that has gone away (`sparsegate gate … | head -1`: EPIPE) is
/// not an error of ours: the rest of the output is dropped and the exit code still says
/// the verdict; std's `print!` panicked there (exit 101, issue 23). Any other write error
/// is reported once on stderr.
pub(crate) fn stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static CLOSED: AtomicBool = AtomicBool::new(false);
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| out.flush());
    if let Err(e) = written {
        CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("warning: cannot write to stdout: {e}");
        }
    }
}

/// Write to stderr. A stderr that has gone away (`sparsegate gate … 2>&1 >/dev/null |
/// true`: EPIPE) cannot be told anything, and is no reason to change the exit code: std's
/// `eprint!` panicked there (exit 101, issue 23). The rest of the diagnostics are dropped.
/// (A closed descriptor, `2>&-`, is /dev/null: std reopens fds 0-2 at startup.)
pub(crate) fn stderr(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static CLOSED: AtomicBool = AtomicBool::new(false);
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut err = std::io::stderr().lock();
    let written = err
        .write_fmt(args)
        .and_then(|()| if newline { err.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| err.flush());
    if written.is_err() {
        CLOSED.store(true, Ordering::Relaxed);
    }
}
