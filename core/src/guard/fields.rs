//! The guard's rules for fields outside pod templates that let an object reach beyond its
//! App: metadata the host owns, Service exposure, and claims that bind existing volumes.

use serde_json::{Map, Value};

use super::{Breach, PlanPolicy};

/// The prefix of labels and annotations that carry the host's own bookkeeping.
const HOST_PREFIX: &str = "wasmop.dev/";
/// The host labels that tie objects and Pods to their App (how the host finds an App's Pods and
/// claims): a plugin may write them (the SDK writes the first, in selectors and pod templates)
/// only with the App's own name and kind mark.
pub(super) use crate::observed::{APP_LABEL, PARENT_KIND_LABEL};

fn breach(path: String, rule: &str, reason: String) -> Option<Breach> {
    Some(Breach {
        path,
        rule: rule.to_string(),
        reason,
    })
}

/// `metadata` of a planned object (`at` = `metadata`) or of a pod template
/// (`spec.template.metadata`): no finalizers, owner references or generated names, and no
/// `wasmop.dev/*` annotation, nor label but those in `host_labels` with exactly their value
/// (`wasmop.dev/app` = the App's name, `wasmop.dev/parent-kind` = its kind mark; a backup
/// Job's slot).
pub(super) fn metadata(
    metadata: &Map<String, Value>,
    at: &str,
    host_labels: &[(&str, &str)],
) -> Option<Breach> {
    for (field, why) in [
        (
            "finalizers",
            "would keep the object from being deleted; only the host sets finalizers",
        ),
        (
            "ownerReferences",
            "is set by the host, not the plugin (it would tie the object to another owner)",
        ),
        (
            "generateName",
            "the host applies objects by name; a generated name cannot be pruned",
        ),
        (
            "managedFields",
            "is the API server's record of who owns which field; a create would take it as \
             given",
        ),
        (
            "resourceVersion",
            "is the API server's; the host writes planned objects whatever version they are at",
        ),
        (
            "uid",
            "is the API server's; it names an object, not what it should hold",
        ),
    ] {
        if metadata.get(field).is_some_and(|v| !v.is_null()) {
            return breach(format!("{at}.{field}"), "wasmop/metadata", why.to_string());
        }
    }
    for (map, kind) in [("labels", "label"), ("annotations", "annotation")] {
        let Some(Value::Object(entries)) = metadata.get(map) else {
            continue;
        };
        for (key, value) in entries {
            if !key.starts_with(HOST_PREFIX) {
                continue;
            }
            let expected = host_labels
                .iter()
                .find(|(label, _)| kind == "label" && label == key)
                .map(|(_, expected)| *expected);
            if expected.is_some() && value.as_str() == expected {
                continue;
            }
            let reason = match expected {
                Some(expected) if key == APP_LABEL => format!(
                    "{value} is not this App's name {expected:?}: a plan cannot mark its \
                     objects as another App's"
                ),
                Some(expected) if key == PARENT_KIND_LABEL => format!(
                    "{value} is not this App's kind {expected:?}: a plan cannot mark its \
                     objects as those of a parent of another kind"
                ),
                Some(expected) => format!("{value} is not the host's value {expected:?}"),
                None => format!("the {HOST_PREFIX}* {kind}s are the host's"),
            };
            return breach(format!("{at}.{map}[{key:?}]"), "wasmop/metadata", reason);
        }
    }
    None
}

/// A Service's `spec`: its type must be one the policy allows, and no `externalIPs`
/// (CVE-2020-8554: a Service with external IPs intercepts traffic to those IPs cluster-wide).
pub(super) fn service(policy: &PlanPolicy, spec: &Value) -> Option<Breach> {
    let kind = match spec.get("type") {
        None | Some(Value::Null) => "ClusterIP",
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => {
            return breach(
                "spec.type".into(),
                "wasmop/serviceType",
                format!("{other} is not a string"),
            );
        }
    };
    if !policy.service_types.iter().any(|allowed| allowed == kind) {
        return breach(
            "spec.type".into(),
            "wasmop/serviceType",
            format!(
                "{kind} is not allowed by the policy (allowed: {})",
                policy.service_types.join(", ")
            ),
        );
    }
    if spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|ips| !ips.is_empty())
    {
        return breach(
            "spec.externalIPs".into(),
            "wasmop/externalIPs",
            "a Service may not claim external IPs (CVE-2020-8554)".into(),
        );
    }
    None
}

/// A claim's `spec` at `at`: it may not bind or copy an existing volume, which could hold
/// another tenant's data.
pub(super) fn claim(spec: &Value, at: &str) -> Option<Breach> {
    // `selector` too: a claim with a selector is never dynamically provisioned (upstream: "If
    // the claim has a selector, it cannot be provisioned"), so its only use is binding an
    // existing Available PersistentVolume whose labels match, possibly one with another
    // tenant's data (with `storageClassName: ""`, any such volume of the cluster).
    for field in ["volumeName", "dataSource", "dataSourceRef", "selector"] {
        if spec.get(field).is_some_and(|v| !v.is_null() && v != "") {
            return breach(
                format!("{at}.{field}"),
                "wasmop/claimSource",
                "a claim gets a new volume; it may not bind or copy an existing one".into(),
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn host_metadata_is_the_hosts() {
        let ok = meta(
            json!({"name": "x", "labels": {"wasmop.dev/app": "kv", "app": "kv",
            "wasmop.dev/parent-kind": "App.wasmop.dev"}}),
        );
        let host = [(APP_LABEL, "kv"), (PARENT_KIND_LABEL, "App.wasmop.dev")];
        assert_eq!(metadata(&ok, "metadata", &host), None);
        for (value, path) in [
            (json!({"finalizers": ["x/y"]}), "metadata.finalizers"),
            (json!({"ownerReferences": []}), "metadata.ownerReferences"),
            (json!({"generateName": "x-"}), "metadata.generateName"),
            (
                json!({"managedFields": [{"manager": "someone"}]}),
                "metadata.managedFields",
            ),
            (json!({"resourceVersion": "1"}), "metadata.resourceVersion"),
            (json!({"uid": "u-2"}), "metadata.uid"),
            (
                json!({"labels": {"wasmop.dev/app": "other"}}),
                "metadata.labels[\"wasmop.dev/app\"]",
            ),
            (
                json!({"labels": {"wasmop.dev/backup-slot": "1"}}),
                "metadata.labels[\"wasmop.dev/backup-slot\"]",
            ),
            // Forging the kind: the objects would be a KVStore's named `kv`.
            (
                json!({"labels": {"wasmop.dev/parent-kind": "KVStore.data.example.com"}}),
                "metadata.labels[\"wasmop.dev/parent-kind\"]",
            ),
            (
                json!({"annotations": {"wasmop.dev/parent-kind": "App.wasmop.dev"}}),
                "metadata.annotations[\"wasmop.dev/parent-kind\"]",
            ),
            (
                json!({"annotations": {"wasmop.dev/app": "kv"}}),
                "metadata.annotations[\"wasmop.dev/app\"]",
            ),
        ] {
            let breach = metadata(&meta(value), "metadata", &host).expect(path);
            assert_eq!(breach.path, path);
        }
    }

    #[test]
    fn services_stay_inside_the_cluster() {
        let policy = PlanPolicy::default();
        assert_eq!(service(&policy, &json!({"ports": []})), None);
        assert_eq!(service(&policy, &json!({"type": "ClusterIP"})), None);
        for (spec, rule) in [
            (json!({"type": "NodePort"}), "wasmop/serviceType"),
            (json!({"type": "LoadBalancer"}), "wasmop/serviceType"),
            (json!({"type": "ExternalName"}), "wasmop/serviceType"),
            (json!({"type": 3}), "wasmop/serviceType"),
            (json!({"externalIPs": ["10.0.0.1"]}), "wasmop/externalIPs"),
        ] {
            assert_eq!(service(&policy, &spec).expect(rule).rule, rule);
        }
        let open = PlanPolicy {
            service_types: vec!["ClusterIP".into(), "LoadBalancer".into()],
            ..PlanPolicy::default()
        };
        assert_eq!(service(&open, &json!({"type": "LoadBalancer"})), None);
    }

    #[test]
    fn claims_get_new_volumes() {
        assert_eq!(claim(&json!({"resources": {}}), "spec"), None);
        for field in ["volumeName", "dataSource", "dataSourceRef", "selector"] {
            let spec = json!({ field: match field {
                "volumeName" => json!("pv-1"),
                "selector" => json!({"matchLabels": {"team": "b"}}),
                _ => json!({"kind": "PersistentVolumeClaim", "name": "x"}),
            }});
            assert_eq!(
                claim(&spec, "spec").expect(field).path,
                format!("spec.{field}")
            );
        }
    }
}
