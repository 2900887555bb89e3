//! `memo sign` and `memo verify`: SSH-key signatures over the memo and its digests.

use crate::error::Result;
use crate::release::sign::{self, SignReport, VerifyReport};
use std::path::{Path, PathBuf};

/// Sign the memo in `dir` with the key at `key` for `role`, or for the memo's only role
/// when none is given (refused when the packs have several). `allowed_signers` must bind
/// the key to an owner holding the role in the pack (issue 23).
pub fn sign_memo(dir: &Path, key: &Path, role: Option<&str>, allowed_signers: &Path) -> Result<SignReport> {
    Ok(sign::sign(dir, key, role, allowed_signers)?)
}

/// Verify every signature of the memo in `dir` against `allowed_signers`; with `packs`,
/// the memo must be for exactly those pack files.
pub fn verify_memo(dir: &Path, allowed_signers: &Path, packs: &[PathBuf]) -> Result<VerifyReport> {
    Ok(sign::verify(dir, allowed_signers, packs)?)
}
