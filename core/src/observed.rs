//! What the host observed of an App: its objects as the plugin may see them, with what the
//! host itself needs to know (ownership, backup slot), and the labels that tie them to the App.

use serde_json::Value;

/// The label every object of an App carries.
pub const APP_LABEL: &str = "wasmop.dev/app";
/// The label on the host's backup Jobs: which slot they ran for.
pub const BACKUP_SLOT_LABEL: &str = "wasmop.dev/backup-slot";
/// The label naming who manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "wasmop";

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
        if let Some(metadata) = json.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
        }
        Some(Self {
            api_version,
            kind,
            name,
            owned,
            backup_slot,
            json,
        })
    }

    /// Whether the App named `app` may update this object (the adoption rule): controlled by
    /// the App (an owner reference with its uid, [`ObservedObject::owned`]), or, for a claim,
    /// which carries no owner reference because it outlives the App, labelled with it. A label
    /// alone proves nothing elsewhere: anyone in the namespace (or a plugin) can write one.
    pub fn is_managed_by(&self, app: &str) -> bool {
        self.owned
            || (self.api_version == "v1"
                && self.kind == "PersistentVolumeClaim"
                && self
                    .json
                    .pointer("/metadata/labels")
                    .and_then(|labels| labels.get(APP_LABEL))
                    .and_then(Value::as_str)
                    == Some(app))
    }
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

    /// The adoption rule: control by owner reference, or a claim's label; a label on anything
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
        assert!(read("ConfigMap", Some("u-1"), None).is_managed_by("kv"));
        assert!(!read("ConfigMap", Some("u-2"), Some("kv")).is_managed_by("kv"));
        assert!(!read("ConfigMap", None, Some("kv")).is_managed_by("kv"));
        assert!(read("PersistentVolumeClaim", None, Some("kv")).is_managed_by("kv"));
        assert!(!read("PersistentVolumeClaim", None, Some("billing")).is_managed_by("kv"));
        assert!(!read("PersistentVolumeClaim", None, None).is_managed_by("kv"));
    }
}
