//! Builders for the objects most plugins plan, with the standard labels.
//!
//! Every builder takes a [`Scope`]: the App's namespace and the labels that
//! tie an object to it. Selectors use only labels that never change over the
//! App's life (name, instance, `wasmop.dev/app`, component), so a version
//! bump never orphans Pods; `app.kubernetes.io/version` goes on metadata and
//! Pod templates only. The host adds `app.kubernetes.io/managed-by` and owner
//! references itself.

mod job;
mod pdb;
mod service;
mod statefulset;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::app::App;

pub use job::JobBuilder;
pub use pdb::PdbBuilder;
pub use service::ServiceBuilder;
pub use statefulset::StatefulSetBuilder;

/// `app.kubernetes.io/name`: what the service is, e.g. `kvstore`.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/instance`: which App, its name.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/component`: which part, e.g. `server`, `backup`.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/version`: the service version an object runs.
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";
/// `app.kubernetes.io/managed-by`: set to `wasmop` by the host.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// `wasmop.dev/app`: the App's name. The host finds Pods, PVCs and Jobs by it
/// and by `wasmop.dev/parent-kind`, the App's kind, which the host adds itself:
/// to every object it applies and, for an instance of a kind other than `App`,
/// beside this label in pod and claim templates.
pub const APP_LABEL: &str = "wasmop.dev/app";
/// `wasmop.dev/backup-slot`: the slot a backup Job is for.
pub const SLOT_LABEL: &str = "wasmop.dev/backup-slot";

/// Makes `spec` pass the host's default policy (the `restricted` Pod Security Standard and
/// wasmop's pod rules) wherever the plugin left a field unset, and leaves what it set alone:
/// the pod runs as non-root with the runtime's default seccomp profile, every container drops
/// all capabilities and cannot escalate privileges, and without a `serviceAccountName` the pod
/// gets no ServiceAccount token. The builders call it; call it on a `PodSpec` you build
/// yourself (a Deployment's, say). A value the plugin set that the policy forbids is still
/// refused by the host, naming the field.
pub fn harden(spec: &mut PodSpec) {
    let pod = spec
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    pod.run_as_non_root.get_or_insert(true);
    pod.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: "RuntimeDefault".to_string(),
        ..Default::default()
    });
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for container in containers {
        let context = container
            .security_context
            .get_or_insert_with(SecurityContext::default);
        context.allow_privilege_escalation.get_or_insert(false);
        context.capabilities.get_or_insert_with(|| Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        });
    }
    if spec.service_account_name.is_none() {
        spec.automount_service_account_token.get_or_insert(false);
    }
}

/// Where an App's objects live and how they are labelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    name: String,
    instance: String,
    namespace: String,
    component: Option<String>,
    version: Option<String>,
}

impl Scope {
    /// The scope of `app`'s objects; `name` is the service kind
    /// (`app.kubernetes.io/name`), e.g. `kvstore`.
    pub fn new<C>(app: &App<C>, name: impl Into<String>) -> Self {
        Scope {
            name: name.into(),
            instance: app.name().to_string(),
            namespace: app.namespace().to_string(),
            component: None,
            version: None,
        }
    }

    /// The same scope for one component, e.g. `server`.
    pub fn with_component(&self, component: impl Into<String>) -> Self {
        Scope {
            component: Some(component.into()),
            ..self.clone()
        }
    }

    /// The same scope for objects running `version`.
    pub fn with_version(&self, version: impl Into<String>) -> Self {
        Scope {
            version: Some(version.into()),
            ..self.clone()
        }
    }

    /// The App's name.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The App's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `<app name>-<suffix>`, the usual name of a child object.
    pub fn child_name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.instance)
    }

    /// Labels that select this scope's Pods; stable for the App's lifetime.
    pub fn selector(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (NAME_LABEL.to_string(), self.name.clone()),
            (INSTANCE_LABEL.to_string(), self.instance.clone()),
            (APP_LABEL.to_string(), self.instance.clone()),
        ]);
        if let Some(component) = &self.component {
            labels.insert(COMPONENT_LABEL.to_string(), component.clone());
        }
        labels
    }

    /// [`Scope::selector`] plus the version label, for metadata and Pod
    /// templates.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        if let Some(version) = &self.version {
            labels.insert(VERSION_LABEL.to_string(), label_value(version));
        }
        labels
    }

    /// Metadata for an object named `name` in this scope.
    pub fn metadata(&self, name: impl Into<String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels()),
            ..Default::default()
        }
    }
}

/// A ConfigMap in `scope` holding `data`.
pub fn config_map<K, V>(
    scope: &Scope,
    name: impl Into<String>,
    data: impl IntoIterator<Item = (K, V)>,
) -> ConfigMap
where
    K: Into<String>,
    V: Into<String>,
{
    ConfigMap {
        metadata: scope.metadata(name),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Makes `text` a valid label value: at most 63 of `[A-Za-z0-9._-]`,
/// starting and ending alphanumeric. Versions like `7.2.4+build.1` would
/// otherwise make the API server reject the whole object.
fn label_value(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::app::App;

    pub(crate) fn app() -> App<serde_json::Value> {
        let json = serde_json::json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "cache", "namespace": "shop"},
            "spec": {"plugin": {}, "version": "7.2.4"}
        });
        App::from_json(&json.to_string()).expect("valid app")
    }

    #[test]
    fn selector_is_stable_and_labels_add_version() {
        let scope = Scope::new(&app(), "kvstore").with_component("server");
        let v1 = scope.with_version("7.2.4");
        let v2 = scope.with_version("7.2.5");
        assert_eq!(v1.selector(), v2.selector());
        assert_eq!(v1.selector()[APP_LABEL], "cache");
        assert_eq!(v1.selector()[INSTANCE_LABEL], "cache");
        assert_eq!(v1.selector()[NAME_LABEL], "kvstore");
        assert_eq!(v1.selector()[COMPONENT_LABEL], "server");
        assert_eq!(v1.labels()[VERSION_LABEL], "7.2.4");
        assert!(!v1.selector().contains_key(VERSION_LABEL));
        assert_eq!(scope.child_name("headless"), "cache-headless");
        let meta = v1.metadata("cache");
        assert_eq!(meta.namespace.as_deref(), Some("shop"));
    }

    #[test]
    fn label_values_are_sanitized() {
        assert_eq!(label_value("7.2.4+build.1"), "7.2.4_build.1");
        assert_eq!(label_value("+x+"), "x");
        assert_eq!(label_value(&"9".repeat(80)).len(), 63);
    }

    #[test]
    fn config_map_carries_data_and_labels() {
        let scope = Scope::new(&app(), "kvstore");
        let cm = config_map(&scope, "cache-config", [("valkey.conf", "maxmemory 1gb")]);
        assert_eq!(
            cm.data.as_ref().map(|d| d["valkey.conf"].as_str()),
            Some("maxmemory 1gb")
        );
        assert_eq!(
            cm.metadata.labels.as_ref().map(|l| l[APP_LABEL].as_str()),
            Some("cache")
        );
    }

    #[test]
    fn harden_fills_what_is_unset_and_keeps_what_is_set() {
        use k8s_openapi::api::core::v1::Container;
        let mut spec = PodSpec {
            containers: vec![
                Container {
                    name: "a".into(),
                    ..Default::default()
                },
                Container {
                    name: "b".into(),
                    security_context: Some(SecurityContext {
                        capabilities: Some(Capabilities {
                            add: Some(vec!["NET_BIND_SERVICE".into()]),
                            drop: Some(vec!["ALL".into()]),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ],
            security_context: Some(PodSecurityContext {
                run_as_user: Some(1000),
                ..Default::default()
            }),
            ..Default::default()
        };
        harden(&mut spec);
        let pod = spec.security_context.as_ref().expect("pod context");
        assert_eq!(
            (pod.run_as_non_root, pod.run_as_user),
            (Some(true), Some(1000))
        );
        assert_eq!(
            pod.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
        let a = spec.containers[0].security_context.as_ref().expect("a");
        assert_eq!(a.allow_privilege_escalation, Some(false));
        assert_eq!(
            a.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()])
        );
        let b = spec.containers[1].security_context.as_ref().expect("b");
        assert_eq!(
            b.capabilities.as_ref().and_then(|c| c.add.clone()),
            Some(vec!["NET_BIND_SERVICE".to_string()])
        );
        assert_eq!(spec.automount_service_account_token, Some(false));

        let mut own = PodSpec {
            service_account_name: Some("mine".into()),
            ..Default::default()
        };
        harden(&mut own);
        assert_eq!(own.automount_service_account_token, None, "its own token");
    }
}
