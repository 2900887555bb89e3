//! Signatures over the closure memo that anyone can check with stock tools.
//!
//! Two forms, both made with the owner's existing SSH ed25519 key:
//! - an **SSHSIG** per role over the exact bytes of `memo.json` (`memo.json.<role>.sig`),
//!   which `ssh-keygen -Y verify -n sparsegate-memo -f allowed_signers -I EMAIL -s
//!   memo.json.<role>.sig < memo.json` accepts;
//! - a **DSSE envelope** (`memo.intoto.json`) holding an in-toto Statement v1 whose subjects
//!   are the digests of the memo, the other gate outputs, the packs and the baselines, so a
//!   memo replayed against other evidence is caught. Every signer adds a signature over the
//!   same payload.
//!
//! Trust comes only from the `allowed_signers` file (OpenSSH format): a principal (email)
//! is bound to a key, and the memo's owners bind emails to roles.

use super::Memo;
use super::error::{ReleaseError, Result};
use crate::domain::digest::sha256_hex;
use crate::files::{FileError, to_json, write_atomic};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use signature::{Signer, Verifier};
use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The SSHSIG namespace: a signature made for anything else never verifies as a memo's.
pub const NAMESPACE: &str = "sparsegate-memo";
/// DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// What the statement's predicate is.
pub const PREDICATE_TYPE: &str = "urn:sparsegate:closure-memo:v1";
/// The envelope file in the gate's output directory.
pub const ENVELOPE_FILE: &str = "memo.intoto.json";

/// Gate outputs covered by the statement, relative to the output directory.
const OUTPUTS: &[&str] = &[
    "memo.json",
    "memo.md",
    "memo.html",
    "verdict.json",
    "evidence.json",
    "junit.xml",
];

/// in-toto Statement v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// Always [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The files vouched for, by digest.
    pub subject: Vec<Subject>,
    /// Always [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// A summary of what was decided.
    pub predicate: serde_json::Value,
}

/// One file vouched for: its name (relative to the output directory for gate outputs, as
/// recorded for packs and baselines) and sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// File name.
    pub name: String,
    /// `{"sha256": "<hex>"}`.
    pub digest: BTreeMap<String, String>,
}

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// base64 of the statement's JSON bytes.
    pub payload: String,
    /// Always [`PAYLOAD_TYPE`].
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// One per signer.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One DSSE signature; `keyid` is only a hint (the SSH key fingerprint), never trusted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// SSH key fingerprint, `SHA256:…`.
    pub keyid: String,
    /// base64 ed25519 signature over the PAE of the payload.
    pub sig: String,
}

/// DSSE pre-authentication encoding: binds the payload type into what is signed.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The SSHSIG file for a role.
pub fn signature_file(role: &str) -> String {
    format!("memo.json.{role}.sig")
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| {
        FileError::Read {
            path: path.to_owned(),
            source,
        }
        .into()
    })
}

fn hex_digest(bytes: &[u8]) -> String {
    sha256_hex(bytes).trim_start_matches("sha256:").to_owned()
}

fn load_memo(dir: &Path) -> Result<(Vec<u8>, Memo)> {
    let path = dir.join("memo.json");
    let bytes = read(&path)?;
    let memo = serde_json::from_slice(&bytes).map_err(|e| {
        FileError::json(
            &path,
            &e,
            "memo.json is written by `sparsegate gate`; do not edit it",
        )
    })?;
    Ok((bytes, memo))
}

/// The statement for the memo in `dir`, from the files as they are now.
pub fn statement(dir: &Path, memo: &Memo) -> Result<Statement> {
    let subject = |name: String, bytes: &[u8]| Subject {
        name,
        digest: BTreeMap::from([("sha256".to_owned(), hex_digest(bytes))]),
    };
    let mut subjects = Vec::new();
    for name in OUTPUTS {
        subjects.push(subject((*name).to_owned(), &read(&dir.join(name))?));
    }
    for pack in &memo.packs {
        subjects.push(subject(pack.path.clone(), &read(Path::new(&pack.path))?));
    }
    for baseline in &memo.baselines {
        subjects.push(subject(baseline.path.clone(), &read(Path::new(&baseline.path))?));
    }
    Ok(Statement {
        statement_type: STATEMENT_TYPE.to_owned(),
        subject: subjects,
        predicate_type: PREDICATE_TYPE.to_owned(),
        predicate: serde_json::json!({
            "verdict": memo.verdict,
            "exit_code": memo.exit_code,
            "first_failing_stage": memo.first_failing_stage,
            "tool_version": memo.environment.tool_version,
            "git": memo.environment.git,
            "packs": memo.packs.iter().map(|p| serde_json::json!({"name": p.name, "digest": p.digest})).collect::<Vec<_>>(),
        }),
    })
}

/// The roles that must sign: every role held by an owner of a gated pack.
pub fn required_roles(memo: &Memo) -> BTreeSet<String> {
    memo.packs
        .iter()
        .flat_map(|p| p.owners.iter().map(|o| o.role.clone()))
        .collect()
}

/// The only role of the memo in `dir`, for signing without `--role`.
pub fn sole_role(dir: &Path) -> Result<String> {
    let (_, memo) = load_memo(dir)?;
    let roles = required_roles(&memo);
    match roles.len() {
        1 => Ok(roles.into_iter().next().unwrap_or_default()),
        _ => Err(ReleaseError::AmbiguousRole {
            roles: roles.into_iter().collect(),
        }),
    }
}

/// What `sign` did. The type is the format of `memo sign --json`
/// (`schemas/memo-sign-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SignReport {
    /// The role signed for.
    pub role: String,
    /// The key's fingerprint.
    pub fingerprint: String,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// Sign the memo in `dir` for `role` with the OpenSSH ed25519 private key at `key_path`.
pub fn sign(dir: &Path, key_path: &Path, role: &str) -> Result<SignReport> {
    let (memo_bytes, memo) = load_memo(dir)?;
    let roles = required_roles(&memo);
    if !roles.contains(role) {
        return Err(ReleaseError::Signing {
            message: format!("role `{role}` is not held by any owner of this memo"),
            hint: format!("roles are: {}", roles.into_iter().collect::<Vec<_>>().join(", ")),
        });
    }
    let key_text = read(key_path)?;
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
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    let signing_error = |e: &dyn std::fmt::Display| ReleaseError::Signing {
        message: format!("signing failed: {e}"),
        hint: "check the key file".into(),
    };

    let sshsig = key
        .sign(NAMESPACE, HashAlg::Sha512, &memo_bytes)
        .map_err(|e| signing_error(&e))?;
    let sig_path = dir.join(signature_file(role));
    let pem = sshsig.to_pem(LineEnding::LF).map_err(|e| signing_error(&e))?;
    write_atomic(&sig_path, pem.as_bytes())?;

    let payload = serde_json::to_vec(&statement(dir, &memo)?).expect("statements serialize");
    let envelope_path = dir.join(ENVELOPE_FILE);
    let mut envelope = match std::fs::read(&envelope_path) {
        Ok(bytes) => {
            let existing: Envelope = serde_json::from_slice(&bytes).map_err(|e| {
                FileError::json(
                    &envelope_path,
                    &e,
                    "memo.intoto.json is written by `sparsegate memo sign`",
                )
            })?;
            if BASE64.decode(&existing.payload).ok().as_deref() != Some(payload.as_slice()) {
                return Err(ReleaseError::Signing {
                    message: "the memo or its evidence changed since the first signature".into(),
                    hint: "re-run the gate and collect every signature on the new memo".into(),
                });
            }
            existing
        }
        Err(_) => Envelope {
            payload: BASE64.encode(&payload),
            payload_type: PAYLOAD_TYPE.to_owned(),
            signatures: vec![],
        },
    };
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
        role: role.to_owned(),
        fingerprint,
        files: vec![sig_path, envelope_path],
    })
}

/// One trusted key from an `allowed_signers` file.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    /// Principals (emails) the key may sign as.
    pub principals: Vec<String>,
    /// The key.
    pub key: PublicKey,
}

/// Parse an OpenSSH `allowed_signers` file, honouring a `namespaces="…"` option.
pub fn parse_allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>> {
    let text = String::from_utf8_lossy(&read(path)?).into_owned();
    let mut signers = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| ReleaseError::Signing {
            message: format!("{}:{}: {what}", path.display(), index + 1),
            hint: "lines read `email[,email] [namespaces=\"sparsegate-memo\"] ssh-ed25519 AAAA…`".into(),
        };
        let mut fields = line.split_whitespace();
        let principals: Vec<String> = fields
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::to_owned)
            .collect();
        let mut rest: Vec<&str> = fields.collect();
        if rest
            .first()
            .is_some_and(|f| !f.starts_with("ssh-") && !f.starts_with("ecdsa-") && !f.starts_with("sk-"))
        {
            let options = rest.remove(0);
            if let Some(ns) = options.split(',').find_map(|o| o.strip_prefix("namespaces="))
                && !ns.trim_matches('"').split(',').any(|n| n == NAMESPACE)
            {
                continue;
            }
        }
        let key =
            PublicKey::from_openssh(&rest.join(" ")).map_err(|e| bad(&format!("not a public key: {e}")))?;
        signers.push(AllowedSigner { principals, key });
    }
    Ok(signers)
}

/// What `verify` found: one line per check that passed. The type is the format of
/// `memo verify --json` (`schemas/memo-verify-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerifyReport {
    /// `role: principal (fingerprint)` per required role.
    pub roles: Vec<String>,
    /// Subjects whose digests matched.
    pub subjects: usize,
    /// Envelope signatures that verified.
    pub envelope_signatures: usize,
}

/// Check every signature on the memo in `dir`, that every required role signed with a key
/// `allowed_signers` binds to an owner holding that role, and that every file the statement
/// names still has its recorded digest. All problems are reported together.
pub fn verify(dir: &Path, allowed_signers: &Path) -> Result<VerifyReport> {
    let (memo_bytes, memo) = load_memo(dir)?;
    let signers = parse_allowed_signers(allowed_signers)?;
    let mut problems = Vec::new();

    // The envelope: payload signatures, then the subjects against the files on disk.
    let envelope_path = dir.join(ENVELOPE_FILE);
    let mut envelope_signatures = 0;
    let mut subjects = 0;
    match std::fs::read(&envelope_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Envelope>(&b).ok())
    {
        None => problems.push(format!("{} is missing or unreadable", envelope_path.display())),
        Some(envelope) => {
            let payload = BASE64.decode(&envelope.payload).unwrap_or_default();
            if envelope.payload_type != PAYLOAD_TYPE {
                problems.push(format!(
                    "envelope payloadType is `{}`, expected `{PAYLOAD_TYPE}`",
                    envelope.payload_type
                ));
            }
            let message = pae(&envelope.payload_type, &payload);
            for s in &envelope.signatures {
                let verified = BASE64
                    .decode(&s.sig)
                    .ok()
                    .and_then(|raw| ssh_key::Signature::new(ssh_key::Algorithm::Ed25519, raw).ok())
                    .is_some_and(|sig| {
                        signers
                            .iter()
                            .any(|a| Verifier::verify(&a.key, &message, &sig).is_ok())
                    });
                if verified {
                    envelope_signatures += 1;
                } else {
                    problems.push(format!(
                        "envelope signature by {} does not verify with any allowed signer",
                        s.keyid
                    ));
                }
            }
            if envelope.signatures.is_empty() {
                problems.push("the envelope carries no signature".into());
            }
            match serde_json::from_slice::<Statement>(&payload) {
                Err(e) => problems.push(format!("the envelope payload is not an in-toto statement: {e}")),
                Ok(statement) => {
                    if statement.statement_type != STATEMENT_TYPE
                        || statement.predicate_type != PREDICATE_TYPE
                    {
                        problems.push("the envelope payload is not a sparsegate memo statement".into());
                    }
                    for s in &statement.subject {
                        let path = if OUTPUTS.contains(&s.name.as_str()) {
                            dir.join(&s.name)
                        } else {
                            PathBuf::from(&s.name)
                        };
                        let recorded = s.digest.get("sha256").cloned().unwrap_or_default();
                        match std::fs::read(&path) {
                            Err(e) => problems.push(format!("{} cannot be read ({e}): the memo cannot be checked against it", path.display())),
                            Ok(bytes) if hex_digest(&bytes) != recorded => problems.push(format!(
                                "{} changed since signing (sha256 {} recorded, {} now): the memo does not describe this evidence",
                                path.display(),
                                recorded,
                                hex_digest(&bytes)
                            )),
                            Ok(_) => subjects += 1,
                        }
                    }
                }
            }
        }
    }

    // One SSHSIG per required role, by a key bound to an owner holding that role.
    let mut roles = Vec::new();
    for role in required_roles(&memo) {
        let holders: Vec<&str> = memo
            .packs
            .iter()
            .flat_map(|p| p.owners.iter())
            .filter(|o| o.role == role)
            .map(|o| o.email.as_str())
            .collect();
        let sig_path = dir.join(signature_file(&role));
        let Ok(pem) = std::fs::read_to_string(&sig_path) else {
            problems.push(format!(
                "role `{role}` has not signed ({} is missing)",
                sig_path.display()
            ));
            continue;
        };
        let Ok(sig) = SshSig::from_pem(pem.trim()) else {
            problems.push(format!("{} is not an SSH signature", sig_path.display()));
            continue;
        };
        let signer = signers.iter().find(|a| {
            a.key.key_data() == sig.public_key() && a.principals.iter().any(|p| holders.contains(&p.as_str()))
        });
        match signer {
            None => problems.push(format!(
                "the `{role}` signature was made with a key that allowed_signers does not bind to an owner with that role ({})",
                holders.join(", ")
            )),
            Some(a) => match a.key.verify(NAMESPACE, &memo_bytes, &sig) {
                Err(e) => problems.push(format!("the `{role}` signature does not verify over memo.json: {e}")),
                Ok(()) => roles.push(format!(
                    "{role}: {} ({})",
                    a.principals.iter().find(|p| holders.contains(&p.as_str())).map_or("", String::as_str),
                    a.key.fingerprint(HashAlg::Sha256)
                )),
            },
        }
    }

    if problems.is_empty() {
        Ok(VerifyReport {
            roles,
            subjects,
            envelope_signatures,
        })
    } else {
        Err(ReleaseError::Verification {
            dir: dir.to_owned(),
            problems,
        })
    }
}
