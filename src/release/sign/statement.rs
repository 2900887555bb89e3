//! What every signature covers: an in-toto Statement v1 (format v2 since issue 23) naming
//! every gate output, pack, baseline and artifact by sha256, and, in its predicate, the
//! verdict and the roles that must sign with the principals the (verified) packs give them.
//! Its exact bytes are `memo.statement.json` and the payload of the DSSE envelope.

use crate::domain::digest::sha256_hex;
use crate::domain::{Stage, Verdict};
use crate::files::{FileError, open_regular, read_bounded};
use crate::ingress::GitInfo;
use crate::release::error::{ReleaseError, Result};
use crate::release::{ExitCode, Memo};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The SSHSIG namespace: a signature made for anything else never verifies as a memo's.
pub const NAMESPACE: &str = "sparsegate-memo";
/// DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// What the statement's predicate is. v2 (issue 23): role signatures cover the statement,
/// and the predicate names the roles and principals taken from the packs.
pub const PREDICATE_TYPE: &str = "urn:sparsegate:closure-memo:v2";
/// The envelope file in the gate's output directory.
pub const ENVELOPE_FILE: &str = "memo.intoto.json";
/// The statement's exact bytes, the file each role's SSHSIG is made over.
pub const STATEMENT_FILE: &str = "memo.statement.json";

/// Gate outputs covered by the statement, relative to the output directory.
pub const OUTPUTS: &[&str] = &[
    "memo.json",
    "memo.md",
    "memo.html",
    "verdict.json",
    "evidence.json",
    "junit.xml",
];

/// The most bytes read of a memo, an envelope, a statement or a pack.
pub(super) const MAX_DOC_BYTES: u64 = 64 << 20;
/// The most bytes of a pack (as ingress allows).
pub(super) const MAX_PACK_BYTES: u64 = 4 << 20;
/// The most bytes of a subject hashed (a checkpoint may be large; it is streamed).
const MAX_SUBJECT_BYTES: u64 = 1 << 40;

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
    /// What was decided and who must vouch for it.
    pub predicate: Predicate,
}

/// The statement's predicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicate {
    /// The gate's verdict.
    pub verdict: Verdict,
    /// Its exit status.
    pub exit_code: ExitCode,
    /// The earliest stage with a blocking failure.
    pub first_failing_stage: Option<Stage>,
    /// sparsegate's version.
    pub tool_version: String,
    /// The commit measured.
    pub git: Option<GitInfo>,
    /// The packs gated.
    pub packs: Vec<PackSubject>,
    /// Every role that must sign, with the principals the packs give it.
    pub sign_off: Vec<RoleSigners>,
}

/// A pack the memo is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackSubject {
    /// Pack name.
    pub name: String,
    /// The file, as the gate found it.
    pub path: String,
    /// `sha256:<hex>` of the file.
    pub digest: String,
}

/// A role that must sign and the principals (emails) that hold it in the packs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSigners {
    /// The role.
    pub role: String,
    /// Its holders' emails, sorted.
    pub principals: Vec<String>,
}

/// One file vouched for: its name (relative to the output directory for gate outputs, as
/// recorded for packs, baselines and artifacts) and sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// File name.
    pub name: String,
    /// `{"sha256": "<hex>"}`.
    pub digest: BTreeMap<String, String>,
}

impl Subject {
    /// Where the file is: gate outputs inside `dir`, everything else as recorded.
    pub fn path(&self, dir: &Path) -> PathBuf {
        if OUTPUTS.contains(&self.name.as_str()) {
            dir.join(&self.name)
        } else {
            PathBuf::from(&self.name)
        }
    }

    /// The recorded sha256, hex.
    pub fn sha256(&self) -> &str {
        self.digest.get("sha256").map_or("", String::as_str)
    }
}

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// base64 of the statement's JSON bytes.
    pub payload: String,
    /// Always [`PAYLOAD_TYPE`].
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// One per signing key.
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

/// Whether `role` may name a file: `[a-z0-9][a-z0-9_-]{0,63}`, the alphabet the pack schema
/// gives roles (issue 23: a role like `x/../../victim` once made `memo sign` write outside
/// the output directory).
pub fn is_safe_role(role: &str) -> bool {
    let mut chars = role.chars();
    role.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The SSHSIG file of a role, refused for a role that is not a safe file name.
pub fn signature_file(role: &str) -> Result<String> {
    if is_safe_role(role) {
        Ok(format!("{STATEMENT_FILE}.{role}.sig"))
    } else {
        Err(ReleaseError::Signing {
            message: format!("role `{}` cannot name a signature file", role.escape_debug()),
            hint: "roles use lowercase letters, digits, `-` and `_`, starting with a letter or digit (at most 64)"
                .into(),
        })
    }
}

/// The bytes of the regular file at `path`, at most `limit` (the shared bounded reader).
pub(super) fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>> {
    Ok(crate::files::read_bounded_bytes(path, limit)?)
}

/// sha256 hex of the regular file at `path`, streamed (checkpoints may be gigabytes).
pub(super) fn file_digest(path: &Path) -> Result<String, FileError> {
    let read_error = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let mut file = open_regular(path)?.take(MAX_SUBJECT_BYTES + 1);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(read_error)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    if total > MAX_SUBJECT_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            limit: MAX_SUBJECT_BYTES,
        });
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Load `memo.json` from `dir`.
pub(super) fn load_memo(dir: &Path) -> Result<Memo> {
    let path = dir.join("memo.json");
    let bytes = read_limited(&path, MAX_DOC_BYTES)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        FileError::json(
            &path,
            &e,
            "memo.json is written by `sparsegate gate`; do not edit it",
        )
        .into()
    })
}

/// The owners of the pack at `path`, read (bounded) and checked against `digest` first:
/// who must sign comes from the pack file, never from the memo (issue 23).
pub(super) fn pack_owners(path: &Path, digest: &str) -> Result<Vec<crate::ingress::pack::Owner>> {
    let text = read_bounded(path, MAX_PACK_BYTES)?;
    let now = sha256_hex(text.as_bytes());
    if now != digest {
        return Err(ReleaseError::PackChanged {
            path: path.to_owned(),
            recorded: digest.to_owned(),
            now,
        });
    }
    let pack = crate::ingress::parse_pack(path, text).map_err(|e| ReleaseError::Pack(Box::new(e)))?;
    Ok(pack.file.owners)
}

/// The roles of `packs`' owners and their holders' emails, sorted.
pub(super) fn sign_off(owners: &[crate::ingress::pack::Owner]) -> Vec<RoleSigners> {
    let mut roles: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for o in owners {
        roles.entry(&o.role).or_default().insert(&o.email);
    }
    roles
        .into_iter()
        .map(|(role, principals)| RoleSigners {
            role: role.to_owned(),
            principals: principals.into_iter().map(str::to_owned).collect(),
        })
        .collect()
}

/// The statement for the memo in `dir`, from the files as they are now: the packs are read
/// from disk (checked against the digests the memo recorded) for the roles that must sign.
pub fn statement(dir: &Path, memo: &Memo) -> Result<Statement> {
    let mut subjects: Vec<Subject> = Vec::new();
    let mut add = |name: String, path: &Path| -> Result<()> {
        if !subjects.iter().any(|s| s.name == name) {
            let digest = file_digest(path)?;
            subjects.push(Subject {
                name,
                digest: BTreeMap::from([("sha256".to_owned(), digest)]),
            });
        }
        Ok(())
    };
    for name in OUTPUTS {
        add((*name).to_owned(), &dir.join(name))?;
    }
    let mut owners = Vec::new();
    let mut packs = Vec::new();
    for pack in &memo.packs {
        owners.extend(pack_owners(Path::new(&pack.path), &pack.digest)?);
        add(pack.path.clone(), Path::new(&pack.path))?;
        packs.push(PackSubject {
            name: pack.name.clone(),
            path: pack.path.clone(),
            digest: pack.digest.clone(),
        });
    }
    for baseline in &memo.baselines {
        add(baseline.path.clone(), Path::new(&baseline.path))?;
    }
    for slice in &memo.slices {
        let Some(pack) = memo.packs.iter().find(|p| p.name == slice.pack) else {
            continue;
        };
        for artifact in &slice.artifacts {
            let path = crate::ingress::pack_dir(&pack.path).join(&artifact.name);
            add(path.display().to_string(), &path)?;
        }
    }
    Ok(Statement {
        statement_type: STATEMENT_TYPE.to_owned(),
        subject: subjects,
        predicate_type: PREDICATE_TYPE.to_owned(),
        predicate: Predicate {
            verdict: memo.verdict,
            exit_code: memo.exit_code,
            first_failing_stage: memo.first_failing_stage,
            tool_version: memo.environment.tool_version.clone(),
            git: memo.environment.git.clone(),
            packs,
            sign_off: sign_off(&owners),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 23: a role is a file name, so only a small alphabet is one.
    #[test]
    fn a_role_that_is_not_a_plain_name_names_no_signature_file() {
        for bad in [
            "x/../../../victim/memo.json.owner",
            "../owner",
            "owner/x",
            "",
            "Owner",
            "-owner",
            ".owner",
            "own er",
            "owner\0",
            &"a".repeat(65),
        ] {
            assert!(signature_file(bad).is_err(), "{bad:?}");
        }
        for good in ["owner", "release-manager", "qa_lead", "0", &"a".repeat(64)] {
            assert_eq!(
                signature_file(good).unwrap(),
                format!("memo.statement.json.{good}.sig")
            );
        }
    }

    #[test]
    fn pae_binds_the_payload_type_and_lengths() {
        assert_eq!(pae("t", b"ab"), b"DSSEv1 1 t 2 ab".to_vec());
    }
}
