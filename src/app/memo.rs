//! `memo sign` and `memo verify`: SSH-key signatures over the memo and its digests.

use crate::error::Result;
use crate::release::sign::{self, SignReport, VerifyReport};
use std::path::Path;

/// Sign the memo in `dir` with the key at `key` for `role`, or for the memo's only role
/// when none is given (refused when the memo has several).
pub fn sign_memo(dir: &Path, key: &Path, role: Option<&str>) -> Result<SignReport> {
    let role = match role {
        Some(role) => role.to_owned(),
        None => sign::sole_role(dir)?,
    };
    Ok(sign::sign(dir, key, &role)?)
}

/// Verify every signature of the memo in `dir` against `allowed_signers`.
pub fn verify_memo(dir: &Path, allowed_signers: &Path) -> Result<VerifyReport> {
    Ok(sign::verify(dir, allowed_signers)?)
}
