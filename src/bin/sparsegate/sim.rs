//! `sparsegate sim --arch NAME_OR_FILE --gemm MxNxK`: one simulated layer.

use crate::cli::SimArgs;
use crate::report::print_report;
use sparsegate::release::ExitCode;
use sparsegate::sim::measured::{Agreement, SPEEDUP_TOLERANCE, TimingSource};
use sparsegate::sim::{SimRun, TrafficRequest};
use sparsegate::{Result, app};

pub fn run(args: &SimArgs) -> Result<ExitCode> {
    if let Some(grid) = &args.measured {
        let agreement = app::check_measured(&args.arch, grid)?;
        print_report(&agreement, args.json, print_agreement);
        return Ok(ExitCode::Pass);
    }
    // clap requires --gemm unless --measured is given.
    let gemm = args.gemm.as_deref().unwrap_or_default();
    let traffic = args.traffic.as_deref().map(|arrivals| TrafficRequest {
        arrivals,
        requests: args.requests,
        seed: args.seed,
    });
    let run = app::simulate(&args.arch, gemm, &args.sparsity, &args.precision, traffic)?;
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

fn print_agreement(a: &Agreement) {
    println!("{} predicted against {} (measured):", a.preset, a.device);
    println!(
        "{:<24} {:>6} {:>5} {:>6} {:>10} {:>10} {:>9} {:>9} {:>7}",
        "layer", "tokens", "prec", "timing", "dense us", "2:4 us", "measured", "model", "error"
    );
    for c in &a.cells {
        println!(
            "{:<24} {:>6} {:>5} {:>6} {:>10.1} {:>10.1} {:>8.2}x {:>8.2}x {:>+6.1}%{}",
            c.layer,
            c.m,
            c.precision.as_str(),
            match c.timing {
                TimingSource::Graph => "graph",
                TimingSource::Eager => "eager",
            },
            c.measured_dense_s * 1e6,
            c.measured_sparse_s * 1e6,
            c.measured_speedup,
            c.predicted_speedup,
            c.speedup_error * 100.0,
            if c.compute_bound { " compute-bound" } else { "" }
        );
    }
    for s in &a.skipped {
        println!(
            "skipped {} at {} tokens ({}): {}",
            s.layer, s.m, s.dtype, s.reason
        );
    }
    for x in &a.crossovers {
        println!(
            "{} {}: at {} tokens measured {:.2}x, model {:.2}x ({}); 2:4 wins from {} measured, {} in the model",
            x.layer,
            x.precision.as_str(),
            x.decode_tokens,
            x.measured_decode_speedup,
            x.predicted_decode_speedup,
            if x.decode_side_agrees {
                "same side"
            } else {
                "WRONG SIDE"
            },
            x.measured_wins_from
                .map_or("never".to_owned(), |m| format!("{m} tokens")),
            x.predicted_wins_from
                .map_or("never".to_owned(), |m| format!("{m} tokens")),
        );
    }
    println!(
        "compute-bound speedups within {:.0}%: {}/{}; decode crossover on the right side: {}/{}",
        SPEEDUP_TOLERANCE * 100.0,
        a.compute_bound_within,
        a.compute_bound_total,
        a.decode_sides_agreeing,
        a.crossovers.len()
    );
}
