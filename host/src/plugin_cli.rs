//! `wasmop plugin ...`: the plugin author's commands, running the host's own pipeline (verify,
//! compile, validate) so that what passes here loads in the host.

use std::path::Path;

use anyhow::Context;

use crate::{
    cli::PluginCommand,
    plugin::{
        Digest, bindings, compile::CompiledPlugin, engine::PluginEngine, source::oci::OciSource,
    },
};

/// Runs one `wasmop plugin` subcommand.
pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Inspect { file, json } => inspect(&file, json),
        PluginCommand::Push {
            file,
            reference,
            insecure,
        } => {
            let bytes = read(&file)?;
            let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
            // Refuse to publish what the host would refuse to load.
            CompiledPlugin::prepare(
                &engine,
                None,
                &file.display().to_string(),
                &bytes,
                Digest::of(&bytes),
            )?;
            let parsed: oci_client::Reference = reference
                .parse()
                .with_context(|| format!("invalid OCI reference {reference:?}"))?;
            let insecure = if insecure {
                vec![parsed.resolve_registry().to_string()]
            } else {
                vec![]
            };
            let digest = OciSource::new(None, insecure)?
                .push(&reference, &bytes)
                .await?;
            println!(
                "{}/{}@{digest}",
                parsed.resolve_registry(),
                parsed.repository()
            );
            Ok(())
        }
    }
}

fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("reading {}", file.display()))
}

fn inspect(file: &Path, json: bool) -> anyhow::Result<()> {
    let bytes = read(file)?;
    let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let digest = Digest::of(&bytes);
    let plugin = CompiledPlugin::prepare(
        &engine,
        None,
        &file.display().to_string(),
        &bytes,
        digest.clone(),
    )?;
    let m = &plugin.metadata;
    let capabilities: Vec<&str> = plugin.capabilities.iter().map(|c| c.interface()).collect();
    if json {
        let out = serde_json::json!({
            "name": m.name, "version": m.version, "description": m.description,
            "capabilities": capabilities, "world": format!("{}@{}", bindings::PACKAGE, bindings::WORLD_VERSION),
            "size": bytes.len(), "digest": digest.as_str(), "owns": m.owns, "observes": m.observes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("name:         {}", m.name);
        println!("version:      {}", m.version);
        println!("description:  {}", m.description);
        println!("capabilities: {}", capabilities.join(", "));
        println!(
            "world:        {}@{}",
            bindings::PACKAGE,
            bindings::WORLD_VERSION
        );
        println!("size:         {} bytes", bytes.len());
        println!("digest:       {digest}");
        println!("owns:         {}", m.owns.join(", "));
    }
    Ok(())
}
