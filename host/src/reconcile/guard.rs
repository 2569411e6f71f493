//! Guard: the host's check of a plan before anything is applied. Every object must be of an
//! allowed kind, in the App's namespace, well named, unique and bounded in size; a plan that
//! breaks any rule is rejected whole, with an error naming the object.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::plugin::object::PluginObject;

/// A kind plugins may plan, and how the host reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// API group, empty for the core group.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// Kind name.
    pub kind: &'static str,
    /// Resource (plural) name.
    pub plural: &'static str,
}

impl Kind {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// What a plan may contain. A planned PersistentVolumeClaim (say, for backups) is applied but
/// never pruned: claims are deleted only through `finalize`. Secrets, RBAC and cluster-scoped
/// objects are never planned.
pub const PLANNABLE: &[Kind] = &[
    Kind {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        plural: "statefulsets",
    },
    Kind {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
    },
    Kind {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
    },
    Kind {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
    },
    Kind {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
    },
    Kind {
        group: "policy",
        version: "v1",
        kind: "PodDisruptionBudget",
        plural: "poddisruptionbudgets",
    },
    Kind {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
    },
    Kind {
        group: "",
        version: "v1",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
    },
];

/// Most objects planned for one App.
pub const MAX_OBJECTS: usize = 64;
/// Largest planned object as the plugin wrote it; etcd's own limit is 1.5 MiB.
pub const MAX_OBJECT_BYTES: usize = 512 << 10;

/// An object that passed the guard.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// Its kind.
    pub kind: &'static Kind,
    /// The object, with `metadata.namespace` set to the App's.
    pub object: PluginObject,
}

/// Why a plan was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan rejected: {object}: {reason}")]
pub struct GuardError {
    /// `Kind/name`.
    pub object: String,
    /// The rule it broke.
    pub reason: String,
}

/// Checks every object of a plan for the App in `namespace`.
pub fn check(namespace: &str, objects: Vec<PluginObject>) -> Result<Vec<Guarded>, GuardError> {
    if objects.len() > MAX_OBJECTS {
        return Err(GuardError {
            object: format!("{} objects", objects.len()),
            reason: format!("a plan may hold at most {MAX_OBJECTS} objects"),
        });
    }
    let mut seen = BTreeSet::new();
    let mut guarded = Vec::with_capacity(objects.len());
    for mut object in objects {
        let name = object.name().to_string();
        let reject = |reason: String| GuardError {
            object: format!("{}/{name}", object.kind()),
            reason,
        };

        let kind = PLANNABLE
            .iter()
            .find(|k| k.kind == object.kind() && k.api_version() == object.api_version())
            .ok_or_else(|| {
                let allowed: Vec<String> = PLANNABLE
                    .iter()
                    .map(|k| format!("{}/{}", k.api_version(), k.kind))
                    .collect();
                reject(format!(
                    "{}/{} is not an allowed kind (allowed: {})",
                    object.api_version(),
                    object.kind(),
                    allowed.join(", ")
                ))
            })?;
        if !is_dns_subdomain(&name) {
            return Err(reject(format!(
                "metadata.name {name:?} is not a DNS-1123 subdomain"
            )));
        }
        match object.metadata().get("namespace") {
            None => {}
            Some(Value::String(ns)) if ns == namespace => {}
            Some(ns) => {
                return Err(reject(format!(
                    "metadata.namespace {ns} is not the App's namespace {namespace:?}"
                )));
            }
        }
        if object.metadata().contains_key("ownerReferences") {
            return Err(reject(
                "metadata.ownerReferences is set by the host, not the plugin".into(),
            ));
        }
        if object.text_len() > MAX_OBJECT_BYTES {
            return Err(reject(format!(
                "{} bytes is over the {MAX_OBJECT_BYTES} byte limit",
                object.text_len()
            )));
        }
        if !seen.insert((kind.kind, name.clone())) {
            return Err(reject("planned twice".into()));
        }
        object.metadata_mut(|metadata| {
            metadata.insert("namespace".into(), Value::String(namespace.to_string()));
        });
        guarded.push(Guarded { kind, object });
    }
    Ok(guarded)
}

fn is_dns_subdomain(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(value: Value) -> PluginObject {
        PluginObject::parse(&value.to_string()).expect("test objects are plugin objects")
    }

    fn cm(name: &str) -> PluginObject {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
    }

    #[test]
    fn a_good_plan_passes_with_the_namespace_filled_in() {
        let plan = vec![
            cm("a"),
            obj(
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a", "namespace": "ns"}}),
            ),
        ];
        let guarded = check("ns", plan).expect("passes");
        assert_eq!(guarded.len(), 2);
        assert_eq!(guarded[0].object.metadata()["namespace"], "ns");
        assert_eq!(guarded[1].kind.plural, "statefulsets");
    }

    #[test]
    fn each_rule_names_the_object() {
        let cases = [
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
                ),
                "ConfigMap/x",
                "not the App's namespace",
            ),
            (
                obj(
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "admin"}}),
                ),
                "ClusterRole/admin",
                "not an allowed kind",
            ),
            (
                obj(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})),
                "Secret/s",
                "not an allowed kind",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}),
                ),
                "ConfigMap/Bad_Name",
                "DNS-1123",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "ownerReferences": []}}),
                ),
                "ConfigMap/o",
                "ownerReferences",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(MAX_OBJECT_BYTES)}}),
                ),
                "ConfigMap/big",
                "byte limit",
            ),
        ];
        for (object, name, reason) in cases {
            let err = check("ns", vec![cm("fine"), object]).expect_err(reason);
            assert_eq!(err.object, name);
            assert!(err.reason.contains(reason), "{err}");
        }
        let err = check("ns", vec![cm("a"), cm("a")]).expect_err("duplicate");
        assert_eq!(err.to_string(), "plan rejected: ConfigMap/a: planned twice");
        let err = check(
            "ns",
            (0..=MAX_OBJECTS).map(|i| cm(&format!("c{i}"))).collect(),
        )
        .expect_err("too many");
        assert!(err.reason.contains("at most"), "{err}");
    }
}
