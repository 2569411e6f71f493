//! The App custom resource as a plugin sees it, with `spec.config` typed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use serde_json::value::RawValue;

use crate::error::{Error, ErrorKind, Result, from_path_error, json_message};

/// `apiVersion` of the App resource.
pub const API_VERSION: &str = "wasmop.dev/v1alpha1";
/// `kind` of the App resource.
pub const KIND: &str = "App";

/// One App (`apps.wasmop.dev/v1alpha1`), with `spec.config` deserialized into
/// the plugin's own type `C`.
#[derive(Debug, Clone, PartialEq)]
pub struct App<C> {
    /// Standard object metadata. `name` and `namespace` are always set;
    /// `managedFields` and kubectl's last-applied annotation are not sent.
    pub metadata: ObjectMeta,
    /// What the user asked for.
    pub spec: AppSpec<C>,
    /// What the host last recorded; empty before the first reconcile.
    pub status: AppStatus,
}

/// The App's spec.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSpec<C> {
    /// Desired service version, e.g. `7.2.4`. The plugin validates its form.
    pub version: String,
    /// `spec.config`, deserialized. A missing or null config is read as `{}`,
    /// so `#[serde(default)]` fields get their defaults.
    pub config: C,
    /// `spec.plugin` as written (which image or ConfigMap); rarely needed.
    pub plugin: serde_json::Value,
    /// `spec.limits` as written, if any.
    pub limits: Option<serde_json::Value>,
}

/// The part of the App's status plugins may read. Written by the host only.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The generation this status describes.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// One-word summary.
    #[serde(default)]
    pub phase: Option<String>,
    /// The rolled-out service version.
    #[serde(default)]
    pub version: Option<String>,
    /// Standard and plugin conditions. Entries that are not well-formed
    /// conditions are dropped rather than failing the whole App: a plugin
    /// must keep working whatever else wrote to the status.
    #[serde(default, deserialize_with = "lenient_conditions")]
    pub conditions: Vec<Condition>,
}

fn lenient_conditions<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Vec<Condition>, D::Error> {
    let values = Option::<Vec<serde_json::Value>>::deserialize(de)?.unwrap_or_default();
    Ok(values
        .iter()
        .filter_map(|v| Condition::deserialize(v).ok())
        .collect())
}

impl<C> App<C> {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// `spec.config`, typed.
    pub fn config(&self) -> &C {
        &self.spec.config
    }

    /// `spec.version`.
    pub fn version(&self) -> &str {
        &self.spec.version
    }
}

/// The App as the host sends it, read in one pass: `metadata` and `status`
/// are typed on the way (the App's metadata carries the largest strings,
/// such as users' annotations, so it is scanned once), and
/// `spec` stays a slice of the text, typed next with field paths for errors.
///
/// Everything is typed straight from text, the same deserializer observed
/// objects use: each k8s-openapi type then has one deserializer
/// instantiation in the component, which matters for its size (ObjectMeta
/// alone is tens of kilobytes of wasm per instantiation), and no
/// `serde_json::Value` tree is built, which matters for the time of a call.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawApp<'a> {
    api_version: String,
    kind: String,
    #[serde(deserialize_with = "metadata_field")]
    metadata: ObjectMeta,
    #[serde(borrow)]
    spec: &'a RawValue,
    #[serde(default, deserialize_with = "status_field")]
    status: AppStatus,
}

/// Names the part in the message: these errors carry no field path.
fn metadata_field<'de, D: serde::Deserializer<'de>>(de: D) -> Result<ObjectMeta, D::Error> {
    ObjectMeta::deserialize(de).map_err(|e| serde::de::Error::custom(format!("metadata: {e}")))
}

fn status_field<'de, D: serde::Deserializer<'de>>(de: D) -> Result<AppStatus, D::Error> {
    Option::<AppStatus>::deserialize(de)
        .map(Option::unwrap_or_default)
        .map_err(|e| serde::de::Error::custom(format!("status: {e}")))
}

#[derive(Deserialize)]
struct RawSpec<'a> {
    version: String,
    #[serde(default, borrow)]
    config: Option<&'a RawValue>,
    #[serde(default)]
    plugin: serde_json::Value,
    #[serde(default)]
    limits: Option<serde_json::Value>,
}

impl<C: DeserializeOwned> App<C> {
    /// Reads the App from the JSON text the host sends.
    ///
    /// A malformed object is [`ErrorKind::InvalidInput`] (the host should never
    /// send one); a `spec.config` that does not fit `C` is
    /// [`ErrorKind::InvalidConfig`] naming the field, e.g.
    /// `spec.config.backup.retain`.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: RawApp<'_> = serde_json::from_str(text).map_err(|e| {
            Error::invalid_input(format!("the App is not readable: {}", json_message(&e)))
        })?;
        if raw.api_version != API_VERSION || raw.kind != KIND {
            return Err(Error::invalid_input(format!(
                "expected {API_VERSION} {KIND}, got {} {}",
                raw.api_version, raw.kind
            )));
        }
        let metadata = raw.metadata;
        for (field, value) in [
            ("metadata.name", &metadata.name),
            ("metadata.namespace", &metadata.namespace),
        ] {
            if value.as_deref().is_none_or(str::is_empty) {
                return Err(
                    Error::invalid_input("the App has no name or namespace").with_field(field)
                );
            }
        }
        let status = raw.status;
        let spec: RawSpec<'_> = serde_path_to_error::deserialize(
            &mut serde_json::Deserializer::from_str(raw.spec.get()),
        )
        .map_err(|e| from_path_error(ErrorKind::InvalidInput, "spec", e))?;
        let config = match spec.config.map(RawValue::get) {
            None | Some("null") => "{}",
            Some(config) => config,
        };
        let config =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(config))
                .map_err(|e| from_path_error(ErrorKind::InvalidConfig, "spec.config", e))?;
        Ok(App {
            metadata,
            spec: AppSpec {
                version: spec.version,
                config,
                plugin: spec.plugin,
                limits: spec.limits,
            },
            status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Config {
        replicas: u32,
    }

    impl Default for Config {
        fn default() -> Self {
            Config { replicas: 3 }
        }
    }

    fn app(config: serde_json::Value) -> String {
        app_value(config).to_string()
    }

    fn app_value(config: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "wasmop.dev/v1alpha1",
            "kind": "App",
            "metadata": {"name": "cache", "namespace": "shop", "generation": 2},
            "spec": {"plugin": {"image": "r/kv:1"}, "version": "7.2.4", "config": config},
            "status": {
                "version": "7.2.3", "observedGeneration": 1, "somethingNew": true,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "Up", "message": "",
                     "lastTransitionTime": "2025-01-01T00:00:00Z"},
                    {"type": "Broken"}
                ]
            }
        })
    }

    #[test]
    fn reads_spec_status_and_typed_config() {
        let app = App::<Config>::from_json(&app(json!({"replicas": 5}))).expect("valid app");
        assert_eq!(app.name(), "cache");
        assert_eq!(app.namespace(), "shop");
        assert_eq!(app.version(), "7.2.4");
        assert_eq!(app.config().replicas, 5);
        assert_eq!(app.status.version.as_deref(), Some("7.2.3"));
        let types: Vec<_> = app
            .status
            .conditions
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, ["Available"], "malformed conditions are dropped");
    }

    #[test]
    fn missing_or_null_config_uses_defaults() {
        for config in [json!(null), json!({})] {
            let app = App::<Config>::from_json(&app(config)).expect("valid app");
            assert_eq!(app.config().replicas, 3);
        }
    }

    #[test]
    fn bad_config_names_the_field() {
        let err = App::<Config>::from_json(&app(json!({"replicas": "three"})))
            .expect_err("replicas is a number");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.field(), Some("spec.config.replicas"));

        let err = App::<Config>::from_json(&app(json!({"replica": 1}))).expect_err("unknown field");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("replica"), "{err}");
    }

    #[test]
    fn malformed_app_is_invalid_input() {
        let err = App::<Config>::from_json("{not json").expect_err("not json");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);

        let no_version = json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "a", "namespace": "b"}, "spec": {}
        });
        let err = App::<Config>::from_json(&no_version.to_string()).expect_err("no version");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("spec"));

        let wrong_kind = app(json!({})).replace("\"App\"", "\"Pod\"");
        let err = App::<Config>::from_json(&wrong_kind).expect_err("not an App");
        assert!(err.message().contains("Pod"), "{err}");

        let bad_metadata = app(json!({})).replace("\"generation\":2", "\"generation\":\"two\"");
        let err = App::<Config>::from_json(&bad_metadata).expect_err("generation is a number");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("metadata: invalid type"), "{err}");

        let mut no_ns = app_value(json!({}));
        no_ns["metadata"]
            .as_object_mut()
            .map(|m| m.remove("namespace"));
        let err = App::<Config>::from_json(&no_ns.to_string()).expect_err("no namespace");
        assert_eq!(err.field(), Some("metadata.namespace"));
    }
}
