//! The `App` custom resource (`apps.wasmop.dev/v1alpha1`): one instance of a service, the plugin
//! that knows how to run it, and the status the host reports back.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use wasmop_core::status::{AppStatus, BackupStatus, PluginStatus, UpgradeStatus};

/// Desired state of an App.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "wasmop.dev",
    version = "v1alpha1",
    kind = "App",
    namespaced,
    status = "AppStatus",
    shortname = "wapp",
    category = "wasmop",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.version"}"#,
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".status.plugin.shortDigest"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AppSpec {
    /// Where the plugin that runs this App comes from.
    pub plugin: PluginSource,
    /// The desired version of the service; the plugin's upgrade gate decides when it rolls out.
    pub version: String,
    /// Service configuration, handed to the plugin as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub config: Option<serde_json::Value>,
    /// Per-call limits for this App's plugin calls, clamped by the host's maxima.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimits>,
}

/// Exactly one source of a plugin.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.image), has(self.configMap), has(self.file)].filter(x, x).size() == 1",
    "message": "set exactly one of spec.plugin.image, spec.plugin.configMap or spec.plugin.file"
}, {
    "rule": "!has(self.imagePullSecrets) || has(self.image)",
    "message": "spec.plugin.imagePullSecrets applies only to spec.plugin.image"
}]))]
pub struct PluginSource {
    /// OCI reference of a Wasm artifact, by tag (polled) or by digest (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Secrets in the App's namespace (type `kubernetes.io/dockerconfigjson` or
    /// `kubernetes.io/dockercfg`) holding credentials for `image`'s registry, as a Pod's
    /// `imagePullSecrets`. The host reads them only where the namespace's admin bound the
    /// `wasmop-pull-secrets` ClusterRole to it (see the README).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub image_pull_secrets: Vec<PullSecretRef>,
    /// A ConfigMap in the App's namespace holding the component in `binaryData`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapPluginSource>,
    /// A path on the host's filesystem; only honoured when the host runs with file sources
    /// enabled (development).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// A Secret in the App's namespace, by name.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct PullSecretRef {
    /// The Secret's name (a DNS subdomain, as every Secret's).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// A plugin stored in a ConfigMap.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ConfigMapPluginSource {
    /// Name of the ConfigMap, in the App's namespace.
    pub name: String,
    /// Key in `binaryData` that holds the component.
    pub key: String,
}

/// Per-call limits for an App's plugin.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginLimits {
    /// Deadline of one plugin call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    /// Memory cap of one plugin instance, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn crd_has_status_subresource_and_columns() {
        let crd = App::crd();
        let version = &crd.spec.versions[0];
        assert_eq!(crd.spec.group, "wasmop.dev");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Ready", "Version", "Plugin", "Age"]);
    }

    #[test]
    fn plugin_source_carries_exactly_one_rule() {
        let yaml = serde_yaml::to_string(&App::crd()).expect("CRD serialises");
        assert!(yaml.contains("x-kubernetes-validations"), "{yaml}");
        assert!(
            yaml.contains("x-kubernetes-preserve-unknown-fields: true"),
            "{yaml}"
        );
    }
}
