//! What the host observed of an App: its objects as the plugin may see them, with what the
//! host itself needs to know (ownership, backup slot), and the labels that tie them to the App.
//!
//! The App is the parent of its objects, and a parent may be of any kind: the built-in `App`
//! (`wasmop.dev/v1alpha1`) or a custom resource bound to a plugin. Two labels tie an object to
//! its parent, so that parents of different kinds with the same name in one namespace never
//! see, own or prune each other's objects:
//! - [`APP_LABEL`] (`wasmop.dev/app`): the parent's name;
//! - [`PARENT_KIND_LABEL`] (`wasmop.dev/parent-kind`): the parent's kind and API group,
//!   [`kind_mark`] (`KVStore.data.example.com`; `App.wasmop.dev` for an App).
//!
//! An object without the kind label is an App's: objects an App made before the kind label
//! existed carry only `wasmop.dev/app`, and so do the Pods and claims an App's workloads make
//! from their templates (the host adds the kind label to an App's templates never: that would
//! restart every App's Pods and change its StatefulSets' claim templates, which the API server
//! refuses). An object of any other kind's parent always carries it. Labels name candidates
//! only: ownership is the controlling owner reference, which names the parent's uid.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The label every object of an App carries: the App's (the parent's) name.
pub const APP_LABEL: &str = "wasmop.dev/app";
/// The label beside [`APP_LABEL`] naming the parent's kind: its [`kind_mark`].
pub const PARENT_KIND_LABEL: &str = "wasmop.dev/parent-kind";
/// The [`kind_mark`] of the built-in `App` (`wasmop.dev/v1alpha1`), the one kind whose objects
/// may lack [`PARENT_KIND_LABEL`].
pub const APP_KIND_MARK: &str = "App.wasmop.dev";
/// The label on the host's backup Jobs: which slot they ran for.
pub const BACKUP_SLOT_LABEL: &str = "wasmop.dev/backup-slot";
/// The label naming who manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "wasmop";
/// The field manager of everything the host writes (server-side apply, creates).
pub const FIELD_MANAGER: &str = "wasmop";

/// The value of [`PARENT_KIND_LABEL`] for parents of `kind` in the API group `group`:
/// `<kind>.<group>` as Kubernetes writes a group-qualified kind (`KVStore.data.example.com`;
/// the kind alone in the core group). A label value holds at most 63 characters of
/// `[A-Za-z0-9._-]`, beginning and ending with a letter or digit; a longer one (a long group)
/// keeps its first 46 characters and ends with `_` and 16 hex digits of the SHA-256 of the whole
/// `<kind>.<group>`, so it stays unique and still reads as the kind. No kind or API group holds
/// a `_`, so a hashed mark never equals a plain one (a group named like another's hashed mark
/// does not share its objects); a `<kind>.<group>` that does hold one is hashed too.
pub fn kind_mark(group: &str, kind: &str) -> String {
    let full = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-');
    let valid = full.len() <= 63
        && full.chars().all(allowed)
        && full.starts_with(|c: char| c.is_ascii_alphanumeric())
        && full.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        return full;
    }
    let hash = format!("{:x}", Sha256::digest(full.as_bytes()));
    let prefix: String = full.chars().take_while(|c| allowed(*c)).take(46).collect();
    let prefix = prefix
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if prefix.is_empty() {
        format!("h_{}", &hash[..16])
    } else {
        format!("{prefix}_{}", &hash[..16])
    }
}

/// The name of the parent whose kind mark is `kind_mark` that an object's labels (`label`
/// reads one) name: [`APP_LABEL`], when [`PARENT_KIND_LABEL`] is `kind_mark`, or is missing
/// and `kind_mark` is the App's ([`APP_KIND_MARK`]: objects an App made before the kind label,
/// and those its templates make). `None` for an object of another kind's parent.
pub fn parent_name<'a>(
    label: impl Fn(&str) -> Option<&'a str>,
    kind_mark: &str,
) -> Option<&'a str> {
    let name = label(APP_LABEL)?;
    match label(PARENT_KIND_LABEL) {
        Some(mark) if mark == kind_mark => Some(name),
        None if kind_mark == APP_KIND_MARK => Some(name),
        _ => None,
    }
}

/// Whether an object's labels (`label` reads one) name the parent `name` whose kind mark is
/// `kind_mark` ([`parent_name`]).
pub fn labelled_for<'a>(
    label: impl Fn(&str) -> Option<&'a str>,
    name: &str,
    kind_mark: &str,
) -> bool {
    parent_name(label, kind_mark) == Some(name)
}

/// Whether the labels of the JSON object `object` name the parent `name` of kind mark
/// `kind_mark` ([`labelled_for`]).
pub fn json_labelled_for(object: &Value, name: &str, kind_mark: &str) -> bool {
    let labels = object.pointer("/metadata/labels");
    labelled_for(
        |key| labels.and_then(|l| l.get(key)).and_then(Value::as_str),
        name,
        kind_mark,
    )
}

/// An observed object, as JSON for the plugin, with what the host needs to know about it.
#[derive(Debug, Clone)]
pub struct ObservedObject {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// Whether the App is its controlling owner.
    pub owned: bool,
    /// The backup slot label, for backup Jobs.
    pub backup_slot: Option<String>,
    /// Whether some of its fields belong to the host's create (a POST: an `Update` entry of
    /// [`FIELD_MANAGER`] in `managedFields`) rather than to its server-side apply. A field only
    /// that entry owns is one a later apply cannot remove by leaving it out, so the host hands
    /// the entry's fields over to its apply entry before it applies the object again.
    pub create_owned: bool,
    /// The object as JSON, without `managedFields` (noise to a plugin).
    pub json: Value,
}

impl ObservedObject {
    /// An object as read from a file or a list (`kubectl get -o json`), seen from the App with
    /// uid `app_uid`: owned when the App is its controlling owner. `None` when it lacks
    /// `apiVersion`, `kind` or `metadata.name`.
    pub fn from_value(mut json: Value, app_uid: &str) -> Option<Self> {
        let text = |p: &str| json.pointer(p).and_then(Value::as_str).map(str::to_string);
        let (api_version, kind, name) = (
            text("/apiVersion")?,
            text("/kind")?,
            text("/metadata/name")?,
        );
        let owned = json
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(app_uid)
                        && r.get("controller").and_then(Value::as_bool) == Some(true)
                })
            });
        let backup_slot = json
            .pointer("/metadata/labels")
            .and_then(|l| l.get(BACKUP_SLOT_LABEL))
            .and_then(Value::as_str)
            .map(str::to_string);
        let create_owned = json
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|entries| {
                entries.iter().any(|entry| {
                    let text = |key: &str| entry.get(key).and_then(Value::as_str);
                    is_create_entry(text("manager"), text("operation"), text("subresource"))
                })
            });
        if let Some(metadata) = json.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
        }
        Some(Self {
            api_version,
            kind,
            name,
            owned,
            backup_slot,
            create_owned,
            json,
        })
    }

    /// Whether the App `app` may update this object (the adoption rule): controlled by the App
    /// (an owner reference with its uid, [`ObservedObject::owned`]), or, for a claim, which
    /// carries no owner reference because it outlives the App, labelled with it (its name and
    /// kind, [`labelled_for`]). A label alone proves nothing elsewhere: anyone in the namespace
    /// (or a plugin) can write one.
    pub fn is_managed_by(&self, app: &crate::stamp::AppRef) -> bool {
        self.owned
            || (self.api_version == "v1"
                && self.kind == "PersistentVolumeClaim"
                && json_labelled_for(&self.json, &app.name, &app.kind_mark()))
    }
}

/// Whether a `managedFields` entry (its `manager`, `operation` and `subresource`) is the host's
/// create's: manager [`FIELD_MANAGER`], operation `Update`, on the object itself (not a
/// subresource).
pub fn is_create_entry(
    manager: Option<&str>,
    operation: Option<&str>,
    subresource: Option<&str>,
) -> bool {
    manager == Some(FIELD_MANAGER)
        && operation == Some("Update")
        && subresource.is_none_or(str::is_empty)
}

/// What of `observed` a plugin is shown, as the WIT states it: objects of its `owns` kinds the
/// App controls (claims, which never carry an owner reference, by label), objects of its
/// `observes` kinds labelled with the App, and the App's backup Jobs when it backs up. A plugin
/// sees nothing else of the namespace.
pub fn visible_to<'a>(
    observed: &'a [ObservedObject],
    owns: &'a [String],
    observes: &'a [String],
    backs_up: bool,
) -> impl Iterator<Item = &'a ObservedObject> + 'a {
    observed.iter().filter(move |o| {
        let key = format!("{}/{}", o.api_version, o.kind);
        (owns.contains(&key) && (o.owned || o.kind == "PersistentVolumeClaim"))
            || observes.contains(&key)
            || (backs_up && o.kind == "Job" && o.owned && o.backup_slot.is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(api_version: &str, kind: &str, name: &str, owned: bool) -> ObservedObject {
        ObservedObject {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            owned,
            backup_slot: (kind == "Job").then(|| "s1".to_string()),
            create_owned: false,
            json: Value::Null,
        }
    }

    #[test]
    fn a_plugin_sees_only_what_it_owns_observes_or_backs_up() {
        let observed = vec![
            object("v1", "ConfigMap", "mine", true),
            object("v1", "ConfigMap", "labelled-only", false),
            object("apps/v1", "StatefulSet", "undeclared", true),
            object("v1", "Pod", "p", false),
            object("v1", "PersistentVolumeClaim", "claim", false),
            object("batch/v1", "Job", "backup", true),
        ];
        let owns = vec![
            "v1/ConfigMap".to_string(),
            "v1/PersistentVolumeClaim".to_string(),
        ];
        let observes = vec!["v1/Pod".to_string()];
        let names = |backs_up| -> Vec<&str> {
            visible_to(&observed, &owns, &observes, backs_up)
                .map(|o| o.name.as_str())
                .collect()
        };
        assert_eq!(names(false), ["mine", "p", "claim"]);
        assert_eq!(names(true), ["mine", "p", "claim", "backup"]);
    }

    fn parent(api_version: &str, kind: &str) -> crate::stamp::AppRef {
        crate::stamp::AppRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "kv".into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
            generation: Some(1),
        }
    }

    /// The adoption rule: control by owner reference, or a claim's labels; a label on anything
    /// else, or another App's, proves nothing.
    #[test]
    fn the_app_manages_what_it_controls_and_its_labelled_claims() {
        let read = |kind: &str, owner: Option<&str>, label: Option<&str>| {
            let mut json = serde_json::json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": "x"}});
            if let Some(uid) = owner {
                json["metadata"]["ownerReferences"] =
                    serde_json::json!([{"uid": uid, "controller": true}]);
            }
            if let Some(app) = label {
                json["metadata"]["labels"] = serde_json::json!({APP_LABEL: app});
            }
            ObservedObject::from_value(json, "u-1").expect("an object")
        };
        let kv = parent("wasmop.dev/v1alpha1", "App");
        assert!(read("ConfigMap", Some("u-1"), None).is_managed_by(&kv));
        assert!(!read("ConfigMap", Some("u-2"), Some("kv")).is_managed_by(&kv));
        assert!(!read("ConfigMap", None, Some("kv")).is_managed_by(&kv));
        assert!(read("PersistentVolumeClaim", None, Some("kv")).is_managed_by(&kv));
        assert!(!read("PersistentVolumeClaim", None, Some("billing")).is_managed_by(&kv));
        assert!(!read("PersistentVolumeClaim", None, None).is_managed_by(&kv));
    }

    /// A claim of an App and one of a KVStore named alike: each parent manages its own only.
    /// A claim with the App label alone is the App's (made before the parent-kind label, or
    /// from an App's claim template), never another kind's.
    #[test]
    fn claims_are_managed_by_the_parent_of_their_kind() {
        let claim = |labels: Value| {
            let json = serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "labels": labels}});
            ObservedObject::from_value(json, "nobody").expect("an object")
        };
        let app = parent("wasmop.dev/v1alpha1", "App");
        let kv = parent("data.example.com/v1", "KVStore");
        let old = claim(serde_json::json!({APP_LABEL: "kv"}));
        let apps = claim(serde_json::json!({APP_LABEL: "kv", PARENT_KIND_LABEL: APP_KIND_MARK}));
        let kvs = claim(
            serde_json::json!({APP_LABEL: "kv", PARENT_KIND_LABEL: "KVStore.data.example.com"}),
        );
        assert!(old.is_managed_by(&app) && apps.is_managed_by(&app));
        assert!(!kvs.is_managed_by(&app));
        assert!(kvs.is_managed_by(&kv));
        assert!(!old.is_managed_by(&kv) && !apps.is_managed_by(&kv));
    }

    #[test]
    fn kind_marks_are_label_values() {
        assert_eq!(kind_mark("wasmop.dev", "App"), APP_KIND_MARK);
        assert_eq!(
            kind_mark("data.example.com", "KVStore"),
            "KVStore.data.example.com"
        );
        assert_eq!(kind_mark("", "ConfigMap"), "ConfigMap");
        let group = format!("{}.example.com", "very-long-group-name".repeat(3));
        let long = kind_mark(&group, "KVStore");
        assert_eq!(long.len(), 63, "{long}");
        assert!(long.starts_with("KVStore.very-long-group-name"), "{long}");
        assert!(long.ends_with(|c: char| c.is_ascii_hexdigit()), "{long}");
        assert_eq!(long, kind_mark(&group, "KVStore"), "stable");
        assert_ne!(long, kind_mark(&group, "KVStores"), "unique");
        let other = kind_mark(&format!("{group}.x"), "KVStore");
        assert_eq!(&long[..46], &other[..46]);
        assert_ne!(long, other, "the hash tells groups with one prefix apart");
        // A group named after another's hashed mark is a kind of its own: the `_` before the
        // hash is in no plain mark.
        let (kind, group) = long.split_once('.').expect("Kind.group");
        assert!(group.contains('_'), "{long}");
        let forged = kind_mark(&group.replace('_', "-"), kind);
        assert_ne!(forged, long, "a look-alike group takes another's mark");
        // Whatever the input, a valid label value.
        for (group, kind) in [("a.b", "Ké"), ("x", "-A-"), ("", "")] {
            let mark = kind_mark(group, kind);
            assert!(mark.len() <= 63, "{mark}");
            assert!(
                mark.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
                "{mark}"
            );
            assert!(
                mark.starts_with(|c: char| c.is_ascii_alphanumeric()),
                "{mark}"
            );
            assert!(
                mark.ends_with(|c: char| c.is_ascii_alphanumeric()),
                "{mark}"
            );
        }
    }

    #[test]
    fn an_unmarked_object_is_an_apps_only() {
        let labels = |pairs: &[(&'static str, &'static str)]| {
            let map: std::collections::BTreeMap<&str, &str> = pairs.iter().copied().collect();
            move |key: &str| map.get(key).copied()
        };
        let old = labels(&[(APP_LABEL, "cache")]);
        assert_eq!(parent_name(&old, APP_KIND_MARK), Some("cache"));
        assert_eq!(parent_name(&old, "KVStore.data.example.com"), None);
        let kv = labels(&[
            (APP_LABEL, "cache"),
            (PARENT_KIND_LABEL, "KVStore.data.example.com"),
        ]);
        assert_eq!(parent_name(&kv, APP_KIND_MARK), None);
        assert_eq!(parent_name(&kv, "KVStore.data.example.com"), Some("cache"));
        assert!(!labelled_for(&kv, "other", "KVStore.data.example.com"));
        assert_eq!(parent_name(labels(&[]), APP_KIND_MARK), None);
    }
}
