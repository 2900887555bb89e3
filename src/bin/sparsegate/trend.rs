//! `sparsegate trend`: one slice's metric over the recorded runs, with its change points.

use crate::cli::TrendArgs;
use crate::options::history_location;
use crate::report::print_report;
use sparsegate::release::ExitCode;
use sparsegate::release::history::SeriesSource;
use sparsegate::release::trend::TrendReport;
use sparsegate::validate::stats::EDivisiveOptions;
use sparsegate::{Result, app};

pub fn run(args: &TrendArgs) -> Result<ExitCode> {
    let options = EDivisiveOptions {
        pvalue: args.pvalue,
        permutations: args.permutations as usize,
        seed: args.seed,
    };
    let report = app::trend(
        &history_location(args.history.clone()),
        args.pack.as_deref(),
        &args.slice,
        &args.metric,
        &options,
        args.window as usize,
    )?;
    print_report(&report, args.json, print_text);
    Ok(ExitCode::Pass)
}

fn print_text(report: &TrendReport) {
    println!(
        "{} of {} ({} runs, {} values)",
        report.metric,
        report.slice,
        report.points.len(),
        match report.source {
            SeriesSource::Metric => "median",
            SeriesSource::Guardrail => "guardrail",
        }
    );
    for (i, p) in report.points.iter().enumerate() {
        let mark = if report.change_points.iter().any(|c| c.index == i) {
            "  <- change"
        } else {
            ""
        };
        println!("{:>6}  {}  {:.6e}{mark}", p.run_id, p.recorded_at, p.value);
    }
    if report.change_points.is_empty() {
        println!(
            "no change point (E-divisive means, p <= {}, {} permutations)",
            report.pvalue, report.permutations
        );
    }
    for c in &report.change_points {
        println!(
            "change before run {} (index {}, recorded {}): median {:.6e} -> {:.6e}{}, q = {:.4e}, p = {:.3}{}",
            c.run_id,
            c.index,
            c.recorded_at,
            c.median_before,
            c.median_after,
            c.relative_change
                .map_or_else(String::new, |r| format!(" ({:+.1}%)", r * 100.0)),
            c.q,
            c.p_value,
            c.git_commit
                .as_deref()
                .map_or_else(String::new, |g| format!(", commit {g}"))
        );
    }
    if let Some(w) = &report.window {
        println!(
            "latest run {} ({:.6e}{}) against the {} run(s) before it (runs {}..={}, of --window {}): \
             median {:.6e}, range {:.6e}..{:.6e}{}{}{}",
            w.latest_run_id,
            w.latest_value,
            w.latest_git_commit
                .as_deref()
                .map_or_else(String::new, |g| format!(", commit {g}")),
            w.runs,
            w.first_run_id,
            w.last_run_id,
            w.requested,
            w.median,
            w.low,
            w.high,
            w.relative_change
                .map_or_else(String::new, |r| format!(", {:+.1}%", r * 100.0)),
            w.robust_z
                .map_or_else(String::new, |z| format!(", robust z = {z:+.2}")),
            if w.outlier { "  <- outside the window" } else { "" }
        );
    }
    if let Some(b) = &report.baseline {
        println!(
            "latest run against the last baseline (recorded by run {}): {:.6e} vs {:.6e}{}",
            b.run_id,
            b.latest_value,
            b.baseline,
            b.relative_change
                .map_or_else(String::new, |r| format!(" ({:+.1}%)", r * 100.0)),
        );
    }
}
