//! The trust root: an OpenSSH `allowed_signers` file binds each principal (email) to a key.
//! A role is signed by a key only when this file binds the key to a principal that the
//! pack gives the role.

use super::statement::NAMESPACE;
use crate::files::read_bounded;
use crate::release::error::{ReleaseError, Result};
use ssh_key::PublicKey;
use ssh_key::public::KeyData;
use std::path::Path;

/// The most bytes of an `allowed_signers` file read.
const MAX_ALLOWED_SIGNERS_BYTES: u64 = 1 << 20;

/// One trusted key from an `allowed_signers` file.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    /// Principals (emails) the key may sign as.
    pub principals: Vec<String>,
    /// The key.
    pub key: PublicKey,
}

/// Parse an OpenSSH `allowed_signers` file, honouring a `namespaces="…"` option (a line
/// whose namespaces exclude [`NAMESPACE`] is skipped, as `ssh-keygen` does).
pub fn parse_allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>> {
    let text = read_bounded(path, MAX_ALLOWED_SIGNERS_BYTES)?;
    let mut signers = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| ReleaseError::Signing {
            message: format!("{}:{}:1: {what}", path.display(), index + 1),
            hint: "lines read `email[,email] [namespaces=\"sparsegate-memo\"] ssh-ed25519 AAAA…`".into(),
        };
        let mut fields = line.split_whitespace();
        let principals: Vec<String> = fields
            .next()
            .unwrap_or_default()
            .split(',')
            .filter(|p| !p.is_empty())
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

/// The signer entry that binds `key` to one of `holders`, and the principal it binds.
pub fn bound<'a>(
    signers: &'a [AllowedSigner],
    key: &KeyData,
    holders: &[String],
) -> Option<(&'a AllowedSigner, &'a str)> {
    signers.iter().filter(|a| a.key.key_data() == key).find_map(|a| {
        a.principals
            .iter()
            .find(|p| holders.contains(p))
            .map(|p| (a, p.as_str()))
    })
}

/// The principals `signers` binds `key` to (for messages).
pub fn principals_of(signers: &[AllowedSigner], key: &KeyData) -> Vec<String> {
    signers
        .iter()
        .filter(|a| a.key.key_data() == key)
        .flat_map(|a| a.principals.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssh_key::PrivateKey;
    use ssh_key::private::Ed25519Keypair;

    fn public(seed: u8) -> PublicKey {
        PrivateKey::from(Ed25519Keypair::from_seed(&[seed; 32]))
            .public_key()
            .clone()
    }

    /// Issue 23: a key signs a role only as a principal allowed_signers binds it to, and a
    /// line restricted to other namespaces binds nothing here.
    #[test]
    fn a_key_is_bound_only_to_its_own_principals_in_this_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowed_signers");
        let (ada, mallory) = (public(1), public(9));
        std::fs::write(
            &path,
            format!(
                "# comment\nada@example.com {}\nmallory@example.com namespaces=\"git\" {}\nmallory@example.com,x@example.com {}\n",
                ada.to_openssh().unwrap(),
                ada.to_openssh().unwrap(),
                mallory.to_openssh().unwrap()
            ),
        )
        .unwrap();
        let signers = parse_allowed_signers(&path).unwrap();
        assert_eq!(signers.len(), 2, "the git-only line is skipped");
        let holders = vec!["ada@example.com".to_owned()];
        assert_eq!(
            bound(&signers, ada.key_data(), &holders).map(|(_, p)| p),
            Some("ada@example.com")
        );
        assert!(bound(&signers, mallory.key_data(), &holders).is_none());
        let mallory_holds = vec!["mallory@example.com".to_owned()];
        assert!(
            bound(&signers, ada.key_data(), &mallory_holds).is_none(),
            "ada's key is bound to mallory only in the git namespace"
        );
        assert_eq!(
            principals_of(&signers, mallory.key_data()),
            ["mallory@example.com", "x@example.com"]
        );
    }
}
