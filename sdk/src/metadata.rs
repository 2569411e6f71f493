//! The [`Plugin`] trait every plugin implements, and the facts it reports.

use k8s_openapi::Resource;
use serde::de::DeserializeOwned;

use crate::error::Result;

/// An optional interface of the WIT package: the decision core's capability table
/// ([`wasmop_core::capability`]), which the host reads too.
pub use wasmop_core::capability::Capability;

/// The part every plugin implements: who it is and what its config looks
/// like. The capability traits ([`SpecDiff`](crate::SpecDiff),
/// [`Health`](crate::Health), ...) build on it.
pub trait Plugin {
    /// `spec.config`, as the plugin's own serde type. Use
    /// `#[serde(default)]` for defaults and `deny_unknown_fields` to catch
    /// typos; the SDK reports deserialization errors with the field's path.
    type Config: DeserializeOwned;

    /// Name, version and the kinds the plugin works with. Capabilities are
    /// filled in by [`export!`](crate::export) from the list it is given.
    fn metadata() -> Metadata;

    /// Checks what serde cannot (ranges, cross-field rules). Called on every
    /// call, before the capability; return
    /// [`Error::invalid_config`](crate::Error::invalid_config) naming the
    /// field.
    fn validate(config: &Self::Config) -> Result<()> {
        let _ = config;
        Ok(())
    }
}

/// A Kubernetes kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindRef {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `StatefulSet`.
    pub kind: String,
}

impl KindRef {
    /// The kind of the k8s-openapi type `K`.
    pub fn of<K: Resource>() -> Self {
        KindRef {
            api_version: K::API_VERSION.to_string(),
            kind: K::KIND.to_string(),
        }
    }
}

/// Static facts about a plugin, returned by `metadata.get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Plugin name, e.g. `kvstore`.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// One line for humans.
    pub description: String,
    /// Exported capabilities; set by [`export!`](crate::export).
    pub capabilities: Vec<Capability>,
    /// Kinds that may appear in a plan.
    pub owns: Vec<KindRef>,
    /// Kinds only read (Pods, PVCs).
    pub observes: Vec<KindRef>,
}

impl Metadata {
    /// Starts the facts; pass `env!("CARGO_PKG_NAME")` and
    /// `env!("CARGO_PKG_VERSION")` to keep them in step with Cargo.toml.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Metadata {
            name: name.into(),
            version: version.into(),
            description: String::new(),
            capabilities: Vec::new(),
            owns: Vec::new(),
            observes: Vec::new(),
        }
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Declares that plans may contain objects of kind `K`.
    pub fn owns<K: Resource>(mut self) -> Self {
        self.owns.push(KindRef::of::<K>());
        self
    }

    /// Declares that the plugin reads objects of kind `K` labelled with the
    /// App.
    pub fn observes<K: Resource>(mut self) -> Self {
        self.observes.push(KindRef::of::<K>());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;

    #[test]
    fn builder_records_kinds() {
        let m = Metadata::new("kv", "1.0.0")
            .description("d")
            .owns::<StatefulSet>()
            .observes::<PersistentVolumeClaim>();
        assert_eq!(
            m.owns,
            [KindRef {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into()
            }]
        );
        assert_eq!(m.observes[0].kind, "PersistentVolumeClaim");
        assert_eq!(m.observes[0].api_version, "v1");
        assert!(m.capabilities.is_empty());
    }
}
