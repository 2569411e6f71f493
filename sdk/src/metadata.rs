//! The [`Plugin`] trait every plugin implements, and the facts it reports.

use k8s_openapi::Resource;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::error::Result;

/// An optional interface of the WIT package: the decision core's capability table
/// ([`wasmop_core::capability`]), which the host reads too.
pub use wasmop_core::capability::Capability;

/// A column of `kubectl get` for a kind bound to the plugin, and the type of its values: the
/// host's own types, which it checks the plugin's columns with
/// ([`wasmop_core::answers::check_printer_columns`]).
pub use wasmop_core::answers::{ColumnType, PrinterColumn};

/// The part every plugin implements: who it is and what its config looks
/// like. The capability traits ([`SpecDiff`](crate::SpecDiff),
/// [`Health`](crate::Health), ...) build on it.
pub trait Plugin {
    /// `spec.config`, as the plugin's own serde type. Use
    /// `#[serde(default)]` for defaults and `deny_unknown_fields` to catch
    /// typos; the SDK reports deserialization errors with the field's path.
    ///
    /// Its [`JsonSchema`] is the configuration's schema, which `metadata.get`
    /// reports and `wasmop plugin crd` turns into a CustomResourceDefinition:
    /// derive it beside `Deserialize` (`#[derive(Deserialize, JsonSchema)]`,
    /// through [`wasmop_sdk::schemars`](crate::schemars)). Serde's attributes
    /// shape it (renames, defaults, optional fields), doc comments become the
    /// fields' descriptions (`kubectl explain`), and `#[schemars(range(min =
    /// 1, max = 15))]`, `length(...)`, `regex(pattern = ...)` or
    /// `extend("x-kubernetes-validations" = [...])` become rules the API
    /// server enforces. A `Config` that constrains nothing
    /// (`serde_json::Value`) declares no schema.
    type Config: DeserializeOwned + JsonSchema;

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
    /// Columns `kubectl get` shows for a kind bound to the plugin, after the
    /// host's Ready and Version; see [`Metadata::printer_column`].
    pub printer_columns: Vec<PrinterColumn>,
    /// The JSON Schema of [`Plugin::Config`]; filled in by
    /// [`export!`](crate::export) from the type (`None` for a free-form
    /// configuration).
    pub config_schema: Option<String>,
    /// The API versions of a bound kind the plugin knows, oldest first; filled
    /// in by [`export!`](crate::export) from [`Convert`](crate::Convert) when
    /// it is exported (its previous version and [`Plugin::Config`]'s), empty
    /// otherwise (one version, whose schema is `config_schema`).
    pub versions: Vec<ApiVersion>,
}

/// One API version of a bound kind, as `metadata.get` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersion {
    /// The version, e.g. `v1alpha1`.
    pub name: String,
    /// The JSON Schema of the configuration at this version (as
    /// [`config_schema`] derives it); `None`: free-form.
    pub config_schema: Option<String>,
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
            printer_columns: Vec::new(),
            config_schema: None,
            versions: Vec::new(),
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

    /// Adds a column to `kubectl get` of a kind bound to the plugin: its
    /// heading, the type of its values, a JSONPath into the instance starting
    /// with `.` (a bound kind's `spec` is the configuration, so a field is
    /// `.spec.<field>`) and one line of description (may be empty). At most
    /// 8; the host has Ready, Version and Age already.
    ///
    /// ```
    /// # use wasmop_sdk::{ColumnType, Metadata};
    /// let m = Metadata::new("kv", "1.0.0").printer_column(
    ///     "Replicas",
    ///     ColumnType::Integer,
    ///     ".spec.replicas",
    ///     "Pods asked for",
    /// );
    /// assert_eq!(m.printer_columns[0].json_path, ".spec.replicas");
    /// ```
    pub fn printer_column(
        mut self,
        name: impl Into<String>,
        type_: ColumnType,
        json_path: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        self.printer_columns.push(PrinterColumn {
            name: name.into(),
            type_,
            json_path: json_path.into(),
            description: description.into(),
        });
        self
    }
}

/// The JSON Schema (draft 2020-12) of a configuration type `C`, as `metadata.get` reports it:
/// `None` for a type that constrains nothing (`serde_json::Value`), whose configuration is
/// free-form. The host makes it structural (`wasmop_core::structural`).
pub fn config_schema<C: JsonSchema>() -> Option<String> {
    let settings =
        schemars::generate::SchemaSettings::draft2020_12().with(|s| s.meta_schema = None);
    let schema = settings.into_generator().into_root_schema_for::<C>();
    let free_form = match schema.as_object() {
        Some(object) => object
            .keys()
            .all(|k| matches!(k.as_str(), "title" | "description" | "$defs")),
        None => schema.as_bool() == Some(true),
    };
    (!free_form).then(|| schema.as_value().to_string())
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
        assert!(m.printer_columns.is_empty());
        assert_eq!(m.config_schema, None);
        assert!(m.versions.is_empty());
    }

    #[test]
    fn the_config_schema_is_the_types_with_serde_and_docs() {
        /// The config.
        #[derive(serde::Deserialize, JsonSchema)]
        #[serde(default, rename_all = "camelCase")]
        #[allow(dead_code)]
        struct Config {
            /// How many.
            #[schemars(range(min = 1, max = 5))]
            max_replicas: i32,
        }
        impl Default for Config {
            fn default() -> Self {
                Config { max_replicas: 2 }
            }
        }
        let text = config_schema::<Config>().expect("a schema");
        let schema: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["description"], "The config.");
        let field = &schema["properties"]["maxReplicas"];
        assert_eq!(field["description"], "How many.");
        assert_eq!(
            (&field["minimum"], &field["maximum"]),
            (&1.into(), &5.into())
        );
        assert_eq!(field["default"], 2);
        assert!(schema.get("$schema").is_none());
        // What the host makes of it.
        wasmop_core::structural::plugin_config(&text).expect("structural");
        assert_eq!(config_schema::<serde_json::Value>(), None);
    }
}
