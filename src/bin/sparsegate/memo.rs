//! `sparsegate memo sign|verify`: SSH-key signatures over the memo and its digests.

use crate::report::print_report;
use sparsegate::release::ExitCode;
use sparsegate::{Result, app};
use std::path::Path;

pub fn sign(dir: &Path, key: &Path, role: Option<&str>, json: bool) -> Result<ExitCode> {
    let report = app::sign_memo(dir, key, role)?;
    print_report(&report, json, |report| {
        println!(
            "signed memo in {} as `{}` with {}",
            dir.display(),
            report.role,
            report.fingerprint
        );
        for file in &report.files {
            println!("wrote {}", file.display());
        }
    });
    Ok(ExitCode::Pass)
}

pub fn verify(dir: &Path, allowed_signers: &Path, json: bool) -> Result<ExitCode> {
    let report = app::verify_memo(dir, allowed_signers)?;
    print_report(&report, json, |report| {
        for role in &report.roles {
            println!("signed  {role}");
        }
        println!(
            "memo in {} verified: {} roles, {} envelope signatures, {} files unchanged",
            dir.display(),
            report.roles.len(),
            report.envelope_signatures,
            report.subjects
        );
    });
    Ok(ExitCode::Pass)
}
