//! Throughput of the simulated accelerator: single-GEMM evaluations per second over a rayon
//! sweep, a full LLaMA-2-7B prefill, and the speed ratio against SCALE-Sim's wall time on
//! the committed reference cases. `cargo run --release --example sim_sweep`.

use sparsegate::ingress::{Precision, Sparsity};
use sparsegate::sim::model::{Model, evaluate_model};
use sparsegate::sim::{Layer, Preset, evaluate, sweep};
use std::time::Instant;

fn main() {
    let h100 = Preset::resolve("h100").expect("built-in preset");
    let n = 2_000_000u64;
    let layers: Vec<Layer> = (0..n)
        .map(|i| {
            let sp = match i % 3 {
                0 => Sparsity::Dense,
                1 => Sparsity::NOfM { n: 2, m: 4 },
                _ => Sparsity::Unstructured { density: 0.3 },
            };
            Layer::new(
                1 + i % 8192,
                64 * (1 + i % 256),
                64 * (1 + (i / 7) % 256),
                sp,
                Precision::Fp16,
            )
        })
        .collect();
    let _ = sweep(&h100, &layers[..10_000]);
    let start = Instant::now();
    let out = sweep(&h100, &layers);
    let secs = start.elapsed().as_secs_f64();
    let sum: f64 = out.iter().map(|r| r.as_ref().map_or(0.0, |r| r.latency_s)).sum();
    println!(
        "sweep: {n} GEMM evaluations in {secs:.3} s = {:.0} evals/s on {} threads (checksum {sum:.6e})",
        n as f64 / secs,
        rayon::current_num_threads()
    );
    let start = Instant::now();
    let seq: f64 = layers[..200_000]
        .iter()
        .map(|l| evaluate(&h100, l).unwrap().latency_s)
        .sum();
    let secs1 = start.elapsed().as_secs_f64();
    println!(
        "sequential: {:.0} evals/s on one thread (checksum {seq:.6e})",
        200_000.0 / secs1
    );

    let reps = 1000;
    let start = Instant::now();
    let mut total = 0.0;
    for _ in 0..reps {
        let r = evaluate_model(
            &h100,
            Model::Llama2_7b,
            1,
            4096,
            Sparsity::NOfM { n: 2, m: 4 },
            Precision::Fp16,
        )
        .unwrap();
        total += r.latency_s;
    }
    let per = start.elapsed().as_secs_f64() / f64::from(reps);
    println!(
        "LLaMA-2-7B prefill (32 layers: 5 linear + 2 attention GEMMs + 4 non-GEMM passes, 4096 tokens, 2:4) simulated in {:.1} us (model latency {:.3} ms)",
        per * 1e6,
        total / f64::from(reps) * 1e3
    );

    // SCALE-Sim wall time on the same kind of cases (tests/data/sim/scalesim_reference.json).
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/sim/scalesim_reference.json"
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    let scalesim_s: f64 = cases.iter().map(|c| c["scalesim_wall_s"].as_f64().unwrap()).sum();
    let sys = Preset::resolve("systolic-32-os").unwrap();
    let layers: Vec<Layer> = cases
        .iter()
        .map(|c| {
            Layer::new(
                c["m"].as_u64().unwrap(),
                c["n"].as_u64().unwrap(),
                c["k"].as_u64().unwrap(),
                c["sparsity"].as_str().unwrap().parse().unwrap(),
                Precision::Int8,
            )
        })
        .collect();
    let reps = 10_000;
    let start = Instant::now();
    let mut acc = 0u64;
    for _ in 0..reps {
        for l in &layers {
            acc = acc.wrapping_add(evaluate(&sys, l).unwrap().cycles);
        }
    }
    let ours = start.elapsed().as_secs_f64() / f64::from(reps);
    println!(
        "SCALE-Sim {} cases: {scalesim_s:.1} s; this model: {:.1} us; {:.0}x faster (checksum {acc})",
        cases.len(),
        ours * 1e6,
        scalesim_s / ours
    );
}
