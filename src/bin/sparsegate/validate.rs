//! `sparsegate validate PACK...`: every pack's outcome, each problem as `file:line:col`.

use sparsegate::ingress::report::PackValidation;
use sparsegate::release::ExitCode;
use sparsegate::{Error, Result, app};
use std::path::PathBuf;

pub fn run(paths: &[PathBuf], json: bool) -> Result<ExitCode> {
    let results = app::validate_packs(paths);
    let mut ok = true;
    let mut report = Vec::new();
    for (path, result) in results {
        match result {
            Ok(pack) => {
                // Issue 24: warnings go to stderr in both modes; `--json` also lists them.
                for w in &pack.warnings {
                    eprintln!("warning: {w}");
                }
                if !json {
                    println!(
                        "ok {} ({} slice{})",
                        path.display(),
                        pack.slices.len(),
                        if pack.slices.len() == 1 { "" } else { "s" }
                    );
                }
                report.push(PackValidation::of(&path, Ok(&pack)));
            }
            Err(err) => {
                ok = false;
                report.push(PackValidation::of(&path, Err(&err)));
                crate::errors::eprint(Error::from(err));
            }
        }
    }
    if json {
        print!("{}", app::to_json(&report));
    }
    Ok(if ok { ExitCode::Pass } else { ExitCode::Error })
}
