//! OCI sources: Wasm components stored as OCI artifacts in the CNCF Wasm layout (config
//! `application/vnd.wasm.config.v0+json`, one layer `application/wasm`).
//!
//! Tags resolve to manifest digests, which `plugin::watch` polls; digest references are
//! immutable and never polled. The layer is verified against its descriptor's digest, and,
//! where the App's policy lists keys, the manifest against its cosign signatures ([`verify`])
//! before the layer is read. Plain HTTP is used only for loopback registries or those named
//! with `--insecure-registry`.
//!
//! Credentials, by the source's [`Access`]: the App's `imagePullSecrets`, read from its
//! namespace at each resolve; the host's own docker `config.json` (`--registry-config`) only
//! where the App's policy shares it; otherwise none.
//!
//! Reading goes through [`pull`], the host's own bounded client, which reaches only the
//! addresses [`reach`] allows (no private ones unless the host or the App's policy allows
//! them); pushing (a person's command) through `oci-client`.

pub mod artifact;
pub mod pull;
pub mod reach;
pub mod slots;
pub mod verify;

use std::{collections::HashMap, net::IpAddr, path::Path, sync::Mutex, time::Duration};

use k8s_openapi::api::core::v1::Secret;

use base64::Engine as _;
use oci_client::{
    Client, Reference,
    client::{ClientConfig, ClientProtocol, Config, ImageLayer},
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest},
    secrets::RegistryAuth,
};

use self::{
    pull::{BlobError, PullLimits, Puller, Target, excerpt},
    reach::PrivateNetworks,
    verify::SignatureLayer,
};
use super::{Access, Fetched, OciRef, SourceRef, fetch_error};
use crate::plugin::{
    LoadError,
    limits::{DEFAULT_COMPONENT_BYTES, MAX_COMPONENT_BYTES},
};

/// Media type of the config blob of a Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the component layer of a Wasm artifact.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Talks to OCI registries on behalf of plugin sources.
pub struct OciSource {
    credentials: HashMap<String, (String, String)>,
    /// Reads Apps' pull secrets; without one, a source with pull secrets fails to fetch.
    kube: Option<kube::Client>,
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
    /// The on-disk cache's key for the source as it was just read (see [`OciSource::cache_key`]),
    /// from the credentials this read used: remembering a version costs no second read of the
    /// App's pull secrets.
    pub cache_key: String,
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
            kube: None,
            insecure,
            puller: Puller::new(limits).map_err(|err| anyhow::anyhow!(err))?,
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// This source, reaching registries at the private addresses in `networks`
    /// (`--allow-private-registries`); without it, only where an App's policy vouches for the
    /// registry. Link-local and metadata addresses stay refused.
    pub fn with_private_networks(mut self, networks: PrivateNetworks) -> Self {
        self.puller.allow_private(networks);
        self
    }

    /// This source, reading Apps' `imagePullSecrets` with `client`.
    pub fn with_client(mut self, client: kube::Client) -> Self {
        self.kube = Some(client);
        self
    }

    /// The credentials `access` gives for `registry` (`host[:port]`).
    async fn credentials(
        &self,
        source: &SourceRef,
        access: &Access,
        registry: &str,
    ) -> Result<Option<(String, String)>, LoadError> {
        let (namespace, names) = match access {
            Access::Anonymous => return Ok(None),
            Access::Host => return Ok(self.credentials.get(registry).cloned()),
            Access::PullSecrets { namespace, names } => (namespace, names),
        };
        let Some(client) = &self.kube else {
            return Err(fetch_error(
                source,
                "imagePullSecrets need a Kubernetes client",
            ));
        };
        let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
        for name in names {
            let secret = match api.get_opt(name).await {
                Ok(Some(secret)) => secret,
                Ok(None) => {
                    return Err(fetch_error(
                        source,
                        format!("imagePullSecret {namespace}/{name} does not exist"),
                    ));
                }
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    return Err(fetch_error(
                        source,
                        format!(
                            "the host may not read imagePullSecret {namespace}/{name}: the \
                             namespace's admin grants it by binding the ClusterRole \
                             wasmop-pull-secrets to the host's ServiceAccount in {namespace}"
                        ),
                    ));
                }
                Err(err) => {
                    return Err(fetch_error(
                        source,
                        format!("reading imagePullSecret {namespace}/{name}: {err}"),
                    ));
                }
            };
            let found = pull_secret_credentials(&secret, registry).map_err(|err| {
                fetch_error(source, format!("imagePullSecret {namespace}/{name}: {err}"))
            })?;
            if found.is_some() {
                return Ok(found);
            }
        }
        // As the kubelet does: no secret names this registry, so it is asked anonymously.
        Ok(None)
    }

    /// The on-disk cache's key for `oci` as read now: with the credentials its access gives
    /// at this moment (so a missing pull secret, or changed credentials, find nothing cached).
    pub async fn cache_key(&self, source: &SourceRef, oci: &OciRef) -> Result<String, LoadError> {
        let parsed = Self::parse(source, &oci.reference)?;
        let credentials = self
            .credentials(source, &oci.access, parsed.resolve_registry())
            .await?;
        Ok(oci.cache_key(credentials.as_ref()))
    }

    /// How the puller addresses `reference`'s registry and repository for `oci`.
    async fn target(
        &self,
        source: &SourceRef,
        oci: &OciRef,
        reference: &Reference,
    ) -> Result<Target, LoadError> {
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
            credentials: self.credentials(source, &oci.access, registry).await?,
            realm_hosts: oci.realm_hosts.clone(),
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
        let parsed = super::reference::parse(reference).map_err(|err| {
            fetch_error(
                source,
                format!("invalid OCI reference {reference:?}: {err}"),
            )
        })?;
        // The host checks what it reads against sha256 digests only: a reference pinned by
        // another algorithm would be trusted unchecked, and never polled again.
        if let Some(digest) = parsed.digest()
            && crate::plugin::Digest::parse(digest).is_err()
        {
            return Err(fetch_error(
                source,
                format!("{reference}: only sha256:<64 hex digits> digests are supported"),
            ));
        }
        Ok(parsed)
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
        super::reference::parse(reference).is_ok_and(|r| r.digest().is_some())
    }

    /// Asks the registry which manifest `reference` points at now.
    pub async fn resolve(&self, source: &SourceRef, oci: &OciRef) -> Result<Resolved, LoadError> {
        let reference = oci.reference.as_str();
        let parsed = Self::parse(source, reference)?;
        let target = self.target(source, oci, &parsed).await?;
        let digest = self
            .puller
            .resolve(&target, &Self::tag_or_digest(&parsed))
            .await
            .map_err(|err| fetch_error(source, format!("resolving {reference}: {err}")))?;
        Ok(Resolved {
            manifest: digest.to_string(),
            cache_key: oci.cache_key(target.credentials.as_ref()),
        })
    }

    /// Pulls the component `oci` points at, verifying its signature (where `oci` lists keys)
    /// before reading it, and its digest after.
    pub async fn fetch(
        &self,
        source: &SourceRef,
        oci: &OciRef,
    ) -> Result<(Resolved, Fetched), LoadError> {
        let reference = oci.reference.as_str();
        let parsed = Self::parse(source, reference)?;
        let target = self.target(source, oci, &parsed).await?;
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
        if !oci.keys.is_empty() {
            let signer = self.verify(source, oci, &target, &manifest_digest).await?;
            tracing::debug!(source = %source, manifest = %manifest_digest, key = %signer, "signature verified");
        }
        // Fetched from the manifest's own digest, so that what was resolved is what is read.
        let bytes = self
            .puller
            .blob(
                &target,
                layer,
                oci.max_component_bytes
                    .unwrap_or(DEFAULT_COMPONENT_BYTES)
                    .min(MAX_COMPONENT_BYTES),
            )
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
                cache_key: oci.cache_key(target.credentials.as_ref()),
            },
            Fetched::new(bytes),
        ))
    }

    /// Which of `oci`'s keys signed `manifest`, from the signatures cosign stored beside it.
    async fn verify(
        &self,
        source: &SourceRef,
        oci: &OciRef,
        target: &Target,
        manifest: &crate::plugin::Digest,
    ) -> Result<String, LoadError> {
        let refused = |reason: String| LoadError::SignatureInvalid {
            source_ref: source.to_string(),
            reason,
        };
        let tag = verify::signature_tag(manifest);
        let failed = |err: String| {
            fetch_error(
                source,
                format!("reading the signatures of {}: {err}", oci.reference),
            )
        };
        // One deadline for every read of the check, so a registry that drips cannot hold a
        // pull slot for a deadline per signature.
        let read = async {
            let Some((signatures, _)) = self.puller.manifest_if_tagged(target, &tag).await? else {
                return Ok(Vec::new());
            };
            let mut layers = Vec::new();
            for descriptor in signatures
                .layers
                .iter()
                .filter(|l| l.media_type == verify::SIGNATURE_MEDIA_TYPE)
                .take(verify::MAX_SIGNATURES)
            {
                let Some(signature) = descriptor
                    .annotations
                    .as_ref()
                    .and_then(|a| a.cosign_signature.clone())
                else {
                    continue;
                };
                let payload = self
                    .puller
                    .blob(target, descriptor, verify::MAX_PAYLOAD_BYTES)
                    .await
                    .map_err(|err| err.to_string())?;
                layers.push(SignatureLayer { payload, signature });
            }
            Ok(layers)
        };
        let layers = tokio::time::timeout(self.puller.limits().total, read)
            .await
            .unwrap_or_else(|_| {
                tracing::debug!(source = %source, limit = ?self.puller.limits().total, "reading the signatures timed out");
                Err(pull::unreachable(&target.base))
            })
            .map_err(failed)?;
        verify::check(&oci.keys, manifest, &layers).map_err(refused)
    }

    /// Pushes bytes that were not loaded (a broken component, in tests and the benchmark) with
    /// [`artifact::Artifact::unchecked`]'s config.
    pub async fn push_unchecked(
        &self,
        reference: &str,
        component: &[u8],
    ) -> anyhow::Result<String> {
        self.push(
            reference,
            component,
            &artifact::Artifact::unchecked(component),
        )
        .await
    }

    /// Pushes `component` to `reference` as a CNCF Wasm artifact described by `artifact` and
    /// returns the manifest digest.
    pub async fn push(
        &self,
        reference: &str,
        component: &[u8],
        artifact: &artifact::Artifact,
    ) -> anyhow::Result<String> {
        let parsed = super::reference::parse(reference)
            .map_err(|err| anyhow::anyhow!("invalid OCI reference {reference:?}: {err}"))?;
        let client = self.client(parsed.resolve_registry());
        let auth = self.push_auth(&parsed);
        let layers = [ImageLayer::new(
            component.to_vec(),
            WASM_LAYER_MEDIA_TYPE.to_string(),
            artifact.layer_annotations(),
        )];
        let config = Config::new(
            artifact.config_json(),
            WASM_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        let mut manifest =
            OciImageManifest::build(&layers, &config, Some(artifact.annotations.clone()));
        manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
        // OCI image-spec 1.1: an artifact's type is its config's media type; saying so in
        // `artifactType` lets registries and `oras discover` show it without reading the config.
        manifest.artifact_type = Some(WASM_CONFIG_MEDIA_TYPE.to_string());
        client
            .push(&parsed, &layers, config, &auth, Some(manifest))
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

/// The credentials a pull secret holds for `registry`: a `kubernetes.io/dockerconfigjson`
/// Secret (`.dockerconfigjson`, a docker `config.json`) or a `kubernetes.io/dockercfg` one
/// (`.dockercfg`, its `auths` alone).
fn pull_secret_credentials(
    secret: &Secret,
    registry: &str,
) -> Result<Option<(String, String)>, String> {
    let data = secret.data.as_ref();
    let field = |key: &str| data.and_then(|d| d.get(key)).map(|b| b.0.as_slice());
    let text = match secret.type_.as_deref() {
        Some("kubernetes.io/dockerconfigjson") => {
            let bytes = field(".dockerconfigjson").ok_or("has no .dockerconfigjson")?;
            String::from_utf8_lossy(bytes).into_owned()
        }
        Some("kubernetes.io/dockercfg") => {
            let bytes = field(".dockercfg").ok_or("has no .dockercfg")?;
            format!(r#"{{"auths": {}}}"#, String::from_utf8_lossy(bytes))
        }
        other => {
            return Err(format!(
                "is of type {}, not kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg",
                other.unwrap_or("Opaque")
            ));
        }
    };
    Ok(parse_docker_config(&text)?.remove(registry))
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
        // Docker Desktop and `docker login` with a credential helper leave `{}` here: the
        // credentials live in the helper, which this reader does not run.
        if entry.as_object().is_some_and(|o| o.is_empty()) {
            continue;
        }
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
                // Not the decoder's message: it quotes the offending byte of a secret.
                .map_err(|_| format!("auths.{registry}.auth is not base64"))?;
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
        // `{}` is what a credential helper leaves in `auths`: skipped, not an error.
        let text = r#"{"auths": {
            "https://ghcr.io/v2/": {"auth": "dXNlcjpwYXNz"},
            "registry.example:5000": {"username": "u", "password": "p"},
            "helper.example": {}
        }, "credsStore": "desktop"}"#;
        let creds = parse_docker_config(text).expect("valid config");
        assert_eq!(creds.len(), 2);
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
    fn only_sha256_pins_are_taken() {
        let source = SourceRef::Oci(OciRef::anonymous("x"));
        let sha512 = format!("127.0.0.1:15000/p@sha512:{}", "a".repeat(128));
        let err = OciSource::parse(&source, &sha512).expect_err("unchecked algorithm");
        assert!(err.to_string().contains("only sha256"), "{err}");
        let sha256 = format!("127.0.0.1:15000/p@sha256:{}", "a".repeat(64));
        assert!(OciSource::parse(&source, &sha256).is_ok());
    }

    #[test]
    fn digest_references_are_pinned() {
        let digest = format!("127.0.0.1:15000/p@sha256:{}", "a".repeat(64));
        assert!(OciSource::is_pinned(&digest));
        assert!(!OciSource::is_pinned("127.0.0.1:15000/p:1.0"));
    }

    fn secret(type_: &str, key: &str, value: &str) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pull"},
            "type": type_,
            "data": {key: base64::engine::general_purpose::STANDARD.encode(value)},
        }))
        .expect("a Secret")
    }

    #[test]
    fn pull_secrets_of_both_docker_types_give_their_registrys_credentials() {
        let json = secret(
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            r#"{"auths": {"ghcr.io": {"auth": "dXNlcjpwYXNz"}}}"#,
        );
        assert_eq!(
            pull_secret_credentials(&json, "ghcr.io"),
            Ok(Some(("user".into(), "pass".into())))
        );
        assert_eq!(pull_secret_credentials(&json, "quay.io"), Ok(None));
        let legacy = secret(
            "kubernetes.io/dockercfg",
            ".dockercfg",
            r#"{"quay.io": {"username": "u", "password": "p"}}"#,
        );
        assert_eq!(
            pull_secret_credentials(&legacy, "quay.io"),
            Ok(Some(("u".into(), "p".into())))
        );
        let opaque = secret("Opaque", "password", "hunter2");
        let err = pull_secret_credentials(&opaque, "ghcr.io").expect_err("not a pull secret");
        assert!(err.contains("of type Opaque"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let empty = secret("kubernetes.io/dockerconfigjson", "other", "{}");
        let err = pull_secret_credentials(&empty, "ghcr.io").expect_err("no data");
        assert!(err.contains(".dockerconfigjson"), "{err}");
    }
}
