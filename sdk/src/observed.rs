//! The objects the host observed for an App, read on demand as k8s-openapi types.

use k8s_openapi::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};

/// Existing objects the host passed in (owned objects, Pods, PVCs, backup
/// Jobs...).
///
/// Each object is checked for `apiVersion`, `kind` and `metadata.name` when
/// the input is read; typing into a k8s-openapi struct happens only when the
/// plugin asks for a kind, so unknown kinds cost nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    objects: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    api_version: String,
    kind: String,
    name: String,
    value: Value,
}

impl Observed {
    /// Reads the JSON texts the host sends. `what` names the input in errors
    /// (`observed` or `retained`).
    pub(crate) fn from_json<S: AsRef<str>>(what: &str, texts: &[S]) -> Result<Self> {
        let mut objects = Vec::with_capacity(texts.len());
        for (index, text) in texts.iter().enumerate() {
            let value: Value = serde_json::from_str(text.as_ref()).map_err(|e| {
                Error::invalid_input(format!("not a JSON object: {e}"))
                    .with_field(format!("{what}[{index}]"))
            })?;
            objects.push(Entry::new(value).map_err(|e| e.with_field(format!("{what}[{index}]")))?);
        }
        Ok(Observed { objects })
    }

    /// Builds a collection from objects already in memory (tests, fixtures).
    pub fn from_values(values: impl IntoIterator<Item = Value>) -> Result<Self> {
        let objects = values.into_iter().map(Entry::new).collect::<Result<_>>()?;
        Ok(Observed { objects })
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every object of kind `K`, in the order the host sent them.
    ///
    /// Fails with [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// naming the object if one of them does not fit `K`.
    pub fn all<K: Resource + DeserializeOwned>(&self) -> Result<Vec<K>> {
        self.all_as::<K, K>()
    }

    /// The object of kind `K` named `name`, if it exists.
    pub fn get<K: Resource + DeserializeOwned>(&self, name: &str) -> Result<Option<K>> {
        self.get_as::<K, K>(name)
    }

    /// Every object of kind `K`, read as `T`: a struct with only the fields
    /// the plugin needs, such as [`StatusView`].
    ///
    /// This is how a plugin stays small. Reading a Pod as the full
    /// k8s-openapi `Pod` compiles deserializers for all of `PodSpec`
    /// (containers, thirty volume sources...) into the component;
    /// `StatusView<PodStatus>` compiles only what it names, and unknown
    /// fields are skipped.
    pub fn all_as<K: Resource, T: DeserializeOwned>(&self) -> Result<Vec<T>> {
        self.entries::<K>().map(Entry::typed).collect()
    }

    /// The object of kind `K` named `name` read as `T`, if it exists.
    pub fn get_as<K: Resource, T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        self.entries::<K>()
            .find(|e| e.name == name)
            .map(Entry::typed)
            .transpose()
    }

    /// Whether an object of kind `K` named `name` exists, without typing it.
    pub fn contains<K: Resource>(&self, name: &str) -> bool {
        self.entries::<K>().any(|e| e.name == name)
    }

    /// Every object as raw JSON, for kinds k8s-openapi does not know.
    pub fn values(&self) -> impl Iterator<Item = &Value> {
        self.objects.iter().map(|e| &e.value)
    }

    fn entries<K: Resource>(&self) -> impl Iterator<Item = &Entry> {
        self.objects
            .iter()
            .filter(|e| e.api_version == K::API_VERSION && e.kind == K::KIND)
    }
}

/// An object's metadata and status without its spec, for
/// [`Observed::all_as`]: `observed.all_as::<Pod, StatusView<PodStatus>>()`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct StatusView<S> {
    /// `metadata`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `status`, if the object has one yet.
    #[serde(default = "none")]
    pub status: Option<S>,
}

// `#[serde(default)]` on `Option<S>` would require `S: Default`.
fn none<S>() -> Option<S> {
    None
}

impl Entry {
    fn new(value: Value) -> Result<Self> {
        let text = |field: &str| {
            value
                .pointer(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let (Some(api_version), Some(kind), Some(name)) =
            (text("/apiVersion"), text("/kind"), text("/metadata/name"))
        else {
            return Err(Error::invalid_input(
                "an object needs apiVersion, kind and metadata.name",
            ));
        };
        Ok(Entry {
            api_version,
            kind,
            name,
            value,
        })
    }

    fn typed<K: DeserializeOwned>(&self) -> Result<K> {
        // Plain `&Value` deserialization, no path tracking: every k8s-openapi
        // type then has a single deserializer instantiation in the component
        // (a path-tracking one would double the code of StatefulSet, Pod,
        // Job...). The host sent these objects, so the message naming the
        // object is enough to debug it.
        K::deserialize(&self.value).map_err(|e| {
            Error::invalid_input(format!(
                "{} {} {}: {e}",
                self.api_version, self.kind, self.name
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn sts(name: &str, replicas: i64) -> String {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {}, "serviceName": name, "template": {}}
        })
        .to_string()
    }

    #[test]
    fn typed_lookup_by_kind_and_name() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kv-0"}});
        let observed = Observed::from_json(
            "observed",
            &[sts("kv", 3), sts("other", 1), pod.to_string()],
        )
        .expect("valid objects");
        assert_eq!(observed.len(), 3);
        let kv: StatefulSet = observed.get("kv").expect("typed").expect("present");
        assert_eq!(kv.spec.replicas, Some(3));
        assert_eq!(observed.all::<StatefulSet>().expect("typed").len(), 2);
        assert_eq!(observed.all::<Pod>().expect("typed").len(), 1);
        assert!(observed.get::<Pod>("kv").expect("typed").is_none());
        assert!(observed.contains::<Pod>("kv-0"));
    }

    #[test]
    fn views_read_only_what_they_name() {
        use k8s_openapi::api::apps::v1::StatefulSetStatus;
        let mut value: Value = serde_json::from_str(&sts("kv", 3)).expect("json");
        value["status"] = json!({"replicas": 3, "readyReplicas": 2});
        // A spec that does not even fit StatefulSetSpec: views never read it.
        value["spec"] = json!({"replicas": "many"});
        let observed = Observed::from_values([value]).expect("valid");
        let view: StatusView<StatefulSetStatus> = observed
            .get_as::<StatefulSet, _>("kv")
            .expect("typed")
            .expect("present");
        assert_eq!(view.status.and_then(|s| s.ready_replicas), Some(2));
        assert_eq!(view.metadata.name.as_deref(), Some("kv"));
        assert!(
            observed.get::<StatefulSet>("kv").is_err(),
            "the full type does read the spec"
        );
        let pods: Vec<StatusView<StatefulSetStatus>> = observed.all_as::<Pod, _>().expect("typed");
        assert!(pods.is_empty());
    }

    #[test]
    fn malformed_objects_name_their_index() {
        let err = Observed::from_json("observed", &[sts("kv", 1), "[1, 2".to_string()])
            .expect_err("bad json");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("observed[1]"));

        let nameless = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
        let err = Observed::from_json("retained", &[nameless.to_string()]).expect_err("no name");
        assert_eq!(err.field(), Some("retained[0]"));
    }

    #[test]
    fn ill_typed_objects_fail_on_read_not_on_load() {
        let observed = Observed::from_json("observed", &[sts("kv", 1).replace("1,", "\"one\",")])
            .expect("shape is fine");
        let err = observed
            .get::<StatefulSet>("kv")
            .expect_err("replicas is a number");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(err.message().contains("expected i32"), "{err}");
        assert!(
            err.message().starts_with("apps/v1 StatefulSet kv:"),
            "{err}"
        );
    }
}
