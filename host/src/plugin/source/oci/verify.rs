//! Verify: cosign signatures over a plugin's manifest, checked against the keys a
//! `PluginPolicy` trusts, offline.
//!
//! What `cosign sign --key` stores (sigstore/cosign `pkg/oci`, the "simple signing" format):
//! beside the image, under the tag `sha256-<manifest hex>.sig`, an image manifest whose layers
//! are each one signature: the layer blob is a JSON payload naming the signed manifest's digest
//! (`critical.image.docker-manifest-digest`, with `critical.type` `cosign container image
//! signature`), and the layer's annotation `dev.cosignproject.cosign/signature` is the
//! base64 signature over those exact payload bytes. A version verifies if one payload names
//! its manifest digest and is signed by one of the policy's keys.
//!
//! The keys are the trust root: no transparency log or certificate is consulted (what
//! `cosign verify --key … --insecure-ignore-tlog` checks). The signature manifest and payloads
//! are read with the bounded [`super::pull::Puller`]; only the key parsing and the signature
//! arithmetic are the `sigstore` crate's (its registry client would read without bounds).
//! `critical.identity.docker-reference` is not compared, as cosign does not by default: the
//! same signed digest may be served through a mirror.

use base64::Engine as _;
use serde::Deserialize;
use sigstore::crypto::{CosignVerificationKey, Signature};

use crate::plugin::{Digest, source::TrustedKey};

/// Media type of a cosign signature layer.
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Most signature layers looked at: re-signing adds a layer each time.
pub const MAX_SIGNATURES: usize = 16;
/// Largest payload read; cosign's are a few hundred bytes.
pub const MAX_PAYLOAD_BYTES: usize = 64 << 10;
/// The payload's `critical.type`.
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// The tag cosign stores the signatures of `manifest` under.
pub fn signature_tag(manifest: &Digest) -> String {
    format!("sha256-{}.sig", manifest.hex())
}

/// A public key as a policy gives it, or why it is unusable.
pub fn parse_key(pem: &str) -> Result<CosignVerificationKey, String> {
    CosignVerificationKey::try_from_pem(pem.trim().as_bytes())
        .map_err(|err| format!("not a PEM public key cosign signs with: {err}"))
}

/// One signature layer, read: the payload and the signature from its annotation.
#[derive(Debug, Clone)]
pub struct SignatureLayer {
    /// The payload blob's bytes, exactly as signed.
    pub payload: Vec<u8>,
    /// The annotation's base64 signature.
    pub signature: String,
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The name of the first of `keys` that signed a payload naming `manifest`, or why none did.
pub fn check(
    keys: &[TrustedKey],
    manifest: &Digest,
    layers: &[SignatureLayer],
) -> Result<String, String> {
    let parsed: Vec<(&TrustedKey, Result<CosignVerificationKey, String>)> =
        keys.iter().map(|k| (k, parse_key(&k.pem))).collect();
    let mut other_digest = false;
    for layer in layers {
        let Ok(signature) =
            base64::engine::general_purpose::STANDARD.decode(layer.signature.trim())
        else {
            continue;
        };
        for (key, verifier) in &parsed {
            let Ok(verifier) = verifier else { continue };
            if verifier
                .verify_signature(Signature::Raw(&signature), &layer.payload)
                .is_err()
            {
                continue;
            }
            // Only a payload whose signature holds is read: the rest is the registry's text. A
            // signed payload of another shape is skipped, not fatal: another layer may hold.
            let Ok(payload) = serde_json::from_slice::<Payload>(&layer.payload) else {
                continue;
            };
            if payload.critical.kind != PAYLOAD_TYPE {
                continue;
            }
            if payload.critical.image.docker_manifest_digest == manifest.as_str() {
                return Ok(key.name.clone());
            }
            other_digest = true;
        }
    }
    let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    let unusable: Vec<&str> = parsed
        .iter()
        .filter(|(_, v)| v.is_err())
        .map(|(k, _)| k.name.as_str())
        .collect();
    let mut reason = if keys.is_empty() {
        "the policy asks for signatures but lists no key".to_string()
    } else if layers.is_empty() {
        format!("{manifest} is not signed")
    } else if other_digest {
        format!("the signatures by the policy's keys are for another manifest than {manifest}")
    } else {
        format!(
            "{manifest} is signed ({} signature{}), but by none of the policy's keys ({})",
            layers.len(),
            if layers.len() == 1 { "" } else { "s" },
            names.join(", ")
        )
    };
    if !unusable.is_empty() {
        reason.push_str(&format!(
            "; the policy's key{} {} cannot be parsed",
            if unusable.len() == 1 { "" } else { "s" },
            unusable.join(", ")
        ));
    }
    Err(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made by cosign v2.6.5 (`generate-key-pair`, then `sign --key … --tlog-upload=false`)
    // against the local registry on 2026-12-05: the payload blob and annotation of the
    // signature of 127.0.0.1:15000/sigtest/hello@sha256:4051d414….
    const PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFmXaIwPz0U5sKc4ev+CAWjGfduKo
HQNOw8D59Q1hVNWHvN0GyyujyPNWMKHT1G4Z5nyVGpNpd0O3o0UPGR9Z/Q==
-----END PUBLIC KEY-----
";
    const PAYLOAD: &str = r#"{"critical":{"identity":{"docker-reference":"127.0.0.1:15000/sigtest/hello"},"image":{"docker-manifest-digest":"sha256:4051d4149be824cffc9aa3229ce6edaeffd6a2168512f4664cfe82042cccef69"},"type":"cosign container image signature"},"optional":null}"#;
    const SIGNATURE: &str = "MEQCIBDhaEIfaCLVqoB3qjyM4xg1Z54FMlYfrVuuxjRKB2S8AiAsOjVOI4F0yyXLb+s/Va86Mj8+oxLcgmKiMCPdyBnAIA==";
    const SIGNED: &str = "sha256:4051d4149be824cffc9aa3229ce6edaeffd6a2168512f4664cfe82042cccef69";
    // Another P-256 key (from a second `cosign generate-key-pair`).
    const OTHER_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEI60HwJkLTeV0spNQ1DkN/0f02hfk
Y5X/4YPZNraeBuI7hqfNj8qI82QXjIeD6Yvtq4R4uj3w+c4TOoCXs6qBQw==
-----END PUBLIC KEY-----
";

    fn key(name: &str, pem: &str) -> TrustedKey {
        TrustedKey {
            name: name.into(),
            pem: pem.into(),
        }
    }

    fn layer(payload: &str, signature: &str) -> SignatureLayer {
        SignatureLayer {
            payload: payload.as_bytes().to_vec(),
            signature: signature.into(),
        }
    }

    fn digest(text: &str) -> Digest {
        Digest::parse(text).expect("a digest")
    }

    #[test]
    fn cosigns_signature_verifies_with_its_key() {
        let got = check(
            &[key("other", OTHER_KEY), key("release", PUBLIC_KEY)],
            &digest(SIGNED),
            &[layer(PAYLOAD, SIGNATURE)],
        );
        assert_eq!(got.as_deref(), Ok("release"));
        assert_eq!(
            signature_tag(&digest(SIGNED)),
            "sha256-4051d4149be824cffc9aa3229ce6edaeffd6a2168512f4664cfe82042cccef69.sig"
        );
    }

    #[test]
    fn another_key_an_edited_payload_or_another_digest_is_refused() {
        let err = check(
            &[key("other", OTHER_KEY)],
            &digest(SIGNED),
            &[layer(PAYLOAD, SIGNATURE)],
        )
        .expect_err("wrong key");
        assert!(
            err.contains("by none of the policy's keys (other)"),
            "{err}"
        );

        let edited = PAYLOAD.replace("4051d414", "4051d415");
        let err = check(
            &[key("release", PUBLIC_KEY)],
            &digest(SIGNED),
            &[layer(&edited, SIGNATURE)],
        )
        .expect_err("payload changed after signing");
        assert!(err.contains("by none of the policy's keys"), "{err}");

        let another = digest(&format!("sha256:{}", "a".repeat(64)));
        let err = check(
            &[key("release", PUBLIC_KEY)],
            &another,
            &[layer(PAYLOAD, SIGNATURE)],
        )
        .expect_err("a signature of another image");
        assert!(err.contains("for another manifest"), "{err}");

        let err = check(&[key("release", PUBLIC_KEY)], &digest(SIGNED), &[]).expect_err("none");
        assert!(err.ends_with("is not signed"), "{err}");

        let err = check(
            &[key("release", PUBLIC_KEY)],
            &digest(SIGNED),
            &[layer(PAYLOAD, "not base64!")],
        )
        .expect_err("garbage signature");
        assert!(err.contains("by none"), "{err}");

        // A layer that is not a payload at all does not hide a good one after it.
        let got = check(
            &[key("release", PUBLIC_KEY)],
            &digest(SIGNED),
            &[layer("not json", SIGNATURE), layer(PAYLOAD, SIGNATURE)],
        );
        assert_eq!(got.as_deref(), Ok("release"));
    }

    #[test]
    fn a_key_that_does_not_parse_verifies_nothing_and_is_named() {
        let err = check(
            &[key(
                "typo",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
            )],
            &digest(SIGNED),
            &[layer(PAYLOAD, SIGNATURE)],
        )
        .expect_err("no usable key");
        assert!(err.contains("key typo cannot be parsed"), "{err}");
        let err = check(&[], &digest(SIGNED), &[layer(PAYLOAD, SIGNATURE)]).expect_err("no keys");
        assert!(err.contains("lists no key"), "{err}");
        assert!(parse_key("hello").is_err());
        assert!(parse_key(PUBLIC_KEY).is_ok());
    }
}
