//! `plugin inspect`: name, version, capabilities, world (the `wasmop:plugin` version it was
//! built for), digest, and whether it declares a configuration schema, of a component.

use serde_json::json;

use super::{blocking, oci::load_bytes, prepare};

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
    }
    Ok(())
}
