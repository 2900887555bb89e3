//! `SPARSEGATE_MAX_ISA` (issue 20): a process capped below its CPU takes, and records, the
//! paths an older CPU would, so a runner can reproduce an AVX2-only machine and these tests
//! check the AVX2 and portable paths end to end on a CPU with AVX-512.

use crate::support::{Sandbox, assert_exit, assert_refused, stdout, stdout_json, tiny_pack};

const CAP: &str = "SPARSEGATE_MAX_ISA";

/// Whether this CPU has AVX2 and FMA, the features the `avx2` cap keeps.
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Under each cap, every precision's comparator and kernel run on paths the cap allows, the
/// f32 one named for it, and the product still runs sparse.
#[test]
fn issue_20_a_capped_bench_takes_the_paths_an_older_cpu_would() {
    let sb = Sandbox::new();
    let avx2_f32 = if has_avx2() { "avx2-f32" } else { "portable-f32" };
    for (cap, fp32) in [("avx2", avx2_f32), ("portable", "portable-f32")] {
        for precision in ["fp32", "fp16", "bf16", "int8"] {
            for sparsity in ["2:4", "block:16x16:density=25%"] {
                let args = [
                    "bench",
                    "--gemm",
                    "16x64x64",
                    "--sparsity",
                    sparsity,
                    "--precision",
                    precision,
                    "--threads",
                    "1",
                    "--min-samples",
                    "3",
                    "--max-samples",
                    "6",
                    "--time-budget",
                    "0.01",
                    "--json",
                ];
                let out = sb.cmd(&args).env(CAP, cap).output().unwrap();
                assert_exit(&out, 0);
                let r = stdout_json(&out);
                let what = format!("{cap} {precision} {sparsity}: {r}");
                assert_eq!(r["path"], "sparse", "{what}");
                for side in ["comparator", "candidate"] {
                    let path = r["isa"][side].as_str().unwrap();
                    assert!(!path.contains("avx512") && !path.contains("amx"), "{what}");
                    if precision == "fp32" {
                        assert_eq!(path, fp32, "{what}");
                    }
                }
            }
        }
    }
}

/// A baseline blessed under a cap records the capped features and paths, so it is another
/// runner: gated without the cap on a CPU with more, it is refused as drift rather than
/// compared; under the same cap it compares.
#[test]
fn issue_20_a_baseline_blessed_under_a_cap_is_another_runner() {
    let pack = tiny_pack(
        "capped",
        "{warmup: 2, min: 10, max: 15, time_budget_s: 0.05}",
        &["{metric: latency, regress_at_most: 90%}"],
    );
    let sb = Sandbox::with_pack(&pack);
    let out = sb
        .cmd(&["bless", "pack.yaml", "-q"])
        .env(CAP, "avx2")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let env = sb.json("golden/capped/tiny-2of4-fp32.json")["environment"].clone();
    let features: Vec<&str> = env["cpu_features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        features
            .iter()
            .all(|f| !f.starts_with("avx512") && !f.starts_with("amx")),
        "{env}"
    );
    if has_avx2() {
        assert_eq!(env["kernel_paths"]["fp32"], "avx2-f32", "{env}");
    }

    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q", "--no-history"])
        .env(CAP, "avx2")
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "the same cap compares: {}",
        stdout(&out)
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        let out = sb
            .cmd(&["gate", "pack.yaml", "--out", "out2", "-q", "--no-history"])
            .env_remove(CAP)
            .output()
            .unwrap();
        assert_refused(&out, "cpu_features");
    }
}

/// A cap (or a bf16 kernel) that names nothing is refused before anything runs, with what it
/// may be: ignoring it would measure kernels the user ruled out.
#[test]
fn issue_20_an_unknown_isa_cap_or_bf16_kernel_is_refused_with_exit_2() {
    let pack = tiny_pack(
        "caps",
        "{warmup: 1, min: 10, max: 15}",
        &["{metric: latency, regress_at_most: 90%}"],
    );
    let sb = Sandbox::with_pack(&pack);
    let out = sb
        .cmd(&["validate", "pack.yaml"])
        .env(CAP, "avx-512")
        .output()
        .unwrap();
    assert_refused(
        &out,
        "names no instruction-set level; expected one of portable, avx2, avx512, amx",
    );
    let out = sb
        .cmd(&["validate", "pack.yaml"])
        .env("SPARSEGATE_BF16_KERNEL", "fastest")
        .output()
        .unwrap();
    assert_refused(&out, "expected `dot` or `widen`");
    for cap in ["portable", "avx2", "avx512", "amx"] {
        let out = sb.cmd(&["validate", "pack.yaml"]).env(CAP, cap).output().unwrap();
        assert_exit(&out, 0);
    }
}
