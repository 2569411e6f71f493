//! `plugin inspect`: name, version, capabilities, world and digest of a component.

use serde_json::json;

use super::{blocking, oci::load_bytes, prepare};
use crate::plugin::bindings;

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
    let world = format!("{}@{}", bindings::PACKAGE, bindings::WORLD_VERSION);
    if json {
        let out = json!({
            "name": m.name, "version": m.version, "description": m.description,
            "capabilities": capabilities, "world": world, "size": bytes.len(),
            "digest": compiled.digest.as_str(), "owns": m.owns, "observes": m.observes,
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
    }
    Ok(())
}
