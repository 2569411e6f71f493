//! `plugin crd`: a CustomResourceDefinition for a kind bound to a plugin, from the plugin's own
//! schema, and the ClusterRole the host needs to serve it. GitOps-friendly: the output is a file
//! a team reviews and applies; nothing is written to a cluster.
//!
//! The kind's `spec` is the plugin's configuration (its schema, made structural when the plugin
//! loaded: [`wasmop_core::structural`]) plus `version`, the service version the upgrade gate
//! rolls out; its `status` is the App's (the host writes the same status for every kind), as
//! the status subresource. A plugin without a schema (built for `wasmop:plugin@0.1.0`, or with a
//! free-form configuration) gets a `spec` that preserves unknown fields.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use wasmop_core::{answers::PluginMetadata, status::AppStatus, structural};

use super::{blocking, oci::load_bytes, prepare};
use crate::{cli::CrdScope, plugin::compiled::CompiledPlugin};

/// What `plugin crd` was asked for: the kind's names, as the flags give them.
#[derive(Debug, Clone)]
pub struct CrdRequest {
    /// `--group`, e.g. `data.acme.io`.
    pub group: String,
    /// `--kind`, e.g. `KVStore`.
    pub kind: String,
    /// `--version`: one version (`v1`) or several, oldest first (`v1alpha1,v1`); by default the
    /// versions the plugin declares, else `v1`.
    pub version: Option<String>,
    /// `--storage`: the version instances are stored in; by default the last of `--version`.
    pub storage: Option<String>,
    /// `--plural`; by default the kind in lower case, made plural.
    pub plural: Option<String>,
    /// `--short-name`, any number.
    pub short_names: Vec<String>,
    /// `--scope`.
    pub scope: CrdScope,
}

/// The kind's names, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// API group.
    pub group: String,
    /// CamelCase kind.
    pub kind: String,
    /// API versions, oldest first.
    pub versions: Vec<String>,
    /// The version instances are stored in, one of `versions`.
    pub storage: String,
    /// Plural resource name.
    pub plural: String,
    /// Singular resource name: the kind in lower case.
    pub singular: String,
    /// Short names.
    pub short_names: Vec<String>,
}

/// The host's own columns, around the plugin's: Ready and Version first, Age last.
const READY_PATH: &str = r#".status.conditions[?(@.type=="Ready")].status"#;

/// Prints (or writes to `output`) the CRD and ClusterRole for `plugin` as `request` names it.
pub(super) async fn crd(
    plugin: &str,
    request: CrdRequest,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    // The names first: a typo in a flag should not wait for a pull and a compile.
    let mut names = Names::check(&request)?;
    let bytes = load_bytes(plugin).await?;
    let label = plugin.to_string();
    let (asked, storage) = (request.version.clone(), request.storage.clone());
    let yaml = blocking(move || {
        let (_engine, compiled) = prepare(&label, &bytes)?;
        if asked.is_none() && !compiled.metadata.versions.is_empty() {
            names.versions = compiled
                .metadata
                .versions
                .iter()
                .map(|v| v.name.clone())
                .collect();
            names.storage = storage
                .clone()
                .unwrap_or_else(|| names.versions.last().cloned().unwrap_or_default());
            if !names.versions.contains(&names.storage) {
                bail!(
                    "--storage {:?} is not one of plugin {}'s versions ({})",
                    names.storage,
                    compiled.metadata.name,
                    names.versions.join(", ")
                );
            }
        }
        render(&compiled, &names)
    })
    .await?;
    match output {
        Some(path) => {
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{yaml}"),
    }
    Ok(())
}

/// The CRD and, after a `---`, the ClusterRole, as YAML.
fn render(plugin: &CompiledPlugin, names: &Names) -> anyhow::Result<String> {
    let source = format!(
        "{} {} ({}, wasmop:plugin@{})",
        plugin.metadata.name, plugin.metadata.version, plugin.digest, plugin.wit
    );
    let crd = custom_resource_definition(&plugin.metadata, names, &source)?;
    let role = cluster_role(names);
    Ok(format!(
        "{}---\n{}",
        serde_yaml::to_string(&crd)?,
        serde_yaml::to_string(&role)?
    ))
}

impl Names {
    /// Checks the flags as the API server would check the CRD's names, and refuses groups that
    /// are not the team's to define (wasmop's own, Kubernetes' built-in ones). Every error names
    /// its flag.
    pub fn check(request: &CrdRequest) -> anyhow::Result<Self> {
        let group = request.group.as_str();
        if !is_dns_subdomain(group) || !group.contains('.') {
            bail!(
                "--group {group:?} must be a DNS subdomain with a dot, such as data.acme.io \
                 (lower-case letters, digits, '-' and '.'; a domain the team owns)"
            );
        }
        if group == "wasmop.dev" || group.ends_with(".wasmop.dev") {
            bail!(
                "--group {group:?} is wasmop's own API group (App, PluginPolicy); use a domain \
                 the team owns, such as data.acme.io"
            );
        }
        let reserved = ["k8s.io", "kubernetes.io"];
        if reserved
            .iter()
            .any(|r| group == *r || group.ends_with(&format!(".{r}")))
        {
            bail!(
                "--group {group:?} is Kubernetes' (the *.k8s.io and *.kubernetes.io groups are \
                 the built-in APIs'); use a domain the team owns, such as data.acme.io"
            );
        }
        let kind = request.kind.as_str();
        let camel = kind.len() <= 63
            && kind.starts_with(|c: char| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !camel {
            bail!(
                "--kind {kind:?} must be CamelCase: an upper-case letter, then letters and \
                 digits, at most 63 (e.g. KVStore)"
            );
        }
        let listed = request.version.as_deref().unwrap_or("v1");
        let mut versions: Vec<String> = Vec::new();
        for version in listed.split(',').map(str::trim) {
            if !is_dns_label(version) || !version.starts_with('v') {
                bail!(
                    "--version {version:?} must be a Kubernetes API version such as v1 or \
                     v1alpha1 (a lower-case DNS label starting with 'v')"
                );
            }
            if versions.iter().any(|v| v == version) {
                bail!("--version {listed:?} names {version} twice");
            }
            versions.push(version.to_string());
        }
        let storage = match &request.storage {
            Some(storage) if !versions.contains(storage) => bail!(
                "--storage {storage:?} must be one of --version ({})",
                versions.join(", ")
            ),
            Some(storage) => storage.clone(),
            None => versions.last().cloned().unwrap_or_default(),
        };
        let singular = kind.to_ascii_lowercase();
        let plural = match &request.plural {
            Some(plural) => plural.clone(),
            None => plural_of(&singular),
        };
        if !is_dns_label(&plural) {
            bail!(
                "--plural {plural:?} must be a lower-case DNS label: letters, digits and '-', \
                 starting with a letter, at most 63"
            );
        }
        if plural == singular {
            bail!("--plural {plural:?} must differ from the singular, the kind in lower case");
        }
        if !is_dns_label(&singular) {
            bail!("--kind {kind:?} in lower case ({singular:?}) must be a DNS label");
        }
        let mut short_names = Vec::new();
        for short in &request.short_names {
            if !is_dns_label(short) {
                bail!("--short-name {short:?} must be a lower-case DNS label such as kvs");
            }
            if *short == plural || *short == singular || short_names.contains(short) {
                bail!(
                    "--short-name {short:?} repeats the plural, the singular or another short name"
                );
            }
            short_names.push(short.clone());
        }
        if request.scope == CrdScope::Cluster {
            bail!(
                "--scope Cluster: wasmop serves namespaced kinds only (a plugin's objects live in \
                 the instance's namespace)"
            );
        }
        Ok(Self {
            group: group.to_string(),
            kind: kind.to_string(),
            versions,
            storage,
            plural,
            singular,
            short_names,
        })
    }

    /// `<plural>.<group>`: the CRD's name.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// A lower-case RFC 1123 subdomain, as Kubernetes checks an API group.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A lower-case RFC 1035 label (a letter first), as Kubernetes checks a CRD's plural, singular,
/// short names and version names.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// English plural of a lower-case noun, the way `kubectl` guesses them: `kvstores`,
/// `policies`, `caches`, `boxes`.
fn plural_of(singular: &str) -> String {
    let consonant_y = singular.len() > 1
        && singular.ends_with('y')
        && !singular[..singular.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &singular[..singular.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| singular.ends_with(end))
    {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

/// The App's status schema (`wasmop_core::status::AppStatus`), made structural as a plugin's
/// configuration is: what the host writes into every instance's status.
pub fn status_schema() -> anyhow::Result<Value> {
    let generated = schemars::SchemaGenerator::default().into_root_schema_for::<AppStatus>();
    let mut schema = structural::structural(generated.as_value())
        .map_err(|err| anyhow::anyhow!("the status schema is not structural: {err}"))?;
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "description".into(),
            "Observed state, written only by the wasmop host: conditions (Ready, Reconciling \
             and Stalled as kstatus reads them, PluginReady, Available, Progressing, Degraded, \
             UpgradeGated and the plugin's own), the rolled-out version and the plugin serving \
             the instance."
                .into(),
        );
    }
    Ok(schema)
}

/// The kind's `spec`: `version`, then the configuration's properties as the plugin's schema
/// gives them, or any fields where it gives none.
/// `config` is the configuration schema of one version (`metadata`'s own, or one of its
/// `versions`).
pub fn spec_schema(
    metadata: &PluginMetadata,
    config: Option<&Value>,
    kind: &str,
) -> anyhow::Result<Value> {
    let version = json!({
        "type": "string",
        "minLength": 1,
        "description": "The version of the service to run, e.g. 7.2.4. The plugin's upgrade gate \
                        decides when a change rolls out; status.version is the version rolled out.",
    });
    let mut spec = match config {
        Some(Value::Object(config)) => config.clone(),
        Some(_) => bail!(
            "plugin {}'s configuration schema is not an object",
            metadata.name
        ),
        None => {
            let mut free = Map::new();
            free.insert("type".into(), "object".into());
            free.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
            free
        }
    };
    // The configuration's own `description` is the spec's; a root default or nullable says
    // nothing about a spec, which is required.
    spec.remove("nullable");
    spec.remove("default");
    spec.entry("description").or_insert_with(|| {
        format!(
            "The desired state of this {kind}: the version of the service and the \
             configuration of plugin {} (its fields are the plugin's).",
            metadata.name
        )
        .into()
    });
    let properties = spec
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(properties) = properties else {
        bail!(
            "plugin {}'s configuration schema has no object of properties",
            metadata.name
        );
    };
    if properties.contains_key("version") {
        bail!(
            "plugin {}'s configuration has a field `version` of its own: in a bound kind's spec \
             it would be the service version (spec.version), so the plugin cannot be bound to a \
             kind as it is",
            metadata.name
        );
    }
    properties.insert("version".into(), version);
    if spec.contains_key("additionalProperties") {
        bail!(
            "plugin {}'s configuration is a map (`additionalProperties`): a bound kind's spec \
             holds `version` beside it, and a structural schema cannot have both",
            metadata.name
        );
    }
    let required = spec
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(required) = required {
        required.insert(0, "version".into());
    }
    Ok(Value::Object(spec))
}

/// The CRD for `metadata`'s plugin under `names`; `source` says which plugin build it was made
/// from (an annotation).
pub fn custom_resource_definition(
    metadata: &PluginMetadata,
    names: &Names,
    source: &str,
) -> anyhow::Result<Value> {
    let status = status_schema()?;
    let description = if metadata.description.is_empty() {
        format!(
            "A {} served by the wasmop plugin {}.",
            names.kind, metadata.name
        )
    } else {
        format!(
            "A {} served by the wasmop plugin {}: {}",
            names.kind, metadata.name, metadata.description
        )
    };
    let mut columns = vec![
        json!({"name": "Ready", "type": "string", "jsonPath": READY_PATH,
               "description": "Whether it serves as configured (the Ready condition)"}),
        json!({"name": "Version", "type": "string", "jsonPath": ".status.version",
               "description": "The version rolled out"}),
    ];
    for column in &metadata.printer_columns {
        columns.push(serde_json::to_value(column)?);
    }
    columns.push(json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    let mut crd_names = json!({
        "kind": names.kind,
        "listKind": format!("{}List", names.kind),
        "plural": names.plural,
        "singular": names.singular,
        // Not `all`: `kubectl get all` is for the built-in workloads, and sig-cli advises
        // custom kinds against joining it.
        "categories": ["wasmop"],
    });
    if !names.short_names.is_empty() {
        crd_names["shortNames"] = json!(names.short_names);
    }
    let declared = &metadata.versions;
    if !declared.is_empty()
        && let Some(unknown) = names
            .versions
            .iter()
            .find(|v| !declared.iter().any(|d| &d.name == *v))
    {
        bail!(
            "--version {unknown}: plugin {} knows versions {} (its configuration has a schema \
             for each)",
            metadata.name,
            declared
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let converts = declared.len() > 1;
    if names.versions.len() > 1 && declared.is_empty() {
        // One schema for every version: the API server converts by rewriting apiVersion alone
        // (conversion strategy None), which is right only because nothing else differs.
    } else if names.versions.len() > 1 && !converts {
        bail!(
            "--version {}: plugin {} declares one version; it must export convert for several",
            names.versions.join(","),
            metadata.name
        );
    }
    let mut versions = Vec::new();
    for version in &names.versions {
        let config = match declared.iter().find(|d| &d.name == version) {
            Some(declared) => declared.config_schema.as_ref(),
            None => metadata.config_schema.as_ref(),
        };
        let spec = spec_schema(metadata, config, &names.kind)?;
        structural::check_structural(&spec).map_err(|err| {
            anyhow::anyhow!(
                "the spec of {version} made of plugin {}'s schema: {err}",
                metadata.name
            )
        })?;
        versions.push(json!({
            "name": version,
            "served": true,
            "storage": *version == names.storage,
            "schema": {"openAPIV3Schema": {
                "description": description,
                "type": "object",
                "required": ["spec"],
                "properties": {"spec": spec, "status": status},
            }},
            "subresources": {"status": {}},
            "additionalPrinterColumns": columns,
        }));
    }
    Ok(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": names.crd_name(),
            "annotations": {"wasmop.dev/generated-from": source},
        },
        "spec": {
            "group": names.group,
            "names": crd_names,
            "scope": "Namespaced",
            "versions": versions,
        },
    }))
}

/// The ClusterRole the host needs for a bound kind, aggregated into the host's own by its label:
/// read and patch instances, write their status and finalizers.
pub fn cluster_role(names: &Names) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": format!("wasmop-{}", names.crd_name()),
            "labels": {"wasmop.dev/aggregate-to-host": "true"},
        },
        "rules": [
            {
                "apiGroups": [names.group],
                "resources": [names.plural],
                "verbs": ["get", "list", "watch", "patch", "update"],
            },
            {
                "apiGroups": [names.group],
                "resources": [
                    format!("{}/status", names.plural),
                    format!("{}/finalizers", names.plural),
                ],
                "verbs": ["patch", "update"],
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::rbac::v1::ClusterRole,
        apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    };
    use wasmop_core::answers::{ApiVersionSchema, ColumnType, PrinterColumn};

    use super::*;

    fn request(group: &str, kind: &str) -> CrdRequest {
        CrdRequest {
            group: group.into(),
            kind: kind.into(),
            version: None,
            storage: None,
            plural: None,
            short_names: vec![],
            scope: CrdScope::Namespaced,
        }
    }

    fn names() -> Names {
        Names::check(&CrdRequest {
            short_names: vec!["kvs".into()],
            ..request("data.acme.io", "KVStore")
        })
        .expect("valid names")
    }

    fn metadata(config_schema: Option<Value>) -> PluginMetadata {
        PluginMetadata {
            name: "kvstore".into(),
            version: "0.1.0".into(),
            description: "A key-value store".into(),
            owns: vec![],
            observes: vec![],
            config_schema,
            printer_columns: vec![PrinterColumn {
                name: "Replicas".into(),
                type_: ColumnType::Integer,
                json_path: ".spec.replicas".into(),
                description: "Pods".into(),
            }],
            versions: vec![],
        }
    }

    /// `value` with every number as a float: k8s-openapi types `minimum` and the like as f64.
    fn floats(value: &Value) -> Value {
        match value {
            Value::Number(n) => json!(n.as_f64()),
            Value::Array(items) => Value::Array(items.iter().map(floats).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), floats(v))).collect())
            }
            other => other.clone(),
        }
    }

    fn config() -> Value {
        json!({
            "type": "object",
            "description": "The configuration.",
            "required": ["replicas"],
            "x-kubernetes-validations": [{"rule": "self.replicas <= 15"}],
            "properties": {"replicas": {"type": "integer", "minimum": 1,
                                        "description": "How many."}},
        })
    }

    #[test]
    fn names_are_checked_and_each_error_names_its_flag() {
        let n = names();
        assert_eq!(n.plural, "kvstores");
        assert_eq!(n.singular, "kvstore");
        assert_eq!(n.crd_name(), "kvstores.data.acme.io");
        let with = |change: fn(&mut CrdRequest)| {
            let mut r = request("data.acme.io", "KVStore");
            change(&mut r);
            Names::check(&r).map(|_| ()).map_err(|e| e.to_string())
        };
        for (case, result, flag) in [
            ("no dot", with(|r| r.group = "apps".into()), "--group"),
            (
                "the core group",
                with(|r| r.group = String::new()),
                "--group",
            ),
            (
                "wasmop's",
                with(|r| r.group = "wasmop.dev".into()),
                "--group",
            ),
            (
                "under wasmop's",
                with(|r| r.group = "x.wasmop.dev".into()),
                "--group",
            ),
            (
                "built in",
                with(|r| r.group = "apps.k8s.io".into()),
                "--group",
            ),
            (
                "rbac",
                with(|r| r.group = "rbac.authorization.k8s.io".into()),
                "--group",
            ),
            (
                "kubernetes.io",
                with(|r| r.group = "x.kubernetes.io".into()),
                "--group",
            ),
            (
                "upper case",
                with(|r| r.group = "Data.acme.io".into()),
                "--group",
            ),
            ("lower kind", with(|r| r.kind = "kvstore".into()), "--kind"),
            (
                "kind with a dash",
                with(|r| r.kind = "KV-Store".into()),
                "--kind",
            ),
            (
                "version",
                with(|r| r.version = Some("1".into())),
                "--version",
            ),
            (
                "a version twice",
                with(|r| r.version = Some("v1,v1".into())),
                "--version",
            ),
            (
                "storage not among the versions",
                with(|r| {
                    r.version = Some("v1alpha1,v1".into());
                    r.storage = Some("v2".into());
                }),
                "--storage",
            ),
            (
                "plural",
                with(|r| r.plural = Some("KVStores".into())),
                "--plural",
            ),
            (
                "plural is singular",
                with(|r| r.plural = Some("kvstore".into())),
                "--plural",
            ),
            (
                "short name",
                with(|r| r.short_names = vec!["k_v".into()]),
                "--short-name",
            ),
            (
                "short twice",
                with(|r| r.short_names = vec!["kv".into(), "kv".into()]),
                "--short-name",
            ),
            ("cluster", with(|r| r.scope = CrdScope::Cluster), "--scope"),
        ] {
            let err = result.expect_err(case);
            assert!(err.starts_with(flag), "{case}: {err}");
        }
        assert!(with(|r| r.group = "cluster.x-k8s.io".into()).is_ok());
        assert!(with(|r| r.plural = Some("kv-stores".into())).is_ok());
    }

    #[test]
    fn plurals_are_guessed_as_kubectl_does() {
        for (singular, plural) in [
            ("kvstore", "kvstores"),
            ("policy", "policies"),
            ("gateway", "gateways"),
            ("cache", "caches"),
            ("box", "boxes"),
            ("mesh", "meshes"),
            ("bus", "buses"),
        ] {
            assert_eq!(plural_of(singular), plural);
        }
    }

    #[test]
    fn several_versions_each_have_their_schema_and_one_is_stored() {
        let versioned = |names: &[&str]| {
            Names::check(&CrdRequest {
                version: Some(names.join(",")),
                ..request("data.acme.io", "KVStore")
            })
            .expect("valid names")
        };
        let old = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let mut converting = metadata(Some(config()));
        converting.versions = vec![
            ApiVersionSchema {
                name: "v1alpha1".into(),
                config_schema: Some(old.clone()),
            },
            ApiVersionSchema {
                name: "v1".into(),
                config_schema: Some(config()),
            },
        ];
        let crd = custom_resource_definition(&converting, &versioned(&["v1alpha1", "v1"]), "x")
            .expect("renders");
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 2);
        assert_eq!(
            (versions[0]["name"].clone(), versions[0]["storage"].clone()),
            (json!("v1alpha1"), json!(false))
        );
        assert_eq!(versions[1]["storage"], true);
        let spec = |v: &Value| v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone();
        assert!(spec(&versions[0])["properties"].get("text").is_some());
        assert!(spec(&versions[1])["properties"].get("replicas").is_some());
        // A version the plugin does not declare, or several of a plugin that declares none
        // but one, are refused naming what it knows.
        let err = custom_resource_definition(&converting, &versioned(&["v1beta1", "v1"]), "x")
            .expect_err("unknown version");
        assert!(err.to_string().contains("v1alpha1, v1"), "{err}");
        let mut one = metadata(Some(config()));
        one.versions = vec![ApiVersionSchema {
            name: "v1".into(),
            config_schema: Some(config()),
        }];
        let err = custom_resource_definition(&one, &versioned(&["v1"]), "x");
        assert!(err.is_ok(), "{err:?}");
        // A plugin that declares no versions: every version has its one schema.
        let plain = custom_resource_definition(
            &metadata(Some(config())),
            &versioned(&["v1beta1", "v1"]),
            "x",
        )
        .expect("renders");
        assert_eq!(
            spec(&plain["spec"]["versions"][0]),
            spec(&plain["spec"]["versions"][1])
        );
    }

    #[test]
    fn the_crd_has_the_plugins_schema_wasmops_status_and_columns() {
        let crd = custom_resource_definition(&metadata(Some(config())), &names(), "kvstore 0.1.0")
            .expect("renders");
        // Everything in it is a field of the API's types: it deserializes and serializes back
        // the same, so the API server reads what was printed.
        let typed: CustomResourceDefinition =
            serde_json::from_value(crd.clone()).expect("a CustomResourceDefinition");
        assert_eq!(
            floats(&serde_json::to_value(&typed).expect("serializes")),
            floats(&crd)
        );
        let version = &crd["spec"]["versions"][0];
        let root = &version["schema"]["openAPIV3Schema"];
        structural::check_structural(root).expect("structural");
        let spec = &root["properties"]["spec"];
        assert_eq!(spec["required"], json!(["version", "replicas"]));
        assert_eq!(spec["description"], "The configuration.");
        assert_eq!(spec["properties"]["replicas"]["minimum"], 1);
        assert_eq!(spec["properties"]["version"]["type"], "string");
        assert_eq!(
            spec["x-kubernetes-validations"][0]["rule"],
            "self.replicas <= 15"
        );
        let status = &root["properties"]["status"];
        for field in ["conditions", "observedGeneration", "version", "plugin"] {
            assert!(status["properties"].get(field).is_some(), "status.{field}");
        }
        assert_eq!(
            status["properties"]["plugin"]["properties"]["digest"]["type"],
            "string"
        );
        assert_eq!(version["subresources"], json!({"status": {}}));
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().expect("a name"))
            .collect();
        assert_eq!(columns, ["Ready", "Version", "Replicas", "Age"]);
        assert_eq!(
            version["additionalPrinterColumns"][0]["jsonPath"],
            READY_PATH
        );
        let names = &crd["spec"]["names"];
        assert_eq!(names["listKind"], "KVStoreList");
        assert_eq!(names["shortNames"], json!(["kvs"]));
        assert_eq!(names["categories"], json!(["wasmop"]));
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["metadata"]["name"], "kvstores.data.acme.io");
    }

    #[test]
    fn without_a_schema_the_spec_keeps_any_field_besides_version() {
        let crd = custom_resource_definition(&metadata(None), &names(), "old").expect("renders");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(spec["required"], json!(["version"]));
        assert_eq!(spec["properties"]["version"]["type"], "string");
        structural::check_structural(spec).expect("structural");
    }

    #[test]
    fn a_config_with_its_own_version_field_cannot_be_bound() {
        let mut schema = config();
        schema["properties"]["version"] = json!({"type": "string"});
        let err = custom_resource_definition(&metadata(Some(schema)), &names(), "x")
            .expect_err("shadowed");
        assert!(err.to_string().contains("field `version`"), "{err}");
    }

    #[test]
    fn a_config_that_is_a_map_cannot_share_the_spec_with_version() {
        let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
        let err = custom_resource_definition(&metadata(Some(map)), &names(), "x")
            .expect_err("a map beside version");
        assert!(err.to_string().contains("is a map"), "{err}");
    }

    #[test]
    fn the_status_schema_is_the_apps() {
        let ours = status_schema().expect("structural");
        // kube-derive's rendering of the same type for the App CRD: the same fields.
        let crd = <crate::app::App as kube::CustomResourceExt>::crd();
        let theirs = serde_json::to_value(&crd.spec.versions[0].schema).expect("JSON");
        let theirs = &theirs["openAPIV3Schema"]["properties"]["status"];
        let fields = |schema: &Value| -> Vec<String> {
            schema["properties"]
                .as_object()
                .expect("object")
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(fields(&ours), fields(theirs));
        assert_eq!(
            fields(&ours["properties"]["conditions"]["items"]),
            fields(&theirs["properties"]["conditions"]["items"])
        );
    }

    #[test]
    fn the_cluster_role_grants_what_the_host_needs_for_the_kind() {
        let role = cluster_role(&names());
        let typed: ClusterRole = serde_json::from_value(role.clone()).expect("a ClusterRole");
        assert_eq!(
            floats(&serde_json::to_value(&typed).expect("serializes")),
            floats(&role)
        );
        assert_eq!(role["metadata"]["name"], "wasmop-kvstores.data.acme.io");
        assert_eq!(
            role["metadata"]["labels"]["wasmop.dev/aggregate-to-host"],
            "true"
        );
        assert_eq!(role["rules"][0]["resources"], json!(["kvstores"]));
        assert_eq!(
            role["rules"][0]["verbs"],
            json!(["get", "list", "watch", "patch", "update"])
        );
        assert_eq!(
            role["rules"][1]["resources"],
            json!(["kvstores/status", "kvstores/finalizers"])
        );
        assert_eq!(role["rules"][1]["apiGroups"], json!(["data.acme.io"]));
    }
}
