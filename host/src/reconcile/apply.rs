//! Apply and prune: server-side apply of a guarded plan with the host's field manager, owner
//! reference and labels; deletion of owned objects the plan no longer contains (never claims,
//! never backup Jobs — those follow `finalize` and the backup schedule).

use std::collections::BTreeSet;

use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{
    fetch::{APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL, ObservedObject},
    guard::{Guarded, Kind, Policy},
};
use crate::{app::App, crd_install::FIELD_MANAGER, plugin::object::PluginObject};

/// How the API server is reached for `kind`.
pub(super) fn api_resource(kind: &Kind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind),
        &kind.plural,
    )
}

/// The owner reference every object of `app` carries.
pub fn owner_reference(app: &App) -> Value {
    json!({
        "apiVersion": App::api_version(&()),
        "kind": App::kind(&()),
        "name": app.name_any(),
        "uid": app.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Adds the host's labels and owner reference to `object`.
pub fn stamp(app: &App, object: &mut PluginObject) {
    // A claim the plan asks for must outlive the App unless finalize says otherwise, so it
    // carries the labels (that is how fetch finds it) but no owner reference: garbage
    // collection would delete it with the App whatever the retention policy.
    let is_claim = object.kind() == "PersistentVolumeClaim";
    object.metadata_mut(|metadata| {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(MANAGED_BY_LABEL.into(), Value::String(MANAGED_BY.into()));
            labels.insert(APP_LABEL.into(), Value::String(app.name_any()));
        }
        if !is_claim {
            metadata.insert("ownerReferences".into(), json!([owner_reference(app)]));
        }
    });
}

/// Why a plan could not be applied.
#[derive(Debug)]
pub enum ApplyError {
    /// An object of that name exists and belongs to someone else (a user, another App):
    /// applying would take it over, and pruning or garbage collection could later delete it.
    Foreign {
        /// `Kind/name`.
        object: String,
    },
    /// The API server refused an apply.
    Api {
        /// `Kind/name`.
        object: String,
        /// The error.
        source: kube::Error,
    },
}

/// Server-side applies every object of the plan, after checking that none of them would take
/// over an object the App does not already manage; `observed` is what the App manages.
pub async fn apply(
    client: &Client,
    app: &App,
    plan: Vec<Guarded>,
    observed: &[ObservedObject],
) -> Result<(), ApplyError> {
    let namespace = app.namespace().unwrap_or_default();
    // Ours means controlled by this App (owner reference with its uid): a label anyone in the
    // namespace (or a plugin) can write proves nothing. Claims carry no owner reference (they
    // outlive the App), so for them the label is all there is.
    // Keyed by apiVersion too: a Knative `Service` is not a core one.
    let ours: BTreeSet<(&str, &str, &str)> = observed
        .iter()
        .filter(|o| o.owned || o.kind == "PersistentVolumeClaim")
        .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str()))
        .collect();
    let uid = app.uid().unwrap_or_default();
    // Only objects the App does not manage yet cost a read, so a steady App costs none.
    for Guarded { kind, object } in &plan {
        let name = object.name();
        let api_version = kind.api_version();
        if ours.contains(&(api_version.as_str(), kind.kind.as_ref(), name)) {
            continue;
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &api_resource(kind));
        let label = format!("{}/{name}", kind.kind);
        match api.get_opt(name).await {
            Ok(None) => {}
            Ok(Some(existing))
                if existing
                    .owner_references()
                    .iter()
                    .any(|o| o.uid == uid && o.controller == Some(true))
                    || (kind.kind == "PersistentVolumeClaim"
                        && existing.labels().get(APP_LABEL) == Some(&app.name_any())) => {}
            Ok(Some(_)) => return Err(ApplyError::Foreign { object: label }),
            Err(source) => {
                return Err(ApplyError::Api {
                    object: label,
                    source,
                });
            }
        }
    }
    for Guarded { kind, mut object } in plan {
        stamp(app, &mut object);
        let name = object.name();
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &api_resource(&kind));
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|source| ApplyError::Api {
            object: format!("{}/{name}", kind.kind),
            source,
        })?;
    }
    Ok(())
}

/// Deletes owned objects of the kinds `policy` lets plans hold that the plan does not contain;
/// returns what it deleted, as `Kind/name`.
pub async fn prune(
    client: &Client,
    app: &App,
    policy: &Policy,
    planned: &BTreeSet<(String, String, String)>,
    observed: &[ObservedObject],
) -> Result<Vec<String>, (String, kube::Error)> {
    let namespace = app.namespace().unwrap_or_default();
    let mut deleted = Vec::new();
    for object in observed {
        let keep = !object.owned
            || object.backup_slot.is_some()
            || object.kind == "PersistentVolumeClaim"
            || planned.contains(&(
                object.api_version.clone(),
                object.kind.clone(),
                object.name.clone(),
            ));
        if keep {
            continue;
        }
        let Some(kind) = policy.kind(&object.api_version, &object.kind) else {
            continue;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &api_resource(kind));
        let label = format!("{}/{}", kind.kind, object.name);
        match api.delete(&object.name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(label),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err((label, err)),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app() -> App {
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "kv", "namespace": "ns", "uid": "u-1"},
            "spec": {"plugin": {"image": "x"}, "version": "1"},
        }))
        .expect("valid App")
    }

    fn stamped(kind: &str) -> Value {
        let mut object = PluginObject::parse(
            &json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "labels": {"keep": "me"}}})
                .to_string(),
        )
        .expect("a plugin object");
        stamp(&app(), &mut object);
        object.to_value()
    }

    #[test]
    fn objects_get_labels_and_the_controller_owner() {
        let cm = stamped("ConfigMap");
        assert_eq!(cm["metadata"]["labels"]["keep"], "me");
        assert_eq!(cm["metadata"]["labels"][APP_LABEL], "kv");
        assert_eq!(cm["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(cm["metadata"]["ownerReferences"][0]["controller"], true);
    }

    #[test]
    fn claims_are_labelled_but_not_owned_so_they_outlive_the_app() {
        let claim = stamped("PersistentVolumeClaim");
        assert_eq!(claim["metadata"]["labels"][APP_LABEL], "kv");
        assert!(claim["metadata"].get("ownerReferences").is_none());
    }
}
