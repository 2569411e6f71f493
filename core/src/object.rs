//! An object a plugin returned (a planned object, a backup Job), checked once on its way out of
//! the plugin and otherwise kept as the plugin wrote it.
//!
//! The host reads and changes only the head of an object: `apiVersion`, `kind` and `metadata`
//! (name, namespace, labels, owner references). So only `metadata` is parsed into a tree; every
//! other top-level field stays the plugin's JSON text and goes to the API server verbatim
//! (but for the labels of templates, for a parent of another kind than `App`:
//! [`crate::stamp::stamp`]).
//! Parsing whole objects into trees was most of the host's share of a plan call (measured with
//! kvstore's six objects: 15-23 µs, against 4-5 µs for reading the head alone), and each tree
//! was serialized again for the size check and for the apply body.

use serde::{
    Serialize, Serializer,
    de::{self, Deserializer, MapAccess, Visitor},
    ser::SerializeMap,
};
use serde_json::{Map, Value, value::RawValue};

/// A JSON object with string `apiVersion`, `kind` and `metadata.name`, each top-level field
/// present once.
#[derive(Debug, Clone)]
pub struct PluginObject {
    api_version: String,
    kind: String,
    /// Always holds a non-empty string `name`; changed only through [`Self::metadata_mut`],
    /// which keeps it so.
    metadata: Map<String, Value>,
    /// The other top-level fields, in the plugin's order, as the plugin wrote them.
    fields: Vec<(String, Box<RawValue>)>,
    /// Length of the plugin's text, which is what size limits are held against.
    text_len: usize,
}

impl PluginObject {
    /// Checks and splits one object the plugin returned as JSON text; the error says what is
    /// wrong with it, for people.
    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.trim_start().starts_with('{') {
            return Err(match serde_json::from_str::<&RawValue>(text) {
                Ok(_) => "is not a JSON object".into(),
                Err(err) => format!("is not valid JSON: {err}"),
            });
        }
        let Head {
            api_version,
            kind,
            metadata,
            fields,
        } = serde_json::from_str(text).map_err(|err| {
            if err.is_data() {
                err.to_string()
            } else {
                format!("is not valid JSON: {err}")
            }
        })?;
        let string = |value: Option<Value>, field: &str| match value {
            Some(Value::String(text)) if !text.is_empty() => Ok(text),
            _ => Err(format!("has no string {field}")),
        };
        let api_version = string(api_version, "apiVersion")?;
        let kind = string(kind, "kind")?;
        let metadata = match metadata {
            Some(Value::Object(metadata)) => metadata,
            _ => return Err("has no string metadata.name".into()),
        };
        if metadata
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err("has no string metadata.name".into());
        }
        Ok(Self {
            api_version,
            kind,
            metadata,
            fields,
            text_len: text.len(),
        })
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.metadata
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `metadata`.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }

    /// Changes `metadata` in `change`; a change that leaves no string `metadata.name` is
    /// undone for the name, which the host relies on.
    pub fn metadata_mut(&mut self, change: impl FnOnce(&mut Map<String, Value>)) {
        let name = self.name().to_string();
        change(&mut self.metadata);
        if self.name().is_empty() {
            self.metadata.insert("name".into(), Value::String(name));
        }
    }

    /// Top-level field `name` (not `apiVersion`, `kind` or `metadata`) parsed into a tree, for
    /// the guard; `Ok(None)` when absent, `Ok(Some(Value::Null))` when the plugin wrote `null`.
    pub fn field(&self, name: &str) -> Result<Option<Value>, serde_json::Error> {
        self.fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, raw)| serde_json::from_str(raw.get()))
            .transpose()
    }

    /// Replaces the top-level field `name` (not `apiVersion`, `kind` or `metadata`) with
    /// `value`, in its place (added at the end when absent): for the host's own additions to a
    /// checked object, never the plugin's. [`Self::text_len`] stays the plugin's.
    pub fn set_field(&mut self, name: &str, value: &Value) {
        debug_assert!(!matches!(name, "apiVersion" | "kind" | "metadata"));
        let Ok(raw) = serde_json::value::to_raw_value(value) else {
            return;
        };
        match self.fields.iter_mut().find(|(key, _)| key == name) {
            Some((_, slot)) => *slot = raw,
            None => self.fields.push((name.to_string(), raw)),
        }
    }

    /// Bytes of the object as the plugin wrote it.
    pub fn text_len(&self) -> usize {
        self.text_len
    }

    /// The object as a tree, for callers that show or inspect it (the CLI, tests).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Writes the object with the host's `metadata` and the plugin's text for every other field;
/// with serde_json (as kube's apply does) that text is copied, not parsed again.
/// Two objects are equal when their JSON is, whatever the order of their fields.
impl PartialEq for PluginObject {
    fn eq(&self, other: &Self) -> bool {
        self.to_value() == other.to_value()
    }
}

impl Serialize for PluginObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3 + self.fields.len()))?;
        map.serialize_entry("apiVersion", &self.api_version)?;
        map.serialize_entry("kind", &self.kind)?;
        map.serialize_entry("metadata", &self.metadata)?;
        for (key, value) in &self.fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// The top level of an object: the head fields as values, the rest as text.
struct Head {
    api_version: Option<Value>,
    kind: Option<Value>,
    metadata: Option<Value>,
    fields: Vec<(String, Box<RawValue>)>,
}

impl<'de> serde::Deserialize<'de> for Head {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeadVisitor)
    }
}

struct HeadVisitor;

impl<'de> Visitor<'de> for HeadVisitor {
    type Value = Head;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
        let mut head = Head {
            api_version: None,
            kind: None,
            metadata: None,
            fields: Vec::new(),
        };
        while let Some(key) = map.next_key::<String>()? {
            let twice = || de::Error::custom(format_args!("has field {key:?} twice"));
            let slot = match key.as_str() {
                "apiVersion" => &mut head.api_version,
                "kind" => &mut head.kind,
                "metadata" => &mut head.metadata,
                _ => {
                    if head.fields.iter().any(|(seen, _)| *seen == key) {
                        return Err(twice());
                    }
                    let value = map.next_value()?;
                    head.fields.push((key, value));
                    continue;
                }
            };
            if slot.is_some() {
                return Err(twice());
            }
            *slot = Some(map.next_value()?);
        }
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn other_fields_travel_verbatim_and_metadata_is_the_hosts() {
        let text = r#"{"kind":"ConfigMap","data":{"b":"\u00e9","a":1.50},"apiVersion":"v1","metadata":{"name":"c"}}"#;
        let mut object = PluginObject::parse(text).expect("valid");
        assert_eq!(
            (object.api_version(), object.kind(), object.name()),
            ("v1", "ConfigMap", "c")
        );
        object.metadata_mut(|m| {
            m.insert("namespace".into(), json!("ns"));
        });
        let json = serde_json::to_string(&object).expect("serializes");
        assert!(json.contains(r#""data":{"b":"\u00e9","a":1.50}"#), "{json}");
        assert_eq!(
            object.to_value(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"b": "é", "a": 1.5}})
        );
        assert_eq!(object.text_len(), text.len());
    }

    #[test]
    fn the_name_survives_a_metadata_change() {
        let mut object = PluginObject::parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
        )
        .expect("valid");
        object.metadata_mut(Map::clear);
        assert_eq!(object.name(), "c");
    }

    #[test]
    fn each_fault_is_named() {
        for (text, reason) in [
            ("{", "is not valid JSON"),
            (r#"{"kind":"A"} x"#, "is not valid JSON"),
            ("[1]", "is not a JSON object"),
            ("", "is not valid JSON"),
            (
                r#"{"kind":"A","metadata":{"name":"a"}}"#,
                "has no string apiVersion",
            ),
            (
                r#"{"apiVersion":"v1","kind":7,"metadata":{"name":"a"}}"#,
                "has no string kind",
            ),
            (
                r#"{"apiVersion":"v1","kind":"A","metadata":{"name":""}}"#,
                "has no string metadata.name",
            ),
            (
                r#"{"apiVersion":"v1","kind":"A","metadata":[]}"#,
                "has no string metadata.name",
            ),
            (
                r#"{"apiVersion":"v1","kind":"A","metadata":{"name":"a"},"spec":{},"spec":{}}"#,
                r#"has field "spec" twice"#,
            ),
            (
                r#"{"apiVersion":"v1","kind":"A","kind":"B","metadata":{"name":"a"}}"#,
                r#"has field "kind" twice"#,
            ),
            (
                r#"{"apiVersion":"v1","kind":"A","metadata":{"name":"a"},"spec":{"x":}}"#,
                "is not valid JSON",
            ),
        ] {
            let err = PluginObject::parse(text).expect_err(text);
            assert!(err.contains(reason), "{text}: {err}");
        }
    }
}
