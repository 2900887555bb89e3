//! Records facts about the build that the environment lock needs: the compiler version and
//! the versions of the kernel libraries resolved in Cargo.lock.

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SPARSEGATE_RUSTC_VERSION={version}");

    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let wanted = ["gemm", "rayon"];
    let mut libs = Vec::new();
    let mut name: Option<String> = None;
    for line in lock.lines() {
        if let Some(v) = line.strip_prefix("name = ") {
            name = Some(v.trim_matches('"').to_owned());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take())
            && wanted.contains(&n.as_str())
        {
            libs.push(format!("{n}={}", v.trim_matches('"')));
        }
    }
    println!("cargo:rustc-env=SPARSEGATE_KERNEL_LIBS={}", libs.join(","));
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");
}
