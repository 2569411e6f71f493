//! What the host adds to every object it creates for an App (the parent, of any kind): the
//! managed-by, App and parent-kind labels and the App as controlling owner (claims excepted),
//! plus the digest of what it applied, which lets a later reconcile see that an object is
//! already as planned and skip the write.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::{
    object::PluginObject,
    observed::{
        APP_KIND_MARK, APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PARENT_KIND_LABEL, kind_mark,
    },
};

/// The App's `apiVersion`.
pub const APP_API_VERSION: &str = "wasmop.dev/v1alpha1";
/// The App's `kind`.
pub const APP_KIND: &str = "App";
/// The annotation holding the digest of the object as last applied (see [`mark_applied`]).
pub const APPLIED_ANNOTATION: &str = "wasmop.dev/applied";

/// Who an object belongs to: the identity of the App, the parent of the objects the host makes
/// for it, as the host stamps it. The parent is the built-in `App` ([`APP_API_VERSION`],
/// [`APP_KIND`]) or an instance of any other kind: owner references and the parent-kind label
/// name its own `apiVersion` and `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppRef {
    /// `apiVersion` (`wasmop.dev/v1alpha1` for an App, `data.example.com/v1` say for a bound
    /// kind).
    pub api_version: String,
    /// `kind`.
    pub kind: String,
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

    /// The API group of [`Self::api_version`] (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// The value of the parent-kind label on its objects ([`kind_mark`]).
    pub fn kind_mark(&self) -> String {
        kind_mark(self.group(), &self.kind)
    }

    /// Whether the parent is the built-in `App` (any version of `wasmop.dev`'s `App`).
    pub fn is_app(&self) -> bool {
        self.kind_mark() == APP_KIND_MARK
    }
}

/// The owner reference every object of `app` carries (claims excepted): the parent's own
/// `apiVersion`, `kind`, name and uid.
pub fn owner_reference(app: &AppRef) -> Value {
    json!({
        "apiVersion": app.api_version,
        "kind": app.kind,
        "name": app.name,
        "uid": app.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Adds the host's labels and owner reference to `object`. For a parent of any kind but `App`,
/// the parent-kind label also goes wherever the plan put the App label in a template (pod
/// templates, a CronJob's job template, claim templates, ephemeral volumes' claim templates):
/// the Pods and claims made from them are then the parent's by kind as well as by name. An
/// App's templates stay as the plugin wrote them (see [`crate::observed`]).
pub fn stamp(app: &AppRef, object: &mut PluginObject) {
    // A claim the plan asks for must outlive the App unless finalize says otherwise, so it
    // carries the labels (that is how fetch finds it) but no owner reference: garbage
    // collection would delete it with the App whatever the retention policy.
    let is_claim = object.kind() == "PersistentVolumeClaim";
    let mark = app.kind_mark();
    let is_app = mark == APP_KIND_MARK;
    object.metadata_mut(|metadata| {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(MANAGED_BY_LABEL.into(), Value::String(MANAGED_BY.into()));
            labels.insert(APP_LABEL.into(), Value::String(app.name.clone()));
            labels.insert(PARENT_KIND_LABEL.into(), Value::String(mark.clone()));
        }
        if !is_claim {
            metadata.insert("ownerReferences".into(), json!([owner_reference(app)]));
        }
    });
    if !is_app {
        mark_templates(object, &app.name, &mark);
    }
}

/// Adds the parent-kind label `mark` beside every App label naming `name` in the templates of
/// `object`'s `spec`, for the workload kinds whose templates the guard checks, and both labels
/// to every claim template of a StatefulSet. Only the labels of templates, never selectors: a
/// selector is immutable, and keeps matching (the Pods still carry every label it names).
fn mark_templates(object: &mut PluginObject, name: &str, mark: &str) {
    let template = match (object.api_version(), object.kind()) {
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch/v1", "Job")
        | ("v1", "ReplicationController") => "/template",
        ("batch/v1", "CronJob") => "/jobTemplate/spec/template",
        ("v1", "Pod") => "",
        _ => return,
    };
    let Ok(Some(mut spec)) = object.field("spec") else {
        return;
    };
    let mut changed = false;
    if template.is_empty() {
        // A Pod's labels are its metadata's, stamped already; its spec is its template's.
        changed |= mark_volumes(spec.get_mut("volumes"), name, mark);
    } else if let Some(pod) = spec.pointer_mut(template) {
        changed |= mark_labels(pod.get_mut("metadata"), name, mark);
        changed |= mark_volumes(pod.pointer_mut("/spec/volumes"), name, mark);
    }
    changed |= mark_labels(spec.pointer_mut("/jobTemplate/metadata"), name, mark);
    if object.kind() == "StatefulSet" {
        // Every claim template, labelled or not: the StatefulSet controller labels the claims it
        // makes with the template's labels and the selector's (`getPersistentVolumeClaims` in
        // k8s.io/kubernetes pkg/controller/statefulset), so a template without the kind label
        // under a selector naming `wasmop.dev/app` would make claims an App of the same name
        // takes for its own.
        for claim in spec
            .get_mut("volumeClaimTemplates")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(claim) = claim.as_object_mut() {
                let labels = claim
                    .entry("metadata")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .map(|m| m.entry("labels").or_insert_with(|| json!({})));
                if let Some(Value::Object(labels)) = labels {
                    labels.insert(APP_LABEL.into(), Value::String(name.to_string()));
                    labels.insert(PARENT_KIND_LABEL.into(), Value::String(mark.to_string()));
                    changed = true;
                }
            }
        }
    }
    if changed {
        object.set_field("spec", &spec);
    }
}

/// The claim templates of a pod spec's ephemeral `volumes`, as [`mark_labels`].
fn mark_volumes(volumes: Option<&mut Value>, name: &str, mark: &str) -> bool {
    let mut changed = false;
    for volume in volumes.and_then(Value::as_array_mut).into_iter().flatten() {
        changed |= mark_labels(
            volume.pointer_mut("/ephemeral/volumeClaimTemplate/metadata"),
            name,
            mark,
        );
    }
    changed
}

/// Adds the parent-kind label `mark` to the labels of `metadata` when they carry the App label
/// naming `name`; whether it did.
fn mark_labels(metadata: Option<&mut Value>, name: &str, mark: &str) -> bool {
    let Some(labels) = metadata
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    if labels.get(APP_LABEL).and_then(Value::as_str) != Some(name) {
        return false;
    }
    labels.insert(PARENT_KIND_LABEL.into(), Value::String(mark.to_string()));
    true
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
            api_version: APP_API_VERSION.into(),
            kind: APP_KIND.into(),
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
        assert_eq!(cm["metadata"]["labels"][PARENT_KIND_LABEL], APP_KIND_MARK);
        assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(cm["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            cm["metadata"]["ownerReferences"][0]["apiVersion"],
            "wasmop.dev/v1alpha1"
        );
        assert_eq!(cm["metadata"]["ownerReferences"][0]["kind"], "App");
    }

    /// A StatefulSet as the SDK writes it: the App label in its pod template and claim
    /// template, and in its selector.
    fn statefulset() -> PluginObject {
        let labels = json!({"app": "kv", "wasmop.dev/app": "kv"});
        PluginObject::parse(
            &json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "kv"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"volumes": [
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate":
                            {"metadata": {"labels": labels}, "spec": {}}}},
                        {"name": "plain", "emptyDir": {}}]}},
                    "volumeClaimTemplates": [
                        {"metadata": {"name": "data", "labels": labels}},
                        {"metadata": {"name": "unlabelled"}}]}})
            .to_string(),
        )
        .expect("a plugin object")
    }

    /// A parent of another kind: owner references name its own apiVersion, kind and uid, and
    /// every template the App label marks gets the kind label too, so that the Pods and
    /// claims made from it are the KVStore's, not those of an App named alike.
    #[test]
    fn a_parent_of_any_kind_owns_and_marks_its_objects_and_their_templates() {
        let kv = AppRef {
            api_version: "data.example.com/v1".into(),
            kind: "KVStore".into(),
            ..app()
        };
        let mut set = statefulset();
        stamp(&kv, &mut set);
        let set = set.to_value();
        let mark = "KVStore.data.example.com";
        assert_eq!(set["metadata"]["labels"][PARENT_KIND_LABEL], mark);
        assert_eq!(set["metadata"]["labels"][APP_LABEL], "kv");
        let owner = &set["metadata"]["ownerReferences"][0];
        assert_eq!(owner["apiVersion"], "data.example.com/v1");
        assert_eq!(owner["kind"], "KVStore");
        assert_eq!(owner["uid"], "u-1");
        let spec = &set["spec"];
        assert_eq!(
            spec["template"]["metadata"]["labels"][PARENT_KIND_LABEL],
            mark
        );
        assert_eq!(
            spec["template"]["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["metadata"]
                ["labels"][PARENT_KIND_LABEL],
            mark
        );
        assert_eq!(
            spec["volumeClaimTemplates"][0]["metadata"]["labels"][PARENT_KIND_LABEL],
            mark
        );
        // Every claim template, unlabelled ones too: the StatefulSet controller copies the
        // selector's `wasmop.dev/app` onto the claims, which without the kind label would be an
        // App's. Never a selector (immutable).
        let unlabelled = &spec["volumeClaimTemplates"][1]["metadata"]["labels"];
        assert_eq!(unlabelled[PARENT_KIND_LABEL], mark);
        assert_eq!(unlabelled[APP_LABEL], "kv");
        assert!(
            spec["selector"]["matchLabels"]
                .get(PARENT_KIND_LABEL)
                .is_none()
        );
        assert_eq!(
            spec["template"]["spec"]["volumes"][1],
            json!({"name": "plain", "emptyDir": {}})
        );

        // A CronJob's job template and its pod template.
        let mut cron = PluginObject::parse(
            &json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
                "spec": {"jobTemplate": {"metadata": {"labels": {"wasmop.dev/app": "kv"}},
                    "spec": {"template": {"metadata": {"labels": {"wasmop.dev/app": "kv"}}}}}}})
            .to_string(),
        )
        .expect("a plugin object");
        stamp(&kv, &mut cron);
        let cron = cron.to_value();
        assert_eq!(
            cron["spec"]["jobTemplate"]["metadata"]["labels"][PARENT_KIND_LABEL],
            mark
        );
        assert_eq!(
            cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
                [PARENT_KIND_LABEL],
            mark
        );
    }

    /// An App's templates stay as the plugin wrote them: a kind label there would restart
    /// every App's Pods and change its StatefulSets' claim templates, which the API server
    /// refuses to update. Its Pods and claims are the App's without it.
    #[test]
    fn an_apps_templates_are_left_as_planned() {
        let mut set = statefulset();
        let spec = set.field("spec").expect("json");
        stamp(&app(), &mut set);
        assert_eq!(set.field("spec").expect("json"), spec);
        assert_eq!(
            set.to_value()["metadata"]["labels"][PARENT_KIND_LABEL],
            APP_KIND_MARK
        );
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
