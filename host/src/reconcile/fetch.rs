//! Fetch: what the host observes for an App, read from reflector caches (never the API server
//! directly): its owned objects, the Pods and claims its workloads made, its backup Jobs.

use kube::ResourceExt;
use serde_json::Value;
use wasmop_core::{
    observed::{APP_LABEL, ObservedObject, labelled_for},
    stamp::AppRef,
};

/// Why objects of a policy's extra kind could not be listed.
#[derive(Debug, thiserror::Error)]
#[error(
    "listing {kind} ({plural}) in {namespace}: {source}; the host's ServiceAccount needs get, \
     list, watch, create, patch and delete on {plural} for the policy's extraKinds (see the README)"
)]
pub struct ExtraKindError {
    /// `apiVersion/kind`.
    pub kind: String,
    /// The resource.
    pub plural: String,
    /// The namespace listed.
    pub namespace: String,
    /// What the API server said.
    #[source]
    pub source: kube::Error,
}

/// Objects of `kinds` (a policy's extra kinds that the plugin declares) labelled with the App
/// `app` in its namespace (by name and kind, [`wasmop_core::observed`]). The host keeps no
/// cache of these (the policy decides which there are); one labelled list per kind per
/// reconcile reads them from the API server, and a change to one is seen at the App's next
/// reconcile rather than at once.
pub async fn observe_extra(
    client: &kube::Client,
    app: &AppRef,
    kinds: &[&wasmop_core::kind::Kind],
) -> Result<Vec<ObservedObject>, ExtraKindError> {
    use kube::api::{Api, DynamicObject, ListParams};

    use crate::controller::kinds::api_resource;
    let (namespace, uid, mark) = (app.namespace.as_str(), app.uid.as_str(), app.kind_mark());
    let mut out = Vec::new();
    for kind in kinds {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &api_resource(kind));
        let list = api
            .list(&ListParams::default().labels(&format!("{APP_LABEL}={}", app.name)))
            .await
            .map_err(|source| ExtraKindError {
                kind: format!("{}/{}", kind.api_version(), kind.kind),
                plural: kind.plural.to_string(),
                namespace: namespace.to_string(),
                source,
            })?;
        for object in list.items {
            if !labelled_for(
                |k| object.labels().get(k).map(String::as_str),
                &app.name,
                &mark,
            ) {
                continue;
            }
            let owned = object
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true));
            let Ok(mut json) = serde_json::to_value(&object) else {
                continue;
            };
            let create_owned = object
                .managed_fields()
                .iter()
                .any(crate::write::is_create_entry);
            if let Some(metadata) = json.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            if let Some(map) = json.as_object_mut() {
                map.insert("apiVersion".into(), Value::String(kind.api_version()));
                map.insert("kind".into(), Value::String(kind.kind.to_string()));
            }
            out.push(ObservedObject {
                api_version: kind.api_version(),
                kind: kind.kind.to_string(),
                name: object.name_any(),
                owned,
                backup_slot: None,
                create_owned,
                json,
            });
        }
    }
    Ok(out)
}
