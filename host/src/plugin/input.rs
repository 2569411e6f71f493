//! What every capability call is given about the App: the App and the objects observed for it,
//! written as JSON text once per reconcile and shared by its calls.
//!
//! Objects are written head first (`apiVersion`, `kind`, then `metadata` with `name` first) so a
//! plugin finds its lookup key in the first few bytes instead of scanning past annotations,
//! labels or a ConfigMap's data (a twentieth of a kvstore plan call, measured), and without the
//! bookkeeping of API clients: `metadata.managedFields` (server-side apply) and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation (a copy of the whole object as
//! `kubectl apply` last sent it). Those are often most of an object's bytes, no plugin decision
//! should depend on them, and every call would copy them into the guest and parse them there.

use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value};

/// The head of an object, in the order it is written.
const HEAD: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Where `kubectl apply` keeps its copy of the object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What every capability call is given about the App, serialized once: a reconcile makes up to
/// five calls with the same App and observed objects, and turning them into JSON text was a
/// tenth of each call (measured).
#[derive(Debug, Clone, PartialEq)]
pub struct AppContext {
    pub(super) app: String,
    pub(super) observed: Vec<String>,
    pub(super) now_ms: i64,
}

impl AppContext {
    /// `app` is the App object (typed or JSON); `observed` the objects the host observes for it
    /// (owned objects, backup Jobs, Pods...); `now_ms` the host's clock in milliseconds since the
    /// Unix epoch. An App that cannot be serialized (never, for the typed App) is sent as `null`,
    /// which the plugin refuses as invalid input.
    pub fn new<'a>(
        app: &impl Serialize,
        observed: impl IntoIterator<Item = &'a Value>,
        now_ms: i64,
    ) -> Self {
        let app = serde_json::to_value(app).map_or_else(|_| "null".to_string(), |v| to_text(&v));
        Self {
            app,
            observed: observed.into_iter().map(to_text).collect(),
            now_ms,
        }
    }

    /// The same App and clock with other observed objects (finalize sees only what is retained).
    pub fn with_observed<'a>(&self, observed: impl IntoIterator<Item = &'a Value>) -> Self {
        Self {
            app: self.app.clone(),
            observed: observed.into_iter().map(to_text).collect(),
            now_ms: self.now_ms,
        }
    }

    /// The App, the observed objects and the clock, as plugins get them (JSON text).
    pub fn parts(&self) -> (&str, &[String], i64) {
        (&self.app, &self.observed, self.now_ms)
    }

    /// Bytes of the App as plugins get it.
    pub fn app_len(&self) -> usize {
        self.app.len()
    }

    /// The observed objects as the generated bindings take them: borrowed, so a call copies
    /// them once, into the guest.
    pub(super) fn observed_texts(&self) -> Vec<&str> {
        self.observed.iter().map(String::as_str).collect()
    }
}

/// One object as a plugin receives it; see the module docs.
pub fn to_text(object: &Value) -> String {
    // Writing a `Value` cannot fail: its keys are strings and its numbers finite.
    serde_json::to_string(&ForPlugin(object)).unwrap_or_else(|_| "null".to_string())
}

/// An object written head first, without the clients' bookkeeping. Anything that is not an
/// object is written as it is.
struct ForPlugin<'a>(&'a Value);

impl Serialize for ForPlugin<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(object) = self.0 else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        for key in HEAD {
            match (key, object.get(key)) {
                ("metadata", Some(Value::Object(metadata))) => {
                    map.serialize_entry(key, &Metadata(metadata))?
                }
                (_, Some(value)) => map.serialize_entry(key, value)?,
                (_, None) => {}
            }
        }
        for (key, value) in object.iter().filter(|(k, _)| !HEAD.contains(&k.as_str())) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// `metadata` with `name` first, without `managedFields` or kubectl's last-applied annotation.
struct Metadata<'a>(&'a Map<String, Value>);

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if let Some(name) = self.0.get("name") {
            map.serialize_entry("name", name)?;
        }
        for (key, value) in self.0 {
            match (key.as_str(), value) {
                ("name" | "managedFields", _) => {}
                ("annotations", Value::Object(annotations)) => {
                    map.serialize_entry(key, &Annotations(annotations))?
                }
                _ => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// `metadata.annotations` without kubectl's last-applied copy.
struct Annotations<'a>(&'a Map<String, Value>);

impl Serialize for Annotations<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().filter(|(key, _)| *key != LAST_APPLIED))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_are_written_head_first_without_client_bookkeeping() {
        let object = json!({
            "apiVersion": "v1",
            "data": {"a": "1"},
            "kind": "ConfigMap",
            "metadata": {
                "annotations": {"x": "y", LAST_APPLIED: "{\"kind\":\"ConfigMap\"}"},
                "managedFields": [{"manager": "kubectl"}],
                "name": "c",
                "namespace": "ns",
            },
        });
        assert_eq!(
            to_text(&object),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","annotations":{"x":"y"},"namespace":"ns"},"data":{"a":"1"}}"#
        );
    }

    #[test]
    fn anything_else_is_written_as_it_is() {
        for value in [
            json!({"kind": "A", "metadata": "not an object"}),
            json!({"spec": {}}),
            json!([1, 2]),
            json!(null),
        ] {
            let text = to_text(&value);
            assert_eq!(
                serde_json::from_str::<Value>(&text).expect("JSON"),
                value,
                "{text}"
            );
        }
    }

    #[test]
    fn the_app_loses_only_the_clients_bookkeeping() {
        let app = json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {
                "name": "kv", "managedFields": [{}], "labels": {"a": "b"},
                "annotations": {LAST_APPLIED: "{}", "team": "storage"},
            },
            "spec": {"version": "1.0.0"},
        });
        let cx = AppContext::new(&app, [], 0);
        let expected = json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "kv", "labels": {"a": "b"}, "annotations": {"team": "storage"}},
            "spec": {"version": "1.0.0"},
        });
        assert_eq!(
            serde_json::from_str::<Value>(&cx.app).expect("JSON"),
            expected
        );
    }
}
