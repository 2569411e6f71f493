//! The `PluginBinding` custom resource (`pluginbindings.wasmop.dev/v1alpha1`, cluster-scoped):
//! a platform team's own kind bound to the plugin that serves every instance of it. The
//! instance's author writes only its `spec` (the service's version and configuration); the code
//! that runs for it is the binding's, chosen by whoever may write bindings (a cluster-scoped
//! resource: the cluster admin, or a platform team the admin lets).
//!
//! [`check`] holds the rules on a binding by itself and against the others (pure);
//! [`serve`] watches bindings, looks each kind up, checks the host may serve it, runs a
//! controller per bound kind and writes the bindings' status.

pub mod check;
pub(crate) mod serve;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::app::{PluginLimits, PluginSource};

/// Which kind a binding binds to which plugin.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "wasmop.dev",
    version = "v1alpha1",
    kind = "PluginBinding",
    status = "PluginBindingStatus",
    shortname = "wbind",
    category = "wasmop",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind.kind"}"#,
    printcolumn = r#"{"name":"Group","type":"string","jsonPath":".spec.kind.group"}"#,
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
    printcolumn = r#"{"name":"Instances","type":"integer","jsonPath":".status.instances"}"#,
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".status.rollout.phase"}"#,
    printcolumn = r#"{"name":"Stable","type":"integer","jsonPath":".status.rolloutInstances.stable"}"#,
    printcolumn = r#"{"name":"Candidate","type":"integer","jsonPath":".status.rolloutInstances.candidate"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PluginBindingSpec {
    /// The kind bound: a namespaced custom resource kind whose CRD is installed and in the
    /// `wasmop` category (as one `wasmop plugin crd` printed). Not a built-in kind, not one of
    /// wasmop's own. It cannot change: its instances' finalizers need the binding that took
    /// them; bind another kind with another binding.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "spec.kind cannot change: create another PluginBinding for another kind"
    }]))]
    pub kind: BoundKind,
    /// Where the plugin that serves every instance comes from, as an App's `spec.plugin`. A
    /// ConfigMap and pull Secrets are read in `sourceNamespace`, never in the instance's.
    pub plugin: PluginSource,
    /// The namespace holding the plugin's ConfigMap and pull Secrets; by default the host's
    /// own namespace (`default` for a host running outside a Pod). Never the instance's: its
    /// author must not pick the code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub source_namespace: Option<String>,
    /// Per-call limits for the plugin's calls, clamped by the host's maxima.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimits>,
    /// Where an instance holds the service version the plugin's upgrade gate rolls out: a
    /// string field of `spec`, `spec.version` by default (what `wasmop plugin crd` makes), or a
    /// nested one such as `spec.image.tag`. The rest of `spec` is the plugin's configuration;
    /// the plugin reads the version as `spec.version` whatever the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 6, max = 256))]
    pub version_path: Option<String>,
    /// How the API server asks the plugin about writes of instances, when the plugin exports
    /// `validate`: the host then registers a validating webhook for the kind. Defaults apply
    /// when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionSettings>,
    /// How a new version of the plugin reaches the instances: at once (the default), or
    /// progressively (shadow plans, canaries, analysis, batches, automatic rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
}

/// How the API server calls the plugin's `validate` (a `ValidatingWebhookConfiguration`'s
/// settings, for the one webhook of the kind).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSettings {
    /// What the API server does when the plugin cannot answer (it traps, runs past its
    /// deadline, is not loaded yet, or no host answers): `Fail` refuses the write (the
    /// default), `Ignore` lets it through unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// How long the API server waits for an answer, 1 to 30 seconds (default 5). The plugin's
    /// deadline is held well inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub timeout_seconds: Option<i32>,
    /// Whether the plugin is told the groups of the user who writes (default false: a plugin
    /// learns nothing of who asks unless the binding says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_groups: Option<bool>,
}

/// A webhook's failure policy.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FailurePolicy {
    /// Refuse the write.
    Fail,
    /// Let the write through.
    Ignore,
}

impl AdmissionSettings {
    /// The default timeout, as the API server's own default for a webhook (since v1).
    pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;

    /// The failure policy, `Fail` unless set.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.failure_policy.unwrap_or(FailurePolicy::Fail)
    }

    /// The timeout in seconds, clamped to 1..=30 (the API server's bounds).
    pub fn timeout_seconds(&self) -> i32 {
        self.timeout_seconds
            .unwrap_or(Self::DEFAULT_TIMEOUT_SECONDS)
            .clamp(1, 30)
    }
}

/// A kind, by API group, version and name.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct BoundKind {
    /// The API group, e.g. `data.acme.io`.
    #[schemars(length(min = 1, max = 253))]
    pub group: String,
    /// The version the host reads and writes instances in, e.g. `v1`.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// The kind, e.g. `KVStore`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

impl std::fmt::Display for BoundKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind, self.group)
    }
}

/// What the host reports about a binding.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginBindingStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The kind's plural resource name, as the API server serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// How many instances of the kind the host sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
    /// `Valid`: the kind exists, may be bound and the host may serve it; when False, the
    /// reason (`KindNotFound`, `KindNotBindable`, `AlreadyBound`, `Forbidden`, ...) and what
    /// to do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// A progressive binding's rollout: where it is, the stable digest and the one rolling
    /// out, the digests marked bad and those that may be pinned, the shadow plans' findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<wasmop_core::rollout::State>,
    /// A progressive binding's instances by the digest serving them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_instances: Option<crate::rollout::InstanceCounts>,
}

/// The finalizer on a binding while instances of its kind remain: deleting the binding waits
/// for them, as their own deletion needs the binding's plugin (its `finalize`) and controller.
pub const FINALIZER: &str = "wasmop.dev/instances";

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn the_crd_is_cluster_scoped_with_a_status_and_columns() {
        let crd = PluginBinding::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
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
        assert_eq!(
            columns,
            [
                "Kind",
                "Group",
                "Valid",
                "Instances",
                "Rollout",
                "Stable",
                "Candidate",
                "Age"
            ]
        );
    }
}
