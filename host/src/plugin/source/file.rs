//! File sources, for development: the component is read from the host's filesystem and the
//! file is watched for changes (see `plugin::watch`).

use std::path::Path;

use super::{Fetched, SourceRef, fetch_error};
use crate::plugin::{LoadError, limits::MAX_COMPONENT_BYTES};

/// Reads the component at `path`.
pub async fn read(source: &SourceRef, path: &Path) -> Result<Fetched, LoadError> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|err| fetch_error(source, format!("reading {}: {err}", path.display())))?;
    if meta.len() > MAX_COMPONENT_BYTES as u64 {
        return Err(fetch_error(
            source,
            format!(
                "{} is {} bytes, over the {MAX_COMPONENT_BYTES} byte limit",
                path.display(),
                meta.len()
            ),
        ));
    }
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|err| fetch_error(source, format!("reading {}: {err}", path.display())))?;
    Ok(Fetched::new(bytes))
}
