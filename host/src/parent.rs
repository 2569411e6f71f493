//! The parent of one reconcile: an `App`, or an instance of a kind a `PluginBinding` binds to a
//! plugin, seen the same way. Below the controllers (prepare, the decision, execute, cleanup)
//! everything works on a [`Parent`]: only where it comes from, the plugin that serves it and
//! where its status goes differ, and those are read here.
//!
//! A bound instance is read as an App whose `spec.version` is the instance's, whose
//! configuration is the rest of its `spec`, and whose plugin and limits are the binding's; the
//! plugin itself receives the instance as stored (its own `apiVersion`, `kind` and `spec`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
};
use serde_json::Value;
use wasmop_core::{observed::kind_mark, stamp::AppRef};

use crate::app::{App, AppSpec, AppStatus, PluginLimits, PluginSource};

/// What a kind of parent is and who serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentKind {
    /// How the API server is reached for the kind.
    pub resource: ApiResource,
    /// For a bound kind, the binding that binds it; `None` for the App.
    pub binding: Option<Binding>,
}

/// What a `PluginBinding` says about every instance of its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The binding's name.
    pub name: String,
    /// The plugin that serves every instance.
    pub plugin: PluginSource,
    /// Where the plugin's ConfigMap and pull Secrets are read.
    pub source_namespace: String,
    /// Per-call limits.
    pub limits: Option<PluginLimits>,
    /// The fields of `spec` holding the service version (`["version"]` by default).
    pub version_path: Vec<String>,
    /// The binding is being deleted: it serves the instances it has and takes no new one.
    pub deleting: bool,
    /// A progressive rollout's settings; `None`: a new digest serves every instance at once.
    pub rollout: Option<crate::rollout::Settings>,
}

impl ParentKind {
    /// The built-in App.
    pub fn app() -> Arc<Self> {
        Arc::new(Self {
            resource: ApiResource::erase::<App>(&()),
            binding: None,
        })
    }

    /// The value of the parent-kind label on the kind's objects.
    pub fn mark(&self) -> String {
        kind_mark(&self.resource.group, &self.resource.kind)
    }
}

/// One parent, as a reconcile reads it.
#[derive(Debug, Clone)]
pub struct Parent {
    /// The parent as an App: its metadata, the plugin that serves it, its version, its
    /// configuration, its limits and its status.
    pub app: App,
    /// The parent as its plugin receives it: the App, or the bound instance as stored.
    pub object: Value,
    /// Its kind.
    pub kind: Arc<ParentKind>,
    /// Why the instance cannot be served as it is (its `spec.version` is missing or not a
    /// string): the reconcile then holds and says so in its status.
    pub invalid: Option<String>,
}

impl Parent {
    /// An App.
    pub fn from_app(app: &App, kind: Arc<ParentKind>) -> Self {
        Self {
            object: serde_json::to_value(app).unwrap_or(Value::Null),
            app: app.clone(),
            kind,
            invalid: None,
        }
    }

    /// An instance of the bound kind `kind` (whose `binding` is set).
    pub fn from_instance(object: &DynamicObject, kind: Arc<ParentKind>) -> Self {
        let default_path = ["version".to_string()];
        let path: &[String] = kind
            .binding
            .as_ref()
            .map_or(&default_path[..], |b| &b.version_path[..]);
        let dotted = format!("spec.{}", path.join("."));
        let mut config = object
            .data
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let (version, invalid) = match take(&mut config, path) {
            Some(Value::String(version)) => (version, None),
            Some(_) => (
                String::new(),
                Some(format!(
                    "{dotted} must be a string (the service version, e.g. 7.2.4)"
                )),
            ),
            None => (
                String::new(),
                Some(format!(
                    "{dotted} is missing: the service version to run, e.g. 7.2.4"
                )),
            ),
        };
        // The plugin reads the version as `spec.version` whatever the path: a configuration
        // with a `version` of its own beside another path cannot be handed over unchanged.
        let invalid = invalid.or_else(|| {
            (path != default_path && config.contains_key("version")).then(|| {
                format!(
                    "spec.version is a field of the configuration, but the binding's \
                     versionPath is {dotted}: the plugin reads the service version as \
                     spec.version"
                )
            })
        });
        // The status is the host's record of what rolled out (the upgrade gate reads it), as an
        // App's is; one that does not parse as the host's is read as none and replaced by the
        // next write. Whoever may write the status subresource can move that record: RBAC must
        // grant `<plural>/status` to the host alone (the README says so).
        let status: Option<AppStatus> = object
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let (plugin, limits) = match &kind.binding {
            Some(binding) => (binding.plugin.clone(), binding.limits.clone()),
            None => (
                PluginSource {
                    image: None,
                    image_pull_secrets: Vec::new(),
                    config_map: None,
                    file: None,
                },
                None,
            ),
        };
        let mut json = serde_json::to_value(object).unwrap_or(Value::Null);
        if let Some(map) = json.as_object_mut() {
            // The kind of the binding, whatever the object's own fields say; the spec as the
            // plugin reads it: the configuration and `version`.
            map.insert(
                "apiVersion".into(),
                kind.resource.api_version.clone().into(),
            );
            map.insert("kind".into(), kind.resource.kind.clone().into());
            if path != default_path && invalid.is_none() {
                let mut spec = config.clone();
                spec.insert("version".into(), Value::String(version.clone()));
                map.insert("spec".into(), Value::Object(spec));
            }
        }
        let mut app = App::new(
            &object.name_any(),
            AppSpec {
                plugin,
                version,
                config: object
                    .data
                    .get("spec")
                    .is_some()
                    .then_some(Value::Object(config)),
                limits,
            },
        );
        app.metadata = object.metadata.clone();
        app.status = status;
        Self {
            app,
            object: json,
            kind,
            invalid,
        }
    }

    /// Its name.
    pub fn name(&self) -> String {
        self.app.name_any()
    }

    /// Its namespace.
    pub fn namespace(&self) -> String {
        self.app.namespace().unwrap_or_default()
    }

    /// Whether it is an App.
    pub fn is_app(&self) -> bool {
        self.kind.binding.is_none()
    }

    /// The key of its backoff and due time: `<namespace>/<name>` for an App,
    /// `<namespace>/<Kind>.<group>/<name>` for an instance of a bound kind, so an App and an
    /// instance of one name never share one.
    pub fn key(&self) -> String {
        key_of(&self.kind, &self.namespace(), &self.name())
    }

    /// The name RBAC bindings grant to with `wasmop.dev/grants-app`: the App's name, or
    /// `<Kind>.<group>/<name>` for an instance (no name holds a `/`, so an instance author
    /// cannot take an App's grants by naming the instance like it).
    pub fn grantee(&self) -> String {
        match self.is_app() {
            true => self.name(),
            false => format!("{}/{}", self.kind.mark(), self.name()),
        }
    }

    /// How messages name it: `App team-a/cache`, `KVStore.data.acme.io team-a/cache`.
    pub fn describe(&self) -> String {
        match self.is_app() {
            true => format!("App {}/{}", self.namespace(), self.name()),
            false => format!("{} {}/{}", self.kind.mark(), self.namespace(), self.name()),
        }
    }

    /// The namespace its plugin's ConfigMap and pull Secrets are read in: the App's own, or
    /// the binding's `sourceNamespace`.
    pub fn source_namespace(&self) -> String {
        match &self.kind.binding {
            Some(binding) => binding.source_namespace.clone(),
            None => self.namespace(),
        }
    }

    /// Its identity, as the decision core stamps its objects.
    pub fn app_ref(&self) -> AppRef {
        AppRef {
            api_version: self.kind.resource.api_version.clone(),
            kind: self.kind.resource.kind.clone(),
            name: self.name(),
            namespace: self.namespace(),
            uid: self.app.uid().unwrap_or_default(),
            generation: self.app.metadata.generation,
        }
    }

    /// The reference its Events are published on.
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.kind.resource.api_version.clone()),
            kind: Some(self.kind.resource.kind.clone()),
            name: Some(self.name()),
            namespace: Some(self.namespace()),
            uid: self.app.uid(),
            resource_version: self.app.resource_version(),
            ..ObjectReference::default()
        }
    }

    /// Its kind's API in its namespace (for the status subresource).
    pub fn api(&self, client: &Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &self.namespace(), &self.kind.resource)
    }
}

/// Takes the field at `path` out of `spec` (the leaf only; the objects around it stay).
fn take(spec: &mut serde_json::Map<String, Value>, path: &[String]) -> Option<Value> {
    let (leaf, parents) = path.split_last()?;
    let mut at = spec;
    for field in parents {
        at = at.get_mut(field)?.as_object_mut()?;
    }
    at.remove(leaf)
}

/// [`Parent::key`] of the parent `name` of kind `kind` in `namespace`.
pub fn key_of(kind: &ParentKind, namespace: &str, name: &str) -> String {
    match kind.binding {
        None => format!("{namespace}/{name}"),
        Some(_) => format!("{namespace}/{}/{name}", kind.mark()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bound() -> Arc<ParentKind> {
        Arc::new(ParentKind {
            resource: ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("data.acme.io", "v1", "KVStore"),
                "kvstores",
            ),
            binding: Some(Binding {
                name: "kvstores".into(),
                plugin: PluginSource {
                    image: Some("registry.local/kvstore:1".into()),
                    image_pull_secrets: Vec::new(),
                    config_map: None,
                    file: None,
                },
                source_namespace: "wasmop-system".into(),
                limits: None,
                version_path: vec!["version".into()],
                deleting: false,
                rollout: None,
            }),
        })
    }

    fn instance(spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "data.acme.io/v1", "kind": "KVStore",
            "metadata": {"name": "cache", "namespace": "team-a", "uid": "u1", "generation": 3},
            "spec": spec,
        }))
        .expect("an object")
    }

    /// The instance's version is the App's, the rest of its spec the configuration; the
    /// plugin and the source namespace are the binding's, never the instance's.
    #[test]
    fn an_instance_reads_as_an_app_with_the_bindings_plugin() {
        let parent = Parent::from_instance(
            &instance(json!({"version": "7.2.4", "replicas": 3})),
            bound(),
        );
        assert_eq!(parent.invalid, None);
        assert_eq!(parent.app.spec.version, "7.2.4");
        assert_eq!(parent.app.spec.config, Some(json!({"replicas": 3})));
        assert_eq!(
            parent.app.spec.plugin.image.as_deref(),
            Some("registry.local/kvstore:1")
        );
        assert_eq!(parent.source_namespace(), "wasmop-system");
        assert_eq!(parent.object["kind"], "KVStore");
        assert_eq!(parent.object["spec"]["version"], "7.2.4");
        let app_ref = parent.app_ref();
        assert_eq!(
            (app_ref.api_version.as_str(), app_ref.kind.as_str()),
            ("data.acme.io/v1", "KVStore")
        );
        assert_eq!(parent.key(), "team-a/KVStore.data.acme.io/cache");
        assert_eq!(parent.grantee(), "KVStore.data.acme.io/cache");
        assert_eq!(parent.describe(), "KVStore.data.acme.io team-a/cache");
    }

    #[test]
    fn an_instance_without_a_string_version_is_invalid_and_says_which_field() {
        for spec in [json!({"replicas": 3}), json!({"version": 7})] {
            let parent = Parent::from_instance(&instance(spec), bound());
            let invalid = parent.invalid.expect("invalid");
            assert!(invalid.contains("spec.version"), "{invalid}");
        }
    }

    /// A version elsewhere (`versionPath: spec.image.tag`) is taken out of the configuration,
    /// and the plugin reads it as `spec.version`; a configuration with a `version` of its own
    /// beside that path is refused, naming both.
    #[test]
    fn a_version_path_moves_the_version_to_where_the_plugin_reads_it() {
        let kind = |path: &[&str]| {
            let mut kind = (*bound()).clone();
            if let Some(b) = kind.binding.as_mut() {
                b.version_path = path.iter().map(|s| s.to_string()).collect();
            }
            Arc::new(kind)
        };
        let parent = Parent::from_instance(
            &instance(json!({"image": {"tag": "7.2.4", "repo": "kv"}, "replicas": 3})),
            kind(&["image", "tag"]),
        );
        assert_eq!(parent.invalid, None);
        assert_eq!(parent.app.spec.version, "7.2.4");
        let config = json!({"image": {"repo": "kv"}, "replicas": 3});
        assert_eq!(parent.app.spec.config, Some(config.clone()));
        let mut seen = config;
        seen["version"] = json!("7.2.4");
        assert_eq!(parent.object["spec"], seen);

        let clash = Parent::from_instance(
            &instance(json!({"image": {"tag": "7.2.4"}, "version": "x"})),
            kind(&["image", "tag"]),
        );
        let invalid = clash.invalid.expect("refused");
        assert!(
            invalid.contains("spec.image.tag") && invalid.contains("spec.version"),
            "{invalid}"
        );
        let missing =
            Parent::from_instance(&instance(json!({"image": {}})), kind(&["image", "tag"]));
        assert!(
            missing
                .invalid
                .expect("refused")
                .contains("spec.image.tag is missing"),
        );
    }

    #[test]
    fn an_app_keeps_its_keys() {
        let app = App::new(
            "cache",
            AppSpec {
                plugin: PluginSource {
                    image: Some("r/p:1".into()),
                    image_pull_secrets: Vec::new(),
                    config_map: None,
                    file: None,
                },
                version: "1".into(),
                config: None,
                limits: None,
            },
        );
        let mut app = app;
        app.metadata.namespace = Some("team-a".into());
        let parent = Parent::from_app(&app, ParentKind::app());
        assert_eq!(parent.key(), "team-a/cache");
        assert_eq!(parent.grantee(), "cache");
        assert_eq!(parent.source_namespace(), "team-a");
        assert_eq!(parent.kind.mark(), wasmop_core::observed::APP_KIND_MARK);
    }
}
