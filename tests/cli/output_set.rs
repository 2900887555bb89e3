//! Issue 23: the output directory is written as a whole (a reader never mixes two runs,
//! whenever the gate is killed), writes never follow a symbolic link below the tree the
//! command was given, the history records a run after its outputs (and a failure to write
//! them), memo.md cannot carry markup from a pack, and a broken stderr is no panic.

use crate::support::{FAST, Sandbox, assert_exit, stderr, tiny_pack};
use sparsegate::digest::sha256_hex;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A pack that passes quickly: one tiny 2:4 slice under an absolute latency bound.
fn quick_pack() -> String {
    tiny_pack("p", FAST, &["{metric: latency, at_most: 10}"])
}

/// The run id of the complete output set in `dir`, after checking that the set is
/// complete and consistent: `run-manifest.json` names every file of ours in the directory
/// and each has the digest recorded there. Panics on a mixed or incomplete set.
#[track_caller]
fn complete_set(dir: &Path) -> String {
    let manifest_text = std::fs::read_to_string(dir.join("run-manifest.json"))
        .unwrap_or_else(|e| panic!("{}: no run manifest ({e})", dir.display()));
    let manifest: serde_json::Value = serde_json::from_str(&manifest_text).unwrap();
    let listed: BTreeSet<String> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap().to_owned();
            let bytes = std::fs::read(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                sha256_hex(&bytes),
                f["digest"].as_str().unwrap(),
                "{name} is not the file its run wrote: a mixed set"
            );
            name
        })
        .collect();
    let expected: BTreeSet<String> = [
        "memo.json",
        "evidence.json",
        "verdict.json",
        "memo.md",
        "memo.html",
        "junit.xml",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(listed, expected, "the manifest names the whole gate set");
    let present: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "run-manifest.json")
        .collect();
    assert_eq!(present, expected, "nothing of another run lies in the set");
    manifest["run"].as_str().unwrap().to_owned()
}

/// Entries named like our temporaries (`.sparsegate-…`) in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".sparsegate-"))
                .collect()
        })
        .unwrap_or_default()
}

fn gate_command(sb: &Sandbox) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sparsegate"));
    cmd.current_dir(sb.path())
        .args(["gate", "pack.yaml", "--out", "out", "-q"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Issue 23 (16 of 38 signals once left a new memo beside the previous run's verdict):
/// signals at many instants of a gate over a previous run's outputs leave either that
/// set intact or the new one complete, never a mix; the next run removes the
/// temporaries killed runs left.
#[test]
fn a_gate_killed_at_any_instant_leaves_one_complete_output_set() {
    let sb = Sandbox::with_pack(&quick_pack());
    // How long a gate takes here: the fastest of a few (the machine is shared).
    let mut duration = std::time::Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(gate_command(&sb).status().unwrap().code(), Some(0));
        duration = duration.min(started.elapsed());
    }
    let mut current = complete_set(&sb.path().join("out"));

    // Deterministic instants: a third spread over the whole run, the rest dense over its
    // end, where the outputs are rendered, written and swapped in. A run that finishes
    // before its signal shortens the estimate of the run's length.
    const KILLS: u32 = 34;
    let signals = [
        rustix::process::Signal::KILL,
        rustix::process::Signal::KILL,
        rustix::process::Signal::TERM,
        rustix::process::Signal::KILL,
        rustix::process::Signal::INT,
    ];
    let (mut old_kept, mut new_complete, mut runs_finished) = (0, 0, 0);
    for i in 0..KILLS {
        let fraction = if i < KILLS / 3 {
            f64::from(i) / f64::from(KILLS / 3)
        } else {
            0.7 + 0.35 * f64::from(i - KILLS / 3) / f64::from(KILLS - KILLS / 3)
        };
        let started = Instant::now();
        let mut child = gate_command(&sb).spawn().unwrap();
        std::thread::sleep(duration.mul_f64(fraction));
        let pid = rustix::process::Pid::from_child(&child);
        let signal = signals[i as usize % signals.len()];
        let finished_first = child.try_wait().unwrap().is_some();
        if !finished_first {
            let _ = rustix::process::kill_process(pid, signal);
        }
        let status = child.wait().unwrap();
        if finished_first || status.code().is_some() {
            runs_finished += 1;
            duration = duration.min(started.elapsed());
        }
        let run = complete_set(&sb.path().join("out"));
        if run == current {
            old_kept += 1;
        } else {
            new_complete += 1;
            current = run;
        }
    }
    let left = temporaries(sb.path());
    eprintln!(
        "{KILLS} signals over a {duration:?} gate: old set intact {old_kept}, new set complete {new_complete} \
         ({runs_finished} runs finished first), 0 mixed; {} temporaries left: {left:?}",
        left.len()
    );
    // A temporary a killed run may leave, planted so the clean-up is always exercised.
    let stale = sb.path().join(".sparsegate-999999999-0123456789abcdef.out");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("memo.json"), "{}").unwrap();
    std::fs::write(sb.path().join(".sparsegate-999999999-fedcba9876543210.tmp"), "x").unwrap();

    assert_eq!(gate_command(&sb).status().unwrap().code(), Some(0));
    let last = complete_set(&sb.path().join("out"));
    assert_ne!(last, current);
    assert_eq!(temporaries(sb.path()), Vec::<String>::new());
    assert_eq!(temporaries(&sb.path().join("out")), Vec::<String>::new());
    // Every run the history holds is one whose outputs were written.
    let runs = sb.output_report(&["history", "--json"], "history-report.schema.json");
    for run in runs.as_array().unwrap() {
        assert_eq!(run["outputs"], "written", "{run}");
    }
}

/// A new set replaces the previous run's signatures (they do not vouch for it) and keeps
/// the files the user put in the output directory.
#[test]
fn a_new_set_drops_old_signatures_and_keeps_the_users_files() {
    let sb = Sandbox::with_pack(&quick_pack());
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    sb.write("out/memo.statement.json", "{}");
    sb.write("out/memo.statement.json.owner.sig", "old signature");
    sb.write("out/memo.intoto.json", "{}");
    sb.write("out/NOTES.txt", "mine");
    sb.write("out/attachments/plot.txt", "mine too");
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    let files = sb.files_under("out");
    for gone in [
        "memo.statement.json",
        "memo.statement.json.owner.sig",
        "memo.intoto.json",
    ] {
        assert!(!files.contains(&gone.to_owned()), "{files:?}");
    }
    assert_eq!(sb.read("out/NOTES.txt"), "mine\n");
    assert_eq!(sb.read("out/attachments/plot.txt"), "mine too\n");
    assert_eq!(temporaries(sb.path()), Vec::<String>::new());
}

/// The output directory cannot be the current directory (it is replaced as a whole), and
/// the history cannot live inside it: both refused before anything runs.
#[test]
fn an_output_directory_that_cannot_be_replaced_is_refused_before_the_run() {
    let sb = Sandbox::with_pack(&quick_pack());
    let out = sb.output(&["gate", "pack.yaml", "--out", ".", "-q"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("directory of its own"), "{}", stderr(&out));
    let out = sb.output(&["gate", "pack.yaml", "--out", "out", "--history", "out/h.db", "-q"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("inside the output directory"),
        "{}",
        stderr(&out)
    );
    assert!(!sb.path().join("out").exists());
}

/// Issue 23: a link higher up than the file's own directory (`work -> elsewhere`, then
/// `--out work/out`; `golden -> elsewhere`, then `golden/p`) no longer sends writes out of
/// the tree.
#[test]
fn a_symlinked_ancestor_of_the_output_or_golden_directory_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let sb = Sandbox::with_pack(&quick_pack());
    std::os::unix::fs::symlink(elsewhere.path(), sb.path().join("work")).unwrap();
    let out = sb.output(&["gate", "pack.yaml", "--out", "work/out/run1", "-q"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

    let sb = Sandbox::with_pack(&quick_pack());
    std::os::unix::fs::symlink(elsewhere.path(), sb.path().join("golden")).unwrap();
    let out = sb.output(&["bless", "pack.yaml"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// Issue 23: the history records the run after its outputs, and records a failure to
/// write them (`outputs: "failed: …"`); the previous set stays intact.
#[test]
fn a_failure_to_write_the_outputs_is_recorded_in_the_history() {
    let sb = Sandbox::with_pack(&quick_pack());
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    let before = complete_set(&sb.path().join("out"));
    // An immutable output directory cannot be swapped (root ignores permissions, not this).
    let out_dir = sb.path().join("out");
    let immutable = Command::new("chattr").arg("+i").arg(&out_dir).status();
    if !immutable.is_ok_and(|s| s.success()) {
        eprintln!("skipped: chattr +i is not available here");
        return;
    }
    let out = sb.gate("pack.yaml", &["-q"]);
    let _ = Command::new("chattr").arg("-i").arg(&out_dir).status();
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("cannot write"), "{}", stderr(&out));
    assert_eq!(complete_set(&out_dir), before);
    assert_eq!(temporaries(sb.path()), Vec::<String>::new());
    let runs = sb.output_report(&["history", "--json"], "history-report.schema.json");
    let newest = &runs[0];
    assert!(
        newest["outputs"]
            .as_str()
            .unwrap()
            .starts_with("failed: cannot write"),
        "{newest}"
    );
    assert_eq!(runs[1]["outputs"], "written");
}

/// Issue 23: pack text in memo.md (and so in the CI job summary) cannot inject HTML, a
/// link, a mention or a table row; memo.html escapes it as HTML.
#[test]
fn hostile_pack_text_is_inert_in_the_markdown_memo_and_the_job_summary() {
    let pack = quick_pack()
        .replace(
            "name: p\n",
            "name: p\ndescription: \"<script>alert(1)</script> [x](javascript:alert(1)) @everyone\"\n",
        )
        .replace(
            "{name: Test Owner,",
            "{name: \"Eve | <img src=x onerror=alert(1)> `\",",
        )
        .replace(
            "trigger: test trigger",
            "trigger: \"line one\\n| forged | row |\\n# heading\"",
        );
    let sb = Sandbox::with_pack(&pack);
    let summary = sb.path().join("summary.md");
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    for md in [sb.read("out/memo.md"), std::fs::read_to_string(&summary).unwrap()] {
        // What a Markdown renderer reads as markup: escaped brackets and bars are text.
        let markup = md.replace("\\]", "").replace("\\|", "");
        for raw in [
            "<script",
            "<img",
            "](javascript:",
            "@everyone",
            "\n| forged",
            "\n# heading",
        ] {
            assert!(!markup.contains(raw), "memo.md holds {raw:?}:\n{md}");
        }
        let sign_off = md
            .lines()
            .find(|l| l.starts_with("| owner |"))
            .expect("sign-off row");
        let cells = sign_off.replace("\\|", "").matches('|').count();
        assert_eq!(cells, 3, "the owner stays in one cell: {sign_off}");
        assert!(
            sign_off.contains("Eve \\| &lt;img src=x onerror=alert(1)&gt; \\`"),
            "{sign_off}"
        );
    }
    let html = sb.read("out/memo.html");
    assert!(
        !html.contains("<script>alert") && !html.contains("<img src=x"),
        "memo.html"
    );
}

/// Issue 23: a stderr whose reader has gone (`2>&1 >/dev/null | true`) or that is closed
/// (`2>&-`) does not turn `gate` or `validate` into a panic (exit 101): the command exits
/// with its own code.
#[test]
fn a_broken_or_closed_stderr_keeps_the_commands_exit_code() {
    let sb = Sandbox::with_pack(&quick_pack());
    sb.write("bad.yaml", "schema_version: 1\nname: Bad Name\n");
    for (args, code) in [
        (vec!["validate", "bad.yaml"], 2),
        (vec!["validate", "pack.yaml"], 0),
        (vec!["gate", "pack.yaml", "--out", "out"], 0),
        (vec!["gate", "missing.yaml", "--out", "out"], 2),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sparsegate"))
            .current_dir(sb.path())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{args:?} with a broken stderr");

        let closed = Command::new("sh")
            .current_dir(sb.path())
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 2>&- >/dev/null")
            .arg(env!("CARGO_BIN_EXE_sparsegate"))
            .args(&args)
            .status()
            .unwrap();
        assert_eq!(closed.code(), Some(code), "{args:?} with stderr closed");
    }
}
