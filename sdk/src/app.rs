//! The App custom resource as a plugin sees it, with its configuration typed: `spec.config` of
//! the built-in `App` (`wasmop.dev/v1alpha1`), or the whole `spec` but `spec.version` of an
//! instance of any other kind bound to the plugin. A plugin reads both the same way
//! ([`App::config`]), and serves both without a change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use serde_json::value::RawValue;

use crate::error::{Error, ErrorKind, Result, from_path_error, json_message};

/// `apiVersion` of the App resource.
pub const API_VERSION: &str = "wasmop.dev/v1alpha1";
/// `kind` of the App resource.
pub const KIND: &str = "App";

/// One App (`apps.wasmop.dev/v1alpha1`), or one instance of a kind bound to the
/// plugin (`KVStore` in `data.example.com/v1`, say), with its configuration
/// deserialized into the plugin's own type `C`: `spec.config` of an App, the
/// whole `spec` but `version` of another kind.
#[derive(Debug, Clone, PartialEq)]
pub struct App<C> {
    /// `apiVersion`: [`API_VERSION`] for an App, the bound kind's otherwise.
    pub api_version: String,
    /// `kind`: [`KIND`] for an App, the bound kind otherwise.
    pub kind: String,
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
    /// Desired service version, e.g. `7.2.4` (`spec.version`, whatever the
    /// kind). The plugin validates its form.
    pub version: String,
    /// The configuration, deserialized: `spec.config` of an App (a missing or
    /// null config is read as `{}`, so `#[serde(default)]` fields get their
    /// defaults), the whole `spec` but `version` of another kind (whose CRD puts
    /// the config fields beside `version`; so a `Config` has no field named
    /// `version`).
    pub config: C,
    /// `spec.plugin` as written (which image or ConfigMap); rarely needed.
    /// `null` for another kind: its binding names the plugin.
    pub plugin: serde_json::Value,
    /// `spec.limits` as written, if any; `None` for another kind.
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
    /// Whether this is the built-in `App` (its config in `spec.config`), not an
    /// instance of a kind bound to the plugin.
    pub fn is_app(&self) -> bool {
        is_app_kind(&self.api_version, &self.kind)
    }

    /// `err` naming its field where this App's configuration is. A plugin names
    /// a config field as an App has it (`spec.config.replicas`); for another
    /// kind, whose configuration is its `spec`, the SDK moves such a field to
    /// `spec.replicas` (every capability's error goes through this), so the
    /// plugin need not know which kind it serves.
    pub(crate) fn locate(&self, err: Error) -> Error {
        match err.field().and_then(|field| self.relocated(field)) {
            Some(field) => err.with_field(field),
            None => err,
        }
    }

    /// A configuration field named as an App has it (`spec.config.replicas`), where this
    /// instance has it (`spec.replicas` for another kind); `None` where that is the same.
    pub(crate) fn relocated(&self, field: &str) -> Option<String> {
        if self.is_app() {
            return None;
        }
        instance_field(field)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The configuration, typed: `spec.config` of an App, the whole `spec` but
    /// `version` of another kind.
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

/// A configuration field named as an App has it (`spec.config.replicas`), where an instance of
/// another kind has it (`spec.replicas`); `None` for a field outside the configuration.
pub(crate) fn instance_field(field: &str) -> Option<String> {
    match field {
        "spec.config" => Some("spec".to_string()),
        field => field
            .strip_prefix("spec.config.")
            .map(|rest| format!("spec.{rest}")),
    }
}

/// Whether `api_version` and `kind` are the built-in `App`'s (any version of
/// `wasmop.dev`).
pub(crate) fn is_app_kind(api_version: &str, kind: &str) -> bool {
    kind == KIND
        && api_version.rsplit_once('/').map(|(group, _)| group)
            == API_VERSION.split_once('/').map(|(group, _)| group)
}

/// The fields of a JSON object (another kind's `spec`, a whole instance), in order, each as its
/// text: read without typing what is only passed on.
pub(crate) struct RawFields<'a>(pub(crate) Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for RawFields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = RawFields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    fields.push((key, map.next_value()?));
                }
                Ok(RawFields(fields))
            }
        }
        de.deserialize_map(Fields)
    }
}

impl<'a> RawFields<'a> {
    /// The fields of the object `text`; not an object is invalid input at `at`.
    pub(crate) fn read(text: &'a str, at: &str) -> Result<Self> {
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
            .map_err(|e| from_path_error(ErrorKind::InvalidInput, at, e))
    }
}

/// Reads a configuration of type `C` from its JSON text, errors naming the field under `at`
/// (`spec.config`, `spec`): the one deserializer every configuration is read with, so a
/// component compiles `C`'s once.
pub(crate) fn read_config<C: DeserializeOwned>(text: &str, at: &str) -> Result<C> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
        .map_err(|e| from_path_error(ErrorKind::InvalidConfig, at, e))
}

/// The spec of another kind than `App`: `version` and the config, the rest of
/// `spec` as JSON text (the same deserializer then reads it as for an App).
pub(crate) fn instance_spec(spec: &RawValue) -> Result<(String, String)> {
    let fields = RawFields::read(spec.get(), "spec")?;
    let mut version = None;
    let mut config = String::from("{");
    for (key, value) in fields.0 {
        if key == "version" {
            version = Some(value);
            continue;
        }
        if config.len() > 1 {
            config.push(',');
        }
        config.push_str(&serde_json::to_string(&key).unwrap_or_default());
        config.push(':');
        config.push_str(value.get());
    }
    config.push('}');
    let version = version
        .ok_or_else(|| Error::invalid_input("missing field `version`").with_field("spec"))?;
    let version: String =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(version.get()))
            .map_err(|e| from_path_error(ErrorKind::InvalidInput, "spec.version", e))?;
    Ok((version, config))
}

impl<C: DeserializeOwned> App<C> {
    /// Reads the App from the JSON text the host sends: an App, or an
    /// instance of any other kind bound to the plugin.
    ///
    /// A malformed object is [`ErrorKind::InvalidInput`] (the host should never
    /// send one); a configuration that does not fit `C` is
    /// [`ErrorKind::InvalidConfig`] naming the field, e.g.
    /// `spec.config.backup.retain` for an App, `spec.backup.retain` for
    /// another kind.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: RawApp<'_> = serde_json::from_str(text).map_err(|e| {
            Error::invalid_input(format!("the App is not readable: {}", json_message(&e)))
        })?;
        if raw.api_version.is_empty() || raw.kind.is_empty() {
            return Err(Error::invalid_input("the App has no apiVersion or kind"));
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
        let config = read_config::<C>;
        let spec = if is_app_kind(&raw.api_version, &raw.kind) {
            let spec: RawSpec<'_> = serde_path_to_error::deserialize(
                &mut serde_json::Deserializer::from_str(raw.spec.get()),
            )
            .map_err(|e| from_path_error(ErrorKind::InvalidInput, "spec", e))?;
            let text = match spec.config.map(RawValue::get) {
                None | Some("null") => "{}",
                Some(text) => text,
            };
            AppSpec {
                version: spec.version,
                config: config(text, "spec.config")?,
                plugin: spec.plugin,
                limits: spec.limits,
            }
        } else {
            let (version, text) = instance_spec(raw.spec)?;
            AppSpec {
                version,
                config: config(&text, "spec")?,
                plugin: serde_json::Value::Null,
                limits: None,
            }
        };
        Ok(App {
            api_version: raw.api_version,
            kind: raw.kind,
            metadata,
            spec,
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

        let mut kindless = app_value(json!({}));
        kindless["kind"] = json!("");
        let err = App::<Config>::from_json(&kindless.to_string()).expect_err("no kind");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("kind"), "{err}");

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

    /// An instance of a kind bound to the plugin, as its CRD has it: the config
    /// fields beside `version` in `spec`.
    fn instance(spec: serde_json::Value) -> String {
        json!({
            "apiVersion": "data.example.com/v1",
            "kind": "KVStore",
            "metadata": {"name": "cache", "namespace": "shop", "generation": 2},
            "spec": spec,
            "status": {"version": "7.2.3"}
        })
        .to_string()
    }

    #[test]
    fn an_app_reads_its_config_from_spec_config() {
        let app = App::<Config>::from_json(&app(json!({"replicas": 5}))).expect("valid app");
        assert!(app.is_app());
        assert_eq!(
            (app.api_version.as_str(), app.kind.as_str()),
            (API_VERSION, KIND)
        );
        assert_eq!(app.spec.plugin, json!({"image": "r/kv:1"}));
    }

    #[test]
    fn another_kind_reads_its_config_from_the_whole_spec_but_version() {
        let kv = App::<Config>::from_json(&instance(json!({"version": "7.2.4", "replicas": 5})))
            .expect("valid instance");
        assert!(!kv.is_app());
        assert_eq!(
            (kv.api_version.as_str(), kv.kind.as_str()),
            ("data.example.com/v1", "KVStore")
        );
        assert_eq!(kv.name(), "cache");
        assert_eq!(kv.version(), "7.2.4");
        assert_eq!(kv.config().replicas, 5);
        assert_eq!(kv.status.version.as_deref(), Some("7.2.3"));
        assert_eq!(kv.spec.plugin, serde_json::Value::Null);
        assert_eq!(kv.spec.limits, None);

        // Defaults as for an App's missing config; `version` never reaches the config
        // (`Config` denies unknown fields).
        let defaults =
            App::<Config>::from_json(&instance(json!({"version": "1"}))).expect("valid instance");
        assert_eq!(defaults.config().replicas, 3);

        // A free-form config keeps the fields in order.
        let free = App::<serde_json::Value>::from_json(&instance(
            json!({"replicas": 2, "version": "1", "backup": {"schedule": "0 * * * *"}}),
        ))
        .expect("valid instance");
        assert_eq!(
            free.config(),
            &json!({"replicas": 2, "backup": {"schedule": "0 * * * *"}})
        );
    }

    /// A plugin's own error names a config field as an App has it; for another
    /// kind it is moved to where that kind has it.
    #[test]
    fn a_plugins_config_field_is_located_in_the_kinds_spec() {
        let kv = App::<Config>::from_json(&instance(json!({"version": "1"}))).expect("valid");
        let app = App::<Config>::from_json(&app(json!({}))).expect("valid");
        let err = || Error::invalid_config("spec.config.backup.retain", "too many");
        assert_eq!(kv.locate(err()).field(), Some("spec.backup.retain"));
        assert_eq!(app.locate(err()).field(), Some("spec.config.backup.retain"));
        let whole = Error::invalid_config("spec.config", "empty");
        assert_eq!(kv.locate(whole).field(), Some("spec"));
        let elsewhere = Error::invalid_input("bad").with_field("observed[0]");
        assert_eq!(kv.locate(elsewhere).field(), Some("observed[0]"));
        assert_eq!(kv.locate(Error::internal("x")).field(), None);
    }

    #[test]
    fn another_kinds_bad_config_names_the_field_in_spec() {
        let err = App::<Config>::from_json(&instance(json!({"version": "1", "replicas": "three"})))
            .expect_err("replicas is a number");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.field(), Some("spec.replicas"));

        let err = App::<Config>::from_json(&instance(json!({"version": "1", "replica": 1})))
            .expect_err("unknown field");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("replica"), "{err}");

        let err =
            App::<Config>::from_json(&instance(json!({"replicas": 1}))).expect_err("no version");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("spec"));
        assert!(err.message().contains("version"), "{err}");

        let err = App::<Config>::from_json(&instance(json!({"version": 7}))).expect_err("a number");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("spec.version"));

        let err = App::<Config>::from_json(&instance(json!([1]))).expect_err("not an object");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("spec"));
    }
}
