//! `plugin push` and `plugin pull`, and reading a plugin from a file or a registry.

use std::path::Path;

use anyhow::Context;

use super::{blocking, prepare};
use crate::plugin::source::{OciRef, SourceRef, oci::OciSource};

/// Checks `file` as the host would load it, then pushes it to `reference`.
pub(super) async fn push(file: &Path, reference: &str, insecure: bool) -> anyhow::Result<()> {
    let bytes = read(file)?;
    // Refuse to publish what the host would refuse to load.
    let (label, checked) = (file.display().to_string(), bytes.clone());
    blocking(move || prepare(&label, &checked).map(drop)).await?;
    let digest = oci(reference, insecure)?.push(reference, &bytes).await?;
    let parsed: oci_client::Reference = reference.parse()?;
    println!(
        "{}/{}@{digest}",
        parsed.resolve_registry(),
        parsed.repository()
    );
    Ok(())
}

/// Pulls `reference` (digest verified) into `output`.
pub(super) async fn pull(reference: &str, output: &Path, insecure: bool) -> anyhow::Result<()> {
    let target = OciRef::with_host_credentials(reference.to_string());
    let source = SourceRef::Oci(target.clone());
    let (_, fetched) = oci(reference, insecure)?.fetch(&source, &target).await?;
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

pub(super) fn oci(reference: &str, insecure: bool) -> anyhow::Result<OciSource> {
    let parsed: oci_client::Reference = reference
        .parse()
        .with_context(|| format!("invalid OCI reference {reference:?}"))?;
    let insecure = if insecure {
        vec![parsed.resolve_registry().to_string()]
    } else {
        vec![]
    };
    OciSource::new(None, insecure)
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
    let (_, fetched) = oci(plugin, false)
        .with_context(|| format!("{plugin} is neither a file nor an OCI reference"))?
        .fetch(&source, &target)
        .await?;
    Ok(fetched.bytes)
}
