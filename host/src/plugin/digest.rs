//! Content digests: a plugin is identified by the sha256 of its component bytes.

use std::fmt;

use sha2::{Digest as _, Sha256};

/// A `sha256:<64 hex>` content digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(format!("sha256:{:x}", Sha256::digest(bytes)))
    }

    /// Parses `sha256:<64 lower-case hex>`; anything else is refused with the reason.
    pub fn parse(text: &str) -> Result<Self, String> {
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("digest {text:?} is not sha256:<hex>"))?;
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(format!(
                "digest {text:?} does not have 64 lower-case hex digits"
            ));
        }
        Ok(Self(text.to_string()))
    }

    /// The 64 hex digits, for file names.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The first 12 hex digits, for people and printer columns.
    pub fn short(&self) -> &str {
        &self.hex()[..12]
    }

    /// The full `sha256:...` text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_of_empty_input_is_the_well_known_one() {
        let d = Digest::of(b"");
        assert_eq!(
            d.hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.short(), "e3b0c44298fc");
        assert_eq!(Digest::parse(d.as_str()), Ok(d));
    }

    #[test]
    fn malformed_digests_are_refused_with_a_reason() {
        assert!(
            Digest::parse("md5:abc")
                .expect_err("md5")
                .contains("not sha256")
        );
        assert!(
            Digest::parse("sha256:ABC")
                .expect_err("invalid")
                .contains("64 lower-case")
        );
    }
}
