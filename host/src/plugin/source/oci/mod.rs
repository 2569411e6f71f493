//! OCI sources: Wasm components stored as OCI artifacts in the CNCF Wasm layout (config
//! `application/vnd.wasm.config.v0+json`, one layer `application/wasm`).
//!
//! Tags resolve to manifest digests, which `plugin::watch` polls; digest references are
//! immutable and never polled. The layer is verified against its descriptor's digest. Plain
//! HTTP is used only for loopback registries or those named with `--insecure-registry`.
//! Credentials come from a docker `config.json` (for instance a mounted pull secret).
//!
//! Reading goes through [`pull`], the host's own bounded client; pushing (a person's command)
//! through `oci-client`.

pub mod pull;

use std::{collections::HashMap, net::IpAddr, path::Path, sync::Mutex, time::Duration};

use base64::Engine as _;
use oci_client::{
    Client, Reference,
    client::{ClientConfig, ClientProtocol, Config, ImageLayer},
    secrets::RegistryAuth,
};

use self::pull::{BlobError, PullLimits, Puller, Target, excerpt};
use super::{Fetched, SourceRef, fetch_error};
use crate::plugin::{Digest, LoadError, limits::MAX_COMPONENT_BYTES};

/// Media type of the config blob of a Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the component layer of a Wasm artifact.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Talks to OCI registries on behalf of plugin sources.
pub struct OciSource {
    credentials: HashMap<String, (String, String)>,
    insecure: Vec<String>,
    puller: Puller,
    /// Push clients, by registry.
    clients: Mutex<HashMap<String, Client>>,
}

/// What a reference points at right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The manifest digest (what a tag moves between).
    pub manifest: String,
}

impl OciSource {
    /// A source with the credentials of `docker_config` (a docker `config.json`, as in a
    /// `kubernetes.io/dockerconfigjson` Secret) and plain HTTP allowed for `insecure` registries.
    pub fn new(docker_config: Option<&Path>, insecure: Vec<String>) -> anyhow::Result<Self> {
        Self::with_limits(docker_config, insecure, PullLimits::default())
    }

    /// [`Self::new`] with pulls bounded by `limits` rather than the defaults.
    pub fn with_limits(
        docker_config: Option<&Path>,
        insecure: Vec<String>,
        limits: PullLimits,
    ) -> anyhow::Result<Self> {
        let credentials = match docker_config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|err| {
                    anyhow::anyhow!("reading registry credentials {}: {err}", path.display())
                })?;
                parse_docker_config(&text).map_err(|err| {
                    anyhow::anyhow!("parsing registry credentials {}: {err}", path.display())
                })?
            }
            None => HashMap::new(),
        };
        Ok(Self {
            credentials,
            insecure,
            puller: Puller::new(limits).map_err(|err| anyhow::anyhow!(err))?,
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// How the puller addresses `reference`'s registry and repository.
    fn target(&self, source: &SourceRef, reference: &Reference) -> Result<Target, LoadError> {
        let registry = reference.resolve_registry();
        let scheme = if self.allows_plain_http(registry) {
            "http"
        } else {
            "https"
        };
        let base = format!("{scheme}://{registry}").parse().map_err(|err| {
            fetch_error(
                source,
                format!("registry {registry:?} is not a host: {err}"),
            )
        })?;
        Ok(Target {
            base,
            repository: reference.repository().to_string(),
            credentials: self.credentials.get(registry).cloned(),
        })
    }

    /// The tag or digest a reference names within its repository.
    fn tag_or_digest(reference: &Reference) -> String {
        reference
            .digest()
            .or(reference.tag())
            .unwrap_or("latest")
            .to_string()
    }

    fn parse(source: &SourceRef, reference: &str) -> Result<Reference, LoadError> {
        reference.parse().map_err(|err| {
            fetch_error(
                source,
                format!("invalid OCI reference {reference:?}: {err}"),
            )
        })
    }

    /// Whether plain HTTP may be used for `registry` (`host[:port]`).
    pub fn allows_plain_http(&self, registry: &str) -> bool {
        self.insecure.iter().any(|r| r == registry) || is_loopback(registry)
    }

    fn client(&self, registry: &str) -> Client {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        clients
            .entry(registry.to_string())
            .or_insert_with(|| {
                let protocol = if self.allows_plain_http(registry) {
                    ClientProtocol::HttpsExcept(vec![registry.to_string()])
                } else {
                    ClientProtocol::Https
                };
                Client::new(ClientConfig {
                    protocol,
                    connect_timeout: Some(Duration::from_secs(10)),
                    read_timeout: Some(Duration::from_secs(60)),
                    ..Default::default()
                })
            })
            .clone()
    }

    fn push_auth(&self, reference: &Reference) -> RegistryAuth {
        match self.credentials.get(reference.resolve_registry()) {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// Whether `reference` names a digest (immutable) rather than a tag (polled).
    pub fn is_pinned(reference: &str) -> bool {
        reference
            .parse::<Reference>()
            .is_ok_and(|r| r.digest().is_some())
    }

    /// Asks the registry which manifest `reference` points at now.
    pub async fn resolve(
        &self,
        source: &SourceRef,
        reference: &str,
    ) -> Result<Resolved, LoadError> {
        let parsed = Self::parse(source, reference)?;
        let target = self.target(source, &parsed)?;
        let digest = self
            .puller
            .resolve(&target, &Self::tag_or_digest(&parsed))
            .await
            .map_err(|err| fetch_error(source, format!("resolving {reference}: {err}")))?;
        Ok(Resolved {
            manifest: digest.to_string(),
        })
    }

    /// Pulls the component `reference` points at and verifies its digest.
    pub async fn fetch(
        &self,
        source: &SourceRef,
        reference: &str,
    ) -> Result<(Resolved, Fetched), LoadError> {
        let parsed = Self::parse(source, reference)?;
        let target = self.target(source, &parsed)?;
        let failed = |err: String| fetch_error(source, format!("pulling {reference}: {err}"));
        let (manifest, manifest_digest) = self
            .puller
            .manifest(&target, &Self::tag_or_digest(&parsed))
            .await
            .map_err(failed)?;
        if !manifest.manifests.is_empty() {
            return Err(failed("it is an image index, not a Wasm artifact".into()));
        }
        if let Some(config) = &manifest.config
            && config.media_type != WASM_CONFIG_MEDIA_TYPE
        {
            tracing::debug!(%reference, media_type = %excerpt(&config.media_type), "config media type is not the Wasm one");
        }
        let layers: Vec<_> = manifest
            .layers
            .iter()
            .filter(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
            .collect();
        let [layer] = layers.as_slice() else {
            let mut types: Vec<String> = manifest
                .layers
                .iter()
                .take(4)
                .map(|l| excerpt(&l.media_type))
                .collect();
            if manifest.layers.len() > 4 {
                types.push(format!("and {} more", manifest.layers.len() - 4));
            }
            return Err(LoadError::NotAComponent {
                source_ref: source.to_string(),
                reason: format!(
                    "{reference} must have exactly one {WASM_LAYER_MEDIA_TYPE} layer (layers: {})",
                    types.join(", ")
                ),
            });
        };
        // Fetched from the manifest's own digest, so that what was resolved is what is read.
        let bytes = self
            .puller
            .blob(&target, layer, MAX_COMPONENT_BYTES)
            .await
            .map_err(|err| match err {
                BlobError::Oversized(reason) => LoadError::NotAComponent {
                    source_ref: source.to_string(),
                    reason,
                },
                BlobError::Mismatch { expected, actual } => LoadError::DigestMismatch {
                    source_ref: source.to_string(),
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                },
                BlobError::Failed(reason) => failed(reason),
            })?;
        Ok((
            Resolved {
                manifest: manifest_digest.to_string(),
            },
            Fetched::new(bytes),
        ))
    }

    /// Pushes `component` to `reference` as a Wasm artifact and returns the manifest digest.
    pub async fn push(&self, reference: &str, component: &[u8]) -> anyhow::Result<String> {
        let parsed: Reference = reference
            .parse()
            .map_err(|err| anyhow::anyhow!("invalid OCI reference {reference:?}: {err}"))?;
        let client = self.client(parsed.resolve_registry());
        let auth = self.push_auth(&parsed);
        let layer_digest = Digest::of(component);
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest.as_str()],
        });
        let layers = [ImageLayer::new(
            component.to_vec(),
            WASM_LAYER_MEDIA_TYPE.to_string(),
            None,
        )];
        let config = Config::new(
            config.to_string().into_bytes(),
            WASM_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        client
            .push(&parsed, &layers, config, &auth, None)
            .await
            .map_err(|err| anyhow::anyhow!("pushing {reference}: {err}"))?;
        let digest = client
            .fetch_manifest_digest(&parsed, &auth)
            .await
            .map_err(|err| anyhow::anyhow!("reading back the digest of {reference}: {err}"))?;
        Ok(digest)
    }
}

/// `localhost`, `127.x.y.z` and `[::1]`, with or without a port.
fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        registry.rsplit_once(':').map_or(registry, |(host, _)| host)
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Reads `auths` of a docker `config.json`: `auth` (base64 `user:password`) or
/// `username`/`password`, keyed by registry host (a URL prefix is tolerated).
fn parse_docker_config(text: &str) -> Result<HashMap<String, (String, String)>, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|err| err.to_string())?;
    let mut credentials = HashMap::new();
    let Some(auths) = value.get("auths").and_then(|a| a.as_object()) else {
        return Ok(credentials);
    };
    for (registry, entry) in auths {
        let host = registry
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or(registry)
            .to_string();
        let pair = if let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth)
                .map_err(|err| format!("auths.{registry}.auth is not base64: {err}"))?;
            let decoded = String::from_utf8(decoded)
                .map_err(|_| format!("auths.{registry}.auth is not UTF-8"))?;
            let (user, password) = decoded
                .split_once(':')
                .ok_or_else(|| format!("auths.{registry}.auth is not user:password"))?;
            (user.to_string(), password.to_string())
        } else {
            let field = |name: &str| entry.get(name).and_then(|v| v.as_str()).map(str::to_string);
            match (field("username"), field("password")) {
                (Some(user), Some(password)) => (user, password),
                _ => {
                    return Err(format!(
                        "auths.{registry} has neither auth nor username and password"
                    ));
                }
            }
        };
        credentials.insert(host, pair);
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_registries_get_plain_http() {
        for registry in [
            "127.0.0.1:15000",
            "localhost:5000",
            "localhost",
            "[::1]:5000",
            "127.1.2.3",
        ] {
            assert!(is_loopback(registry), "{registry}");
        }
        for registry in [
            "ghcr.io",
            "10.0.0.1:5000",
            "registry.local:5000",
            "[2001:db8::1]:5000",
        ] {
            assert!(!is_loopback(registry), "{registry}");
        }
    }

    #[test]
    fn explicit_insecure_registries_get_plain_http() {
        let source =
            OciSource::new(None, vec!["registry.internal:5000".into()]).expect("no file to read");
        assert!(source.allows_plain_http("registry.internal:5000"));
        assert!(!source.allows_plain_http("registry.internal"));
    }

    #[test]
    fn docker_config_auth_and_username_forms() {
        let text = r#"{"auths": {
            "https://ghcr.io/v2/": {"auth": "dXNlcjpwYXNz"},
            "registry.example:5000": {"username": "u", "password": "p"}
        }}"#;
        let creds = parse_docker_config(text).expect("valid config");
        assert_eq!(creds["ghcr.io"], ("user".to_string(), "pass".to_string()));
        assert_eq!(
            creds["registry.example:5000"],
            ("u".to_string(), "p".to_string())
        );
    }

    #[test]
    fn broken_docker_config_names_the_entry() {
        let err = parse_docker_config(r#"{"auths": {"ghcr.io": {"auth": "!!"}}}"#)
            .expect_err("bad base64");
        assert!(err.contains("auths.ghcr.io.auth"), "{err}");
    }

    #[test]
    fn digest_references_are_pinned() {
        let digest = format!("127.0.0.1:15000/p@sha256:{}", "a".repeat(64));
        assert!(OciSource::is_pinned(&digest));
        assert!(!OciSource::is_pinned("127.0.0.1:15000/p:1.0"));
    }
}
