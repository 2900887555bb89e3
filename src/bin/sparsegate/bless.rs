//! `sparsegate bless PACK...`: record or update golden baselines, printing what changed.

use crate::cli::RunArgs;
use crate::options::options;
use crate::progress::progress;
use crate::report::print_report;
use sparsegate::release::ExitCode;
use sparsegate::validate::golden::{BLESS_CONFIDENCE, BlessChange};
use sparsegate::{Result, app};

pub fn run(
    run: &RunArgs,
    slices: &[String],
    (expires_in_days, per_runner): (Option<u32>, bool),
    json: bool,
) -> Result<ExitCode> {
    let changes = app::bless(
        &run.packs,
        slices,
        (expires_in_days, per_runner),
        &options(run, false),
        &mut progress(run.quiet),
    )?;
    print_report(&changes, json, |changes| changes.iter().for_each(print_change));
    Ok(ExitCode::Pass)
}

fn print_change(c: &BlessChange) {
    println!(
        "{} {}{}",
        if c.replaced { "updated" } else { "created" },
        c.path.display(),
        c.runner_class
            .as_ref()
            .map_or_else(String::new, |class| format!(" (runner class {class})"))
    );
    for m in &c.metrics {
        let fmt = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.6}"));
        let change = m
            .relative()
            .map_or_else(String::new, |r| format!(" ({:+.1}%", r * 100.0));
        let ci = match (m.ratio_ci, change.is_empty()) {
            (_, true) => String::new(),
            (Some((lo, hi)), false) => format!(
                ", {:.0}% CI {:+.1}% to {:+.1}%)",
                BLESS_CONFIDENCE * 100.0,
                (lo - 1.0) * 100.0,
                (hi - 1.0) * 100.0
            ),
            (None, false) => ")".to_owned(),
        };
        println!("  {:<18} {} -> {}{change}{ci}", m.metric, fmt(m.old), fmt(m.new));
    }
    if c.contended() {
        eprintln!(
            "warning: {}/{} was blessed while other processes took part of the cores (its threads got {:.0}% \
             of them); a gate on a quieter runner will find the contention differs and may be inconclusive \
             — bless on a quiet runner, or gate with --baseline-bin",
            c.pack,
            c.slice,
            c.cpu_share.unwrap_or(1.0) * 100.0
        );
    }
}
