//! Download: where plugin bytes come from. Each source kind is one module; all of them deliver
//! the same [`Fetched`] (bytes and their digest) and fail with [`LoadError::Fetch`] or
//! [`LoadError::DigestMismatch`]. Where a namespace's plugins may come from is its policy's
//! source rules, [`SourcePolicy`] (the plan rules are the decision core's,
//! [`wasmop_core::guard::PlanPolicy`]).

use std::{fmt, path::PathBuf};

use wasmop_core::guard::is_dns_subdomain;

use super::{Digest, LoadError};
use crate::app::PluginSource;

pub mod config_map;
pub mod file;
pub mod oci;
pub mod reference;

/// Which plugin an App refers to, normalised so that Apps naming the same source share one
/// loaded plugin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceRef {
    /// An OCI reference, with whose credentials it is read and whose keys must have signed it.
    Oci(OciRef),
    /// A key in a ConfigMap's `binaryData`.
    ConfigMap {
        /// Namespace of the ConfigMap (the App's).
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// Key in `binaryData`.
        key: String,
    },
    /// A file on the host's filesystem (development).
    File(PathBuf),
}

/// An OCI plugin reference and everything that decides what reading it yields. Two Apps share
/// a loaded plugin only if all of it is equal: an App never gets a version that its own
/// credentials did not resolve, or that its own policy's keys did not verify.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OciRef {
    /// As written (`registry/repo:tag` or `registry/repo@sha256:...`).
    pub reference: String,
    /// Whose credentials the registry is asked with.
    pub access: Access,
    /// Cosign keys one of which must have signed the manifest; empty: no signature needed.
    pub keys: Vec<TrustedKey>,
    /// Hosts (`host[:port]`) besides the registry's own that a token `realm` may name: those of
    /// the policy's `registries`; `None` (no allowlist): any. The same hosts, the cluster admin
    /// vouching for them, may be reached at private addresses (see `oci::reach`).
    pub realm_hosts: Option<Vec<String>>,
    /// The largest component read, when the policy raises it (`None`: the default 8 MiB).
    pub max_component_bytes: Option<usize>,
}

/// Whose credentials an OCI source is read with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// None.
    Anonymous,
    /// The host's own (`--registry-config`), for registries the App's policy shares them for
    /// (`spec.hostCredentials`), and for a person's `wasmop plugin` commands.
    Host,
    /// The App's `spec.plugin.imagePullSecrets`, read from its namespace as the kubelet reads a
    /// Pod's: the first that has an entry for the registry is used.
    PullSecrets {
        /// The App's namespace.
        namespace: String,
        /// The Secrets' names, in the App's order.
        names: Vec<String>,
    },
}

/// A public key a policy trusts to sign plugins.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrustedKey {
    /// The key's name in the policy, for messages.
    pub name: String,
    /// The PEM-encoded public key, as `cosign generate-key-pair` writes `cosign.pub`.
    pub pem: String,
}

impl OciRef {
    /// `reference` read anonymously, with no signature required.
    pub fn anonymous(reference: impl Into<String>) -> Self {
        Self {
            reference: reference.into(),
            access: Access::Anonymous,
            keys: Vec::new(),
            realm_hosts: None,
            max_component_bytes: None,
        }
    }

    /// `reference` read with the host's own credentials, with no signature required: what a
    /// person's `wasmop plugin` command does.
    pub fn with_host_credentials(reference: impl Into<String>) -> Self {
        Self {
            access: Access::Host,
            ..Self::anonymous(reference)
        }
    }

    /// The key under which the on-disk cache remembers what this source last resolved to, when
    /// read with `credentials`: every part of the source and the credentials themselves
    /// (hashed), so that a digest resolved with one tenant's credentials, or verified with one
    /// policy's keys, is never served from the cache to another, nor after the App's pull
    /// secrets changed or went away.
    pub fn cache_key(&self, credentials: Option<&(String, String)>) -> String {
        use sha2::{Digest as _, Sha256};
        let mut hash = Sha256::new();
        let mut part = |bytes: &[u8]| {
            // Length-prefixed: no two different sources encode the same.
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        part(self.reference.as_bytes());
        match &self.access {
            Access::Anonymous => part(b"anonymous"),
            Access::Host => part(b"host"),
            Access::PullSecrets { namespace, names } => {
                part(b"pull-secrets");
                part(namespace.as_bytes());
                for name in names {
                    part(name.as_bytes());
                }
            }
        }
        for key in &self.keys {
            part(b"key");
            part(key.name.as_bytes());
            part(key.pem.as_bytes());
        }
        for host in self.realm_hosts.iter().flatten() {
            part(b"realm-host");
            part(host.as_bytes());
        }
        if let Some(max) = self.max_component_bytes {
            part(b"max-component-bytes");
            part(&(max as u64).to_be_bytes());
        }
        if let Some((user, password)) = credentials {
            part(b"credentials");
            part(user.as_bytes());
            part(password.as_bytes());
        }
        format!("oci-{:x}", hash.finalize())
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reference)?;
        if let Access::PullSecrets { names, .. } = &self.access {
            write!(f, " (pull secrets {})", names.join(", "))?;
        }
        Ok(())
    }
}

/// How an App's OCI plugin is read under its namespace's policy: with its pull secrets if it
/// names any, else with the host's credentials if the policy shares them for the registry,
/// else anonymously; signed by one of the policy's keys if it lists any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OciRules {
    /// Prefixes of `registry/repository` for which the host's credentials are used.
    pub host_credentials: Vec<String>,
    /// Keys one of which must have signed every OCI plugin.
    pub keys: Vec<TrustedKey>,
    /// Hosts a token realm may name besides the registry's own (`None`: any), and which may be
    /// reached at private addresses.
    pub realm_hosts: Option<Vec<String>>,
    /// The largest component an OCI source may deliver (`None`: the default).
    pub max_component_bytes: Option<usize>,
}

/// Where plugins may come from in a namespace: the source rules of a policy.
/// [`SourcePolicy::default`] is the built-in default's: any registry, ConfigMaps allowed, no
/// signature required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePolicy {
    /// Where OCI plugins may come from: prefixes of `registry/repository` (`None`: anywhere).
    pub registries: Option<Vec<String>>,
    /// Whether plugins may come from ConfigMaps in the App's namespace.
    pub config_map_sources: bool,
    /// Whose credentials OCI plugins are read with, and whose signatures they need.
    pub oci: OciRules,
}

impl Default for SourcePolicy {
    fn default() -> Self {
        Self {
            registries: None,
            config_map_sources: true,
            oci: OciRules::default(),
        }
    }
}

impl SourcePolicy {
    /// Whether an App may load its plugin from `source`, or why not.
    pub fn allows_source(&self, source: &SourceRef) -> Result<(), String> {
        match source {
            SourceRef::Oci(oci) => {
                let Some(prefixes) = &self.registries else {
                    return Ok(());
                };
                let repository = repository_of(&oci.reference)
                    .ok_or_else(|| format!("invalid OCI reference {:?}", oci.reference))?;
                if prefixes.iter().any(|p| is_under(&repository, p)) {
                    Ok(())
                } else {
                    Err(format!(
                        "{repository} is not under a registry the policy allows ({})",
                        prefixes.join(", ")
                    ))
                }
            }
            // Only OCI artifacts carry signatures.
            SourceRef::ConfigMap { .. } | SourceRef::File(_) if !self.oci.keys.is_empty() => Err(
                "the policy requires plugins signed by one of its keys (spec.verify), \
                     and only OCI images carry signatures"
                    .into(),
            ),
            SourceRef::ConfigMap { .. } if !self.config_map_sources => {
                Err("the policy does not allow plugins from ConfigMaps".into())
            }
            SourceRef::ConfigMap { .. } | SourceRef::File(_) => Ok(()),
        }
    }
}

impl SourceRef {
    /// The source an App's `spec.plugin` names, in the App's `namespace`, under `rules`.
    pub fn from_spec(
        namespace: &str,
        plugin: &PluginSource,
        rules: &OciRules,
    ) -> Result<Self, String> {
        match (&plugin.image, &plugin.config_map, &plugin.file) {
            (Some(image), None, None) => {
                let reference = image.trim().to_string();
                let names: Vec<String> = plugin
                    .image_pull_secrets
                    .iter()
                    .map(|s| s.name.clone())
                    .collect();
                // The schema says so too; checked here because the name goes into an API path.
                if let Some(bad) = names.iter().find(|n| !is_dns_subdomain(n)) {
                    return Err(format!(
                        "spec.plugin.imagePullSecrets: {bad:?} is not a Secret name"
                    ));
                }
                let access = if !names.is_empty() {
                    Access::PullSecrets {
                        namespace: namespace.to_string(),
                        names,
                    }
                } else if let Some(repository) = repository_of(&reference)
                    && rules
                        .host_credentials
                        .iter()
                        .any(|prefix| is_under(&repository, prefix))
                {
                    Access::Host
                } else {
                    Access::Anonymous
                };
                Ok(Self::Oci(OciRef {
                    reference,
                    access,
                    keys: rules.keys.clone(),
                    realm_hosts: rules.realm_hosts.clone(),
                    max_component_bytes: rules.max_component_bytes,
                }))
            }
            (None, Some(cm), None) => Ok(Self::ConfigMap {
                namespace: namespace.to_string(),
                name: cm.name.clone(),
                key: cm.key.clone(),
            }),
            (None, None, Some(path)) => Ok(Self::File(PathBuf::from(path))),
            _ => Err("spec.plugin must set exactly one of image, configMap or file".into()),
        }
    }
}

impl SourceRef {
    /// Where the plugin is, without whose credentials or keys: equal for every App that names
    /// the same image, ConfigMap or file.
    pub fn location(&self) -> SourceRef {
        match self {
            Self::Oci(oci) => Self::Oci(OciRef::anonymous(oci.reference.clone())),
            other => other.clone(),
        }
    }
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Oci(oci) => write!(f, "{oci}"),
            Self::ConfigMap {
                namespace,
                name,
                key,
            } => write!(f, "configmap:{namespace}/{name}#{key}"),
            Self::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

/// The bytes of one plugin version and their content digest.
#[derive(Clone)]
pub struct Fetched {
    /// The component bytes.
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`.
    pub digest: Digest,
}

impl fmt::Debug for Fetched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetched")
            .field("digest", &self.digest)
            .field("size", &self.bytes.len())
            .finish()
    }
}

impl Fetched {
    /// Bytes whose digest is computed here.
    pub fn new(bytes: Vec<u8>) -> Self {
        let digest = Digest::of(&bytes);
        Self { bytes, digest }
    }
}

/// `registry/repository` of an OCI reference, if it parses.
pub fn repository_of(reference: &str) -> Option<String> {
    let parsed = reference::parse(reference).ok()?;
    Some(format!("{}/{}", parsed.registry(), parsed.repository()))
}

/// Whether `repository` is `prefix` or below it on a path boundary (`ghcr.io/acme` covers
/// `ghcr.io/acme/cache`, not `ghcr.io/acme-evil`).
pub fn is_under(repository: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    repository == prefix
        || repository
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

pub(crate) fn fetch_error(source: &SourceRef, message: impl Into<String>) -> LoadError {
    LoadError::Fetch {
        source_ref: source.to_string(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::PullSecretRef;

    fn image(reference: &str, secrets: &[&str]) -> PluginSource {
        PluginSource {
            image: Some(reference.into()),
            image_pull_secrets: secrets
                .iter()
                .map(|s| PullSecretRef {
                    name: s.to_string(),
                })
                .collect(),
            config_map: None,
            file: None,
        }
    }

    fn access(plugin: &PluginSource, rules: &OciRules) -> Access {
        match SourceRef::from_spec("team-a", plugin, rules) {
            Ok(SourceRef::Oci(oci)) => oci.access,
            other => panic!("not an OCI source: {other:?}"),
        }
    }

    #[test]
    fn credentials_are_the_apps_own_or_shared_by_policy_or_none() {
        let shared = OciRules {
            host_credentials: vec!["ghcr.io/acme".into()],
            ..OciRules::default()
        };
        // Pull secrets win, and are read in the App's namespace.
        assert_eq!(
            access(&image("ghcr.io/acme/db:1", &["pull"]), &shared),
            Access::PullSecrets {
                namespace: "team-a".into(),
                names: vec!["pull".into()]
            }
        );
        assert_eq!(
            access(&image("ghcr.io/acme/db:1", &[]), &shared),
            Access::Host
        );
        // Not under a shared prefix (path boundaries), or no policy sharing: anonymous.
        assert_eq!(
            access(&image("ghcr.io/acme-evil/db:1", &[]), &shared),
            Access::Anonymous
        );
        assert_eq!(
            access(&image("ghcr.io/acme/db:1", &[]), &OciRules::default()),
            Access::Anonymous
        );
    }

    #[test]
    fn sources_differing_in_credentials_or_keys_are_not_shared() {
        let plugin = image("ghcr.io/acme/db:1", &[]);
        let anonymous = SourceRef::from_spec("a", &plugin, &OciRules::default()).expect("valid");
        let shared = OciRules {
            host_credentials: vec!["ghcr.io".into()],
            ..OciRules::default()
        };
        let host = SourceRef::from_spec("a", &plugin, &shared).expect("valid");
        let signed = OciRules {
            keys: vec![TrustedKey {
                name: "release".into(),
                pem: "PEM".into(),
            }],
            ..OciRules::default()
        };
        let verified = SourceRef::from_spec("a", &plugin, &signed).expect("valid");
        assert_ne!(anonymous, host);
        assert_ne!(anonymous, verified);
        assert_eq!(anonymous.location(), host.location());
        let (SourceRef::Oci(a), SourceRef::Oci(h), SourceRef::Oci(v)) =
            (&anonymous, &host, &verified)
        else {
            panic!("OCI sources");
        };
        assert_ne!(a.cache_key(None), h.cache_key(None));
        assert_ne!(a.cache_key(None), v.cache_key(None));
        let (one, two) = (
            ("u".to_string(), "p".to_string()),
            ("u".to_string(), "q".to_string()),
        );
        assert_ne!(h.cache_key(Some(&one)), h.cache_key(Some(&two)));
        assert_ne!(h.cache_key(Some(&one)), h.cache_key(None));
        let bad = SourceRef::from_spec("a", &image("x.io/p:1", &["../x"]), &OciRules::default());
        assert!(bad.is_err_and(|e| e.contains("not a Secret name")));
        // Pull secrets are per namespace: the same names elsewhere are another source.
        let in_a = SourceRef::from_spec("a", &image("x.io/p:1", &["s"]), &OciRules::default());
        let in_b = SourceRef::from_spec("b", &image("x.io/p:1", &["s"]), &OciRules::default());
        assert_ne!(in_a, in_b);
    }

    #[test]
    fn sources_are_held_to_the_policy_registries_on_path_boundaries() {
        let policy = SourcePolicy {
            registries: Some(vec![
                "ghcr.io/acme".into(),
                "127.0.0.1:15000/plugins/".into(),
            ]),
            config_map_sources: false,
            ..SourcePolicy::default()
        };
        let oci = |r: &str| SourceRef::Oci(OciRef::anonymous(r));
        assert!(policy.allows_source(&oci("ghcr.io/acme/cache:1")).is_ok());
        assert!(policy.allows_source(&oci("ghcr.io/acme/team/db@sha256:0000000000000000000000000000000000000000000000000000000000000000")).is_ok());
        assert!(
            policy
                .allows_source(&oci("127.0.0.1:15000/plugins/kvstore:1.0"))
                .is_ok()
        );
        let err = policy
            .allows_source(&oci("ghcr.io/acme-evil/cache:1"))
            .expect_err("not on a boundary");
        assert!(
            err.contains("ghcr.io/acme-evil/cache is not under"),
            "{err}"
        );
        assert!(policy.allows_source(&oci("docker.io/library/x:1")).is_err());
        let cm = SourceRef::ConfigMap {
            namespace: "ns".into(),
            name: "p".into(),
            key: "plugin.wasm".into(),
        };
        assert!(policy.allows_source(&cm).is_err());
        assert!(SourcePolicy::default().allows_source(&cm).is_ok());
        assert!(
            SourcePolicy::default()
                .allows_source(&oci("anything.example/x:1"))
                .is_ok()
        );
        // A policy that wants signatures takes only what can carry one.
        let signed = SourcePolicy {
            oci: OciRules {
                keys: vec![TrustedKey {
                    name: "release".into(),
                    pem: String::new(),
                }],
                ..OciRules::default()
            },
            ..SourcePolicy::default()
        };
        let err = signed.allows_source(&cm).expect_err("unsigned by nature");
        assert!(err.contains("spec.verify"), "{err}");
        assert!(signed.allows_source(&oci("ghcr.io/acme/x:1")).is_ok());
    }
}
