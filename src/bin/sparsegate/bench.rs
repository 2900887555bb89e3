//! `sparsegate bench --gemm MxNxK`: one built-in kernel against its dense comparator.

use crate::cli::BenchArgs;
use crate::report::print_report;
use sparsegate::execute::bench::{BenchReport, BenchRequest, Interval, SweepReport};
use sparsegate::ingress::pack::SamplePolicy;
use sparsegate::release::ExitCode;
use sparsegate::{Error, Result, app};

pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    let request = request(args)?;
    if args.sweep_tokens.is_empty() {
        print_report(&app::bench(&request)?, args.json, print_text);
    } else {
        let tokens: Vec<usize> = args.sweep_tokens.iter().map(|&t| t as usize).collect();
        print_report(&app::bench_sweep(&request, &tokens)?, args.json, print_sweep);
    }
    Ok(ExitCode::Pass)
}

/// The request the flags describe: threads default to every logical CPU, three warm-up
/// iterations, 95% intervals.
fn request(args: &BenchArgs) -> Result<BenchRequest> {
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
    Ok(BenchRequest {
        m,
        n,
        k,
        sparsity: args.sparsity,
        precision: args.precision,
        threads,
        samples: SamplePolicy {
            warmup: 3,
            min: args.min_samples,
            max: args.max_samples,
            time_budget_s: args.time_budget,
            ..Default::default()
        },
        seed: args.seed,
        confidence: 0.95,
    })
}

fn print_text(r: &BenchReport) {
    let ci = |i: &Interval, scale: f64| match (i.low, i.high) {
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
        "  ISA paths: kernel {}, comparator {}",
        r.isa.candidate, r.isa.comparator
    );
    let ms = |i: &Interval| format!("{:>10.3} ms {}", i.estimate * 1e3, ci(i, 1e3));
    println!(
        "  kernel     {}  {:>8.1} GFLOP/s dense-equivalent, {:.1} useful",
        ms(&r.kernel_s),
        r.gflops_dense_equivalent,
        r.gflops_useful
    );
    println!(
        "  comparator {}  {:>8.1} GFLOP/s",
        ms(&r.comparator_s),
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

fn print_sweep(r: &SweepReport) {
    println!(
        "weights {} {} {} on {} thread(s), swept over tokens:",
        r.weights,
        r.sparsity,
        r.precision.as_str(),
        r.threads
    );
    println!(
        "  {:>7} {:>11} {:>11} {:>9} {:>18}  path",
        "tokens", "kernel ms", "dense ms", "speedup", "interval"
    );
    for p in &r.points {
        let tokens = p.gemm.split('x').next().unwrap_or("?");
        let interval = match (p.speedup.low, p.speedup.high) {
            (Some(l), Some(h)) => format!("[{l:.3}, {h:.3}]"),
            _ => "[too few samples]".into(),
        };
        println!(
            "  {:>7} {:>11.3} {:>11.3} {:>8.3}x {:>18}  {:?}",
            tokens,
            p.kernel_s.estimate * 1e3,
            p.comparator_s.estimate * 1e3,
            p.speedup.estimate,
            interval,
            p.path
        );
    }
    let b = &r.break_even;
    println!("  {}", sides(r));
    match (b.tokens, b.rises_at) {
        // A sweep can lose in the middle and win again (int8 2:4 at 8 tokens on Zen 4).
        (Some(t), _) if b.wins_from.is_some_and(|w| w as f64 > t) => println!(
            "  break-even: sparse pays below ~{t:.0} tokens, and again from {} tokens, on this CPU",
            b.wins_from.unwrap_or_default()
        ),
        (Some(t), _) => println!("  break-even: sparse pays below ~{t:.0} tokens on this CPU"),
        (None, Some(t)) => println!("  break-even: sparse pays from ~{t:.0} tokens on this CPU"),
        (None, None) => println!("  break-even: none inside the sweep (the speedup never crosses 1)"),
    }
}

/// Which swept token counts win (speedup interval above 1), lose (below 1) or are
/// undecided, each listed: a sweep need not be monotone, so "wins through" and "loses
/// from" alone can hide a loss in the middle.
fn sides(r: &SweepReport) -> String {
    let (mut wins, mut loses, mut open) = (Vec::new(), Vec::new(), Vec::new());
    for p in &r.points {
        let tokens = p.gemm.split('x').next().unwrap_or("?").to_owned();
        match (p.speedup.low, p.speedup.high) {
            (Some(l), _) if l > 1.0 => wins.push(tokens),
            (_, Some(h)) if h < 1.0 => loses.push(tokens),
            _ => open.push(tokens),
        }
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(", ")
        }
    };
    let mut line = format!(
        "wins (interval above 1) at {}; loses (interval below 1) at {}",
        list(&wins),
        list(&loses)
    );
    if !open.is_empty() {
        line += &format!("; undecided at {}", list(&open));
    }
    line
}
