//! What can stop the release stage: a file it cannot read or write, a template that fails to
//! render, a signature it cannot make, a memo that fails verification.

use crate::files::FileError;
use std::path::PathBuf;

/// Why a memo could not be rendered, signed or verified.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// A file could not be read, written or parsed.
    #[error(transparent)]
    File(#[from] FileError),
    /// A memo template failed to render (a bug in a template).
    #[error("cannot render {template}: {message}")]
    Render {
        /// The template name.
        template: String,
        /// The renderer's message.
        message: String,
    },
    /// A signature cannot be made or the signers' file cannot be used.
    #[error("{message}")]
    Signing {
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },
    /// The memo has several owner roles and the signer named none.
    #[error("this memo has several owner roles; say which one you sign for")]
    AmbiguousRole {
        /// The memo's roles, sorted.
        roles: Vec<String>,
    },
    /// A pack the memo names is not the file the gate read (issue 23: who must sign comes
    /// from the pack, so it must be the same pack).
    #[error("{} changed since the gate ran (recorded {recorded}, now {now})", path.display())]
    PackChanged {
        /// The pack file.
        path: PathBuf,
        /// The digest the memo recorded.
        recorded: String,
        /// The file's digest now.
        now: String,
    },
    /// A pack the memo names no longer loads.
    #[error(transparent)]
    Pack(Box<crate::ingress::PackError>),
    /// A signed memo failed verification: every problem found.
    #[error("memo in {} failed verification:\n{}", dir.display(), problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Verification {
        /// The memo's directory.
        dir: PathBuf,
        /// What failed.
        problems: Vec<String>,
    },
}

/// Result with a [`ReleaseError`].
pub type Result<T, E = ReleaseError> = std::result::Result<T, E>;
