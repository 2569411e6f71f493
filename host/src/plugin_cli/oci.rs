//! `plugin push` and `plugin pull`, and reading a plugin from a file or a registry.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{blocking, prepare};
use crate::{
    cli::RegistryArgs,
    plugin::source::{
        OciRef, SourceRef,
        oci::{
            OciSource,
            artifact::{Artifact, created_for},
            reach::PrivateNetworks,
        },
    },
};

/// Checks `file` as the host would load it, then pushes it to `reference` as a CNCF Wasm
/// artifact whose config and annotations are read from the component.
pub(super) async fn push(
    file: &Path,
    reference: &str,
    source: Option<&str>,
    registry: &RegistryArgs,
) -> anyhow::Result<()> {
    let bytes = read(file)?;
    let created = created_for(file);
    // Refuse to publish what the host would refuse to load.
    let (label, checked, source) = (
        file.display().to_string(),
        bytes.clone(),
        source.map(str::to_string),
    );
    let artifact = blocking(move || {
        prepare(&label, &checked)
            .map(|(_, plugin)| Artifact::describe(&plugin, source.as_deref(), created))
    })
    .await?;
    let digest = oci(reference, registry)?
        .push(reference, &bytes, &artifact)
        .await?;
    let parsed = crate::plugin::source::reference::parse(reference)?;
    println!(
        "{}/{}@{digest}",
        parsed.resolve_registry(),
        parsed.repository()
    );
    Ok(())
}

/// Pulls `reference` (digest verified) into `output`.
pub(super) async fn pull(
    reference: &str,
    output: &Path,
    registry: &RegistryArgs,
) -> anyhow::Result<()> {
    let target = OciRef::with_host_credentials(reference.to_string());
    let source = SourceRef::Oci(target.clone());
    let (_, fetched) = oci(reference, registry)?.fetch(&source, &target).await?;
    std::fs::write(output, &fetched.bytes)
        .with_context(|| format!("writing {}", output.display()))?;
    println!(
        "{} {} bytes {}",
        output.display(),
        fetched.bytes.len(),
        fetched.digest
    );
    Ok(())
}

/// A client for `reference`'s registry with the credentials `registry` names, reaching private
/// addresses too: a person's command runs from their own network position and reaches what
/// they can (a registry on their machine or their company's network); only the host, which
/// reads registries an App's author names, refuses them by default. Link-local and metadata
/// addresses stay refused.
pub(super) fn oci(reference: &str, registry: &RegistryArgs) -> anyhow::Result<OciSource> {
    Ok(client(reference, registry)?.with_private_networks(PrivateNetworks::any()))
}

fn client(reference: &str, registry: &RegistryArgs) -> anyhow::Result<OciSource> {
    let parsed = crate::plugin::source::reference::parse(reference)
        .with_context(|| format!("invalid OCI reference {reference:?}"))?;
    let insecure = if registry.insecure {
        vec![parsed.resolve_registry().to_string()]
    } else {
        vec![]
    };
    if let Some(path) = &registry.registry_config {
        return OciSource::new(Some(path), insecure);
    }
    // The default file is docker's own: one this reader cannot use costs a warning, not the
    // command (an anonymous registry needs nothing from it).
    if let Some(path) = default_docker_config() {
        match OciSource::new(Some(&path), insecure.clone()) {
            Ok(source) => return Ok(source),
            Err(err) => eprintln!(
                "warning: not using the credentials in {}: {err:#}",
                path.display()
            ),
        }
    }
    OciSource::new(None, insecure)
}

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, if it exists: where docker,
/// oras and wkg keep registry logins.
fn default_docker_config() -> Option<PathBuf> {
    let dir = match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".docker"),
    };
    Some(dir.join("config.json")).filter(|path| path.is_file())
}

pub(super) fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("reading {}", file.display()))
}

/// A file path if it exists, else an OCI reference to pull.
pub(super) async fn load_bytes(plugin: &str) -> anyhow::Result<Vec<u8>> {
    let path = Path::new(plugin);
    if path.exists() {
        return read(path);
    }
    let target = OciRef::with_host_credentials(plugin);
    let source = SourceRef::Oci(target.clone());
    let (_, fetched) = oci(plugin, &RegistryArgs::default())
        .with_context(|| format!("{plugin} is neither a file nor an OCI reference"))?
        .fetch(&source, &target)
        .await?;
    Ok(fetched.bytes)
}
