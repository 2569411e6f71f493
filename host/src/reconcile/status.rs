//! The status writer: patches the status subresource only when something changed.

use kube::{
    Api,
    api::{Patch, PatchParams},
};

use crate::app::{App, AppStatus};

/// Writes `status` if it differs from what the App has; returns whether it wrote.
pub async fn write(api: &Api<App>, app: &App, status: &AppStatus) -> Result<bool, kube::Error> {
    if app.status.as_ref() == Some(status) {
        return Ok(false);
    }
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({
        "apiVersion": "wasmop.dev/v1alpha1",
        "kind": "App",
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(crate::write::FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(true)
}
