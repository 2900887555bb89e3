//! A scratch directory per test with helpers to write packs and run `sparsegate` in it.

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The sample policy of most CLI packs: quick, and still enough samples for an interval.
pub const FAST: &str = "{warmup: 1, min: 8, max: 12, time_budget_s: 0.05}";

/// The absolute path of `path`, relative to the repository root (packs, schemas, fixtures).
pub fn repo_file(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The absolute path of the example pack `name` under `scenarios/examples/`.
pub fn example_pack(name: &str) -> String {
    repo_file(&format!("scenarios/examples/{name}"))
}

/// A temporary working directory; `sparsegate` runs with it as the current directory.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A new sandbox holding `yaml` (dedented) as `pack.yaml`.
    pub fn with_pack(yaml: &str) -> Sandbox {
        let sb = Sandbox::new();
        sb.write("pack.yaml", yaml);
        sb
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write `text` (dedented) to `name` inside the sandbox.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, dedent(text)).unwrap();
        path
    }

    /// `sparsegate ARGS...` in the sandbox.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = assert_cmd::cargo::cargo_bin_cmd!("sparsegate");
        cmd.current_dir(self.dir.path()).args(args).env("NO_COLOR", "1");
        cmd
    }

    /// Write `text` to `name` inside the sandbox exactly as given (no dedenting).
    pub fn write_raw(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).unwrap();
    }

    /// `sparsegate ARGS...` in the sandbox, run to its end.
    pub fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `sparsegate ARGS... --json` in the sandbox, which must exit 0 and print a report
    /// the committed `schemas/<schema>` accepts: that report, parsed.
    #[track_caller]
    pub fn output_report(&self, args: &[&str], schema: &str) -> serde_json::Value {
        let out = self.output(args);
        assert_exit(&out, 0);
        assert_stdout_matches_schema(&out, schema);
        stdout_json(&out)
    }

    /// `sparsegate gate PACK --out out EXTRA...` in the sandbox, run to its end.
    pub fn gate(&self, pack: &str, extra: &[&str]) -> Output {
        let mut args = vec!["gate", pack, "--out", "out"];
        args.extend_from_slice(extra);
        self.output(&args)
    }

    /// `gate pack.yaml`, which must fail (exit 1) with `stage` as its first failing stage:
    /// the verdict and the memo.
    #[track_caller]
    pub fn gate_fails_at(&self, stage: &str) -> (serde_json::Value, String) {
        assert_exit(&self.gate("pack.yaml", &[]), 1);
        let verdict = self.json("out/verdict.json");
        assert_eq!(verdict["first_failing_stage"], stage, "{verdict}");
        (verdict, self.read("out/memo.md"))
    }

    /// `validate PACK`, which must refuse the pack (exit 2): everything it printed.
    #[track_caller]
    pub fn refused_at_ingress(&self, pack: &str) -> String {
        let out = self.output(&["validate", pack]);
        assert_exit(&out, 2);
        printed(&out)
    }

    /// The text of the file `name` inside the sandbox.
    pub fn read(&self, name: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The file `name` inside the sandbox, parsed as JSON.
    pub fn json(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The files under `dir` (relative), sorted.
    pub fn files_under(&self, dir: &str) -> Vec<String> {
        let root = self.dir.path().join(dir);
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }
}

/// Remove the common indentation (and a leading newline) so packs can be written inline.
fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    text.lines()
        .map(|l| l.get(indent..).unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A small, fast pack: one 2:4 slice of a tiny GEMM, with the given guardrails (YAML flow
/// mappings, one list item a line: the first sits on line 15 of the pack).
pub fn tiny_pack(name: &str, samples: &str, guardrails: &[&str]) -> String {
    let guardrails: Vec<String> = guardrails.iter().map(|g| format!("      - {g}")).collect();
    let guardrails = guardrails.join("\n");
    format!(
        "schema_version: 1
name: {name}
owners:
  - {{name: Test Owner, email: owner@example.com, role: owner}}
rollback:
  trigger: test trigger
samples: {samples}
slices:
  - id: tiny
    workload:
      ops:
        - gemm: {{name: proj, m: 32, n: 64, k: 64}}
    sparsity: [\"2:4\"]
    guardrails:
{guardrails}
"
    )
}

/// The stdout of a finished command, as text.
pub fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The stderr of a finished command, as text.
pub fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The stdout of a finished command, parsed as JSON.
pub fn stdout_json(output: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(output))
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(output)))
}

/// Everything a finished command printed: its stderr, then its stdout.
pub fn printed(output: &Output) -> String {
    stderr(output) + &stdout(output)
}

/// Asserts that the command exited with `code`; otherwise shows what it printed.
#[track_caller]
pub fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// Asserts that the command was refused (exit 2) with `needle` in its stderr.
#[track_caller]
pub fn assert_refused(output: &Output, needle: &str) {
    assert_exit(output, 2);
    let err = stderr(output);
    assert!(err.contains(needle), "expected {needle:?} in stderr:\n{err}");
}

/// The slice `id` of an `evidence.json` or `memo.json` document.
#[track_caller]
pub fn slice_named<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["slices"]
        .as_array()
        .expect("a `slices` array")
        .iter()
        .find(|s| s["slice"] == id)
        .unwrap_or_else(|| panic!("no slice {id}"))
}

/// A JSON array of whole numbers (run ids, counts).
pub fn u64s(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_u64().expect("a whole number"))
        .collect()
}

/// Asserts that `text` contains `needle`, showing all of `text` when it does not.
#[track_caller]
pub fn assert_contains(text: &str, needle: &str) {
    assert!(text.contains(needle), "expected {needle:?} in:\n{text}");
}

/// What makes `instance` not match the committed `schemas/<schema>`, one line per problem
/// (`instance path: message`); empty when it matches.
pub fn schema_errors(instance: &serde_json::Value, schema: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas").join(schema);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: serde_json::Value = serde_json::from_str(&text).expect("committed schemas are JSON");
    let validator = jsonschema::draft202012::new(&schema).expect("committed schemas are valid schemas");
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Asserts that the JSON file validates against the committed schema (issue 6: versioned,
/// derived schemas).
#[track_caller]
pub fn assert_matches_schema(file: &Path, schema: &str) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let instance: serde_json::Value = serde_json::from_str(&text).expect("the file is JSON");
    let errors = schema_errors(&instance, schema);
    assert!(
        errors.is_empty(),
        "{} does not match {schema}: {errors:?}",
        file.display()
    );
}

/// Asserts that a command's `--json` report on stdout validates against the committed
/// schema of that report (issue 19: every `--json` output has one).
#[track_caller]
pub fn assert_stdout_matches_schema(output: &Output, schema: &str) {
    let errors = schema_errors(&stdout_json(output), schema);
    assert!(
        errors.is_empty(),
        "stdout does not match {schema}: {errors:?}\n{}",
        stdout(output)
    );
}

/// `sparsegate`, run under GNU time writing its max RSS (KiB) to `rss_file` when `time` is
/// given (`/usr/bin/time`, where present), else on its own.
pub fn sparsegate_under(time: Option<&Path>, rss_file: &Path) -> Command {
    match time {
        Some(time) => {
            let mut c = Command::new(time);
            c.arg("-f").arg("%M").arg("-o").arg(rss_file);
            c.arg(env!("CARGO_BIN_EXE_sparsegate"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_sparsegate")),
    }
}
