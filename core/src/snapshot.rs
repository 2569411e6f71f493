//! A [`Snapshot`] from files: an App (or an instance of any kind bound to a plugin) as JSON
//! and the objects around it as JSON, read as the host's caches would hold them. What
//! `wasmop plugin run` and the SDK's `Fixture` decide on; the host builds its snapshot from the
//! object it reconciles and its caches by the same rules.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::{
    decide::{PluginState, Snapshot},
    observed::{ObservedObject, json_labelled_for},
    stamp::AppRef,
    status::AppStatus,
};

/// Why an App's JSON is not one the host could hold.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// No `metadata.name`.
    #[error("the App has no metadata.name")]
    NoName,
    /// No `apiVersion` or `kind`: the parent's kind is what owner references and labels name.
    #[error("the App has no apiVersion or kind")]
    NoKind,
    /// A `status` the host could not have written.
    #[error("the App's status is not a valid App status: {0}")]
    Status(#[source] serde_json::Error),
}

/// The snapshot of `app` at `now` with `plugin`, observing of `objects` what the host's caches
/// hold for it: the objects of its namespace labelled with the App (`wasmop.dev/app` and the
/// parent-kind label, [`crate::observed`]; a claim or Job of another App, or of a parent of
/// another kind with the same name, is not this App's, whatever the file holds). `app` is an
/// App or an instance of any other kind: its `apiVersion` and `kind` are the parent's. A
/// namespace left out is `default`, as kubectl reads it; an object without one is taken to be
/// in the App's.
pub fn from_json(
    app: &Value,
    objects: impl IntoIterator<Item = Value>,
    now: Timestamp,
    plugin: PluginState,
) -> Result<Snapshot, SnapshotError> {
    let text = |p: &str| app.pointer(p).and_then(Value::as_str).map(str::to_string);
    let app_ref = AppRef {
        api_version: text("/apiVersion").ok_or(SnapshotError::NoKind)?,
        kind: text("/kind").ok_or(SnapshotError::NoKind)?,
        name: text("/metadata/name").ok_or(SnapshotError::NoName)?,
        namespace: text("/metadata/namespace").unwrap_or_else(|| "default".into()),
        uid: text("/metadata/uid").unwrap_or_default(),
        generation: app.pointer("/metadata/generation").and_then(Value::as_i64),
    };
    let previous: AppStatus = match app.get("status") {
        Some(status) => serde_json::from_value(status.clone()).map_err(SnapshotError::Status)?,
        None => AppStatus::default(),
    };
    let mark = app_ref.kind_mark();
    let observed = objects
        .into_iter()
        // An object of another namespace is no object of the App's, whatever its labels.
        .filter(|o| {
            o.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .is_none_or(|ns| ns == app_ref.namespace)
        })
        .filter(|o| json_labelled_for(o, &app_ref.name, &mark))
        .filter_map(|o| ObservedObject::from_value(o, &app_ref.uid))
        .collect();
    Ok(Snapshot {
        desired_version: text("/spec/version").unwrap_or_default(),
        app: app_ref,
        previous,
        observed,
        created: text("/metadata/creationTimestamp").and_then(|t| t.parse().ok()),
        now,
        plugin,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_support::serving;

    /// The App's identity, status and version come from its JSON, and only the objects
    /// labelled with it are observed.
    #[test]
    fn a_snapshot_holds_what_the_hosts_caches_would() {
        let app = json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "kv", "uid": "u-1", "generation": 2},
            "spec": {"version": "7.2"}, "status": {"version": "7.0"}});
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "mine", "labels": {"wasmop.dev/app": "kv"}}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "other", "labels": {"wasmop.dev/app": "billing"}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "user"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere",
                "namespace": "team-b", "labels": {"wasmop.dev/app": "kv"}}}),
        ];
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let snapshot = from_json(&app, objects, now, serving(&[])).expect("an App");
        assert_eq!(snapshot.app.namespace, "default");
        assert_eq!(snapshot.app.generation, Some(2));
        assert_eq!(snapshot.desired_version, "7.2");
        assert_eq!(snapshot.previous.version.as_deref(), Some("7.0"));
        let names: Vec<&str> = snapshot.observed.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["mine"]);

        let nameless = from_json(
            &json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "App", "metadata": {}}),
            [],
            now,
            serving(&[]),
        );
        assert!(matches!(nameless, Err(SnapshotError::NoName)));
        let kindless = from_json(&json!({"metadata": {"name": "kv"}}), [], now, serving(&[]));
        assert!(matches!(kindless, Err(SnapshotError::NoKind)));
        let bad = json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "kv"}, "status": {"conditions": 3}});
        assert!(matches!(
            from_json(&bad, [], now, serving(&[])),
            Err(SnapshotError::Status(_))
        ));
    }

    /// An App and a `KVStore` named alike in one namespace: each observes only its own
    /// objects. The App's include those stamped before the parent-kind label (the App label
    /// alone); the KVStore's never do.
    #[test]
    fn parents_of_two_kinds_with_one_name_observe_only_their_own() {
        let object = |name: &str, labels: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "labels": labels}})
        };
        let objects = [
            object("app-old", json!({"wasmop.dev/app": "cache"})),
            object(
                "app-new",
                json!({"wasmop.dev/app": "cache", "wasmop.dev/parent-kind": "App.wasmop.dev"}),
            ),
            object(
                "kv",
                json!({"wasmop.dev/app": "cache",
                    "wasmop.dev/parent-kind": "KVStore.data.example.com"}),
            ),
            object(
                "other-group",
                json!({"wasmop.dev/app": "cache", "wasmop.dev/parent-kind": "KVStore.other.io"}),
            ),
        ];
        let parent = |api_version: &str, kind: &str| {
            json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": "cache", "namespace": "ns", "uid": kind},
                "spec": {"version": "1"}})
        };
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let names = |parent: &Value| -> Vec<String> {
            let snapshot = from_json(parent, objects.clone(), now, serving(&[])).expect("a parent");
            snapshot.observed.iter().map(|o| o.name.clone()).collect()
        };
        let app = parent("wasmop.dev/v1alpha1", "App");
        let kv = parent("data.example.com/v1", "KVStore");
        assert_eq!(names(&app), ["app-old", "app-new"]);
        assert_eq!(names(&kv), ["kv"]);
        let snapshot = from_json(&kv, [], now, serving(&[])).expect("a parent");
        assert_eq!(
            (
                snapshot.app.api_version.as_str(),
                snapshot.app.kind.as_str()
            ),
            ("data.example.com/v1", "KVStore")
        );
    }
}
