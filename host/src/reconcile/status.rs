//! The status writer: patches the status subresource only when something changed.

use kube::{
    Client,
    api::{Patch, PatchParams},
};

use crate::{app::AppStatus, parent::Parent};

/// Writes `status` if it differs from what the parent has (a parent without a status has the
/// empty one, which the decision keeps while it leaves the first status to the next reconcile);
/// returns whether it wrote. The status of every kind is the App's (a bound kind's CRD carries
/// the same status schema).
pub async fn write(
    client: &Client,
    parent: &Parent,
    status: &AppStatus,
) -> Result<bool, kube::Error> {
    let unchanged = match &parent.app.status {
        Some(current) => current == status,
        None => *status == AppStatus::default(),
    };
    if unchanged {
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
