//! The commands end to end with injected run launchers (issue 9).

use super::*;
use crate::execute::RunReply;
use crate::ingress::Environment;
use std::path::Path;

fn tiny_pack(dir: &Path, samples: &str) -> PathBuf {
    let path = dir.join("pack.yaml");
    let text = format!(
        "schema_version: 1\nname: tiny\nowners:\n  - {{name: O, email: o@example.com, role: owner}}\n\
         rollback: {{trigger: t}}\nsamples: {samples}\nslices:\n  - id: s\n    workload:\n      ops:\n\
         \x20       - gemm: {{name: p, m: 16, n: 32, k: 32}}\n    sparsity: [\"2:4\"]\n    guardrails:\n\
         \x20     - {{metric: effective_speedup, at_least: 0.01}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn options(dir: &Path, launcher: Option<Arc<dyn RunLauncher>>) -> Options {
    Options {
        golden_dir: dir.join("golden"),
        allow_env_drift: false,
        work_dir: dir.to_owned(),
        run_launcher: launcher,
        history: None,
        baseline_build: None,
        pr_comment: None,
        focus: Default::default(),
    }
}

#[test]
fn issue_9_a_crashing_child_fails_the_slice_at_execution_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let pack = tiny_pack(dir.path(), "{min: 3, max: 4, time_budget_s: 0.01, runs: 2}");
    let crash: Arc<dyn RunLauncher> = Arc::new(crate::execute::ChildProcessLauncher::new(
        "/bin/sh",
        [
            "-c",
            "cat >/dev/null; echo 'segfault in kernel' >&2; kill -SEGV $$",
        ],
    ));
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let report = gate(&[pack], &out, &options(dir.path(), Some(crash)), &mut |_| {}).unwrap();
    let slice = &report.evidence.slices[0];
    let failure = slice.failure.as_ref().expect("the slice must fail");
    assert_eq!(failure.stage, crate::domain::stage::Stage::Execution);
    assert!(
        failure.message.contains("segfault in kernel"),
        "{}",
        failure.message
    );
    assert_eq!(report.decision.exit_code, crate::release::ExitCode::Fail);
    assert_eq!(
        report.decision.first_failing_stage,
        Some(crate::domain::stage::Stage::Execution)
    );
}

#[test]
fn issue_9_a_child_under_another_lock_is_refused() {
    // A "child" that answers with a reply measured under another CPU model.
    let dir = tempfile::tempdir().unwrap();
    let pack = tiny_pack(dir.path(), "{min: 3, max: 4, time_budget_s: 0.01, runs: 2}");
    let mut environment = Environment::capture(1, dir.path());
    environment.cpu_model = "Some Other CPU".into();
    let reply = RunReply {
        environment,
        record: crate::execute::RunRecord {
            pid: Some(7),
            warmup_iterations: 1,
            candidate: vec![1.0; 3],
            comparator: vec![1.0; 3],
            calibration: vec![1.0; 3],
            counters: Default::default(),
            op_costs: vec![],
            cpu_share: None,
        },
    };
    let script = format!(
        "cat >/dev/null; printf '%s' '{}'",
        serde_json::to_string(&reply).unwrap()
    );
    let liar: Arc<dyn RunLauncher> = Arc::new(crate::execute::ChildProcessLauncher::new(
        "/bin/sh",
        ["-c".to_owned(), script],
    ));
    let packs = load_packs(&[pack]).unwrap();
    let evidence = run(&packs, &options(dir.path(), Some(liar)), &mut |_| {}).unwrap();
    let failure = evidence.slices[0].failure.as_ref().expect("the slice must fail");
    assert!(
        failure.message.contains("different environment lock (cpu_model"),
        "{}",
        failure.message
    );
}
