//! The guard's rules on objects an App already runs: a policy may tighten after an object was
//! applied (baseline to restricted, Secrets taken away), and an object the rules in force now
//! forbid must not keep running unnoticed. When a plan is not applied, the decision core asks
//! about each object the App owns ([`crate::PlanCheck::check_live`]); the answer is the
//! plan rules' answer for the object as it was planned.
//!
//! A live object is not what the plugin wrote: the host stamped its metadata (labels, owner
//! reference, the applied digest), the API server filled in defaults and `status`, the
//! scheduler bound a bare Pod to a node, and built-in admission filled in a Pod's pull
//! secrets, priority and tolerations. Those are taken off before the check, so that only
//! what the plan decided is judged: every rule on a body (pod templates, Services, claims,
//! extra kinds) holds as for a plan, and none on how a plan may write metadata.
//!
//! Known limits: the check runs only while the plan is refused (a plugin that plans a
//! compliant spec is judged by that plan, so pods of an old revision that a workload keeps,
//! `updateStrategy: OnDelete`, are not re-checked), and a mutating webhook that writes into
//! pod templates can make a live object look like something the plan did not ask for; so
//! `enforcement: Remove` is the admin's choice, `Report` the default.

use std::collections::BTreeSet;

use crate::observed::{BACKUP_SLOT_LABEL, ObservedObject};
use serde_json::{Map, Value};

use super::{Owned, ParentLabels, PlanPolicy, check_body, extra::Scope};
use crate::object::PluginObject;

/// Why `object`, owned by the App `app` in `namespace`, breaks `policy`
/// (`Kind/name: field: reason (rule)`), if it does; `observed` is what the host holds of the
/// App, whose ServiceAccounts, claims and workloads stand for the plan's.
pub fn violation(
    policy: &PlanPolicy,
    app: ParentLabels<'_>,
    namespace: &str,
    object: &ObservedObject,
    observed: &[ObservedObject],
) -> Option<String> {
    let mut json = object.json.clone();
    let root = json.as_object_mut()?;
    root.remove("status");
    let metadata = root
        .get("metadata")
        .and_then(Value::as_object)
        .map(as_planned)
        .unwrap_or_default();
    root.insert("metadata".into(), Value::Object(metadata));
    // What the cluster's own admission writes into objects, which a plan's objects never
    // carried when they passed: judging it would report (and under `Remove` delete) objects the
    // App never asked for that way.
    let is_pod = object.api_version == "v1" && object.kind == "Pod";
    if is_pod && let Some(spec) = root.get_mut("spec").and_then(Value::as_object_mut) {
        {
            for field in [
                // The scheduler's binding (a plan's nodeName is refused).
                "nodeName",
                // The ServiceAccount admission plugin copies the account's pull secrets in.
                "imagePullSecrets",
                // The Priority admission plugin resolves the class (a globalDefault one too).
                "priorityClassName",
                "priority",
                // DefaultTolerationSeconds adds not-ready/unreachable tolerations.
                "tolerations",
            ] {
                spec.remove(field);
            }
        }
    }
    if object.api_version == "v1" && object.kind == "ServiceAccount" {
        // Token and pull-secret controllers (OpenShift's among them) fill these in.
        root.remove("secrets");
        root.remove("imagePullSecrets");
    }
    let planned = PluginObject::parse(&json.to_string()).ok()?;
    let slot = object.backup_slot.as_deref().unwrap_or_default();
    let mut host_labels = app.pairs().to_vec();
    if object.backup_slot.is_some() {
        host_labels.push((BACKUP_SLOT_LABEL, slot));
    }
    let named = |kind: &str| -> BTreeSet<String> {
        observed
            .iter()
            .filter(|o| o.api_version == "v1" && o.kind == kind)
            .filter(|o| o.owned || kind == "PersistentVolumeClaim")
            .map(|o| o.name.clone())
            .collect()
    };
    let owned = Owned {
        accounts: named("ServiceAccount"),
        claims: named("PersistentVolumeClaim"),
    };
    let scalable: BTreeSet<(String, String, String)> = observed
        .iter()
        .filter(|o| o.owned)
        .map(|o| (o.api_version.clone(), o.kind.clone(), o.name.clone()))
        .collect();
    let scope = Scope {
        namespace,
        scalable: &scalable,
    };
    let breach = check_body(policy, &host_labels, &planned, &owned, scope).err()?;
    Some(format!(
        "{}/{}: {}: {} ({})",
        object.kind, object.name, breach.path, breach.reason, breach.rule
    ))
}

/// The metadata a plan could have written for a live object: its name, labels and
/// annotations, without the host's annotations (the applied digest) and without what the API
/// server and the host set (owner references, finalizers, uid, timestamps).
fn as_planned(live: &Map<String, Value>) -> Map<String, Value> {
    let mut planned = Map::new();
    for key in ["name", "labels", "annotations"] {
        if let Some(value) = live.get(key) {
            planned.insert(key.into(), value.clone());
        }
    }
    if let Some(Value::Object(annotations)) = planned.get_mut("annotations") {
        annotations.retain(|key, _| !key.starts_with("wasmop.dev/"));
    }
    planned
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use crate::pod_security::Level;

    /// The App `kv`, whose labels its plans may write.
    const KV: ParentLabels<'static> = ParentLabels {
        name: "kv",
        kind_mark: crate::observed::APP_KIND_MARK,
    };

    /// A Deployment as the API server holds it after the host applied it: stamped metadata,
    /// defaults, a status; its containers run privileged, which baseline allows.
    fn live_privileged() -> ObservedObject {
        let json = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "db", "namespace": "ns", "uid": "d-1", "generation": 2,
                "labels": {"wasmop.dev/app": "kv", "app.kubernetes.io/managed-by": "wasmop"},
                "annotations": {"wasmop.dev/applied": "sha256:0", "deployment.kubernetes.io/revision": "1"},
                "ownerReferences": [{"apiVersion": "wasmop.dev/v1alpha1", "kind": "App", "name": "kv",
                    "uid": "u-1", "controller": true}],
                "creationTimestamp": "2026-12-06T00:00:00Z",
            },
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "template": {
                "metadata": {"labels": {"app": "db", "wasmop.dev/app": "kv"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "image": "i", "imagePullPolicy": "IfNotPresent",
                        "securityContext": {"privileged": true}}],
                },
            }},
            "status": {"replicas": 1},
        });
        ObservedObject::from_value(json, "u-1").expect("an object")
    }

    #[test]
    fn what_the_host_and_the_cluster_added_is_not_judged_but_the_plan_is() {
        let baseline = PlanPolicy {
            pod_security: Level::Privileged,
            ..PlanPolicy::default()
        };
        assert_eq!(
            violation(&baseline, KV, "ns", &live_privileged(), &[]),
            None
        );
        let found = violation(&PlanPolicy::default(), KV, "ns", &live_privileged(), &[])
            .expect("restricted forbids privileged containers");
        assert!(
            found.starts_with(
                "Deployment/db: spec.template.spec.containers[0].securityContext.privileged: "
            ),
            "{found}"
        );
        assert!(found.ends_with("(podSecurity/privileged)"), "{found}");
    }

    /// The kind labels the host stamped on a KVStore's object and its template are the host's,
    /// not a breach; another kind's are.
    #[test]
    fn the_hosts_kind_labels_are_not_judged() {
        let stamped = |mark: &str| {
            let mut object = live_privileged();
            for labels in ["/metadata/labels", "/spec/template/metadata/labels"] {
                object.json.pointer_mut(labels).expect("labels")["wasmop.dev/parent-kind"] =
                    json!(mark);
            }
            object
        };
        let baseline = PlanPolicy {
            pod_security: Level::Privileged,
            ..PlanPolicy::default()
        };
        let kvstore = ParentLabels {
            name: "kv",
            kind_mark: "KVStore.data.example.com",
        };
        let own = stamped("KVStore.data.example.com");
        assert_eq!(violation(&baseline, kvstore, "ns", &own, &[]), None);
        let found = violation(&baseline, KV, "ns", &own, &[]).expect("another kind's label");
        assert!(found.contains("wasmop.dev/parent-kind"), "{found}");
        let app = stamped("App.wasmop.dev");
        assert_eq!(violation(&baseline, KV, "ns", &app, &[]), None);
    }

    #[test]
    fn a_bare_pods_node_is_the_schedulers_and_a_backup_jobs_slot_the_hosts() {
        let pod = ObservedObject::from_value(
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"wasmop.dev/app": "kv"}},
                "spec": {"nodeName": "node-1", "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "c", "image": "i", "securityContext":
                        {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}),
            "u-1",
        )
        .expect("a pod");
        assert_eq!(violation(&PlanPolicy::default(), KV, "ns", &pod, &[]), None);
        // What built-in admission writes into a Pod is not the plan's.
        let mut admitted = pod.clone();
        admitted.json["spec"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
        admitted.json["spec"]["priorityClassName"] = json!("system-cluster-critical");
        admitted.json["spec"]["tolerations"] = json!([{"key": "node.kubernetes.io/unschedulable",
            "operator": "Exists", "effect": "NoSchedule"}]);
        assert_eq!(
            violation(&PlanPolicy::default(), KV, "ns", &admitted, &[]),
            None
        );

        let job = ObservedObject::from_value(
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "b", "labels": {"wasmop.dev/app": "kv", "wasmop.dev/backup-slot": "s1"}},
                "spec": {"template": {"spec": {"automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "c", "image": "i", "securityContext":
                        {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}}}),
            "u-1",
        )
        .expect("a job");
        assert_eq!(violation(&PlanPolicy::default(), KV, "ns", &job, &[]), None);
    }
}
