//! `plugin inspect`: name, version, capabilities, world (the `wasmop:plugin` version it was
//! built for), digest, whether it declares a configuration schema, and the API versions of a
//! bound kind it knows (with `convert`, those it converts between), of a component.

use serde_json::json;
use wasmop_core::answers::ApiVersionSchema;

use super::{blocking, oci::load_bytes, prepare};
use crate::plugin::Capability;

pub(super) async fn inspect(plugin: &str, json: bool) -> anyhow::Result<()> {
    let bytes = load_bytes(plugin).await?;
    let label = plugin.to_string();
    blocking(move || inspect_bytes(&label, &bytes, json)).await
}

fn inspect_bytes(plugin: &str, bytes: &[u8], json: bool) -> anyhow::Result<()> {
    let (_engine, compiled) = prepare(plugin, bytes)?;
    let m = &compiled.metadata;
    let capabilities: Vec<&str> = compiled
        .capabilities
        .iter()
        .map(|c| c.interface())
        .collect();
    let world = compiled.wit.package();
    // What `wasmop plugin crd` makes of it: the configuration's fields, or none.
    let schema = match &m.config_schema {
        Some(schema) => {
            let fields = schema
                .get("properties")
                .and_then(|p| p.as_object())
                .map_or(0, |p| p.len());
            format!("yes ({fields} top-level fields)")
        }
        None if compiled.wit.has_config_schema() => "none (free-form configuration)".into(),
        None => format!("none (built for {world}, which has none)"),
    };
    let columns: Vec<String> = m
        .printer_columns
        .iter()
        .map(|c| format!("{} ({})", c.name, c.json_path))
        .collect();
    if json {
        let out = json!({
            "name": m.name, "version": m.version, "description": m.description,
            "capabilities": capabilities, "world": world, "size": bytes.len(),
            "digest": compiled.digest.as_str(), "owns": m.owns, "observes": m.observes,
            "configSchema": m.config_schema, "printerColumns": m.printer_columns,
            "versions": m.versions,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("name:         {}", m.name);
        println!("version:      {}", m.version);
        println!("description:  {}", m.description);
        println!("capabilities: {}", capabilities.join(", "));
        println!("world:        {world}");
        println!("size:         {} bytes", bytes.len());
        println!("digest:       {}", compiled.digest);
        println!("owns:         {}", m.owns.join(", "));
        println!("schema:       {schema}");
        if !columns.is_empty() {
            println!("columns:      {}", columns.join(", "));
        }
        let converts = compiled.capabilities.contains(&Capability::Convert);
        if let Some(versions) = api_versions(&m.versions, converts) {
            println!("versions:     {versions}");
        }
    }
    Ok(())
}

/// The API versions the plugin knows, oldest first, each with the number of its schema's
/// top-level fields (`v1alpha1 (2 fields), v1 (2 fields)`), and whether it converts between
/// them; `None` when it lists none (one version, the configuration's schema).
fn api_versions(versions: &[ApiVersionSchema], converts: bool) -> Option<String> {
    if versions.is_empty() {
        return None;
    }
    let listed: Vec<String> = versions
        .iter()
        .map(|v| {
            let fields = v
                .config_schema
                .as_ref()
                .and_then(|s| s.get("properties"))
                .and_then(|p| p.as_object())
                .map(|p| p.len());
            match fields {
                Some(fields) => format!("{} ({fields} fields)", v.name),
                None => format!("{} (free-form)", v.name),
            }
        })
        .collect();
    let converts = if converts {
        "converted between"
    } else {
        "not converted"
    };
    Some(format!("{}; {converts}", listed.join(", ")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn versions_are_listed_oldest_first_with_their_fields() {
        let versions = [
            ApiVersionSchema {
                name: "v1alpha1".into(),
                config_schema: None,
            },
            ApiVersionSchema {
                name: "v1".into(),
                config_schema: Some(json!({"type": "object", "properties": {"a": {}, "b": {}}})),
            },
        ];
        assert_eq!(
            api_versions(&versions, true).as_deref(),
            Some("v1alpha1 (free-form), v1 (2 fields); converted between")
        );
        assert_eq!(
            api_versions(&versions[1..], false).as_deref(),
            Some("v1 (2 fields); not converted")
        );
        assert_eq!(api_versions(&[], true), None);
    }
}
