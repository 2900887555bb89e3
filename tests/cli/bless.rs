//! Golden baselines through the CLI: bless, gate against them, and every refusal.

use crate::support::{
    Sandbox, assert_contains, assert_exit, assert_refused, assert_stdout_matches_schema, stderr, stdout,
    stdout_json, tiny_pack,
};
use sparsegate::validate::golden::Baseline;

const SAMPLES: &str = "{warmup: 2, min: 15, max: 20, time_budget_s: 0.05}";

/// A tiny pack named `name` with one baseline guardrail, loose enough for equal code.
fn golden_pack(name: &str) -> String {
    tiny_pack(name, SAMPLES, &["{metric: latency, regress_at_most: 90%}"])
}

/// A sandbox with `golden_pack("golden-test")` as `pack.yaml`, blessed when `blessed`.
fn golden_sandbox(blessed: bool) -> Sandbox {
    let sb = Sandbox::with_pack(&golden_pack("golden-test"));
    if blessed {
        assert_exit(&sb.output(&["bless", "pack.yaml", "-q"]), 0);
    }
    sb
}

#[test]
fn bless_then_gate_compares_against_the_baseline() {
    let sb = golden_sandbox(false);
    let out = sb.output(&["bless", "pack.yaml", "-q"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("created golden/golden-test/tiny-2of4-fp32.json"),
        "{}",
        stdout(&out)
    );
    assert_eq!(sb.files_under("golden"), ["golden-test/tiny-2of4-fp32.json"]);

    let out = sb.gate("pack.yaml", &["--json", "-q"]);
    assert_stdout_matches_schema(&out, "verdict.schema.json");
    let verdict = stdout_json(&out);
    let g = &verdict["guardrails"][0];
    // A finding that session drift or the two sessions' CPU contention could explain leaves
    // the Holm family and has no p-value: on a loaded runner (the tests beside this one) the
    // tiny slice can run twice as slow, and bless and gate get different shares of the cores.
    assert!(
        g["baseline"].is_number()
            && g["ci_low"].is_number()
            && (g["p_value"].is_number()
                || g["undecided_by"] == "session_drift"
                || g["undecided_by"] == "contention"),
        "{g}"
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "a 90% margin on equal code must not fail: {verdict}"
    );

    // Blessing again reports the change against the old baseline.
    let out = sb.output(&["bless", "pack.yaml", "-q"]);
    assert!(
        stdout(&out).contains("updated golden/golden-test/tiny-2of4-fp32.json"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("latency"), "{}", stdout(&out));

    // And `--json` says the same as the list its schema describes.
    let out = sb.output(&["bless", "pack.yaml", "-q", "--json"]);
    assert_exit(&out, 0);
    assert_stdout_matches_schema(&out, "bless-report.schema.json");
    let change = &stdout_json(&out)[0];
    assert_eq!(change["replaced"], true, "{change}");
    let latency = change["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "latency")
        .unwrap_or_else(|| panic!("no latency change: {change}"));
    assert!(
        latency["old"].is_number() && latency["new"].is_number(),
        "{latency}"
    );
}

#[test]
fn missing_baseline_exits_2_and_says_bless_before_running() {
    let sb = golden_sandbox(false);
    let out = sb.gate("pack.yaml", &[]);
    assert_refused(&out, "no golden baseline");
    assert_refused(&out, "sparsegate bless pack.yaml");
    assert!(sb.files_under(".") == ["pack.yaml"], "{:?}", sb.files_under("."));
}

fn rewrite_baseline(sb: &Sandbox, edit: impl FnOnce(&mut Baseline), redigest: bool) {
    let name = "golden/golden-test/tiny-2of4-fp32.json";
    let mut baseline: Baseline = serde_json::from_str(&sb.read(name)).unwrap();
    edit(&mut baseline);
    if redigest {
        baseline.digest = baseline.compute_digest();
    }
    sb.write_raw(name, &serde_json::to_string_pretty(&baseline).unwrap());
}

/// Issue 22: on a loaded runner the bf16 kernel's timing probe picked differently at bless
/// and at gate, and golden gates of slices that never run bf16 exited 2 for it.
#[test]
fn a_different_bf16_kernel_pick_does_not_refuse_an_fp32_slice_but_its_own_path_does() {
    let sb = golden_sandbox(true);
    rewrite_baseline(
        &sb,
        |b| {
            b.environment
                .kernel_paths
                .insert("bf16".into(), "a-kernel-the-probe-picked-elsewhere".into());
        },
        true,
    );
    let out = sb.gate("pack.yaml", &["-q"]);
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    rewrite_baseline(
        &sb,
        |b| {
            b.environment
                .kernel_paths
                .insert("fp32".into(), "avx2-f32-elsewhere".into());
        },
        true,
    );
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "fp32=avx2-f32-elsewhere");
}

#[test]
fn mismatched_lock_exits_2_naming_fields_unless_allowed() {
    let sb = golden_sandbox(true);
    rewrite_baseline(
        &sb,
        |b| {
            b.environment.cpu_model = "Imaginary CPU 9000".into();
            b.environment.threads = 64;
        },
        true,
    );
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    for needle in ["cpu_model", "Imaginary CPU 9000", "threads", "--allow-env-drift"] {
        assert_contains(&err, needle);
    }
    assert!(!sb.path().join("out").exists());

    let out = sb.gate("pack.yaml", &["--allow-env-drift", "-q"]);
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "Environment drift allowed");
    assert_contains(&memo, "Imaginary CPU 9000");
}

#[test]
fn hand_edited_baseline_exits_2() {
    let sb = golden_sandbox(true);
    rewrite_baseline(&sb, |b| b.blessed_by = "mallory".into(), false);
    assert_refused(&sb.gate("pack.yaml", &[]), "edited by hand");
}

#[test]
fn bless_one_slice_only() {
    let sb = Sandbox::with_pack(
        &golden_pack("subset").replace("sparsity: [\"2:4\"]", "sparsity: [\"2:4\", \"dense\"]"),
    );
    let out = sb.output(&["bless", "pack.yaml", "--slice", "tiny-dense-fp32", "-q"]);
    assert_exit(&out, 0);
    assert_eq!(sb.files_under("golden"), ["subset/tiny-dense-fp32.json"]);
    let out = sb.output(&["bless", "pack.yaml", "--slice", "nope"]);
    assert_refused(&out, "tiny-2of4-fp32");
}

/// Issue 23, forged baselines: the choice made is review, not keys. The memo says plainly
/// that golden files are protected by code review only and shows who blessed each baseline
/// and when; the signed statement still covers the baseline file, so a baseline edited
/// after the owners signed (digest recomputed) fails `memo verify`.
#[test]
fn the_memo_says_baselines_are_protected_by_review_and_who_blessed_them() {
    let sb = golden_sandbox(true);
    let path = "golden/golden-test/tiny-2of4-fp32.json";
    let baseline = sb.json(path);
    let out = sb.gate("pack.yaml", &["-q"]);
    assert!(matches!(out.status.code(), Some(0) | Some(3)), "{}", stderr(&out));
    let by = baseline["blessed_by"].as_str().unwrap();
    for memo in ["out/memo.md", "out/memo.html"] {
        let text = sb.read(memo);
        assert_contains(&text, "Golden baselines are protected by code review only");
        // The HTML escapes the `<email>` part.
        assert_contains(&text, by.split(" <").next().unwrap());
        assert_contains(&text, baseline["blessed_at"].as_str().unwrap());
    }
    assert_contains(&sb.read("out/memo.md"), by);

    let owner = crate::memo::key(&sb, "owner", "owner@example.com", 4);
    sb.write("allowed_signers", &format!("owner@example.com {owner}\n"));
    assert_exit(&crate::memo::sign(&sb, "owner", "owner"), 0);
    assert_exit(&crate::memo::verify(&sb), 0);
    rewrite_baseline(&sb, |b| b.blessed_by = "mallory".into(), true);
    assert_refused(
        &crate::memo::verify(&sb),
        "tiny-2of4-fp32.json changed since signing",
    );
}

/// Issue 24: a pack's own lock fields (an environment variable, a command's output) are
/// locked like the built-in ones: a baseline blessed under one value refuses a gate under
/// another, naming the field; a failing lock command is refused before anything runs.
#[test]
fn issue_24_pack_lock_fields_are_locked_like_the_built_in_ones() {
    let pack = golden_pack("stack-lock").replace(
        "samples:",
        "lock:\n  fields:\n    - {name: framework, env: SG_TEST_FRAMEWORK}\n    - {name: compiler, command: [sh, -c, 'echo cc   1.2']}\nsamples:",
    );
    let sb = Sandbox::with_pack(&pack);
    let bless = sb
        .cmd(&["bless", "pack.yaml", "-q"])
        .env("SG_TEST_FRAMEWORK", "torch 2.5")
        .output()
        .unwrap();
    assert_exit(&bless, 0);
    let evidence = sb.read("golden/stack-lock/tiny-2of4-fp32.json");
    assert_contains(&evidence, "\"framework\": \"torch 2.5\"");
    assert_contains(&evidence, "\"compiler\": \"cc 1.2\"");
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out"])
        .env("SG_TEST_FRAMEWORK", "torch 2.6")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let err = stderr(&out);
    for needle in ["stack.framework", "torch 2.5", "torch 2.6"] {
        assert_contains(&err, needle);
    }
    let failing = pack.replace("'echo cc   1.2'", "'echo secret; exit 7'");
    let sb = Sandbox::with_pack(&failing);
    let out = sb.gate("pack.yaml", &["-q"]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert_contains(&err, "lock field `compiler` could not be read");
    assert!(
        !err.contains("secret"),
        "a lock command's output is never echoed: {err}"
    );
}

#[test]
fn issue_22_per_runner_baselines_sit_beside_another_runners_and_the_gate_uses_its_own() {
    // The class-less baseline was blessed on another kind of runner.
    let sb = golden_sandbox(true);
    rewrite_baseline(
        &sb,
        |b| b.environment.cpu_model = "Imaginary CPU 9000".into(),
        true,
    );
    let out = sb.gate("pack.yaml", &["-q"]);
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "Imaginary CPU 9000");

    // This runner keeps its own, under its class, beside the other runner's.
    let out = sb.output(&["bless", "pack.yaml", "-q", "--per-runner"]);
    assert_exit(&out, 0);
    let said = stdout(&out);
    let class = said
        .split("(runner class ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("bless names no runner class: {said}"))
        .to_owned();
    let own = format!("runners/{class}/golden-test/tiny-2of4-fp32.json");
    assert_contains(&said, &format!("created golden/{own}"));
    assert_eq!(
        sb.files_under("golden"),
        ["golden-test/tiny-2of4-fp32.json".to_owned(), own.clone()]
    );

    // The gate takes its own class's baseline (no drift to refuse) and the memo says which.
    let out = sb.gate("pack.yaml", &["-q"]);
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_contains(&sb.read("out/memo.md"), &own);
}

/// A bf16 2:4 slice with a loose latency guardrail against its golden baseline, in
/// `runs` fresh child processes each.
fn bf16_pack(runs: u32) -> String {
    tiny_pack(
        "bf16-pin",
        &format!("{{warmup: 1, min: 5, max: 8, time_budget_s: 0.02, runs: {runs}}}"),
        &["{metric: latency, regress_at_most: 90%}"],
    )
    .replace(
        "sparsity: [\"2:4\"]",
        "sparsity: [\"2:4\"]\n    precision: [bf16]",
    )
}

/// `bless pack.yaml` on the bf16 kernel `kernel` (`dot` or `widen`), forced with
/// `SPARSEGATE_BF16_KERNEL`.
#[track_caller]
fn bless_on_bf16_kernel(sb: &Sandbox, kernel: &str) {
    let out = sb
        .cmd(&["bless", "pack.yaml", "-q"])
        .env("SPARSEGATE_BF16_KERNEL", kernel)
        .output()
        .unwrap();
    assert_exit(&out, 0);
}

/// Whether this CPU runs both bf16 kernels (AVX-512 BF16 and the widening kernels): the
/// only CPUs where the per-process pick exists, so where pinning it can be seen.
fn both_bf16_kernels() -> bool {
    sparsegate::ingress::bf16_pick::offered().len() == 2
}

/// The same for `run` (a shard): `merge` compares it with the baselines later, so it runs
/// the kernel they were blessed on, and says how it was chosen.
#[test]
fn a_run_takes_the_bf16_kernel_its_golden_baseline_was_blessed_on() {
    if !both_bf16_kernels() {
        eprintln!("skipped: this CPU does not run both bf16 kernels (no AVX-512 BF16)");
        return;
    }
    for blessed in ["dot", "widen"] {
        let sb = Sandbox::with_pack(&bf16_pack(1));
        bless_on_bf16_kernel(&sb, blessed);
        let out = sb
            .cmd(&["run", "pack.yaml", "--out", "shard", "--shard", "1/1", "-q"])
            .env_remove("SPARSEGATE_BF16_KERNEL")
            .output()
            .unwrap();
        assert_exit(&out, 0);
        let env = &sb.json("shard/evidence.json")["environment"];
        assert_eq!(env["bf16_pick"]["kernel"], blessed, "{env}");
        assert_eq!(env["bf16_pick"]["source"], "baseline", "{env}");
    }
}

/// Issue 22: the bf16 kernel is picked per process by a timing probe, and on a loaded
/// runner bless and gate picked differently, so a bf16 slice gated against its golden
/// baseline was refused (exit 2) although this CPU runs the baseline's kernel. The gate
/// runs the kernel the baseline was blessed on, in its child runs too, and says so; blessed
/// on either kernel (forced with `SPARSEGATE_BF16_KERNEL`), the unforced gate is never
/// refused and runs that kernel.
#[test]
fn a_gate_runs_the_bf16_kernel_its_golden_baseline_was_blessed_on() {
    if !both_bf16_kernels() {
        eprintln!(
            "skipped: this CPU does not run both bf16 kernels (no AVX-512 BF16), so there is no pick to pin"
        );
        return;
    }
    // `kernel_paths` holds the path at many tokens: widening widens the weights once there.
    for (blessed, path) in [("dot", "avx512-bf16"), ("widen", "widen-f32")] {
        let sb = Sandbox::with_pack(&bf16_pack(2));
        bless_on_bf16_kernel(&sb, blessed);
        let baseline = sb.json("golden/bf16-pin/tiny-2of4-bf16.json");
        // Where AMX-BF16 is granted the comparator runs on tiles whatever the pick (issue 20).
        let comparator = baseline["environment"]["kernel_paths"]["bf16"].clone();
        assert!(comparator == path || comparator == "amx-bf16", "{comparator}");
        assert_eq!(baseline["environment"]["bf16_pick"]["kernel"], blessed);
        assert_eq!(
            baseline["environment"]["bf16_pick"]["source"], "requested",
            "{}",
            baseline["environment"]
        );

        let out = sb
            .cmd(&["gate", "pack.yaml", "--out", "out", "-q", "--no-history"])
            .env_remove("SPARSEGATE_BF16_KERNEL")
            .output()
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(0) | Some(3)),
            "blessed on {blessed}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let evidence = sb.json("out/evidence.json");
        let env = &evidence["environment"];
        assert_eq!(env["kernel_paths"]["bf16"], comparator, "{env}");
        assert_eq!(env["bf16_pick"]["kernel"], blessed, "{env}");
        assert_eq!(env["bf16_pick"]["source"], "baseline", "{env}");
        // The child runs ran it too: the slice's own record of its kernels' paths.
        let slice = &evidence["slices"][0];
        assert_eq!(slice["isa"]["comparator"], comparator, "{slice}");
        for memo in ["out/memo.md", "out/memo.html"] {
            assert_contains(&sb.read(memo), "pinned from the golden baseline");
        }
    }
}

/// Issue 22: the user's own `SPARSEGATE_BF16_KERNEL` wins over the baseline's pick, and a
/// mismatch is then refused (exit 2) saying what was recorded, what runs and what to do.
#[test]
fn an_explicit_bf16_kernel_other_than_the_baseline_s_is_refused_with_a_hint() {
    if !both_bf16_kernels() {
        eprintln!(
            "skipped: this CPU does not run both bf16 kernels (no AVX-512 BF16), so there is no pick to pin"
        );
        return;
    }
    let sb = Sandbox::with_pack(&bf16_pack(1));
    let bless = sb
        .cmd(&["bless", "pack.yaml", "-q"])
        .env("SPARSEGATE_BF16_KERNEL", "dot")
        .output()
        .unwrap();
    assert_exit(&bless, 0);
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q", "--no-history"])
        .env("SPARSEGATE_BF16_KERNEL", "widen")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let err = stderr(&out);
    for needle in [
        "dot (avx512-bf16)",
        "widen (avx512-bf16-shift)",
        "SPARSEGATE_BF16_KERNEL=widen",
        "unset SPARSEGATE_BF16_KERNEL",
    ] {
        assert_contains(&err, needle);
    }
    assert!(!sb.path().join("out").exists());
}
