//! OCI image references (`[registry/]repository[:tag][@digest]`), parsed as distribution's
//! `reference` package defines them, into oci-client's [`Reference`].
//!
//! oci-spec's own parser (behind `"...".parse::<Reference>()`) follows the same grammar but
//! compiles the tag rule `[\w][\w.-]{0,127}` with Unicode's `\w`: 128 copies of every Unicode
//! word character's ranges, a regex program of 7.6 MiB (heaptrack, 2026-12-07) held for the
//! host's life once the first App names an image. Upstream's regexes are Go's, whose `\w` is
//! ASCII (`[0-9A-Za-z_]`); here they are compiled without Unicode, as upstream states them
//! (github.com/distribution/reference, `regexp.go`), and normalised as its `normalize.go`
//! does, which is what oci-spec does after its match: `docker.io` for a name without a
//! registry, `library/` for an official image, `latest` when neither tag nor digest is given.

use std::sync::LazyLock;

use oci_client::Reference;
use regex::Regex;

/// Why a reference does not parse (oci-spec's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// An empty string.
    #[error("repository name must have at least one component")]
    Empty,
    /// Not `[registry/]repository[:tag][@digest]`.
    #[error("invalid reference format")]
    InvalidFormat,
    /// A repository of more than 255 characters.
    #[error("repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")]
    NameTooLong,
    /// A digest without `algorithm:`.
    #[error("invalid checksum digest format")]
    DigestInvalidFormat,
    /// A digest whose hex is not its algorithm's length.
    #[error("invalid checksum digest length")]
    DigestInvalidLength,
    /// A digest of another algorithm than SHA-256, -384 or -512.
    #[error("unsupported digest algorithm")]
    DigestUnsupported,
}

/// distribution/reference's `NameTotalLengthMax`.
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// distribution/reference's `ReferenceRegexp`, anchored, ASCII (`(?-u)`: Go's `\w`); captures
/// the name, the tag and the digest.
const REFERENCE: &str = concat!(
    r"(?-u)^(",
    // domain: host components and an optional port, then a slash.
    r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])",
    r"(?:(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))+)?(?::[0-9]+)?/)?",
    // path components, separated by `.`, `_`, `__` or dashes.
    r"[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?",
    r"(?:(?:/[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?)+)?",
    r")",
    // tag
    r"(?::([\w][\w.-]{0,127}))?",
    // digest
    r"(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}))?$",
);

/// The compiled [`REFERENCE`]; a constant pattern, so it compiles.
static REFERENCE_REGEX: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(REFERENCE).ok());

/// Parses `text` as an image reference.
pub fn parse(text: &str) -> Result<Reference, ReferenceError> {
    if text.is_empty() {
        return Err(ReferenceError::Empty);
    }
    let captures = REFERENCE_REGEX
        .as_ref()
        .and_then(|r| r.captures(text))
        .ok_or(ReferenceError::InvalidFormat)?;
    let name = captures.get(1).map_or("", |m| m.as_str());
    let tag = captures.get(2).map(|m| m.as_str().to_string());
    let digest = captures.get(3).map(|m| m.as_str().to_string());
    let (registry, repository) = split_domain(name);
    if repository.len() > NAME_TOTAL_LENGTH_MAX {
        return Err(ReferenceError::NameTooLong);
    }
    if let Some(digest) = &digest {
        let hex_len = match digest.split_once(':') {
            None => return Err(ReferenceError::DigestInvalidFormat),
            Some(("sha256", hex)) => (hex.len(), 64),
            Some(("sha384", hex)) => (hex.len(), 96),
            Some(("sha512", hex)) => (hex.len(), 128),
            Some(_) => return Err(ReferenceError::DigestUnsupported),
        };
        if hex_len.0 != hex_len.1 {
            return Err(ReferenceError::DigestInvalidLength);
        }
    }
    Ok(match (tag, digest) {
        (Some(tag), Some(digest)) => {
            Reference::with_tag_and_digest(registry, repository, tag, digest)
        }
        (None, Some(digest)) => Reference::with_digest(registry, repository, digest),
        (tag, None) => {
            Reference::with_tag(registry, repository, tag.unwrap_or_else(|| "latest".into()))
        }
    })
}

/// distribution/reference's `splitDockerDomain`: the registry and the repository of `name`.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut remainder) = match name.split_once('/') {
        Some((left, right)) if left.contains(['.', ':']) || left == "localhost" => {
            (left.to_string(), right.to_string())
        }
        _ => ("docker.io".to_string(), name.to_string()),
    };
    if domain == "index.docker.io" {
        domain = "docker.io".into();
    }
    if domain == "docker.io" && !remainder.contains('/') {
        remainder = format!("library/{remainder}");
    }
    (domain, remainder)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The references oci-spec parses, parsed alike (registry, repository, tag, digest), and
    /// those it refuses refused alike; the one difference is a tag of non-ASCII word
    /// characters, which upstream's grammar (Go's `\w`) refuses.
    #[test]
    fn parses_as_oci_spec_does_within_upstreams_grammar() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let cases = [
            "busybox".to_string(),
            "busybox:1.36".into(),
            "library/busybox".into(),
            "index.docker.io/busybox".into(),
            "docker.io/acme/app:v2".into(),
            "localhost/app".into(),
            "localhost:5000/app:v1".into(),
            "127.0.0.1:15000/bench/wasm-1000/hello:1".into(),
            "ghcr.io/acme/plugins/cache".into(),
            format!("ghcr.io/acme/cache@{digest}"),
            format!("ghcr.io/acme/cache:v1@{digest}"),
            "registry.example.com/a__b/c-d/e.f:tag_1.2-3".into(),
            "ghcr.io/acme/cache@sha256:abc".into(),
            "ghcr.io/acme/cache@md5:0123456789abcdef0123456789abcdef".into(),
            format!("ghcr.io/acme/cache@sha512:{}", "b".repeat(128)),
            "Ghcr.io/Acme/cache".into(),
            "ghcr.io/acme/cache:".into(),
            "ghcr.io//cache".into(),
            "ghcr.io/acme/cache:-tag".into(),
            format!("ghcr.io/acme/cache:{}", "t".repeat(128)),
            format!("ghcr.io/acme/cache:{}", "t".repeat(129)),
            format!("ghcr.io/{}", "a".repeat(256)),
            "https://ghcr.io/acme/cache".into(),
            " ghcr.io/acme/cache".into(),
            String::new(),
        ];
        let view = |r: &Reference| {
            (
                r.registry().to_string(),
                r.repository().to_string(),
                r.tag().map(str::to_string),
                r.digest().map(str::to_string),
            )
        };
        for case in cases {
            let ours = parse(&case).map(|r| view(&r)).map_err(|e| e.to_string());
            let theirs = case
                .parse::<Reference>()
                .map(|r| view(&r))
                .map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{case:?}");
        }
        assert_eq!(
            parse("ghcr.io/acme/cache:vé"),
            Err(ReferenceError::InvalidFormat),
            "Go's \\w is ASCII"
        );
    }
}
