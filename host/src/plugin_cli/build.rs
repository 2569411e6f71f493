//! `plugin build`: the plugin crate for wasm32-wasip2, checked as the host would load it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{oci::read, prepare};
use crate::plugin::limits::CONFIGMAP_MAX_BYTES;

/// Builds the plugin crate at `path` for wasm32-wasip2 (release) and reports the component.
pub(super) fn build(path: &Path) -> anyhow::Result<()> {
    let manifest = path.join("Cargo.toml");
    if !manifest.is_file() {
        bail!("{} has no Cargo.toml", path.display());
    }
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo")?;
    if !output.status.success() {
        bail!("cargo build of {} failed", manifest.display());
    }
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m.get("reason").and_then(Value::as_str) == Some("compiler-artifact"))
        .filter(|m| {
            m.pointer("/target/kind")
                .and_then(Value::as_array)
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            m.get("filenames")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .rfind(|f| f.extension().is_some_and(|e| e == "wasm"))
        .context("cargo built no .wasm cdylib; is crate-type = [\"cdylib\"] set?")?;
    let bytes = read(&wasm)?;
    let (_engine, compiled) = prepare(&wasm.display().to_string(), &bytes)?;
    let capabilities: Vec<&str> = compiled
        .capabilities
        .iter()
        .map(|c| c.interface())
        .collect();
    println!("{}", wasm.display());
    println!("size:         {} bytes", bytes.len());
    println!("digest:       {}", compiled.digest);
    println!("capabilities: {}", capabilities.join(", "));
    if bytes.len() > CONFIGMAP_MAX_BYTES {
        eprintln!(
            "warning: {} is {} bytes, over a ConfigMap's {CONFIGMAP_MAX_BYTES}: serve it from an \
             OCI registry (spec.plugin.image), or build it smaller (opt-level = \"s\", lto = true)",
            wasm.display(),
            bytes.len()
        );
    }
    Ok(())
}
