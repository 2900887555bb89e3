//! `sparsegate memo sign|verify`: SSH-key signatures over the memo and its digests.

use crate::report::print_report;
use sparsegate::release::ExitCode;
use sparsegate::{Result, app};
use std::path::{Path, PathBuf};

pub fn sign(
    dir: &Path,
    key: &Path,
    role: Option<&str>,
    allowed_signers: &Path,
    json: bool,
) -> Result<ExitCode> {
    let report = app::sign_memo(dir, key, role, allowed_signers)?;
    if report.exit_code != ExitCode::Pass.code() {
        eprintln!(
            "warning: this memo records a gate that did not pass (verdict {}, exit {}); your signature vouches for that record, not for a release",
            report.verdict.as_str(),
            report.exit_code
        );
    }
    print_report(&report, json, |report| {
        println!(
            "signed memo in {} as `{}` ({}) with {}",
            dir.display(),
            report.role,
            report.principal,
            report.fingerprint
        );
        for file in &report.files {
            println!("wrote {}", file.display());
        }
    });
    Ok(ExitCode::Pass)
}

pub fn verify(
    dir: &Path,
    allowed_signers: &Path,
    packs: &[PathBuf],
    require_pass: bool,
    json: bool,
) -> Result<ExitCode> {
    let report = app::verify_memo(dir, allowed_signers, packs)?;
    print_report(&report, json, |report| {
        for pack in &report.packs {
            println!("pack    {pack}");
        }
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
        println!(
            "verdict {} (the gate exited {})",
            report.verdict.as_str(),
            report.exit_code
        );
    });
    if require_pass && report.exit_code != ExitCode::Pass.code() {
        eprintln!(
            "error: the signed gate did not pass (verdict {}); --require-pass refuses it",
            report.verdict.as_str()
        );
        return Ok(match report.exit_code {
            1 => ExitCode::Fail,
            3 => ExitCode::Inconclusive,
            _ => ExitCode::Error,
        });
    }
    Ok(ExitCode::Pass)
}
