//! A [`Snapshot`] from files: an App as JSON and the objects around it as JSON, read as the
//! host's caches would hold them. What `wasmop plugin run` and the SDK's `Fixture` decide on;
//! the host builds its snapshot from its typed App and its caches by the same rules.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::{
    decide::{PluginState, Snapshot},
    observed::{APP_LABEL, ObservedObject},
    stamp::AppRef,
    status::AppStatus,
};

/// Why an App's JSON is not one the host could hold.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// No `metadata.name`.
    #[error("the App has no metadata.name")]
    NoName,
    /// A `status` the host could not have written.
    #[error("the App's status is not a valid App status: {0}")]
    Status(#[source] serde_json::Error),
}

/// The snapshot of `app` at `now` with `plugin`, observing of `objects` what the host's caches
/// hold for it: the objects of its namespace labelled with the App (`wasmop.dev/app`; a claim or
/// Job of another App is not this App's, whatever the file holds). A namespace left out is
/// `default`, as kubectl reads it; an object without one is taken to be in the App's.
pub fn from_json(
    app: &Value,
    objects: impl IntoIterator<Item = Value>,
    now: Timestamp,
    plugin: PluginState,
) -> Result<Snapshot, SnapshotError> {
    let text = |p: &str| app.pointer(p).and_then(Value::as_str).map(str::to_string);
    let app_ref = AppRef {
        name: text("/metadata/name").ok_or(SnapshotError::NoName)?,
        namespace: text("/metadata/namespace").unwrap_or_else(|| "default".into()),
        uid: text("/metadata/uid").unwrap_or_default(),
        generation: app.pointer("/metadata/generation").and_then(Value::as_i64),
    };
    let previous: AppStatus = match app.get("status") {
        Some(status) => serde_json::from_value(status.clone()).map_err(SnapshotError::Status)?,
        None => AppStatus::default(),
    };
    let observed = objects
        .into_iter()
        // An object of another namespace is no object of the App's, whatever its labels.
        .filter(|o| {
            o.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .is_none_or(|ns| ns == app_ref.namespace)
        })
        .filter(|o| {
            o.pointer("/metadata/labels")
                .and_then(|l| l.get(APP_LABEL))
                .and_then(Value::as_str)
                == Some(app_ref.name.as_str())
        })
        .filter_map(|o| ObservedObject::from_value(o, &app_ref.uid))
        .collect();
    Ok(Snapshot {
        desired_version: text("/spec/version").unwrap_or_default(),
        app: app_ref,
        previous,
        observed,
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
        let app = json!({"metadata": {"name": "kv", "uid": "u-1", "generation": 2},
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

        let nameless = from_json(&json!({"metadata": {}}), [], now, serving(&[]));
        assert!(matches!(nameless, Err(SnapshotError::NoName)));
        let bad = json!({"metadata": {"name": "kv"}, "status": {"conditions": 3}});
        assert!(matches!(
            from_json(&bad, [], now, serving(&[])),
            Err(SnapshotError::Status(_))
        ));
    }
}
