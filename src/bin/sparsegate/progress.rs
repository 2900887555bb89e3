//! Per-slice progress of the commands that run slices.

use sparsegate::app::Progress;
use sparsegate::domain::Metric;

/// Per-slice progress on stderr: a progress bar on a terminal, one line per slice otherwise
/// (CI logs keep a readable record), nothing with `--quiet`.
pub fn progress(quiet: bool) -> impl FnMut(Progress<'_>) {
    use std::io::IsTerminal;
    let interactive = std::io::stderr().is_terminal();
    let mut bar: Option<indicatif::ProgressBar> = None;
    move |event| {
        if quiet {
            return;
        }
        match event {
            Progress::SliceStarted { slice, index, total } => {
                let label = format!("{}/{}", slice.pack, slice.id);
                if interactive {
                    let bar = bar.get_or_insert_with(|| {
                        let style =
                            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
                                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
                        indicatif::ProgressBar::new(total as u64).with_style(style)
                    });
                    bar.set_position(index as u64 - 1);
                    bar.set_message(label);
                } else {
                    eprint!("[{index}/{total}] {label} ");
                }
            }
            Progress::SliceFinished { evidence } => {
                let line = match &evidence.failure {
                    Some(f) => format!("failed at {}: {}", f.stage, f.message),
                    None => format!(
                        "{} samples in {:.2} s",
                        evidence
                            .metrics
                            .get(Metric::Latency)
                            .map_or(0, |m| m.samples.len()),
                        evidence.wall_time_s
                    ),
                };
                match &bar {
                    Some(bar) => {
                        bar.println(format!("{}/{}: {line}", evidence.pack, evidence.slice));
                        bar.inc(1);
                        if bar.position() == bar.length().unwrap_or(0) {
                            bar.finish_and_clear();
                        }
                    }
                    None => eprintln!("{line}"),
                }
            }
            Progress::RunsPlanned { plan } => {
                let line = format!(
                    "{}/{}: {} runs planned from the baseline's between-run spread \
                     (its margins need {}; samples.max_runs = {})",
                    plan.pack,
                    plan.slice,
                    plan.runs,
                    if plan.needed == usize::MAX {
                        "more than any budget".to_owned()
                    } else {
                        plan.needed.to_string()
                    },
                    plan.cap
                );
                match &bar {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
            }
            Progress::PackWarning { warning } => {
                let line = format!("warning: {warning}");
                match &bar {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
            }
            Progress::PowerWarning { note } => {
                let line = format!("{}/{} `{}`: {}", note.pack, note.slice, note.metric, note.message);
                match &bar {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
            }
        }
    }
}
