//! `memo verify`: every role the (verified) packs name signed the complete statement with a
//! key the allowed-signers file binds to a holder of that role, in both forms (SSHSIG and
//! DSSE), and every file the statement names still has its digest. All problems are
//! reported together. The verdict is reported, never judged: the caller decides whether a
//! verdict other than pass fails (`memo verify --require-pass`).

use super::allowed::{AllowedSigner, bound, parse_allowed_signers};
use super::signer::MAX_KEY_BYTES;
use super::statement::{
    ENVELOPE_FILE, Envelope, MAX_DOC_BYTES, NAMESPACE, OUTPUTS, PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_FILE,
    STATEMENT_TYPE, Statement, file_digest, load_memo, pack_owners, pae, read_limited, sign_off,
    signature_file,
};
use crate::domain::Verdict;
use crate::domain::digest::sha256_hex;
use crate::release::ExitCode;
use crate::release::error::{ReleaseError, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use signature::Verifier;
use ssh_key::{HashAlg, SshSig};
use std::path::{Path, PathBuf};

/// What `verify` found. The type is the format of `memo verify --json`
/// (`schemas/memo-verify-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerifyReport {
    /// The verdict the owners signed.
    pub verdict: Verdict,
    /// The gate's exit status the owners signed (0 pass, warnings allowed).
    pub exit_code: i32,
    /// `name path sha256:<hex>` per pack the memo is for.
    pub packs: Vec<String>,
    /// `role: principal (fingerprint)` per required role.
    pub roles: Vec<String>,
    /// Subjects whose digests matched.
    pub subjects: usize,
    /// Envelope signatures that verified.
    pub envelope_signatures: usize,
}

/// Verify the memo in `dir` against `allowed_signers`. With `pinned` packs, the memo must be
/// for exactly those pack files (by digest): a memo gated on another pack, whose owners are
/// someone else, is refused.
pub fn verify(dir: &Path, allowed_signers: &Path, pinned: &[PathBuf]) -> Result<VerifyReport> {
    let signers = parse_allowed_signers(allowed_signers)?;
    let mut problems = Vec::new();
    let fail = |problems: Vec<String>| ReleaseError::Verification {
        dir: dir.to_owned(),
        problems,
    };

    let envelope_path = dir.join(ENVELOPE_FILE);
    let envelope = read_limited(&envelope_path, MAX_DOC_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<Envelope>(&b).ok());
    let Some(envelope) = envelope else {
        return Err(fail(vec![format!(
            "{} is missing or not a DSSE envelope",
            envelope_path.display()
        )]));
    };
    let payload = BASE64.decode(&envelope.payload).unwrap_or_default();
    if envelope.payload_type != PAYLOAD_TYPE {
        problems.push(format!(
            "envelope payloadType is `{}`, expected `{PAYLOAD_TYPE}`",
            envelope.payload_type
        ));
    }
    let statement_path = dir.join(STATEMENT_FILE);
    match read_limited(&statement_path, MAX_DOC_BYTES) {
        Ok(bytes) if bytes == payload => {}
        Ok(_) => problems.push(format!(
            "{} is not the statement the envelope carries",
            statement_path.display()
        )),
        Err(e) => problems.push(format!("{}: {e}", statement_path.display())),
    }
    let statement = match serde_json::from_slice::<Statement>(&payload) {
        Ok(s) if s.statement_type == STATEMENT_TYPE && s.predicate_type == PREDICATE_TYPE => s,
        Ok(s) => {
            problems.push(format!(
                "the envelope holds a `{}` statement, not a `{PREDICATE_TYPE}` one (re-sign memos of older sparsegate versions)",
                s.predicate_type
            ));
            return Err(fail(problems));
        }
        Err(e) => {
            problems.push(format!(
                "the envelope payload is not a sparsegate memo statement: {e}"
            ));
            return Err(fail(problems));
        }
    };
    let predicate = &statement.predicate;

    // Every file vouched for, and every gate output among them.
    let mut subjects = 0;
    for name in OUTPUTS {
        if !statement.subject.iter().any(|s| s.name == *name) {
            problems.push(format!("the statement does not cover {name}"));
        }
    }
    for s in &statement.subject {
        let path = s.path(dir);
        match file_digest(&path) {
            Err(e) => problems.push(format!("{e}: the memo cannot be checked against it")),
            Ok(now) if now != s.sha256() => problems.push(format!(
                "{} changed since signing (sha256 {} recorded, {now} now): the memo does not describe this evidence",
                path.display(),
                s.sha256()
            )),
            Ok(_) => subjects += 1,
        }
    }
    match load_memo(dir) {
        Ok(memo) if memo.verdict != predicate.verdict || memo.exit_code != predicate.exit_code => problems
            .push(format!(
                "memo.json says {}, the signed statement {}",
                memo.verdict.as_str(),
                predicate.verdict.as_str()
            )),
        Ok(_) => {}
        Err(e) => problems.push(e.to_string()),
    }

    // Who must sign comes from the pack files, verified by digest, never from memo.json.
    let mut owners = Vec::new();
    let mut packs = Vec::new();
    for pack in &predicate.packs {
        let covered = statement
            .subject
            .iter()
            .any(|s| s.name == pack.path && format!("sha256:{}", s.sha256()) == pack.digest);
        if !covered {
            problems.push(format!(
                "pack {} is not among the statement's subjects",
                pack.path
            ));
        }
        match pack_owners(Path::new(&pack.path), &pack.digest) {
            Ok(o) => owners.extend(o),
            Err(e) => problems.push(format!("the owners of pack `{}` cannot be read: {e}", pack.name)),
        }
        packs.push(format!("{} {} {}", pack.name, pack.path, pack.digest));
    }
    if predicate.packs.is_empty() {
        problems.push("the statement names no pack, so nobody is required to sign".into());
    }
    let required = sign_off(&owners);
    if required != predicate.sign_off {
        problems
            .push("the roles and signers in the statement are not those the packs give their owners".into());
    }
    for pin in pinned {
        match read_limited(pin, super::statement::MAX_PACK_BYTES) {
            Err(e) => problems.push(e.to_string()),
            Ok(bytes) => {
                let digest = sha256_hex(&bytes);
                if !predicate.packs.iter().any(|p| p.digest == digest) {
                    problems.push(format!(
                        "the memo is not for {} ({digest}); it is for: {}",
                        pin.display(),
                        packs.join("; ")
                    ));
                }
            }
        }
    }
    if !pinned.is_empty() && predicate.packs.len() != pinned.len() {
        problems.push(format!(
            "the memo is for {} packs, {} were named",
            predicate.packs.len(),
            pinned.len()
        ));
    }

    // One SSHSIG per required role over the statement, by a key bound to a holder, and the
    // same key's DSSE signature in the envelope.
    let message = pae(&envelope.payload_type, &payload);
    let dsse_by = |a: &AllowedSigner| {
        envelope.signatures.iter().any(|s| {
            BASE64
                .decode(&s.sig)
                .ok()
                .and_then(|raw| ssh_key::Signature::new(ssh_key::Algorithm::Ed25519, raw).ok())
                .is_some_and(|sig| Verifier::verify(&a.key, &message, &sig).is_ok())
        })
    };
    let mut roles = Vec::new();
    let mut role_keys: Vec<&AllowedSigner> = Vec::new();
    for r in &required {
        let sig_path = match signature_file(&r.role) {
            Ok(name) => dir.join(name),
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let Ok(pem) = read_limited(&sig_path, MAX_KEY_BYTES) else {
            problems.push(format!(
                "role `{}` has not signed ({} is missing)",
                r.role,
                sig_path.display()
            ));
            continue;
        };
        let Ok(sig) = SshSig::from_pem(String::from_utf8_lossy(&pem).trim()) else {
            problems.push(format!("{} is not an SSH signature", sig_path.display()));
            continue;
        };
        let Some((signer, principal)) = bound(&signers, sig.public_key(), &r.principals) else {
            problems.push(format!(
                "the `{}` signature was made with a key that allowed_signers does not bind to an owner with that role ({})",
                r.role,
                r.principals.join(", ")
            ));
            continue;
        };
        if let Err(e) = signer.key.verify(NAMESPACE, &payload, &sig) {
            problems.push(format!(
                "the `{}` signature does not verify over the statement: {e}",
                r.role
            ));
            continue;
        }
        if !dsse_by(signer) {
            problems.push(format!(
                "the envelope carries no signature by `{}`'s key ({principal})",
                r.role
            ));
            continue;
        }
        roles.push(format!(
            "{}: {principal} ({})",
            r.role,
            signer.key.fingerprint(HashAlg::Sha256)
        ));
        role_keys.push(signer);
    }

    // Every envelope signature is a role signer's: nobody else seals the statement.
    let mut envelope_signatures = 0;
    for s in &envelope.signatures {
        let by_role = BASE64
            .decode(&s.sig)
            .ok()
            .and_then(|raw| ssh_key::Signature::new(ssh_key::Algorithm::Ed25519, raw).ok())
            .is_some_and(|sig| {
                role_keys
                    .iter()
                    .any(|a| Verifier::verify(&a.key, &message, &sig).is_ok())
            });
        if by_role {
            envelope_signatures += 1;
        } else {
            problems.push(format!(
                "envelope signature by {} is not a verified signature of a role that must sign",
                s.keyid
            ));
        }
    }
    if envelope.signatures.is_empty() {
        problems.push("the envelope carries no signature".into());
    }

    if problems.is_empty() {
        Ok(VerifyReport {
            verdict: predicate.verdict,
            exit_code: ExitCode::code(predicate.exit_code),
            packs,
            roles,
            subjects,
            envelope_signatures,
        })
    } else {
        Err(fail(problems))
    }
}
