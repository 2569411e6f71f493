//! `wasmop plugin ...`: the plugin author's loop — scaffold, build, inspect, run against
//! fixtures, push, pull — and the platform team's `crd`, one module per subcommand. Everything
//! runs the host's own pipeline (verify, compile, validate, sandboxed calls, guard, the decision
//! core), so what passes here behaves the same in the host.

mod build;
pub(crate) mod crd;
mod diff;
mod inspect;
mod oci;
mod reconcile;
mod run;
mod scaffold;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::{
    cli::PluginCommand,
    plugin::{Digest, compiled::CompiledPlugin, engine::PluginEngine},
};

/// Runs one `wasmop plugin` subcommand.
pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::New { name, dir, sdk } => scaffold::scaffold(&name, dir, sdk),
        PluginCommand::Build { path } => {
            blocking(move || build::build(&path.unwrap_or_else(|| PathBuf::from(".")))).await
        }
        PluginCommand::Inspect { plugin, json } => inspect::inspect(&plugin, json).await,
        PluginCommand::Crd {
            plugin,
            group,
            kind,
            version,
            storage,
            plural,
            short_names,
            scope,
            output,
        } => {
            let request = crd::CrdRequest {
                group,
                kind,
                version,
                storage,
                plural,
                short_names,
                scope,
            };
            crd::crd(&plugin, request, output).await
        }
        PluginCommand::Run {
            plugin,
            app,
            observed,
            live,
            diff,
            capability,
            now,
            policy,
            json,
        } => {
            let policy = policy.map(|path| run::read_policy(&path)).transpose()?;
            if let Some(target) = live {
                let request = run::LiveRequest {
                    target,
                    diff,
                    now,
                    policy,
                    json,
                };
                return run::run_live(&plugin, request).await;
            }
            let Some(app) = app else {
                anyhow::bail!("plugin run needs --app FILE or --live NAMESPACE/NAME");
            };
            let request = run::RunRequest {
                app,
                observed,
                which: capability,
                now,
                policy: policy.unwrap_or_default(),
                json,
            };
            run::run_capabilities(&plugin, request).await
        }
        PluginCommand::Push {
            file,
            reference,
            source,
            registry,
        } => oci::push(&file, &reference, source.as_deref(), &registry).await,
        PluginCommand::Pull {
            reference,
            output,
            registry,
        } => oci::pull(&reference, &output, &registry).await,
    }
}

/// Runs plugin work on a blocking thread: wasmtime calls are synchronous, and WASI's stdio
/// must not block a runtime worker.
async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<R> + Send + 'static,
) -> anyhow::Result<R> {
    tokio::task::spawn_blocking(work)
        .await
        .context("plugin work panicked")?
}

/// The engine stays in its `Arc`: its epoch ticker (the deadlines) lives as long as it does.
fn prepare(
    label: &str,
    bytes: &[u8],
) -> anyhow::Result<(std::sync::Arc<PluginEngine>, CompiledPlugin)> {
    let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let plugin = CompiledPlugin::prepare(&engine, None, label, bytes, Digest::of(bytes))?;
    Ok((engine, plugin))
}

/// Reads YAML or JSON documents: one object, a list, a `kind: List`, or several documents.
fn read_objects(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in
            std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?
        {
            let file = entry?.path();
            if file
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            {
                files.push(file);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document)
                .with_context(|| format!("parsing {}", file.display()))?;
            match value {
                Value::Null => {}
                Value::Array(items) => objects.extend(items),
                Value::Object(ref map)
                    if map.get("kind").and_then(Value::as_str) == Some("List") =>
                {
                    objects.extend(
                        map.get("items")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default(),
                    );
                }
                other => objects.push(other),
            }
        }
    }
    Ok(objects)
}

fn print_value(out: &Value, json_out: bool) -> anyhow::Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(out)?);
    } else {
        print!("{}", serde_yaml::to_string(out)?);
    }
    Ok(())
}
