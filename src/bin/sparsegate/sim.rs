//! `sparsegate sim --arch NAME_OR_FILE --gemm MxNxK`: one simulated layer.

use crate::cli::SimArgs;
use crate::report::print_report;
use sparsegate::release::ExitCode;
use sparsegate::sim::{SimRun, TrafficRequest};
use sparsegate::{Result, app};

pub fn run(args: &SimArgs) -> Result<ExitCode> {
    let traffic = args.traffic.as_deref().map(|arrivals| TrafficRequest {
        arrivals,
        requests: args.requests,
        seed: args.seed,
    });
    let run = app::simulate(&args.arch, &args.gemm, &args.sparsity, &args.precision, traffic)?;
    print_report(&run, args.json, print_text);
    Ok(ExitCode::Pass)
}

fn print_text(run: &SimRun) {
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
