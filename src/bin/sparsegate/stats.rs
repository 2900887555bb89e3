//! `sparsegate stats compare`: input problems are printed as located diagnostics and exit 2;
//! otherwise the verdict is the exit code.

use crate::cli::StatsCommand;
use crate::report::print_report;
use sparsegate::app;
use sparsegate::release::ExitCode;
use sparsegate::validate::compare::{CompareOptions, Worse};

pub fn run(command: StatsCommand) -> ExitCode {
    let StatsCommand::Compare {
        baseline,
        candidate,
        margin,
        confidence,
        higher_is_better,
        resamples,
        seed,
        json,
    } = command;
    let opts = CompareOptions {
        margin,
        confidence,
        resamples,
        seed,
        worse: if higher_is_better {
            Worse::Lower
        } else {
            Worse::Higher
        },
    };
    match app::compare_samples(&baseline, &candidate, &opts) {
        Ok(c) => {
            print_report(&c, json, |c| print!("{}", c.render_text()));
            ExitCode::for_verdict(c.verdict)
        }
        Err(e) => {
            eprintln!("{:?}", miette::Report::new(e));
            ExitCode::Error
        }
    }
}
