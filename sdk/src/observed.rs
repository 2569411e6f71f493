//! The objects the host observed for an App, read on demand as k8s-openapi types.

use k8s_openapi::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor,
};
use serde_json::Value;

use crate::error::{Error, Result, json_message};

/// Existing objects the host passed in (owned objects, Pods, PVCs, backup
/// Jobs...).
///
/// Objects stay the JSON text the host sent. Reading the input only checks
/// each for `apiVersion`, `kind` and `metadata.name`; an object is typed,
/// straight from its text, only when the plugin asks for its kind. No
/// `serde_json::Value` tree is ever built: building and freeing one per
/// object was most of the cost of a call. The host leaves out the API
/// clients' bookkeeping: `metadata.managedFields` and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation. Of the
/// objects an App's workloads make, whose number follows replicas rather
/// than the plan, it keeps only what a plugin reads: a Pod has its metadata
/// without annotations, its status, `spec.nodeName` and its (init)
/// containers' names and images; a PersistentVolumeClaim has all but the
/// annotations storage controllers do not write (`pv.kubernetes.io/*`,
/// `volume.kubernetes.io/*`, `volume.beta.kubernetes.io/*` stay).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    objects: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    api_version: String,
    kind: String,
    name: String,
    text: String,
}

/// What [`Entry::new`] reads of an object: its key, and nothing more.
///
/// Reading stops as soon as the key is complete. The host sends every
/// object head first (`apiVersion`, `kind`, then `metadata` with `name`
/// first), so the key is read from the first few bytes and the rest is
/// never scanned until the plugin asks for the object (skipping it was a
/// fifth of a call, measured). Any order works; another only costs a
/// longer scan.
#[derive(Default)]
struct Head {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
}

/// Returned from inside the parse to stop it once the head is complete; the
/// error is never shown.
const HEAD_COMPLETE: &str = "wasmop: head complete";

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum ObjectKey {
    ApiVersion,
    Kind,
    Metadata,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum MetadataKey {
    Name,
    #[serde(other)]
    Other,
}

impl Head {
    fn read(text: &str) -> std::result::Result<Head, serde_json::Error> {
        match Head::scan(text) {
            Some(head) => Ok(head),
            None => Head::parse(text),
        }
    }

    /// The head of an object as serde_json writes one, read without
    /// serde: stopping a serde_json parse early takes an error, and building
    /// it counts the lines up to the stop (this made kvstore's plan and
    /// health calls 3-4 µs faster, measured). Values before the head is
    /// complete are stepped over, not checked: a malformed one fails when
    /// the plugin reads the object, as a truncated `spec` always did.
    /// `None` for anything this does not expect (an escape in a
    /// key or in a head value, text that is not JSON, a head that is not
    /// complete); [`Head::parse`] then reads the object and explains what
    /// is wrong with it.
    fn scan(text: &str) -> Option<Head> {
        let mut scan = Scanner {
            text,
            at: 0,
            first: true,
        };
        let mut head = Head::default();
        scan.open()?;
        while let Some(key) = scan.key()? {
            match key {
                "apiVersion" => head.api_version = Some(scan.string()?.to_string()),
                "kind" => head.kind = Some(scan.string()?.to_string()),
                "metadata" => {
                    scan.open()?;
                    while let Some(key) = scan.key()? {
                        if key == "name" {
                            head.name = Some(scan.string()?.to_string());
                            if head.is_complete() {
                                return Some(head);
                            }
                        } else {
                            scan.skip_value()?;
                        }
                    }
                }
                _ => scan.skip_value()?,
            }
            if head.is_complete() {
                return Some(head);
            }
        }
        None
    }

    /// The head through serde_json, for whatever [`Head::scan`] turns down.
    fn parse(text: &str) -> std::result::Result<Head, serde_json::Error> {
        let mut head = Head::default();
        let result =
            serde_json::Deserializer::from_str(text).deserialize_map(ObjectVisitor(&mut head));
        match result {
            Err(_) if head.is_complete() => Ok(head),
            Err(e) => Err(e),
            Ok(()) => Ok(head),
        }
    }

    fn is_complete(&self) -> bool {
        self.api_version.is_some() && self.kind.is_some() && self.name.is_some()
    }
}

/// Reads JSON objects forward through `text`, as far as [`Head::scan`] needs.
struct Scanner<'t> {
    text: &'t str,
    at: usize,
    /// Whether the object just entered has had no member yet (no comma).
    first: bool,
}

impl<'t> Scanner<'t> {
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(&byte) = bytes.get(self.at) {
            if !matches!(byte, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(byte);
            }
            self.at += 1;
        }
        None
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        if self.peek()? != byte {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// Enters an object; its first [`Self::key`] then needs no comma.
    fn open(&mut self) -> Option<()> {
        self.expect(b'{')?;
        self.first = true;
        Some(())
    }

    /// The next key of the object: `Some(None)` at its end, `None` for
    /// anything unexpected.
    fn key(&mut self) -> Option<Option<&'t str>> {
        match self.peek()? {
            b'}' => {
                self.at += 1;
                // The object just closed was a member of the one around it.
                self.first = false;
                return Some(None);
            }
            b',' if !self.first => self.at += 1,
            _ if self.first => {}
            _ => return None,
        }
        self.first = false;
        let key = self.string()?;
        self.expect(b':')?;
        Some(Some(key))
    }

    /// A string without escapes.
    fn string(&mut self) -> Option<&'t str> {
        self.expect(b'"')?;
        let start = self.at;
        let len = self.text.as_bytes()[start..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        self.at = start + len;
        self.expect(b'"')?;
        self.text.get(start..start + len)
    }

    /// Steps over one value of any kind, checking only that brackets and
    /// quotes pair up: the value is parsed for real if the plugin reads it.
    fn skip_value(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        if !matches!(self.peek()?, b'"' | b'{' | b'[') {
            // A number, true, false or null runs to the next delimiter.
            while !matches!(
                bytes.get(self.at),
                None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            ) {
                self.at += 1;
            }
            return Some(());
        }
        let mut depth = 0usize;
        loop {
            match *bytes.get(self.at)? {
                b'"' => loop {
                    self.at += 1;
                    match *bytes.get(self.at)? {
                        b'"' => break,
                        b'\\' => self.at += 1,
                        _ => {}
                    }
                },
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth = depth.checked_sub(1)?,
                _ => {}
            }
            self.at += 1;
            if depth == 0 {
                return Some(());
            }
        }
    }
}

struct ObjectVisitor<'h>(&'h mut Head);

impl<'de> Visitor<'de> for ObjectVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(key) = map.next_key()? {
            match key {
                ObjectKey::ApiVersion => self.0.api_version = Some(map.next_value()?),
                ObjectKey::Kind => self.0.kind = Some(map.next_value()?),
                ObjectKey::Metadata => map.next_value_seed(MetadataVisitor(&mut *self.0))?,
                ObjectKey::Other => map.next_value::<IgnoredAny>().map(drop)?,
            }
            if self.0.is_complete() {
                return Err(A::Error::custom(HEAD_COMPLETE));
            }
        }
        Ok(())
    }
}

struct MetadataVisitor<'h>(&'h mut Head);

impl<'de> DeserializeSeed<'de> for MetadataVisitor<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetadataVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(key) = map.next_key()? {
            match key {
                MetadataKey::Name => {
                    self.0.name = Some(map.next_value()?);
                    if self.0.is_complete() {
                        return Err(A::Error::custom(HEAD_COMPLETE));
                    }
                }
                MetadataKey::Other => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(())
    }
}

impl Observed {
    /// Reads the JSON texts the host sends. `what` names the input in errors
    /// (`observed` or `retained`).
    pub(crate) fn from_json(what: &str, texts: Vec<String>) -> Result<Self> {
        let objects = texts
            .into_iter()
            .enumerate()
            .map(|(index, text)| {
                Entry::new(text).map_err(|e| e.with_field(format!("{what}[{index}]")))
            })
            .collect::<Result<_>>()?;
        Ok(Observed { objects })
    }

    /// Builds a collection from objects already in memory (tests, fixtures).
    pub fn from_values(values: impl IntoIterator<Item = Value>) -> Result<Self> {
        let objects = values
            .into_iter()
            .map(|value| Entry::new(value.to_string()))
            .collect::<Result<_>>()?;
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
    /// This is how a plugin stays small and fast. Reading a Pod as the full
    /// k8s-openapi `Pod` compiles deserializers for all of `PodSpec`
    /// (containers, thirty volume sources...) into the component and
    /// allocates every field; `StatusView<PodStatus>` compiles and allocates
    /// only what it names, and the rest of the text is skipped.
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

    /// Every object as the JSON text the host sent, for kinds k8s-openapi
    /// does not know: parse it into a type of your own.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.objects.iter().map(|e| e.text.as_str())
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
    fn new(text: String) -> Result<Self> {
        let head = Head::read(&text).map_err(|e| {
            Error::invalid_input(format!("not a Kubernetes object: {}", json_message(&e)))
        })?;
        let non_empty = |field: Option<String>| field.filter(|f| !f.is_empty());
        let (Some(api_version), Some(kind), Some(name)) = (
            non_empty(head.api_version),
            non_empty(head.kind),
            non_empty(head.name),
        ) else {
            return Err(Error::invalid_input(
                "an object needs apiVersion, kind and metadata.name",
            ));
        };
        Ok(Entry {
            api_version,
            kind,
            name,
            text,
        })
    }

    fn typed<K: DeserializeOwned>(&self) -> Result<K> {
        // Plain text deserialization, no path tracking, as for the App's
        // metadata: every k8s-openapi type then has a single deserializer
        // instantiation in the component (a path-tracking one would double
        // the code of StatefulSet, Pod, Job...). The host sent these objects,
        // so the message naming the object is enough to debug it.
        serde_json::from_str(&self.text).map_err(|e| {
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
            vec![sts("kv", 3), sts("other", 1), pod.to_string()],
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
        let err = Observed::from_json("observed", vec![sts("kv", 1), "[1, 2".to_string()])
            .expect_err("bad json");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("observed[1]"));

        let nameless = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
        let err = Observed::from_json("retained", vec![nameless.to_string()]).expect_err("no name");
        assert_eq!(err.field(), Some("retained[0]"));
    }

    #[test]
    fn the_head_is_found_in_any_key_order_and_the_rest_is_read_only_on_demand() {
        let shuffled = r#"{"metadata": {"labels": {"a": "b"}, "name": "kv-0"}, "status": {},
            "kind": "Pod", "apiVersion": "v1"}"#;
        // Sorted keys, as the host sends them: the head is complete before
        // `spec`, so even a truncated spec loads, and fails only when read.
        let truncated =
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kv-1"}, "spec": {"#;
        let observed = Observed::from_json(
            "observed",
            vec![shuffled.to_string(), truncated.to_string()],
        )
        .expect("heads are complete");
        assert!(observed.contains::<Pod>("kv-0"));
        assert!(observed.contains::<Pod>("kv-1"));
        assert!(observed.get::<Pod>("kv-0").expect("typed").is_some());
        let err = observed.get::<Pod>("kv-1").expect_err("truncated");
        assert!(err.message().starts_with("v1 Pod kv-1:"), "{err}");
    }

    #[test]
    fn the_scan_reads_heads_as_serde_would() {
        let texts = [
            sts("kv", 3),
            // Nested values, brackets and escaped quotes inside strings before the name.
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{"a":"{[\"}","b":"c\\"},"generation":3,"labels":{},"managedFields":[{"f":[1,{"g":null}]}],"name":"p"}}"#.to_string(),
            // Whitespace anywhere, and members after the head.
            " {\n \"apiVersion\" : \"v1\" ,\t\"kind\":\"Pod\", \"metadata\": { \"labels\": { } , \"name\" : \"q\" } , \"spec\": {}}".to_string(),
            // An empty object as a member, then more members.
            r#"{"apiVersion":"v1","data":{},"kind":"ConfigMap","metadata":{"name":"c"}}"#.to_string(),
        ];
        for text in &texts {
            let scanned = Head::scan(text).unwrap_or_else(|| panic!("scans {text}"));
            let parsed = Head::parse(text).expect("parses");
            assert_eq!(
                (scanned.api_version, scanned.kind, scanned.name),
                (parsed.api_version, parsed.kind, parsed.name),
                "{text}"
            );
        }
        // An escape in the name is left to serde_json, which decodes it.
        let escaped = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a\u0062"}}"#;
        assert!(Head::scan(escaped).is_none());
        assert_eq!(
            Head::read(escaped).expect("reads").name.as_deref(),
            Some("ab")
        );
        for bad in [
            "",
            "[]",
            "{",
            r#"{"kind" "Pod"}"#,
            r#"{"metadata":[],"kind":"Pod"}"#,
        ] {
            assert!(Head::scan(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn ill_typed_objects_fail_on_read_not_on_load() {
        let observed =
            Observed::from_json("observed", vec![sts("kv", 1).replace("1,", "\"one\",")])
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
