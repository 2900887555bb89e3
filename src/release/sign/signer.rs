//! `memo sign`: one role's signatures over the statement, refused for a key that the
//! allowed-signers file does not bind to a holder of that role in the pack, and never over
//! another signer's signature file (issue 23).

use super::allowed::{bound, parse_allowed_signers, principals_of};
use super::statement::{
    ENVELOPE_FILE, Envelope, EnvelopeSignature, MAX_DOC_BYTES, PAYLOAD_TYPE, STATEMENT_FILE, load_memo, pae,
    read_limited, signature_file, statement,
};
use crate::domain::Verdict;
use crate::files::{FileError, to_json, write_atomic};
use crate::release::ExitCode;
use crate::release::error::{ReleaseError, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use signature::Signer;
use ssh_key::{HashAlg, LineEnding, PrivateKey, SshSig};
use std::path::{Path, PathBuf};

/// The most bytes of a private key or a signature file read.
pub(super) const MAX_KEY_BYTES: u64 = 64 << 10;

/// What `sign` did. The type is the format of `memo sign --json`
/// (`schemas/memo-sign-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SignReport {
    /// The role signed for.
    pub role: String,
    /// The principal (email) the allowed-signers file binds the key to, holding the role.
    pub principal: String,
    /// The key's fingerprint.
    pub fingerprint: String,
    /// The verdict signed: a memo that did not pass can be signed (a record of a failed
    /// gate), and the command warns.
    pub verdict: Verdict,
    /// The gate's exit status recorded in the memo.
    pub exit_code: i32,
    /// Files written.
    pub files: Vec<PathBuf>,
}

fn load_key(key_path: &Path) -> Result<PrivateKey> {
    let key_text = read_limited(key_path, MAX_KEY_BYTES)?;
    let key = PrivateKey::from_openssh(&key_text).map_err(|e| ReleaseError::Signing {
        message: format!("{} is not an OpenSSH private key: {e}", key_path.display()),
        hint: "pass the private half of an ed25519 key, e.g. ~/.ssh/id_ed25519".into(),
    })?;
    if key.is_encrypted() {
        return Err(ReleaseError::Signing {
            message: format!("{} is passphrase-protected", key_path.display()),
            hint: "sign with an unencrypted copy kept outside the repository, or a dedicated signing key"
                .into(),
        });
    }
    if key.algorithm() != ssh_key::Algorithm::Ed25519 {
        return Err(ReleaseError::Signing {
            message: format!(
                "{} is a {} key; memos are signed with ed25519",
                key_path.display(),
                key.algorithm()
            ),
            hint: "create one with `ssh-keygen -t ed25519`".into(),
        });
    }
    Ok(key)
}

/// Sign the memo in `dir` for `role` (or its only role) with the OpenSSH ed25519 private
/// key at `key_path`, which `allowed_signers` must bind to an owner the packs give that role.
///
/// Writes `memo.statement.json` (the first signer; later signers must find the same bytes),
/// `memo.statement.json.<role>.sig` (SSHSIG over it) and adds a DSSE signature to
/// `memo.intoto.json`.
pub fn sign(dir: &Path, key_path: &Path, role: Option<&str>, allowed_signers: &Path) -> Result<SignReport> {
    let memo = load_memo(dir)?;
    let statement = statement(dir, &memo)?;
    let sign_off = &statement.predicate.sign_off;
    let role = match role {
        Some(role) => role.to_owned(),
        None if sign_off.len() == 1 => sign_off[0].role.clone(),
        None => {
            return Err(ReleaseError::AmbiguousRole {
                roles: sign_off.iter().map(|r| r.role.clone()).collect(),
            });
        }
    };
    let sig_name = signature_file(&role)?;
    let Some(holders) = sign_off.iter().find(|r| r.role == role) else {
        return Err(ReleaseError::Signing {
            message: format!("role `{role}` is not held by any owner of the gated packs"),
            hint: format!(
                "roles are: {}",
                sign_off
                    .iter()
                    .map(|r| r.role.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    };

    let key = load_key(key_path)?;
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    let signers = parse_allowed_signers(allowed_signers)?;
    let public = key.public_key().key_data();
    let Some((_, principal)) = bound(&signers, public, &holders.principals) else {
        let known = principals_of(&signers, public);
        let message = if known.is_empty() {
            format!(
                "{} does not list the key {fingerprint}",
                allowed_signers.display()
            )
        } else {
            format!(
                "the key {fingerprint} is bound to {}, and role `{role}` is held by {}",
                known.join(", "),
                holders.principals.join(", ")
            )
        };
        return Err(ReleaseError::Signing {
            message: format!("refusing to sign for `{role}`: {message}"),
            hint: "sign with the key allowed_signers binds to an owner holding that role in the pack".into(),
        });
    };
    let principal = principal.to_owned();

    let signing_error = |e: &dyn std::fmt::Display| ReleaseError::Signing {
        message: format!("signing failed: {e}"),
        hint: "check the key file".into(),
    };
    let payload = to_json(&statement).into_bytes();

    // Never replace another signer's signature.
    let sig_path = dir.join(&sig_name);
    if sig_path.symlink_metadata().is_ok() {
        let existing = read_limited(&sig_path, MAX_KEY_BYTES)
            .ok()
            .and_then(|pem| SshSig::from_pem(String::from_utf8_lossy(&pem).trim()).ok());
        match existing {
            Some(sig) if sig.public_key() == public => {}
            Some(sig) => {
                let other = principals_of(&signers, sig.public_key());
                return Err(ReleaseError::Signing {
                    message: format!(
                        "{} already holds the `{role}` signature of another key ({}); sparsegate never overwrites another signer's signature",
                        sig_path.display(),
                        if other.is_empty() {
                            "not in allowed_signers".to_owned()
                        } else {
                            other.join(", ")
                        }
                    ),
                    hint:
                        "one signature per role is needed; if that one must go, its signer removes the file"
                            .into(),
                });
            }
            None => {
                return Err(ReleaseError::Signing {
                    message: format!("{} exists and is not an SSH signature", sig_path.display()),
                    hint: "sparsegate never overwrites a file it did not write; look at it, then remove it"
                        .into(),
                });
            }
        }
    }

    // The statement: the first signer writes it, later signers must find the same bytes.
    let statement_path = dir.join(STATEMENT_FILE);
    let changed = || ReleaseError::Signing {
        message: "the memo, its evidence, a pack or a baseline changed since the first signature".into(),
        hint: "re-run the gate and collect every signature on the new memo".into(),
    };
    match statement_path.symlink_metadata() {
        Ok(_) => {
            if read_limited(&statement_path, MAX_DOC_BYTES)? != payload {
                return Err(changed());
            }
        }
        Err(_) => write_atomic(&statement_path, &payload)?,
    }
    let envelope_path = dir.join(ENVELOPE_FILE);
    let mut envelope = match envelope_path.symlink_metadata() {
        Ok(_) => {
            let bytes = read_limited(&envelope_path, MAX_DOC_BYTES)?;
            let existing: Envelope = serde_json::from_slice(&bytes).map_err(|e| {
                FileError::json(
                    &envelope_path,
                    &e,
                    "memo.intoto.json is written by `sparsegate memo sign`",
                )
            })?;
            if BASE64.decode(&existing.payload).ok().as_deref() != Some(payload.as_slice()) {
                return Err(changed());
            }
            existing
        }
        Err(_) => Envelope {
            payload: BASE64.encode(&payload),
            payload_type: PAYLOAD_TYPE.to_owned(),
            signatures: vec![],
        },
    };

    let sshsig = key
        .sign(super::statement::NAMESPACE, HashAlg::Sha512, &payload)
        .map_err(|e| signing_error(&e))?;
    let pem = sshsig.to_pem(LineEnding::LF).map_err(|e| signing_error(&e))?;
    write_atomic(&sig_path, pem.as_bytes())?;

    let raw: ssh_key::Signature = key
        .try_sign(&pae(PAYLOAD_TYPE, &payload))
        .map_err(|e| signing_error(&e))?;
    envelope.signatures.retain(|s| s.keyid != fingerprint);
    envelope.signatures.push(EnvelopeSignature {
        keyid: fingerprint.clone(),
        sig: BASE64.encode(raw.as_bytes()),
    });
    write_atomic(&envelope_path, to_json(&envelope).as_bytes())?;
    Ok(SignReport {
        role,
        principal,
        fingerprint,
        verdict: memo.verdict,
        exit_code: ExitCode::code(memo.exit_code),
        files: vec![statement_path, sig_path, envelope_path],
    })
}
