//! Issue 23, `backend: command`: a benchmark can neither exhaust the gate's memory through
//! its pipes nor outlive the gate. An endless stdout fails the invocation at the execution
//! stage (killed at once, at most 16 MiB kept), a stderr flood keeps only its tail, and a
//! daemon the command starts (`setsid`, `setsid -f`, a double fork) dies with the
//! invocation, at its normal end, at its timeout, and when the gate itself is killed.
//!
//! RSS is the gate's, measured by GNU `time -f %M` (`/usr/bin/time`) where present; elsewhere
//! the cases still run and the memory bound is not asserted (the test says so).

use crate::support::{Sandbox, assert_contains, assert_exit};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// The gate's memory must stay under this while a command floods a pipe. Its own RSS on a
/// one-slice pack is ~10 MiB; the stdout cap adds at most 16 MiB, the stderr ring 64 KiB.
/// Reading whole, the floods below would take hundreds of MiB (stdout: without bound).
const RSS_BOUND_KB: u64 = 96 << 10;

/// A record the command contract accepts: 20 latency samples per invocation, enough for
/// the guardrail to be decided on three invocations.
const RECORD: &str = r#"{"sparsegate": 1, "metric": "latency", "unit": "s", "samples": [0.010, 0.011, 0.012, 0.010, 0.011, 0.012, 0.010, 0.011, 0.012, 0.010, 0.011, 0.012, 0.010, 0.011, 0.012, 0.010, 0.011, 0.012, 0.010, 0.011]}"#;

/// A pack with one `command` slice running `sh bench.sh`, three invocations, and a
/// latency guardrail the record above passes; `extra` goes into the `command:` mapping.
fn pack(extra: &str) -> String {
    format!(
        "schema_version: 1
name: contain
owners: [{{name: T, email: t@example.com, role: owner}}]
rollback: {{trigger: t}}
samples: {{warmup: 0, min: 3, max: 3, time_budget_s: 0.1}}
slices:
  - id: hostile
    backend: command
    command: {{argv: [sh, bench.sh]{extra}}}
    guardrails: [{{metric: latency, at_most: 1}}]
"
    )
}

/// A sandbox with the pack and `script` as `bench.sh`.
fn sandbox(script: &str, extra: &str) -> Sandbox {
    let sb = Sandbox::with_pack(&pack(extra));
    sb.write_raw("bench.sh", script);
    sb
}

/// `gate pack.yaml` in `sb` under GNU time where present: its output, how long it took,
/// and its max RSS in KiB (`None` without `/usr/bin/time`).
fn measured_gate(sb: &Sandbox) -> (Output, Duration, Option<u64>) {
    let time = Path::new("/usr/bin/time");
    let rss_dir = tempfile::tempdir().unwrap();
    let rss_file = rss_dir.path().join("rss");
    let mut cmd = crate::support::sparsegate_under(time.exists().then_some(time), &rss_file);
    cmd.current_dir(sb.path())
        .args(["gate", "pack.yaml", "--out", "out", "--no-history"])
        .env("NO_COLOR", "1")
        .timeout(Duration::from_secs(60));
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let took = started.elapsed();
    let rss = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|t| t.lines().last().and_then(|l| l.trim().parse::<u64>().ok()));
    (out, took, rss)
}

/// Assert the gate's RSS stayed under [`RSS_BOUND_KB`], or say why it is not measured.
#[track_caller]
fn assert_rss_bounded(case: &str, took: Duration, rss_kb: Option<u64>) {
    match rss_kb {
        Some(kb) => {
            eprintln!("{case}: {:.2} s, max RSS {kb} KiB", took.as_secs_f64());
            assert!(kb < RSS_BOUND_KB, "{case}: the gate's RSS reached {kb} KiB");
        }
        None => eprintln!(
            "{case}: {:.2} s; /usr/bin/time absent, RSS not asserted",
            took.as_secs_f64()
        ),
    }
}

/// The first failing stage and the memo of a gate that must fail (exit 1).
#[track_caller]
fn failed_at(sb: &Sandbox, out: &Output) -> (String, String) {
    assert_exit(out, 1);
    let verdict = sb.json("out/verdict.json");
    let stage = verdict["first_failing_stage"].as_str().unwrap_or("").to_owned();
    (stage, sb.read("out/memo.md"))
}

#[test]
fn an_endless_stdout_fails_at_execution_at_once_and_bounded() {
    // Without a cap the gate read this until the timeout: 4 GB in 8 s.
    let sb = sandbox("yes 'not a record'\n", ", timeout_s: 30");
    let (out, took, rss) = measured_gate(&sb);
    let (stage, memo) = failed_at(&sb, &out);
    assert_eq!(stage, "execution", "{memo}");
    assert_contains(&memo, "printed more than 16777216 bytes on stdout");
    assert!(
        took < Duration::from_secs(15),
        "killed after {took:?}, not at once"
    );
    assert_rss_bounded("endless stdout", took, rss);
}

#[test]
fn a_stderr_flood_before_valid_records_keeps_only_a_bounded_tail_and_passes() {
    // 150 MB of chatter on stderr (per invocation), then a valid record and exit 0.
    let script = format!("yes 'stderr chatter' | head -c 150000000 >&2\necho '{RECORD}'\n");
    let sb = sandbox(&script, "");
    let (out, took, rss) = measured_gate(&sb);
    assert_exit(&out, 0);
    assert_eq!(sb.json("out/verdict.json")["verdict"], "pass");
    assert_rss_bounded("stderr flood, then records", took, rss);
}

#[test]
fn a_stderr_flood_after_the_records_reaches_the_memo_as_its_tail() {
    // Records first, then 150 MB of chatter, then the real error and a failing exit.
    let script = format!(
        "echo '{RECORD}'\nyes 'stderr chatter' | head -c 150000000 >&2\necho 'the real error' >&2\nexit 3\n"
    );
    let sb = sandbox(&script, "");
    let (out, took, rss) = measured_gate(&sb);
    let (stage, memo) = failed_at(&sb, &out);
    assert_eq!(stage, "execution", "{memo}");
    assert_contains(&memo, "exited with status 3");
    assert_contains(&memo, "the real error");
    assert_contains(&memo, "stderr chatter");
    assert_rss_bounded("records, then stderr flood", took, rss);

    // An endless stderr: drained until the timeout kill, its tail in the memo.
    let sb = sandbox(
        &format!("echo '{RECORD}'\nyes 'endless chatter' >&2\n"),
        ", timeout_s: 1",
    );
    let (out, took, rss) = measured_gate(&sb);
    let (stage, memo) = failed_at(&sb, &out);
    assert_eq!(stage, "execution", "{memo}");
    assert_contains(&memo, "timed out after 1.000 s");
    assert_contains(&memo, "endless chatter");
    assert_rss_bounded("endless stderr", took, rss);
}

/// A script that starts three daemons, each touching its marker after 2 s unless killed:
/// one in a new session (`setsid`), one that `setsid -f` forks away, one double-forked
/// (its parent exits, so it is re-parented).
fn daemons(dir: &Path) -> (String, Vec<std::path::PathBuf>) {
    let markers: Vec<_> = ["setsid", "setsid-f", "double-fork"]
        .iter()
        .map(|m| dir.join(m))
        .collect();
    let script = format!(
        "setsid sh -c 'sleep 2; touch {}' >/dev/null 2>&1 &\n\
         setsid -f sh -c 'sleep 2; touch {}'\n\
         ( ( sleep 2; touch {} ) & )\n",
        markers[0].display(),
        markers[1].display(),
        markers[2].display()
    );
    (script, markers)
}

/// Wait past the daemons' 2 s and assert none of them touched its marker.
#[track_caller]
fn assert_no_daemon_survived(markers: &[std::path::PathBuf]) {
    std::thread::sleep(Duration::from_secs(3));
    let survivors: Vec<_> = markers.iter().filter(|m| m.exists()).collect();
    assert!(survivors.is_empty(), "daemons outlived the gate: {survivors:?}");
}

#[test]
fn daemons_a_command_starts_die_when_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (script, markers) = daemons(dir.path());
    let sb = sandbox(&format!("{script}echo '{RECORD}'\n"), "");
    let started = Instant::now();
    assert_exit(&sb.gate("pack.yaml", &["--no-history"]), 0);
    // The daemons held the pipes open: the gate no longer waits them out.
    let took = started.elapsed();
    eprintln!("gate with daemons: {:.2} s", took.as_secs_f64());
    assert_no_daemon_survived(&markers);
}

#[test]
fn daemons_a_command_starts_die_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (script, markers) = daemons(dir.path());
    let sb = sandbox(&format!("{script}sleep 30\n"), ", timeout_s: 0.5");
    let (v, memo) = sb.gate_fails_at("execution");
    assert_contains(&memo, "timed out after 0.500 s");
    assert_eq!(v["verdict"], "fail");
    assert_no_daemon_survived(&markers);
}

#[test]
fn daemons_a_command_starts_die_when_the_gate_itself_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let (script, markers) = daemons(dir.path());
    let started_marker = dir.path().join("started");
    let sb = sandbox(
        &format!("{script}touch {}\nsleep 30\n", started_marker.display()),
        ", timeout_s: 60",
    );
    let mut gate = std::process::Command::new(env!("CARGO_BIN_EXE_sparsegate"))
        .current_dir(sb.path())
        .args(["gate", "pack.yaml", "--out", "out", "--no-history"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started_marker.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(started_marker.exists(), "the command never started");
    // SIGKILL: no handler of the gate's runs; only the closed cancel pipe tells.
    gate.kill().unwrap();
    gate.wait().unwrap();
    assert_no_daemon_survived(&markers);
}

#[test]
fn a_command_that_cannot_start_is_still_named_as_such() {
    // Through the supervisor, the start failure keeps its own message.
    let sb = Sandbox::with_pack(&pack("").replace("argv: [sh, bench.sh]", "argv: [./no-such-bench]"));
    let (_, memo) = sb.gate_fails_at("execution");
    assert_contains(&memo, "cannot start command `./no-such-bench`");
    assert_contains(&memo, "No such file or directory");
}
