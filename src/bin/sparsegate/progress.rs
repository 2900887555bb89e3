//! Progress of the commands that run slices: per slice, and inside a long slice.

use sparsegate::app::Progress;
use sparsegate::domain::Metric;
use sparsegate::execute::Phase;
use std::time::{Duration, Instant};

/// How often a line about a running slice may be printed when stderr is not a terminal:
/// often enough that a CI log shows a long slice is alive, rarely enough not to flood it
/// (issue 24). `SPARSEGATE_PROGRESS_EVERY_S` overrides it (the CLI tests use a fraction of
/// a second).
const EVERY: Duration = Duration::from_secs(5);

/// Progress on stderr: a progress bar on a terminal, whose message follows the running
/// slice's runs and samples; otherwise one line per slice (CI logs keep a readable record)
/// plus, while a slice runs for long, a line every [`EVERY`]; nothing with `--quiet`.
pub fn progress(quiet: bool) -> impl FnMut(Progress<'_>) {
    use std::io::IsTerminal;
    let interactive = std::io::stderr().is_terminal();
    let every = std::env::var("SPARSEGATE_PROGRESS_EVERY_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(EVERY, Duration::from_secs_f64);
    let mut bar: Option<indicatif::ProgressBar> = None;
    // Without a terminal: whether the `[i/n] slice ` line awaits its end, and when the
    // last line about the running slice was printed (or the slice started).
    let mut line_open = false;
    let mut last_line = Instant::now();
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
                        let bar = indicatif::ProgressBar::new(total as u64).with_style(style);
                        bar.enable_steady_tick(Duration::from_millis(250));
                        bar
                    });
                    bar.set_position(index as u64 - 1);
                    bar.set_message(label);
                } else {
                    eprint!("[{index}/{total}] {label} ");
                    line_open = true;
                    last_line = Instant::now();
                }
            }
            Progress::SliceRunning { slice, at } => {
                let line = format!(
                    "{}/{}: {}, {:.1} s",
                    slice.pack,
                    slice.id,
                    doing(at.phase),
                    at.elapsed_s
                );
                match &bar {
                    Some(bar) => bar.set_message(line),
                    None if last_line.elapsed() >= every => {
                        if std::mem::take(&mut line_open) {
                            eprintln!();
                        }
                        eprintln!("  {line}");
                        last_line = Instant::now();
                    }
                    None => {}
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
                    None if std::mem::take(&mut line_open) => eprintln!("{line}"),
                    // Progress lines came between: name the slice again.
                    None => eprintln!("{}/{}: {line}", evidence.pack, evidence.slice),
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

/// What a running slice is doing, in words: `2/3 runs done, 140 samples`, `training the
/// dense model (64 hidden), epoch 3/20`, `1200/5000 requests (1180 served, 20 dropped)`.
fn doing(phase: Phase) -> String {
    match phase {
        Phase::Runs {
            runs_done,
            runs_planned,
            runs_max,
            samples,
        } => {
            let up_to = if runs_max > runs_planned {
                format!(" (up to {runs_max})")
            } else {
                String::new()
            };
            format!("{runs_done}/{runs_planned} runs{up_to} done, {samples} samples")
        }
        Phase::Training {
            hidden,
            epoch,
            epochs,
        } => {
            format!("training the dense model ({hidden} hidden), epoch {epoch}/{epochs}")
        }
        Phase::Pruning { step, steps } => format!("pruning, step {step}/{steps} done"),
        Phase::EqualLatency { probes } => {
            format!("searching the equal-latency dense width, {probes} timed")
        }
        Phase::Serving {
            offered,
            requests,
            served,
            dropped,
        } => format!("{offered}/{requests} requests ({served} served, {dropped} dropped)"),
    }
}
