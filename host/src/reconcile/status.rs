//! The status writer: patches the status subresource only when something changed.

use kube::{
    Client,
    api::{Patch, PatchParams},
};

use crate::{app::AppStatus, parent::Parent};

/// Writes `status` if it differs from what the parent has; returns whether it wrote. The
/// status of every kind is the App's (a bound kind's CRD carries the same status schema).
pub async fn write(
    client: &Client,
    parent: &Parent,
    status: &AppStatus,
) -> Result<bool, kube::Error> {
    if parent.app.status.as_ref() == Some(status) {
        return Ok(false);
    }
    let patch = serde_json::json!({
        "apiVersion": parent.kind.resource.api_version,
        "kind": parent.kind.resource.kind,
        "status": status,
    });
    parent
        .api(client)
        .patch_status(
            &parent.name(),
            &PatchParams::apply(crate::write::FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(true)
}
