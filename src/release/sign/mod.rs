//! Signatures over the closure memo that anyone can check with stock tools (issue 6), that
//! nobody can forge (issue 23).
//!
//! What is signed is one **statement** (in-toto Statement v1, `memo.statement.json`): the
//! sha256 of every gate output, pack, baseline and artifact, the verdict, and the roles that
//! must sign with the principals the packs give them. Each role signs it twice with the
//! owner's existing SSH ed25519 key:
//! - an **SSHSIG** (`memo.statement.json.<role>.sig`), which `ssh-keygen -Y verify -n
//!   sparsegate-memo -f allowed_signers -I EMAIL -s memo.statement.json.<role>.sig <
//!   memo.statement.json` accepts;
//! - a **DSSE** signature in `memo.intoto.json`, the envelope around the same bytes.
//!
//! Changing any file or any role changes the statement and invalidates every signature.
//! Trust comes only from the `allowed_signers` file (OpenSSH format), which binds each
//! principal (email) to a key, and from the pack files, verified by digest, which bind
//! principals to roles; `memo.json` is never asked who must sign.

mod allowed;
mod signer;
mod statement;
mod verify;

pub use allowed::{AllowedSigner, parse_allowed_signers};
pub use signer::{SignReport, sign};
pub use statement::{
    ENVELOPE_FILE, Envelope, EnvelopeSignature, NAMESPACE, OUTPUTS, PAYLOAD_TYPE, PREDICATE_TYPE,
    PackSubject, Predicate, RoleSigners, STATEMENT_FILE, STATEMENT_TYPE, Statement, Subject, is_safe_role,
    pae, signature_file, statement,
};
pub use verify::{VerifyReport, verify};
