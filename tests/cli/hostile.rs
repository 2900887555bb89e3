//! A hostile corpus (issue 23): every input a user or a pull request can hand sparsegate
//! (the pack, a preset the pack names, `--arch`, `stats` inputs, the allowed-signers
//! file, a shard's manifest), each replaced by a hostile file (a FIFO, `/dev/zero`, a
//! directory, a 64 GiB sparse file, binary garbage, deep nesting, a 10 MB line, a path out
//! of the tree, a secret), plus malformed packs generated from templates. Each input must
//! be refused with exit 2 and a located message, without a panic, within seconds, under
//! 256 MB of RSS, without quoting a secret and without writing a file.
//!
//! RSS is measured per child by GNU `time -f %M` (`/usr/bin/time`) where present; elsewhere
//! the cases still run and the memory bound is not asserted (the test says so).

use crate::support::Sandbox;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a hostile file holds, or what it is.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    Fifo,
    DevZero,
    Directory,
    SparseGiant,
    Garbage,
    DeepNesting,
    LongLine,
    Missing,
}

const HOSTILE: [Hostile; 8] = [
    Hostile::Fifo,
    Hostile::DevZero,
    Hostile::Directory,
    Hostile::SparseGiant,
    Hostile::Garbage,
    Hostile::DeepNesting,
    Hostile::LongLine,
    Hostile::Missing,
];

/// A secret that must never reach stderr or stdout.
const SECRET: &str = "SPARSEGATE_TOKEN=hunter2-do-not-print";

/// Create `kind` at `path`.
fn plant(path: &Path, kind: Hostile) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    match kind {
        Hostile::Fifo => {
            let made = std::process::Command::new("mkfifo").arg(path).status().unwrap();
            assert!(made.success(), "mkfifo {}", path.display());
        }
        Hostile::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        Hostile::Directory => std::fs::create_dir_all(path).unwrap(),
        Hostile::SparseGiant => std::fs::File::create(path).unwrap().set_len(64 << 30).unwrap(),
        Hostile::Garbage => {
            let mut x: u32 = 0x9e37_79b9;
            let bytes: Vec<u8> = (0..4096)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x.to_le_bytes()[0]
                })
                .chain(SECRET.bytes())
                .chain([0xff, 0xfe, 0])
                .collect();
            std::fs::write(path, bytes).unwrap();
        }
        Hostile::DeepNesting => std::fs::write(path, "[".repeat(200_000)).unwrap(),
        Hostile::LongLine => {
            let mut text = format!("{SECRET}: ");
            text.push_str(&"a".repeat(10 << 20));
            std::fs::write(path, text).unwrap();
        }
        Hostile::Missing => {}
    }
}

/// One input: files to plant in a fresh sandbox, the arguments, and what stderr must name.
struct Case {
    name: String,
    plant: Vec<(String, Plant)>,
    args: Vec<String>,
    located: String,
}

enum Plant {
    Hostile(Hostile),
    Text(String),
    /// A symlink to a file outside the sandbox holding [`SECRET`].
    LinkOut,
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// A valid sim pack whose slice names `preset`.
fn sim_pack(preset: &str) -> String {
    format!(
        "schema_version: 1\nname: p\nowners: [{{name: A, email: a@b.c, role: owner}}]\n\
         rollback: {{trigger: t}}\nguardrails: [{{metric: latency, at_most: 1000}}]\nslices:\n  - id: s\n    backend: sim\n    preset: '{preset}'\n\
         \x20   sparsity: [\"2:4\"]\n    precision: [fp16]\n\
         \x20   workload: {{ops: [{{gemm: {{name: g, m: 64, n: 64, k: 64}}}}]}}\n"
    )
}

/// A valid CPU pack, with `{SPARSITY}`, `{M}` and `{EXTRA}` to fill in.
const CPU_TEMPLATE: &str = "schema_version: 1
name: p
owners: [{name: A, email: a@b.c, role: owner}]
rollback: {trigger: t}
samples: {warmup: 1, min: 8, max: 12, time_budget_s: 0.05}
guardrails: [{metric: latency, at_most: 1000}]
slices:
  - id: s
    sparsity: [{SPARSITY}]
    workload: {ops: [{gemm: {name: g, m: {M}, n: 64, k: 64}}]}
{EXTRA}";

fn cpu_pack(sparsity: &str, m: &str, extra: &str) -> String {
    CPU_TEMPLATE
        .replace("{SPARSITY}", sparsity)
        .replace("{M}", m)
        .replace("{EXTRA}", extra)
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    for kind in HOSTILE {
        let k = format!("{kind:?}");
        let file = |name: &str| vec![(name.to_owned(), Plant::Hostile(kind))];
        // The pack itself, through validate and gate.
        for verb in ["validate", "gate"] {
            let mut a = args(&[verb, "pack.yaml"]);
            if verb == "gate" {
                a.extend(args(&["--out", "out"]));
            }
            cases.push(Case {
                name: format!("pack {k} via {verb}"),
                plant: file("pack.yaml"),
                args: a,
                located: "pack.yaml".into(),
            });
        }
        // A preset the pack names, through validate and gate.
        for verb in ["validate", "gate"] {
            let mut a = args(&[verb, "pack.yaml"]);
            if verb == "gate" {
                a.extend(args(&["--out", "out"]));
            }
            cases.push(Case {
                name: format!("preset {k} via {verb}"),
                plant: vec![
                    ("pack.yaml".into(), Plant::Text(sim_pack("parts/p.yaml"))),
                    ("parts/p.yaml".into(), Plant::Hostile(kind)),
                ],
                args: a,
                located: "pack.yaml:".into(),
            });
        }
        cases.push(Case {
            name: format!("--arch {k}"),
            plant: file("arch.yaml"),
            args: args(&[
                "sim",
                "--arch",
                "arch.yaml",
                "--gemm",
                "64x64x64",
                "--sparsity",
                "2:4",
            ]),
            located: "arch.yaml".into(),
        });
        for side in ["--baseline", "--candidate"] {
            let other = if side == "--baseline" {
                "--candidate"
            } else {
                "--baseline"
            };
            cases.push(Case {
                name: format!("stats {side} {k}"),
                plant: vec![
                    ("x.txt".into(), Plant::Hostile(kind)),
                    ("ok.txt".into(), Plant::Text("1\n2\n3\n4\n5\n".into())),
                ],
                args: args(&["stats", "compare", side, "x.txt", other, "ok.txt"]),
                located: "x.txt".into(),
            });
        }
        cases.push(Case {
            name: format!("allowed signers {k}"),
            plant: file("signers"),
            args: args(&["memo", "verify", "out", "--allowed-signers", "signers"]),
            located: "signers".into(),
        });
        cases.push(Case {
            name: format!("shard manifest {k}"),
            plant: file("shard/run-manifest.json"),
            args: args(&["merge", "shard", "--out", "out"]),
            located: "run-manifest.json".into(),
        });
    }
    // Paths a pack names that leave its tree, or name a file that is not a preset.
    for (label, preset, plant) in [
        ("absolute", "/proc/self/environ", None),
        ("absolute /etc", "/etc/passwd", None),
        ("dotdot", "../outside.yaml", None),
        ("dotdot nested", "parts/../../outside.yaml", None),
        ("link out", "parts/link.yaml", Some(Plant::LinkOut)),
        (
            "secret inside",
            "parts/env",
            Some(Plant::Text(format!("{SECRET}\0HOME=/root\0"))),
        ),
        (
            "secret yaml",
            "parts/s.yaml",
            Some(Plant::Text(format!("clock_ghz: '{SECRET}'\n"))),
        ),
        (
            "secret list",
            "parts/l.yaml",
            Some(Plant::Text(format!("- {SECRET}\n"))),
        ),
    ] {
        for verb in ["validate", "gate"] {
            let mut plants = vec![("pack.yaml".to_owned(), Plant::Text(sim_pack(preset)))];
            if let Some(p) = &plant {
                plants.push((
                    preset.to_owned(),
                    match p {
                        Plant::Text(t) => Plant::Text(t.clone()),
                        _ => Plant::LinkOut,
                    },
                ));
            }
            let mut a = args(&[verb, "pack.yaml"]);
            if verb == "gate" {
                a.extend(args(&["--out", "out"]));
            }
            cases.push(Case {
                name: format!("preset {label} via {verb}"),
                plant: plants,
                args: a,
                located: "pack.yaml:".into(),
            });
        }
    }
    // Malformed packs from templates: each hostile value in each position.
    let sparsities = [
        "\"2 :4\"",
        "\"2: 4\"",
        "\"+2:4\"",
        "\"unstructured:1e-310\"",
        "\"block:4x4:5e-324\"",
        "\"unstructured:NaN\"",
        "\"4:4\"",
        "\"0:4\"",
        "\"2:64\"",
        "\"18446744073709551617:4\"",
        "\"block:0x4:0.5\"",
        "!!python/object:os.system \"2:4\"",
        "\"\\0\"",
        "[]",
        "{a: 1}",
    ];
    for s in sparsities {
        cases.push(Case {
            name: format!("sparsity {s}"),
            plant: vec![("pack.yaml".into(), Plant::Text(cpu_pack(s, "64", "")))],
            args: args(&["validate", "pack.yaml"]),
            located: "pack.yaml:".into(),
        });
    }
    let sizes = [
        "0",
        "-1",
        "1e308",
        "18446744073709551616",
        "NaN",
        ".inf",
        "0x7fffffffffffffff",
        "4294967296",
        "\"64\"",
        "[64]",
        "null",
        "~",
        "64.5",
    ];
    for m in sizes {
        cases.push(Case {
            name: format!("m = {m}"),
            plant: vec![("pack.yaml".into(), Plant::Text(cpu_pack("\"2:4\"", m, "")))],
            args: args(&["validate", "pack.yaml"]),
            located: "pack.yaml:".into(),
        });
    }
    let lolz = {
        let mut t = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            t.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        t
    };
    let extras = [
        "    guardrails: [{metric: latency, at_most: 1}]\n    guardrails: []\n".to_owned(),
        "junk: {a: 1}\n".to_owned(),
        lolz,
        format!("deep: {}\n", "[".repeat(5000)),
        format!("deep2: {}\n", "{a: ".repeat(5000)),
        "---\nschema_version: 1\n".to_owned(),
        "\0\0\0\n".to_owned(),
        "\u{feff}schema_version: 2\n".to_owned(),
        "slices: !!binary aGVsbG8=\n".to_owned(),
        "%YAML 9.9\n".to_owned(),
        "    backend: command\n    command: []\n".to_owned(),
        "    backend: sim\n".to_owned(),
        "    precision: [fp64]\n".to_owned(),
        "    precision: [\"fp16\\u0000\"]\n".to_owned(),
        format!("    id2: '{}'\n", "é".repeat(100_000)),
        "    checkpoint: {weights: /etc/passwd}\n".to_owned(),
        "    checkpoint: {weights: ../../../etc/passwd}\n".to_owned(),
        "    sparsity: [\"2:4\", \"2:4\"]\n".to_owned(),
        "owners: []\n".to_owned(),
        "rollback: {trigger: ''}\n".to_owned(),
        "samples: {warmup: 1, min: 0, max: 0, time_budget_s: 0.05}\n".to_owned(),
        "samples: {warmup: 1, min: 8, max: 18446744073709551615, time_budget_s: 1e308}\n".to_owned(),
        "\t- tab\n".to_owned(),
        "key: \"unterminated\n".to_owned(),
        "? [complex, key]\n: value\n".to_owned(),
        "*undefined_alias\n".to_owned(),
        "&a a: *a\n".to_owned(),
        "name: !!python/object/apply:os.system ['id']\n".to_owned(),
        "    sparsity: [\"1:2\"]\n".to_owned(),
        "    workload: {ops: []}\n".to_owned(),
        "    id: '../../x'\n".to_owned(),
        "    seed: -1\n".to_owned(),
        "slices: []\n".to_owned(),
        "schema_version: 18446744073709551616\n".to_owned(),
        "    guardrails: [{metric: '\\u0000', at_most: 1}]\n".to_owned(),
    ];
    for (i, extra) in extras.iter().enumerate() {
        cases.push(Case {
            name: format!("extra #{i}"),
            plant: vec![("pack.yaml".into(), Plant::Text(cpu_pack("\"2:4\"", "64", extra)))],
            args: args(&["validate", "pack.yaml"]),
            located: "pack.yaml:".into(),
        });
    }
    // Panics the issue found.
    for requests in ["18446744073709551615", "0", "100000000000"] {
        cases.push(Case {
            name: format!("sim --requests {requests}"),
            plant: vec![],
            args: args(&[
                "sim",
                "--arch",
                "h100",
                "--gemm",
                "64x64x64",
                "--sparsity",
                "2:4",
                "--traffic",
                "poisson:100",
                "--requests",
                requests,
            ]),
            located: "--requests".into(),
        });
    }
    cases
}

/// Every entry below `root`, links not followed.
fn entries(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in list.flatten() {
            let p = e.path();
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Issue 23: see the module docs.
#[test]
fn every_hostile_input_is_refused_located_bounded_and_writes_nothing() {
    let time = Path::new("/usr/bin/time");
    let measure = time.exists();
    let outside = tempfile::tempdir().unwrap();
    let secret_file = outside.path().join("secret.yaml");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let cases = corpus();
    let (mut refused, mut panics, mut hangs, mut max_rss_kb) = (0, 0, 0, 0u64);
    let mut failures = Vec::new();
    for case in &cases {
        let sb = Sandbox::new();
        for (name, plant) in &case.plant {
            let path = sb.path().join(name);
            match plant {
                Plant::Hostile(kind) => plant_hostile(&path, *kind),
                Plant::Text(text) => {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(&path, text).unwrap();
                }
                Plant::LinkOut => {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::os::unix::fs::symlink(&secret_file, &path).unwrap();
                }
            }
        }
        let before = entries(sb.path());
        let rss_file = outside.path().join("rss");
        let _ = std::fs::remove_file(&rss_file);
        let mut cmd = crate::support::sparsegate_under(measure.then_some(time), &rss_file);
        cmd.current_dir(sb.path())
            .args(&case.args)
            .env("NO_COLOR", "1")
            .timeout(Duration::from_secs(10));
        let started = Instant::now();
        let out = cmd.output().unwrap();
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let printed = format!("{err}{}", String::from_utf8_lossy(&out.stdout));
        let rss_kb = std::fs::read_to_string(&rss_file)
            .ok()
            .and_then(|t| t.lines().last().and_then(|l| l.trim().parse::<u64>().ok()))
            .unwrap_or(0);
        max_rss_kb = max_rss_kb.max(rss_kb);
        let mut problems = Vec::new();
        if took >= Duration::from_secs(10) || out.status.code().is_none() {
            hangs += 1;
            problems.push(format!("no exit within 10 s ({took:?}, {:?})", out.status));
        }
        if out.status.code() == Some(101) || err.contains("panicked") {
            panics += 1;
            problems.push("panicked".to_owned());
        }
        if out.status.code() != Some(2) {
            problems.push(format!("exit {:?}, not 2", out.status.code()));
        }
        if !err.contains(&case.located) {
            problems.push(format!("stderr does not name `{}`", case.located));
        }
        if printed.contains("hunter2") {
            problems.push("the secret was printed".to_owned());
        }
        if rss_kb > 256 * 1024 {
            problems.push(format!("RSS {rss_kb} KiB over 256 MB"));
        }
        let after = entries(sb.path());
        if after != before {
            problems.push(format!(
                "wrote {:?}",
                after.iter().filter(|p| !before.contains(p)).collect::<Vec<_>>()
            ));
        }
        if problems.is_empty() {
            refused += 1;
        } else {
            let head: String = err.chars().take(600).collect();
            failures.push(format!(
                "{}: {}\n  args {:?}\n  stderr: {head}",
                case.name,
                problems.join("; "),
                case.args
            ));
        }
    }
    eprintln!(
        "hostile corpus: {} inputs, {refused} refused cleanly, {panics} panics, {hangs} hangs, \
         max RSS {} ({})",
        cases.len(),
        if measure {
            format!("{max_rss_kb} KiB")
        } else {
            "not measured".to_owned()
        },
        if measure {
            "GNU time -f %M per child"
        } else {
            "/usr/bin/time absent"
        },
    );
    assert!(
        cases.len() >= 150,
        "the hostile corpus holds {} inputs",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} inputs:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn plant_hostile(path: &Path, kind: Hostile) {
    plant(path, kind);
}

/// `sparsegate … | head -1` (issue 23): a reader that goes away is not a panic; the exit
/// code is still the command's own.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let sb = Sandbox::new();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sparsegate"))
        .current_dir(sb.path())
        .args(["sim", "--arch", "h100", "--gemm", "64x64x64", "--sparsity", "2:4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A symlinked `out` or `golden/<pack>` would make gate and bless write outside the tree
/// (issue 23): refused with exit 2, nothing written through the link.
#[test]
fn a_symlinked_output_or_golden_directory_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let pack = crate::support::tiny_pack("p", crate::support::FAST, &["{metric: latency, at_most: 10}"]);
    let sb = Sandbox::with_pack(&pack);
    std::os::unix::fs::symlink(elsewhere.path(), sb.path().join("out")).unwrap();
    let out = sb.gate("pack.yaml", &[]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

    let sb = Sandbox::with_pack(&pack);
    std::fs::create_dir(sb.path().join("golden")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), sb.path().join("golden/p")).unwrap();
    let out = sb.output(&["bless", "pack.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}
