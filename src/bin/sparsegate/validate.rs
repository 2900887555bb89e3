//! `sparsegate validate PACK...`: every pack's outcome, each problem as `file:line:col`.

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
                if !json {
                    println!(
                        "ok {} ({} slice{})",
                        path.display(),
                        pack.slices.len(),
                        if pack.slices.len() == 1 { "" } else { "s" }
                    );
                }
                report.push(serde_json::json!({
                    "path": path, "valid": true,
                    "slices": pack.slices.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
                    "errors": [],
                }));
            }
            Err(err) => {
                ok = false;
                report.push(serde_json::json!({
                    "path": path, "valid": false, "slices": [],
                    "errors": err.diagnostics.iter().map(|d| serde_json::json!({
                        "location": d.location.to_string(), "pointer": d.pointer,
                        "message": d.message, "hint": d.hint,
                    })).collect::<Vec<_>>(),
                }));
                crate::errors::eprint(Error::from(err));
            }
        }
    }
    if json {
        print!("{}", app::to_json(&report));
    }
    Ok(if ok { ExitCode::Pass } else { ExitCode::Error })
}
