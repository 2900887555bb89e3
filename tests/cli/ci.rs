//! CI integration (issue 6): GitHub annotations on the pack line, the job summary, and JUnit
//! that a standard XML parser reads.

use crate::support::{FAST, Sandbox, assert_contains, assert_exit, stderr, stdout, stdout_json, tiny_pack};

/// A tiny pack named `name` whose 2nd guardrail (line 16) fails and whose 1st passes.
fn failing_pack(name: &str) -> String {
    tiny_pack(
        name,
        FAST,
        &[
            "{metric: fallback_rate, at_most: 0}",
            "{metric: effective_speedup, at_least: 100}",
        ],
    )
}

#[test]
fn issue_6_github_annotations_point_at_the_failing_guardrail() {
    let sb = Sandbox::with_pack(&failing_pack("annotated"));
    let summary = sb.path().join("summary.md");
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_exit(&out, 1);
    let text = stdout(&out);
    // The pack's 2nd guardrail sits on line 16 (see `tiny_pack`).
    let line = text
        .lines()
        .find(|l| l.starts_with("::error "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("::error file=pack.yaml,line=16,col="), "{line}");
    assert_contains(line, "effective_speedup at_least 100");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("::")).count(),
        1,
        "only the failing guardrail: {text}"
    );
    let summary = sb.read("summary.md");
    assert_contains(&summary, "# DO NOT SHIP: closure memo (verdict fail, exit 1)");
}

/// Issue 22: in Actions with `--json`, stdout is the verdict alone (annotations there broke
/// every JSON reader); the annotations still reach the runner, on stderr.
#[test]
fn issue_22_annotations_never_go_to_stdout_with_json() {
    let sb = Sandbox::with_pack(&failing_pack("annotated-json"));
    let out = sb
        .cmd(&[
            "gate",
            "pack.yaml",
            "--out",
            "out",
            "-q",
            "--json",
            "--no-history",
        ])
        .env("GITHUB_ACTIONS", "true")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap();
    assert_exit(&out, 1);
    assert_eq!(stdout_json(&out)["verdict"], "fail");
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.starts_with("::error file=pack.yaml,line=16,col=")),
        "{err}"
    );
}

/// Issue 22: `gate` appends the memo to the job summary itself, so the GitHub example must
/// not append it again.
#[test]
fn issue_22_the_github_examples_append_the_memo_to_the_summary_once() {
    for name in ["github-actions.yml", "github-actions-sharded.yml"] {
        let text = std::fs::read_to_string(format!("{}/ci/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let appends = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && l.contains(">> \"$GITHUB_STEP_SUMMARY\""))
            .count();
        assert_eq!(
            appends, 0,
            "{name} appends to the job summary beside gate/merge: {text}"
        );
    }
}

#[test]
fn issue_6_junit_parses_with_a_standard_xml_parser() {
    let sb = Sandbox::with_pack(&failing_pack("junit"));
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 1);
    let xml = sb.read("out/junit.xml");
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let cases: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("testcase")).collect();
    assert_eq!(cases.len(), 2);
    let failures: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("failure")).collect();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0]
            .attribute("message")
            .unwrap_or("")
            .contains("effective_speedup"),
        "{xml}"
    );
    let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
    assert_eq!(suite.attribute("name"), Some("junit"));
}

fn kubernetes_documents(name: &str) -> Vec<serde_json::Value> {
    let path = format!("{}/ci/kubernetes/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Kubernetes example (issue 8): an Indexed Job whose pod K-1 runs shard K of N into a
/// shared volume, and a merge Job that reads exactly those N shard directories.
#[test]
fn issue_8_kubernetes_indexed_job_shards_and_merges() {
    let docs = kubernetes_documents("sparsegate-sharded.yaml");
    let pvc = docs
        .iter()
        .find(|d| d["kind"] == "PersistentVolumeClaim")
        .unwrap();
    assert_eq!(pvc["spec"]["accessModes"][0], "ReadWriteMany");
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let n = job["spec"]["completions"].as_u64().unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let container = &pod["containers"][0];
    let shards_env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "SHARDS")
        .unwrap();
    assert_eq!(shards_env["value"].as_str().unwrap(), n.to_string());
    let script = container["args"][0].as_str().unwrap();
    assert!(
        script.contains("--shard $((JOB_COMPLETION_INDEX+1))/${SHARDS}"),
        "{script}"
    );
    assert!(
        script.contains("--out /shards/shard-$((JOB_COMPLETION_INDEX+1))"),
        "{script}"
    );
    assert_eq!(container["volumeMounts"][0]["mountPath"], "/shards");
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        pvc["metadata"]["name"]
    );

    let merge_docs = kubernetes_documents("sparsegate-merge.yaml");
    let merge = &merge_docs[0];
    assert_eq!(merge["kind"], "Job");
    let merge_pod = &merge["spec"]["template"]["spec"];
    let merge_script = merge_pod["containers"][0]["args"][0].as_str().unwrap();
    let dirs: Vec<String> = (1..=n).map(|k| format!("/shards/shard-{k}")).collect();
    assert!(
        merge_script.contains(&format!("sparsegate merge {}", dirs.join(" "))),
        "{merge_script}"
    );
    assert_eq!(
        merge_pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        pvc["metadata"]["name"]
    );
    // One image (by digest) for shards and merge: `merge` refuses mixed tool versions.
    assert_eq!(merge_pod["containers"][0]["image"], container["image"]);
    assert!(container["image"].as_str().unwrap().contains("@sha256:"));
}

/// A pack of one slice with `n` failing speedup guardrails (and one passing).
fn many_failures_pack(n: usize) -> String {
    let failing: Vec<String> = (0..n)
        .map(|i| format!("{{metric: effective_speedup, at_least: {}}}", 100 + i))
        .collect();
    let mut guardrails = vec!["{metric: fallback_rate, at_most: 0}"];
    guardrails.extend(failing.iter().map(String::as_str));
    tiny_pack("many", FAST, &guardrails)
}

/// `gate` with `--pr-comment pr.md` and `extra`, outside any CI (no job URL in the
/// environment): its exit status and the comment.
fn gate_with_pr_comment(sb: &Sandbox, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec![
        "gate",
        "pack.yaml",
        "--out",
        "out",
        "-q",
        "--no-history",
        "--pr-comment",
        "pr.md",
    ];
    args.extend_from_slice(extra);
    let out = sb
        .cmd(&args)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_SERVER_URL")
        .env_remove("GITHUB_REPOSITORY")
        .env_remove("GITHUB_RUN_ID")
        .env_remove("CI_JOB_URL")
        .output()
        .unwrap();
    (out.status.code(), sb.read("pr.md"))
}

/// Issue 22: the PR comment stays within 60 lines however many guardrails fail, says the
/// call and what the exit code means, lists failures with value and interval, counts the
/// rest, and names the memo file when there is no page to link to.
#[test]
fn issue_22_the_pr_comment_is_at_most_60_lines_with_many_failures() {
    let sb = Sandbox::with_pack(&many_failures_pack(120));
    let (code, comment) = gate_with_pr_comment(&sb, &[]);
    assert_eq!(code, Some(1));
    let lines = comment.lines().count();
    assert!(lines <= 60, "{lines} lines:\n{comment}");
    assert_contains(
        &comment,
        "### sparsegate: DO NOT SHIP (verdict fail, exit 1: a blocking guardrail failed",
    );
    assert_contains(&comment, "1 passed, 0 warned, 0 inconclusive, 120 failed");
    let rows: Vec<&str> = comment
        .lines()
        .filter(|l| l.starts_with("| many/tiny-2of4-fp32 | effective_speedup |"))
        .collect();
    assert_eq!(rows.len(), 40, "{comment}");
    // Each row: the value, the bound, the interval the verdict was read from, the verdict.
    assert!(
        rows.iter()
            .all(|r| r.contains("x | ≥ 1") && r.contains("@ 95% | **fail** |")),
        "{comment}"
    );
    assert!(
        !comment.contains("fallback_rate"),
        "a passing guardrail is not listed: {comment}"
    );
    assert_contains(
        &comment,
        "… and 80 more of the 120 guardrails that did not pass or moved against their baseline: see the full memo.",
    );
    assert_eq!(comment.lines().last(), Some("Full memo: `out/memo.md`"));
    // The comment is the memo's decision: the memo's matrix has every one of the 120.
    assert_eq!(
        sb.read("out/memo.md")
            .lines()
            .filter(|l| l.starts_with("| many/tiny-2of4-fp32 | effective_speedup |"))
            .count(),
        120
    );
}

/// Issue 22: the comment links the memo's page: `--memo-url`, else the CI job; a URL that
/// would break the Markdown link is refused before anything runs.
#[test]
fn issue_22_the_pr_comment_links_the_memo_page() {
    let sb = Sandbox::with_pack(&failing_pack("linked"));
    let (_, comment) = gate_with_pr_comment(&sb, &["--memo-url", "https://ci.example.com/jobs/42"]);
    assert_eq!(
        comment.lines().last(),
        Some("Full memo: [memo.md and memo.html](https://ci.example.com/jobs/42)")
    );
    let out = sb
        .cmd(&[
            "gate",
            "pack.yaml",
            "--out",
            "out",
            "-q",
            "--no-history",
            "--pr-comment",
            "pr.md",
        ])
        .env("GITHUB_SERVER_URL", "https://github.com")
        .env("GITHUB_REPOSITORY", "acme/kernels")
        .env("GITHUB_RUN_ID", "7")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap();
    assert_exit(&out, 1);
    assert_contains(
        &sb.read("pr.md"),
        "Full memo: [memo.md and memo.html](https://github.com/acme/kernels/actions/runs/7)",
    );
    let refused = sb.output(&[
        "gate",
        "pack.yaml",
        "--out",
        "refused",
        "--no-history",
        "--pr-comment",
        "refused.md",
        "--memo-url",
        "https://x.org/a)[y](javascript:alert(1)",
    ]);
    assert_exit(&refused, 2);
    assert_contains(&stderr(&refused), "--memo-url");
    assert!(!sb.path().join("refused").exists() && !sb.path().join("refused.md").exists());
}

/// Issue 22: `merge` writes the same comment from the shards' combined decision, and the
/// comment cannot take the name of one of the gate's own outputs.
#[test]
fn issue_22_merge_writes_the_pr_comment_and_outputs_keep_their_names() {
    let sb = Sandbox::with_pack(&failing_pack("merged"));
    assert_exit(
        &sb.output(&["run", "pack.yaml", "--out", "s1", "--shard", "1/1", "-q"]),
        0,
    );
    let out = sb
        .cmd(&[
            "merge",
            "s1",
            "--out",
            "out",
            "--no-history",
            "--pr-comment",
            "pr.md",
        ])
        .env_remove("GITHUB_SERVER_URL")
        .env_remove("CI_JOB_URL")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap();
    assert_exit(&out, 1);
    let comment = sb.read("pr.md");
    assert_contains(&comment, "| merged/tiny-2of4-fp32 | effective_speedup | ");
    assert_contains(&comment, "| ≥ 100x | ");
    let clash = sb.output(&[
        "gate",
        "pack.yaml",
        "--out",
        "out",
        "--no-history",
        "--pr-comment",
        "out/memo.md",
    ]);
    assert_exit(&clash, 2);
    assert_contains(&stderr(&clash), "would replace one of the gate's outputs");
}

/// A CI example under `ci/`, parsed, and its text.
fn ci_example(name: &str) -> (serde_json::Value, String) {
    let path = format!("{}/ci/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let yaml = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    (yaml, text)
}

/// Issue 22: the GitHub examples cache the cargo build and record the history in a
/// PostgreSQL service, say the SQLite-cache alternative with its trade-off, and the PR
/// comment is written and posted.
#[test]
fn issue_22_the_github_examples_cache_the_build_and_persist_history() {
    for name in ["github-actions.yml", "github-actions-sharded.yml"] {
        let (yaml, text) = ci_example(name);
        let jobs = yaml["jobs"].as_object().unwrap();
        for (id, job) in jobs {
            let steps = job["steps"].as_array().unwrap();
            let cache = steps.iter().position(|s| {
                s["uses"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("Swatinem/rust-cache@"))
            });
            let build = steps.iter().position(|s| s["run"] == "cargo build --release");
            assert!(
                cache.is_some() && cache < build,
                "{name} job {id} caches before it builds"
            );
        }
        let recorder = if name == "github-actions.yml" {
            "gate"
        } else {
            "merge"
        };
        let job = &jobs[recorder];
        assert!(
            job["services"]["postgres"]["image"]
                .as_str()
                .unwrap()
                .starts_with("postgres:"),
            "{name}"
        );
        assert_eq!(job["services"]["postgres"]["env"]["POSTGRES_DB"], "sparsegate");
        assert_eq!(job["services"]["postgres"]["ports"][0], "5432:5432");
        assert_eq!(
            job["env"]["SPARSEGATE_HISTORY"], "postgres://postgres:postgres@localhost:5432/sparsegate",
            "{name}"
        );
        assert_contains(&text, "secret");
    }
    let (yaml, text) = ci_example("github-actions.yml");
    for said in [
        "actions/cache/restore@v4",
        "actions/cache/save@v4",
        "path: .sparsegate/history.db",
        "evicted",
        "the later save wins",
        "secrets.SPARSEGATE_HISTORY",
    ] {
        assert_contains(&text, said);
    }
    let steps = yaml["jobs"]["gate"]["steps"].as_array().unwrap();
    let gate = steps.iter().find(|s| s["name"] == "Gate").unwrap();
    assert_contains(gate["run"].as_str().unwrap(), "--pr-comment pr-comment.md");
    let comment = steps
        .iter()
        .find(|s| s["name"] == "Comment on the pull request")
        .unwrap();
    assert_contains(comment["run"].as_str().unwrap(), "--body-file pr-comment.md");
    assert_eq!(yaml["permissions"]["pull-requests"], "write");
}

/// Issue 22: the GitLab example caches the cargo registry and build, and records the
/// history in a PostgreSQL service reached by its alias.
#[test]
fn issue_22_the_gitlab_example_caches_the_build_and_persists_history() {
    let (yaml, text) = ci_example("gitlab-ci.yml");
    let job = &yaml["sparsegate"];
    let caches = job["cache"].as_array().unwrap();
    let paths: Vec<&str> = caches
        .iter()
        .flat_map(|c| c["paths"].as_array().unwrap())
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        paths.contains(&"target/") && paths.contains(&".cargo/registry/cache/"),
        "{paths:?}"
    );
    assert_eq!(caches[0]["key"]["files"][0], "Cargo.lock");
    assert_eq!(job["variables"]["CARGO_HOME"], "$CI_PROJECT_DIR/.cargo");
    let service = &job["services"][0];
    assert!(service["name"].as_str().unwrap().starts_with("postgres:"));
    assert_eq!(service["alias"], "postgres");
    assert_eq!(job["variables"]["POSTGRES_DB"], "sparsegate");
    assert_eq!(
        job["variables"]["SPARSEGATE_HISTORY"],
        "postgres://postgres:postgres@postgres:5432/sparsegate"
    );
    let script = job["script"].as_array().unwrap();
    assert!(
        script
            .iter()
            .any(|l| l.as_str().unwrap().contains("--pr-comment out/pr-comment.md")),
        "{script:?}"
    );
    for said in [
        ".sparsegate/history.db",
        "later upload wins",
        "masked CI/CD variable",
    ] {
        assert_contains(&text, said);
    }
}
