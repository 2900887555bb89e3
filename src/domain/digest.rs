//! Content digests in the one format every sparsegate file uses: `sha256:<hex>`.

use sha2::{Digest, Sha256};
use std::fmt::Write;

/// `sha256:<lowercase hex>` of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in hash {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_input_has_the_known_digest() {
        assert_eq!(
            super::sha256_hex(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
