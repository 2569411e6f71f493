//! What the host adds to every object it creates for an App: the managed-by and App labels and
//! the App as controlling owner (claims excepted), plus the digest of what it applied, which
//! lets a later reconcile see that an object is already as planned and skip the write.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::{
    object::PluginObject,
    observed::{APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL},
};

/// The App's `apiVersion`.
pub const APP_API_VERSION: &str = "wasmop.dev/v1alpha1";
/// The App's `kind`.
pub const APP_KIND: &str = "App";
/// The annotation holding the digest of the object as last applied (see [`mark_applied`]).
pub const APPLIED_ANNOTATION: &str = "wasmop.dev/applied";

/// Who an object belongs to: the App's identity, as the host stamps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppRef {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
}

impl AppRef {
    /// `namespace/name`, for messages and keys.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The owner reference every object of `app` carries (claims excepted).
pub fn owner_reference(app: &AppRef) -> Value {
    json!({
        "apiVersion": APP_API_VERSION,
        "kind": APP_KIND,
        "name": app.name,
        "uid": app.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Adds the host's labels and owner reference to `object`.
pub fn stamp(app: &AppRef, object: &mut PluginObject) {
    // A claim the plan asks for must outlive the App unless finalize says otherwise, so it
    // carries the labels (that is how fetch finds it) but no owner reference: garbage
    // collection would delete it with the App whatever the retention policy.
    let is_claim = object.kind() == "PersistentVolumeClaim";
    object.metadata_mut(|metadata| {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(MANAGED_BY_LABEL.into(), Value::String(MANAGED_BY.into()));
            labels.insert(APP_LABEL.into(), Value::String(app.name.clone()));
        }
        if !is_claim {
            metadata.insert("ownerReferences".into(), json!([owner_reference(app)]));
        }
    });
}

/// Marks `object` (already stamped) with the digest of its content, as
/// [`APPLIED_ANNOTATION`], and returns the digest. The digest covers everything the host
/// applies, so a field the plan drops changes it even though what is left is still found in
/// the live object.
pub fn mark_applied(object: &mut PluginObject) -> String {
    let digest = applied_digest(object);
    object.metadata_mut(|metadata| {
        let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED_ANNOTATION.into(), Value::String(digest.clone()));
        }
    });
    digest
}

/// The first 16 bytes of the SHA-256 of the object's canonical JSON (keys sorted, no spacing),
/// in hex. Canonical, not the plugin's text: a plugin whose output means the same but is
/// written differently each call (a hash map's order) must not look changed, or every
/// reconcile would write and every write trigger the next reconcile.
fn applied_digest(object: &PluginObject) -> String {
    let text = serde_json::to_string(&object.to_value()).unwrap_or_default();
    let sum = Sha256::digest(text.as_bytes());
    sum[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `live` already holds what `planned` (stamped and marked) would apply: the digest
/// annotation matches (the plan did not change since the last apply) and every field of the
/// plan has its planned value in the live object (nobody changed a field the host sets). The
/// API server adds defaults and status, so the live object may hold more; a value it
/// normalises (a quantity written `0.5`, say) reads as changed, which costs one idempotent
/// apply, never a missed one.
pub fn in_place(planned: &Value, digest: &str, live: &Value) -> bool {
    live.pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        == Some(digest)
        && contains(live, planned)
}

/// Fields whose value server-side apply sets whole (`x-kubernetes-map-type: atomic` maps and
/// `structType=atomic` label selectors): a key someone else added there is drift the host's
/// apply would remove, so they must be equal, not merely contain the plan.
const ATOMIC: &[&str] = &["selector", "nodeSelector", "matchLabels"];

/// Whether every field of `part` is in `whole` with the same value; arrays match element by
/// element and must have the same length (a list the host sets is owned whole), and the
/// [`ATOMIC`] fields must be equal.
fn contains(whole: &Value, part: &Value) -> bool {
    match (whole, part) {
        (Value::Object(w), Value::Object(p)) => p.iter().all(|(k, pv)| {
            w.get(k).is_some_and(|wv| {
                if ATOMIC.contains(&k.as_str()) {
                    wv == pv
                } else {
                    contains(wv, pv)
                }
            })
        }),
        (Value::Array(w), Value::Array(p)) => {
            w.len() == p.len() && w.iter().zip(p).all(|(wv, pv)| contains(wv, pv))
        }
        (w, p) => w == p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> AppRef {
        AppRef {
            name: "kv".into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
            generation: Some(1),
        }
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

    fn marked(data: Value) -> (Value, String) {
        let mut object = PluginObject::parse(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": data})
                .to_string(),
        )
        .expect("a plugin object");
        stamp(&app(), &mut object);
        let digest = mark_applied(&mut object);
        (object.to_value(), digest)
    }

    #[test]
    fn the_digest_ignores_how_the_plugin_spelled_its_json() {
        let parse = |text: &str| PluginObject::parse(text).expect("a plugin object");
        let mut a = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":"1","b":"2"}}"#,
        );
        let mut b = parse(
            r#"{"kind": "ConfigMap", "apiVersion": "v1", "data": {"b": "2",  "a": "1"}, "metadata": {"name": "x"}}"#,
        );
        assert_eq!(mark_applied(&mut a), mark_applied(&mut b));
    }

    #[test]
    fn an_object_as_applied_is_in_place_with_server_defaults_added() {
        let (planned, digest) = marked(json!({"a": "1"}));
        let mut live = planned.clone();
        live["metadata"]["resourceVersion"] = json!("42");
        live["metadata"]["uid"] = json!("cm-uid");
        assert!(in_place(&planned, &digest, &live));
    }

    #[test]
    fn drift_a_dropped_field_or_a_missing_mark_is_not_in_place() {
        let (planned, digest) = marked(json!({"a": "1", "b": "2"}));
        // Someone changed a field the host sets.
        let mut drifted = planned.clone();
        drifted["data"]["a"] = json!("changed");
        assert!(!in_place(&planned, &digest, &drifted));
        // The plan dropped `b`: what is left is still in the live object, but the digest moved.
        let (smaller, smaller_digest) = marked(json!({"a": "1"}));
        assert_ne!(digest, smaller_digest);
        assert!(!in_place(&smaller, &smaller_digest, &planned));
        // Applied before the mark existed (or by someone else).
        let mut unmarked = planned.clone();
        unmarked["metadata"]["annotations"] = json!({});
        assert!(!in_place(&planned, &digest, &unmarked));
        // A key added to a selector (an atomic map) is drift too.
        let (selected, selected_digest) = marked(json!({"a": "1"}));
        let mut widened = selected.clone();
        widened["selector"] = json!({"app": "x", "extra": "y"});
        let mut planned_selector = selected.clone();
        planned_selector["selector"] = json!({"app": "x"});
        assert!(!in_place(&planned_selector, &selected_digest, &widened));
        // A list is owned whole: an extra element is drift.
        let (list, list_digest) = marked(json!({"a": "1"}));
        let mut longer = list.clone();
        longer["metadata"]["ownerReferences"]
            .as_array_mut()
            .expect("owner references")
            .push(json!({"uid": "other"}));
        assert!(!in_place(&list, &list_digest, &longer));
    }
}
