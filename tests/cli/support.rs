//! A scratch directory per test with helpers to write packs and run `sparsegate` in it.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

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

/// A small, fast pack: one 2:4 slice of a tiny GEMM, with the given guardrails (YAML list
/// items, already indented by 2 spaces relative to `guardrails:`).
pub fn tiny_pack(name: &str, samples: &str, guardrails: &str) -> String {
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
