//! Each subcommand: call the library, print its result for people or as JSON.

use crate::cli::{BenchArgs, Cli, Command, MemoCommand, RecordArgs, RunArgs, StatsCommand};
use sparsegate::app::{self, Options, Progress};
use sparsegate::execute::{ChildProcessLauncher, RunLauncher, RunRequest};
use sparsegate::release::history::HISTORY_ENV;
use sparsegate::release::{ExitCode, github_annotations, render_summary, sign};
use sparsegate::{Error, Result};

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Validate { packs, json } => validate(&packs, json),
        Command::RunSlice => run_slice(),
        Command::Run {
            run,
            out,
            shard,
            json,
        } => {
            let mut packs = app::load_packs(&run.packs)?;
            if let Some(shard) = shard {
                app::select_shard(&mut packs, shard);
            }
            let evidence = app::run(&packs, &options(&run, false), &mut progress(run.quiet))?;
            let path = app::write_evidence(&evidence, &out)?;
            if json {
                print!(
                    "{}",
                    app::to_json(&evidence.slices.iter().map(slice_summary).collect::<Vec<_>>())
                );
            } else {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::Pass)
        }
        Command::Merge {
            shards,
            out,
            golden,
            allow_env_drift,
            json,
            history,
        } => {
            let work_dir = std::env::current_dir().unwrap_or_else(|_| ".".into());
            let options = Options {
                golden_dir: golden,
                allow_env_drift,
                history: record_path(&history, &work_dir),
                work_dir,
                run_launcher: None,
            };
            let report = app::merge(&shards, &out, &options)?;
            print_gate_report(&report, json)?;
            Ok(report.decision.exit_code)
        }
        Command::Gate {
            run,
            out,
            allow_env_drift,
            json,
            history,
        } => {
            let mut options = options(&run, allow_env_drift);
            options.history = record_path(&history, &options.work_dir);
            let report = app::gate(&run.packs, &out, &options, &mut progress(run.quiet))?;
            print_gate_report(&report, json)?;
            Ok(report.decision.exit_code)
        }
        Command::Memo(MemoCommand::Sign { dir, key, role, json }) => {
            let role = match role {
                Some(role) => role,
                None => sign::sole_role(&dir)?,
            };
            let report = sign::sign(&dir, &key, &role)?;
            if json {
                print!("{}", app::to_json(&report));
            } else {
                println!(
                    "signed memo in {} as `{}` with {}",
                    dir.display(),
                    report.role,
                    report.fingerprint
                );
                for file in &report.files {
                    println!("wrote {}", file.display());
                }
            }
            Ok(ExitCode::Pass)
        }
        Command::Memo(MemoCommand::Verify {
            dir,
            allowed_signers,
            json,
        }) => {
            let report = sign::verify(&dir, &allowed_signers)?;
            if json {
                print!("{}", app::to_json(&report));
            } else {
                for role in &report.roles {
                    println!("signed  {role}");
                }
                println!(
                    "memo in {} verified: {} roles, {} envelope signatures, {} files unchanged",
                    dir.display(),
                    report.roles.len(),
                    report.envelope_signatures,
                    report.subjects
                );
            }
            Ok(ExitCode::Pass)
        }
        Command::Bless {
            run,
            slices,
            expires_in_days,
            json,
        } => {
            let changes = app::bless(
                &run.packs,
                &slices,
                expires_in_days,
                &options(&run, false),
                &mut progress(run.quiet),
            )?;
            if json {
                print!("{}", app::to_json(&changes));
            } else {
                for c in &changes {
                    println!(
                        "{} {}",
                        if c.replaced { "updated" } else { "created" },
                        c.path.display()
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
                                sparsegate::validate::golden::BLESS_CONFIDENCE * 100.0,
                                (lo - 1.0) * 100.0,
                                (hi - 1.0) * 100.0
                            ),
                            (None, false) => ")".to_owned(),
                        };
                        println!("  {:<18} {} -> {}{change}{ci}", m.metric, fmt(m.old), fmt(m.new));
                    }
                }
            }
            Ok(ExitCode::Pass)
        }
        Command::History {
            pack,
            limit,
            history,
            json,
        } => {
            let runs = app::history_runs(&history_path(history), pack.as_deref(), limit)?;
            if json {
                print!("{}", app::to_json(&runs));
            } else if runs.is_empty() {
                println!(
                    "no runs recorded{}",
                    pack.map_or_else(String::new, |p| format!(" for pack `{p}`"))
                );
            } else {
                for r in &runs {
                    println!(
                        "{:>6}  {}  {:<5} {:<12} exit {}  {}{}  {}",
                        r.id,
                        r.recorded_at,
                        r.command,
                        r.verdict,
                        r.exit_code,
                        r.git_commit.as_deref().map_or("-", |c| c.get(..12).unwrap_or(c)),
                        if r.git_dirty == Some(true) { "+dirty" } else { "" },
                        r.packs.join(" ")
                    );
                }
            }
            Ok(ExitCode::Pass)
        }
        Command::Trend {
            metric,
            slice,
            pack,
            pvalue,
            permutations,
            seed,
            history,
            json,
        } => {
            let options = sparsegate::validate::stats::EDivisiveOptions {
                pvalue,
                permutations: permutations as usize,
                seed,
            };
            let report = app::trend(&history_path(history), pack.as_deref(), &slice, &metric, &options)?;
            if json {
                print!("{}", app::to_json(&report));
            } else {
                println!(
                    "{} of {} ({} runs, {} values)",
                    report.metric,
                    report.slice,
                    report.points.len(),
                    match report.source {
                        sparsegate::release::history::SeriesSource::Metric => "median",
                        sparsegate::release::history::SeriesSource::Guardrail => "guardrail",
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
                        "change at run {} (index {}): median {:.6e} -> {:.6e}{}, q = {:.4e}, p = {:.3}{}",
                        c.run_id,
                        c.index,
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
            }
            Ok(ExitCode::Pass)
        }
        Command::Bench(args) => bench(&args),
        Command::Stats { command } => Ok(stats(command)),
        Command::Sim {
            arch,
            gemm,
            sparsity,
            precision,
            traffic,
            requests,
            seed,
            json,
        } => {
            let traffic = traffic
                .as_deref()
                .map(|arrivals| sparsegate::sim::TrafficRequest {
                    arrivals,
                    requests,
                    seed,
                });
            let run = sparsegate::sim::simulate_one(&arch, &gemm, &sparsity, &precision, traffic)?;
            if json {
                print!("{}", app::to_json(&run));
            } else {
                let r = &run.report;
                println!(
                    "{} {}x{}x{} {} {}: {} cycles, {:.3e} s, {:.3e} J, tc_occupancy {:.1}%, dram {:.0} B, metadata {:.0} B{}",
                    run.arch,
                    run.m,
                    run.n,
                    run.k,
                    run.sparsity,
                    run.precision.as_str(),
                    r.cycles,
                    r.latency_s,
                    r.energy_j,
                    r.tc_occupancy * 100.0,
                    r.dram_bytes,
                    r.metadata_bytes,
                    if r.fallback { ", dense fallback" } else { "" }
                );
                println!(
                    "bottleneck: {} ({}); {:.2}x vs dense",
                    serde_json::to_value(r.bottleneck)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    run.bottleneck_reason,
                    run.effective_speedup
                );
                if let Some(t) = &run.traffic {
                    println!(
                        "under load ({} requests): p50 {:.3e} s, p95 {:.3e} s, p99 {:.3e} s, utilisation {:.1}%{}",
                        t.requests,
                        t.p50_s,
                        t.p95_s,
                        t.p99_s,
                        t.utilisation * 100.0,
                        if t.p99_trustworthy {
                            String::new()
                        } else {
                            format!(" (p99 needs at least {} requests)", t.p99_min_requests)
                        }
                    );
                }
            }
            Ok(ExitCode::Pass)
        }
    }
}

/// `stats compare`: input problems are printed as located diagnostics and exit 2.
fn stats(command: StatsCommand) -> ExitCode {
    use sparsegate::validate::compare::{CompareOptions, Worse, compare, read_samples};
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
    let result = read_samples(&baseline)
        .and_then(|b| Ok((b, read_samples(&candidate)?)))
        .and_then(|(b, c)| compare(&b, &c, &opts));
    match result {
        Ok(c) => {
            if json {
                print!("{}", app::to_json(&c));
            } else {
                print!("{}", c.render_text());
            }
            ExitCode::for_verdict(c.verdict)
        }
        Err(e) => {
            eprintln!("{:?}", miette::Report::new(e));
            ExitCode::Error
        }
    }
}

fn bench(args: &BenchArgs) -> Result<ExitCode> {
    use sparsegate::execute::bench::{BenchRequest, bench_gemm};
    let (m, n, k) = args.gemm;
    if !(args.time_budget > 0.0 && args.time_budget.is_finite()) || args.min_samples > args.max_samples {
        return Err(Error::Usage {
            message: "bench needs --time-budget > 0 and --min-samples <= --max-samples".into(),
            hint: "e.g. --min-samples 10 --max-samples 200 --time-budget 5".into(),
        });
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let request = BenchRequest {
        m,
        n,
        k,
        sparsity: args.sparsity,
        precision: args.precision,
        threads,
        samples: sparsegate::ingress::pack::SamplePolicy {
            warmup: 3,
            min: args.min_samples,
            max: args.max_samples,
            time_budget_s: args.time_budget,
            ..Default::default()
        },
        seed: args.seed,
        confidence: 0.95,
    };
    let r = bench_gemm(&request).map_err(|e| Error::Usage {
        message: e.to_string(),
        hint:
            "check the shape fits in memory; a sparse pattern that does not fit the shape falls back to dense"
                .into(),
    })?;
    if args.json {
        print!("{}", app::to_json(&r));
    } else {
        let ci = |i: &sparsegate::execute::bench::Interval, scale: f64| match (i.low, i.high) {
            (Some(l), Some(h)) => format!("[{:.3}, {:.3}]", l * scale, h * scale),
            _ => "[too few samples]".into(),
        };
        println!(
            "gemm {} {} {} on {} thread(s): {:?} ({})",
            r.gemm,
            r.sparsity,
            r.precision.as_str(),
            r.threads,
            r.path,
            r.reason
        );
        println!(
            "  kernel     {:>10.3} ms {}  {:>8.1} GFLOP/s dense-equivalent, {:.1} useful",
            r.kernel_s.estimate * 1e3,
            ci(&r.kernel_s, 1e3),
            r.gflops_dense_equivalent,
            r.gflops_useful
        );
        println!(
            "  comparator {:>10.3} ms {}  {:>8.1} GFLOP/s",
            r.comparator_s.estimate * 1e3,
            ci(&r.comparator_s, 1e3),
            r.comparator_gflops
        );
        println!(
            "  speedup    {:>10.3}x {} ({} samples, {:.0}% bootstrap interval of the ratio of medians)",
            r.speedup.estimate,
            ci(&r.speedup, 1.0),
            r.samples,
            r.speedup.confidence * 100.0
        );
        if r.value_bytes > 0.0 {
            println!(
                "  weights    {} value bytes, {} metadata bytes (overhead {:.4})",
                r.value_bytes, r.metadata_bytes, r.metadata_overhead
            );
        }
    }
    Ok(ExitCode::Pass)
}

fn validate(paths: &[std::path::PathBuf], json: bool) -> Result<ExitCode> {
    let results = app::validate_packs(paths);
    let mut ok = true;
    let mut report = Vec::new();
    for (path, result) in results {
        match result {
            Ok(pack) => {
                if !json {
                    println!(
                        "ok {} ({} slice{})",
                        path.display(),
                        pack.slices.len(),
                        if pack.slices.len() == 1 { "" } else { "s" }
                    );
                }
                report.push(serde_json::json!({
                    "path": path, "valid": true,
                    "slices": pack.slices.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
                    "errors": [],
                }));
            }
            Err(err) => {
                ok = false;
                report.push(serde_json::json!({
                    "path": path, "valid": false, "slices": [],
                    "errors": err.diagnostics.iter().map(|d| serde_json::json!({
                        "location": d.location.to_string(), "pointer": d.pointer,
                        "message": d.message, "hint": d.hint,
                    })).collect::<Vec<_>>(),
                }));
                eprintln!("{:?}", miette::Report::new(Error::from(err)));
            }
        }
    }
    if json {
        print!("{}", app::to_json(&report));
    }
    Ok(if ok { ExitCode::Pass } else { ExitCode::Error })
}

/// The history database for `history` and `trend`: the flag, else the environment, else
/// the default location.
fn history_path(flag: Option<std::path::PathBuf>) -> std::path::PathBuf {
    flag.or_else(|| std::env::var_os(HISTORY_ENV).map(Into::into))
        .unwrap_or_else(|| app::default_history_path(&std::env::current_dir().unwrap_or_else(|_| ".".into())))
}

/// Where `gate`/`merge` record: nowhere with `--no-history`, else as [`history_path`].
fn record_path(args: &RecordArgs, work_dir: &std::path::Path) -> Option<std::path::PathBuf> {
    if args.no_history {
        return None;
    }
    Some(
        args.history
            .clone()
            .or_else(|| std::env::var_os(HISTORY_ENV).map(Into::into))
            .unwrap_or_else(|| app::default_history_path(work_dir)),
    )
}

/// The gate's result on stdout: verdict.json with `--json`, else the summary and the files.
/// A history that could not be written is a warning on stderr; the verdict stands.
fn print_gate_report(report: &app::GateReport, json: bool) -> Result<()> {
    if let app::HistoryOutcome::Failed { error, .. } = &report.history {
        eprintln!("warning: the run was not recorded in the history: {error}");
    }
    github_actions(report)?;
    if json {
        print!("{}", app::to_json(&report.decision));
    } else {
        print!("{}", render_summary(&report.decision));
        for file in &report.files {
            println!("wrote {}", file.display());
        }
    }
    Ok(())
}

/// In GitHub Actions: annotate the pack lines of guardrails that did not pass, and add the
/// memo to the job summary.
fn github_actions(report: &app::GateReport) -> Result<()> {
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        print!("{}", github_annotations(&report.decision));
    }
    if let Ok(summary) = std::env::var("GITHUB_STEP_SUMMARY") {
        let write_error = |source| Error::Write {
            path: summary.clone().into(),
            source,
        };
        let memo = report.memo.render_markdown()?;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&summary)
            .map_err(write_error)?;
        std::io::Write::write_all(&mut file, memo.as_bytes()).map_err(write_error)?;
    }
    Ok(())
}

fn options(run: &RunArgs, allow_env_drift: bool) -> Options {
    Options {
        golden_dir: run.golden.clone(),
        allow_env_drift,
        work_dir: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        run_launcher: run_launcher(),
        history: None,
    }
}

/// `process`-mode runs start this very executable with the hidden `__run-slice` command,
/// so parent and children are the same build (and share the environment lock). When the
/// executable cannot be located, runs stay in process and the evidence says so.
fn run_launcher() -> Option<std::sync::Arc<dyn RunLauncher>> {
    let exe = std::env::current_exe().ok()?;
    Some(std::sync::Arc::new(ChildProcessLauncher::new(
        exe,
        ["__run-slice"],
    )))
}

/// The child's side of a `process`-mode run: request on stdin, reply on stdout. Errors go
/// to stderr (rendered like any other) with exit code 2; the gate quotes their tail.
fn run_slice() -> Result<ExitCode> {
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut input).map_err(|source| Error::Read {
        path: "<stdin>".into(),
        source,
    })?;
    let request: RunRequest = serde_json::from_str(&input).map_err(|e| Error::Usage {
        message: format!("the run request on stdin is not valid: {e}"),
        hint: "`__run-slice` is started by `sparsegate gate`/`run`/`bless`; do not call it by hand".into(),
    })?;
    let options = Options {
        golden_dir: "golden".into(),
        allow_env_drift: false,
        work_dir: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        run_launcher: None,
        history: None,
    };
    let reply = app::serve_run(&request, &options)?;
    print!("{}", app::to_json(&reply));
    Ok(ExitCode::Pass)
}

/// Per-slice progress on stderr: a progress bar on a terminal, one line per slice otherwise
/// (CI logs keep a readable record), nothing with `--quiet`.
fn progress(quiet: bool) -> impl FnMut(Progress<'_>) {
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
                        evidence.metrics.get("latency").map_or(0, |m| m.samples.len()),
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

fn slice_summary(s: &sparsegate::execute::SliceEvidence) -> serde_json::Value {
    let median = |name: &str| {
        s.metrics
            .get(name)
            .and_then(|m| sparsegate::validate::stats::median(&m.samples).ok())
    };
    serde_json::json!({
        "pack": s.pack, "slice": s.slice, "sparsity": s.sparsity,
        "samples": s.metrics.get("latency").map_or(0, |m| m.samples.len()),
        "latency_median_s": median("latency"), "effective_speedup_median": median("effective_speedup"),
        "fallback_rate": s.plan.fallback_rate(), "failure": s.failure,
    })
}
