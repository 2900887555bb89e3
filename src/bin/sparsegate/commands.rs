//! Each subcommand: call the library, print its result for people or as JSON.

use crate::cli::{Cli, Command, RunArgs};
use sparsegate::app::{self, Options, Progress};
use sparsegate::release::{ExitCode, render_summary};
use sparsegate::{Error, Result};

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Validate { packs, json } => validate(&packs, json),
        Command::Run { run, out, json } => {
            let packs = app::load_packs(&run.packs)?;
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
        Command::Gate {
            run,
            out,
            allow_env_drift,
            json,
        } => {
            let report = app::gate(
                &run.packs,
                &out,
                &options(&run, allow_env_drift),
                &mut progress(run.quiet),
            )?;
            if json {
                print!("{}", app::to_json(&report.decision));
            } else {
                print!("{}", render_summary(&report.decision));
                for file in &report.files {
                    println!("wrote {}", file.display());
                }
            }
            Ok(report.decision.exit_code)
        }
        Command::Bless { run, slices, json } => {
            let changes = app::bless(
                &run.packs,
                &slices,
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
                            .map_or_else(String::new, |r| format!(" ({:+.1}%)", r * 100.0));
                        println!("  {:<18} {} -> {}{change}", m.metric, fmt(m.old), fmt(m.new));
                    }
                }
            }
            Ok(ExitCode::Pass)
        }
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

fn options(run: &RunArgs, allow_env_drift: bool) -> Options {
    Options {
        golden_dir: run.golden.clone(),
        allow_env_drift,
        work_dir: std::env::current_dir().unwrap_or_else(|_| ".".into()),
    }
}

fn progress(quiet: bool) -> impl FnMut(Progress<'_>) {
    move |event| {
        if quiet {
            return;
        }
        match event {
            Progress::SliceStarted { slice, index, total } => {
                eprint!("[{index}/{total}] {}/{} ", slice.pack, slice.id)
            }
            Progress::SliceFinished { evidence } => match &evidence.failure {
                Some(f) => eprintln!("failed at {}: {}", f.stage, f.message),
                None => eprintln!(
                    "{} samples in {:.2} s",
                    evidence.metrics.get("latency").map_or(0, |m| m.samples.len()),
                    evidence.wall_time_s
                ),
            },
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
