//! The CNCF Wasm OCI artifact `plugin push` writes: the config blob and the manifest's
//! annotations, as the TAG Runtime's Wasm OCI Artifact layout states them
//! (<https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/>) and the Bytecode
//! Alliance's `oci-wasm` (which `wkg` and `wash` use) reads them.
//!
//! Only writing is strict. Reading ([`super::OciSource::fetch`]) takes any manifest with exactly
//! one `application/wasm` layer, whatever its config says, so that what `oras push` writes (an
//! empty config) loads too.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::plugin::{
    Digest, bindings,
    compiled::{CompiledPlugin, PluginMetadata},
};

/// `architecture` of every Wasm artifact.
const ARCHITECTURE: &str = "wasm";
/// `os` of a component (a core module would be `wasip1`).
const COMPONENT_OS: &str = "wasip2";
/// The OCI annotation naming a manifest's title and a layer's file.
const TITLE: &str = "org.opencontainers.image.title";

/// The config blob (`application/vnd.wasm.config.v0+json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// RFC 3339, UTC: `SOURCE_DATE_EPOCH` when set, so a rebuild pushes the same config.
    pub created: String,
    /// Always `wasm`.
    pub architecture: &'static str,
    /// Always `wasip2`: wasmop plugins are components.
    pub os: &'static str,
    /// The layers' digests in manifest order; they make the config's digest unique per
    /// component (opencontainers/image-spec#1173).
    pub layer_digests: Vec<String>,
    /// Required for `wasip2`: the component's world as the component itself declares it.
    /// Absent only in [`Artifact::unchecked`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentWorld>,
}

/// The `component` field: what the component imports and exports, read from its type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentWorld {
    /// Exported instances, e.g. `wasmop:plugin/spec-diff@0.1.0`.
    pub exports: Vec<String>,
    /// Imported instances, e.g. `wasmop:plugin/log@0.1.0`, `wasi:cli/environment@0.2.6`.
    pub imports: Vec<String>,
    /// The world a host of this component speaks: `wasmop:plugin/plugin@<version>`, of which a
    /// plugin exports `metadata` and any subset of the capabilities.
    pub target: String,
}

/// Config and manifest annotations for one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The config blob's content.
    pub config: WasmConfig,
    /// The manifest's `org.opencontainers.image.*` annotations.
    pub annotations: BTreeMap<String, String>,
    /// The layer's file name (`org.opencontainers.image.title`, `<name>.wasm`), which `oras
    /// pull` needs to write the layer out at all and `wkg oci push` sets too.
    pub file_name: Option<String>,
}

impl Artifact {
    /// The artifact for `plugin`, whose code lives at `source` (a URL, if the pusher names
    /// one: nothing in a component says it), created at `created`.
    pub fn describe(plugin: &CompiledPlugin, source: Option<&str>, created: DateTime<Utc>) -> Self {
        let (imports, exports) = plugin.world();
        Self::new(
            &plugin.metadata,
            &plugin.digest,
            ComponentWorld {
                exports,
                imports,
                target: format!("{}/plugin@{}", bindings::PACKAGE, plugin.wit),
            },
            source,
            created,
        )
    }

    fn new(
        metadata: &PluginMetadata,
        digest: &Digest,
        component: ComponentWorld,
        source: Option<&str>,
        created: DateTime<Utc>,
    ) -> Self {
        let created = created.to_rfc3339_opts(SecondsFormat::Secs, true);
        let annotations = [
            (TITLE, metadata.name.as_str()),
            ("org.opencontainers.image.version", &metadata.version),
            (
                "org.opencontainers.image.description",
                &metadata.description,
            ),
            (
                "org.opencontainers.image.source",
                source.unwrap_or_default(),
            ),
            ("org.opencontainers.image.created", &created),
        ]
        .into_iter()
        // An empty annotation says nothing; registries' UIs show it as a blank field.
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
        Self {
            config: WasmConfig {
                created,
                architecture: ARCHITECTURE,
                os: COMPONENT_OS,
                layer_digests: vec![digest.as_str().to_string()],
                component: Some(component),
            },
            annotations,
            file_name: Some(file_name(&metadata.name)),
        }
    }

    /// An artifact for bytes that were not loaded: no `component` field and no annotations.
    /// Tests and the benchmark push broken components with it; `plugin push` never does.
    pub fn unchecked(component: &[u8]) -> Self {
        Self {
            config: WasmConfig {
                created: Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
                architecture: ARCHITECTURE,
                os: COMPONENT_OS,
                layer_digests: vec![Digest::of(component).as_str().to_string()],
                component: None,
            },
            annotations: BTreeMap::new(),
            file_name: None,
        }
    }

    /// The layer's annotations.
    pub fn layer_annotations(&self) -> Option<BTreeMap<String, String>> {
        let name = self.file_name.clone()?;
        Some(BTreeMap::from([(TITLE.to_string(), name)]))
    }

    /// The config blob's bytes.
    pub fn config_json(&self) -> Vec<u8> {
        // A struct of strings and vectors of strings: serialising it cannot fail.
        serde_json::to_vec(&self.config).unwrap_or_default()
    }
}

/// `<name>.wasm` where the plugin's self-declared name is a plain file name (lower-case
/// letters, digits, `-`, `_`, `.`, not starting with a dot), else `plugin.wasm`: `oras pull`
/// writes the layer under this title, so a name like `../x` must never reach it.
fn file_name(name: &str) -> String {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        });
    if plain {
        format!("{name}.wasm")
    } else {
        "plugin.wasm".to_string()
    }
}

/// `created` for a push of `file`: `SOURCE_DATE_EPOCH` (reproducible-builds.org) when set and
/// valid, else when the file was last written (so pushing the same build again writes the same
/// manifest, and a signature made for it still holds), else now.
pub fn created_for(file: &std::path::Path) -> DateTime<Utc> {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|secs| DateTime::from_timestamp(secs, 0))
        .or_else(|| {
            let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok()?;
            Some(DateTime::<Utc>::from(modified))
        })
        .unwrap_or_else(Utc::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_title_is_a_plain_file_name_whatever_the_plugin_calls_itself() {
        assert_eq!(file_name("kvstore"), "kvstore.wasm");
        assert_eq!(file_name("my-cache_2"), "my-cache_2.wasm");
        for hostile in [
            "../../etc/cron.d/x",
            "/abs",
            "a/b",
            ".hidden",
            "Upper",
            "",
            "a\\b",
        ] {
            assert_eq!(file_name(hostile), "plugin.wasm", "{hostile:?}");
        }
    }

    #[test]
    fn the_config_has_every_field_the_cncf_layout_requires_for_a_component() {
        let metadata = PluginMetadata {
            name: "kvstore".into(),
            version: "1.2.0".into(),
            description: String::new(),
            owns: vec![],
            observes: vec![],
            config_schema: None,
            printer_columns: vec![],
            versions: vec![],
        };
        let digest = Digest::of(b"component");
        let world = ComponentWorld {
            exports: vec!["wasmop:plugin/metadata@0.1.0".into()],
            imports: vec!["wasmop:plugin/log@0.1.0".into()],
            target: "wasmop:plugin/plugin@0.1.0".into(),
        };
        let created = DateTime::from_timestamp(1_700_000_000, 0).expect("a valid time");
        let artifact = Artifact::new(
            &metadata,
            &digest,
            world,
            Some("https://example.com/kvstore"),
            created,
        );
        let config: serde_json::Value =
            serde_json::from_slice(&artifact.config_json()).expect("JSON");
        assert_eq!(
            config,
            serde_json::json!({
                "created": "2023-11-14T22:13:20Z",
                "architecture": "wasm",
                "os": "wasip2",
                "layerDigests": [digest.as_str()],
                "component": {
                    "exports": ["wasmop:plugin/metadata@0.1.0"],
                    "imports": ["wasmop:plugin/log@0.1.0"],
                    "target": "wasmop:plugin/plugin@0.1.0",
                },
            })
        );
        assert_eq!(
            artifact.annotations["org.opencontainers.image.title"],
            "kvstore"
        );
        assert_eq!(
            artifact.annotations["org.opencontainers.image.version"],
            "1.2.0"
        );
        assert_eq!(
            artifact.layer_annotations(),
            Some(BTreeMap::from([(
                TITLE.to_string(),
                "kvstore.wasm".to_string()
            )]))
        );
        assert_eq!(
            artifact.annotations["org.opencontainers.image.source"],
            "https://example.com/kvstore"
        );
        assert!(
            !artifact
                .annotations
                .contains_key("org.opencontainers.image.description"),
            "an empty description is left out"
        );
    }
}
