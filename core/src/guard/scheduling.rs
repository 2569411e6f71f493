//! The guard's rules for where a pod runs: which nodes, at what priority, under which runtime
//! and scheduler. Each follows an upstream admission plugin or API rule that a cluster admin
//! would otherwise have to set up per namespace, and holds at every Pod Security level (the
//! levels say nothing about scheduling); only the policy's `scheduling` lists relax them:
//! - `priorityClassName`: no `system-*` class (`system-node-critical`,
//!   `system-cluster-critical`), or, when the policy lists `priorityClasses`, exactly those.
//!   Upstream's `Priority` admission plugin once confined the system classes to `kube-system`;
//!   today the docs recommend a ResourceQuota `scopeSelector` on `PriorityClass` to limit them
//!   ("Limit Priority Class consumption by default"). A pod at a system priority preempts every
//!   other tenant's pods.
//! - `tolerations`: only of the taints Kubernetes itself places for node conditions
//!   ([`NODE_CONDITION_TAINTS`]) and the policy's `tolerations` keys (`"*"`: any, including the
//!   empty key with `operator: Exists` that tolerates every taint). Upstream: the
//!   `PodTolerationRestriction` admission plugin (a per-namespace toleration whitelist). Taints
//!   keep pods off the control plane and off other teams' dedicated nodes.
//! - `nodeSelector` and `affinity.nodeAffinity` (required and preferred terms, `matchExpressions`
//!   and `matchFields`): no node-role label ([`NODE_ROLE_PREFIX`], `kubernetes.io/role`), no
//!   `kubernetes.io/hostname`, no `metadata.name` field, unless the policy lists the key in
//!   `nodeLabels`. They pin pods to control-plane or named nodes, which is what `nodeName` does
//!   (refused in [`super::pods`]). Upstream: the `PodNodeSelector` admission plugin (a
//!   namespace's node selector whitelist). `operator: DoesNotExist` only keeps pods off such
//!   nodes and is allowed. `topologySpreadConstraints` and same-namespace pod (anti-)affinity
//!   spread pods by topology keys without choosing nodes, and are not checked.
//! - `affinity.podAffinity` and `podAntiAffinity` (required and preferred terms): no term that
//!   reaches past the pod's own namespace, by `namespaces` naming any other or by a
//!   `namespaceSelector` (`{}` selects every namespace), unless the policy's
//!   `crossNamespaceAffinity` allows it. Placing pods beside, or away from, other namespaces'
//!   pods tells a tenant where those pods run (and, by the pods it is kept from, which ones
//!   exist), and lets it crowd or follow them. Upstream treats it as a privilege to grant per
//!   namespace: the ResourceQuota scope `CrossNamespacePodAffinity` (KEP-2249, which added
//!   `namespaceSelector`; Kubernetes docs "Resource Quotas: Cross-namespace Pod Affinity
//!   Quota") lets an admin refuse such pods with a quota of zero pods in that scope. Upstream
//!   counts every term with a non-empty `namespaces` or any `namespaceSelector` as
//!   cross-namespace (`pkg/quota/v1/evaluator/core/pods.go`); here a `namespaces` list of the
//!   pod's own namespace alone, which means what an empty one does, passes too.
//! - `runtimeClassName`: only a class the policy lists (`runtimeClasses`). A runtime handler is
//!   node-level configuration the admin chooses (RuntimeClass), and a handler may run pods with
//!   less isolation than the default one.
//! - `schedulerName`: `default-scheduler` (or none), or one the policy lists (`schedulers`).
//!   Another scheduler bypasses the default scheduler's placement (its plugins, and the rules
//!   above where they rely on it), as `nodeName` does.

use serde_json::{Map, Value};

use super::Breach;

/// The prefix of node label keys that name a node's role: `node-role.kubernetes.io/control-plane`,
/// the older `node-role.kubernetes.io/master`, and any role a distribution adds.
pub const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";

/// Node label keys and fields a pod may not select nodes by unless the policy lists them:
/// beside [`NODE_ROLE_PREFIX`], the legacy role label some installers set (`kubernetes.io/role:
/// master`), the node's own name as a label and as the only field `matchFields` supports.
const NODE_NAME_KEYS: &[&str] = &[
    "kubernetes.io/role",
    "kubernetes.io/hostname",
    "metadata.name",
];

/// The taints any pod may tolerate: those the node lifecycle controller places for a node's
/// conditions (`k8s.io/api/core/v1` `well_known_taints.go`). Tolerating one only lets a pod stay
/// on, or land on, an unhealthy node, at the cost of its own availability; the
/// `DefaultTolerationSeconds` admission plugin adds the first two to every pod, and stateful
/// workloads tune their `tolerationSeconds`. Left out, so a policy must list them: the
/// `node.kubernetes.io/unschedulable` taint (the admin's `kubectl cordon`/`drain`, not a
/// condition: tolerating it schedules pods onto nodes being emptied) and
/// `node.kubernetes.io/out-of-service` (the admin's mark of a node that was shut down, so its
/// pods are deleted and their volumes detached).
pub const NODE_CONDITION_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/network-unavailable",
];

/// The scheduler every cluster runs, which a pod may always name.
const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// The prefix the API server reserves for the cluster's own PriorityClasses.
const SYSTEM_PRIORITY_PREFIX: &str = "system-";

/// In a policy's lists of keys: every key.
const ANY: &str = "*";

/// What a policy allows beyond the defaults; [`Scheduling::default`] allows none of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scheduling {
    /// The PriorityClasses pods may name: `None`, any but the `system-*` ones; `Some`, exactly
    /// these.
    pub priority_classes: Option<Vec<String>>,
    /// Taint keys pods may tolerate beyond `NODE_CONDITION_TAINTS`; `"*"` allows every key,
    /// the empty one (every taint) included.
    pub tolerations: Vec<String>,
    /// Node label keys (or `metadata.name`) pods may select nodes by although they name a role
    /// or a node; `"*"` allows all.
    pub node_labels: Vec<String>,
    /// RuntimeClasses pods may name.
    pub runtime_classes: Vec<String>,
    /// Schedulers pods may name beyond `default-scheduler`.
    pub schedulers: Vec<String>,
    /// Whether pod (anti-)affinity terms may reach other namespaces' pods (`namespaces`,
    /// `namespaceSelector`).
    pub cross_namespace_affinity: bool,
}

/// Checks the scheduling fields of the pod `spec` at `at` (like `spec.template.spec`) of a pod
/// in `namespace` (empty when the caller does not know it: then no term may name a namespace);
/// the first breach.
pub(super) fn check(rules: &Scheduling, spec: &Value, at: &str, namespace: &str) -> Option<Breach> {
    priority_class(rules, spec, at)
        .and_then(|()| tolerations(rules, spec, at))
        .and_then(|()| node_selector(rules, spec, at))
        .and_then(|()| node_affinity(rules, spec, at))
        .and_then(|()| pod_affinity(rules, spec, at, namespace))
        .and_then(|()| runtime_class(rules, spec, at))
        .and_then(|()| scheduler(rules, spec, at))
        .err()
}

type Checked = Result<(), Breach>;

fn refuse(path: String, rule: &str, reason: String) -> Checked {
    Err(Breach {
        path,
        rule: rule.to_string(),
        reason,
    })
}

/// The string at `value` (`None` when absent, `null` or empty, as the API server reads it), or
/// a breach of `rule` when it is not a string: a value the guard does not understand is not let
/// through.
fn string<'a>(
    value: Option<&'a Value>,
    path: &dyn Fn() -> String,
    rule: &str,
) -> Result<Option<&'a str>, Breach> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(Breach {
            path: path(),
            rule: rule.to_string(),
            reason: format!("{other} is not a string"),
        }),
    }
}

/// The list at `value` (empty when absent or `null`), or a breach of `rule`.
fn list<'a>(
    value: Option<&'a Value>,
    path: &dyn Fn() -> String,
    rule: &str,
) -> Result<&'a [Value], Breach> {
    match value {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(Breach {
            path: path(),
            rule: rule.to_string(),
            reason: format!("{other} is not a list"),
        }),
    }
}

/// The object at `value` (`None` when absent or `null`), or a breach of `rule`.
fn object<'a>(
    value: Option<&'a Value>,
    path: &dyn Fn() -> String,
    rule: &str,
) -> Result<Option<&'a Map<String, Value>>, Breach> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(Breach {
            path: path(),
            rule: rule.to_string(),
            reason: format!("{other} is not an object"),
        }),
    }
}

/// `a, b` or `none`, for reasons.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn priority_class(rules: &Scheduling, spec: &Value, at: &str) -> Checked {
    const RULE: &str = "wasmop/priorityClass";
    let path = || format!("{at}.priorityClassName");
    // No class: the cluster's global default (or priority zero).
    let Some(class) = string(spec.get("priorityClassName"), &path, RULE)? else {
        return Ok(());
    };
    match &rules.priority_classes {
        Some(allowed) if allowed.iter().any(|a| a == class) => Ok(()),
        Some(allowed) => refuse(
            path(),
            RULE,
            format!(
                "{class:?} is not one of the policy's scheduling.priorityClasses ({})",
                listed(allowed)
            ),
        ),
        None if class.starts_with(SYSTEM_PRIORITY_PREFIX) => refuse(
            path(),
            RULE,
            format!(
                "{class:?} is one of the cluster's own PriorityClasses: its pods preempt every \
                 other tenant's (a policy may list the classes pods may use in \
                 scheduling.priorityClasses)"
            ),
        ),
        None => Ok(()),
    }
}

fn tolerations(rules: &Scheduling, spec: &Value, at: &str) -> Checked {
    const RULE: &str = "wasmop/tolerations";
    let path = || format!("{at}.tolerations");
    let tolerations = list(spec.get("tolerations"), &path, RULE)?;
    if rules.tolerations.iter().any(|k| k == ANY) {
        return Ok(());
    }
    for (i, toleration) in tolerations.iter().enumerate() {
        let at = format!("{at}.tolerations[{i}]");
        let Some(toleration) = object(Some(toleration), &|| at.clone(), RULE)? else {
            continue;
        };
        let key_at = || format!("{at}.key");
        // The API server takes an empty key only with `operator: Exists`, which then tolerates
        // every taint; any other empty key is its to reject, and refused here all the same.
        let Some(key) = string(toleration.get("key"), &key_at, RULE)? else {
            return refuse(
                at,
                RULE,
                "a toleration without a key tolerates every taint, the control plane's and \
                 other teams' dedicated nodes' included (a policy may allow it with \
                 scheduling.tolerations: [\"*\"])"
                    .into(),
            );
        };
        if NODE_CONDITION_TAINTS.contains(&key) || rules.tolerations.iter().any(|k| k == key) {
            continue;
        }
        return refuse(
            key_at(),
            RULE,
            format!(
                "{key:?} is not a taint pods may tolerate: taints keep pods off the control plane \
                 and off dedicated nodes; pods may tolerate the node-condition taints \
                 (node.kubernetes.io/not-ready, unreachable, memory-pressure, disk-pressure, \
                 pid-pressure, network-unavailable) and the policy's scheduling.tolerations ({})",
                listed(&rules.tolerations)
            ),
        );
    }
    Ok(())
}

/// Whether node label or field `key` names a node or a node role, and the policy does not
/// list it.
fn refused_key(rules: &Scheduling, key: &str) -> bool {
    (key.starts_with(NODE_ROLE_PREFIX) || NODE_NAME_KEYS.contains(&key))
        && !rules.node_labels.iter().any(|k| k == key || k == ANY)
}

fn node_label_reason(key: &str, rules: &Scheduling) -> String {
    format!(
        "{key:?} names a node or a node's role: selecting nodes by it pins pods to the control \
         plane or to named nodes, as nodeName does (a policy may list it in \
         scheduling.nodeLabels; it lists {})",
        listed(&rules.node_labels)
    )
}

fn node_selector(rules: &Scheduling, spec: &Value, at: &str) -> Checked {
    const RULE: &str = "wasmop/nodeLabels";
    let path = || format!("{at}.nodeSelector");
    let Some(selector) = object(spec.get("nodeSelector"), &path, RULE)? else {
        return Ok(());
    };
    match selector.keys().find(|key| refused_key(rules, key)) {
        Some(key) => refuse(
            format!("{}[{key:?}]", path()),
            RULE,
            node_label_reason(key, rules),
        ),
        None => Ok(()),
    }
}

fn node_affinity(rules: &Scheduling, spec: &Value, at: &str) -> Checked {
    const RULE: &str = "wasmop/nodeLabels";
    let affinity_at = format!("{at}.affinity");
    let Some(affinity) = object(spec.get("affinity"), &|| affinity_at.clone(), RULE)? else {
        return Ok(());
    };
    let at = format!("{affinity_at}.nodeAffinity");
    let Some(node) = object(affinity.get("nodeAffinity"), &|| at.clone(), RULE)? else {
        return Ok(());
    };
    // Every node selector term, with where it is.
    let mut terms: Vec<(String, &Value)> = Vec::new();
    let required_at = format!("{at}.requiredDuringSchedulingIgnoredDuringExecution");
    if let Some(required) = object(
        node.get("requiredDuringSchedulingIgnoredDuringExecution"),
        &|| required_at.clone(),
        RULE,
    )? {
        let terms_at = format!("{required_at}.nodeSelectorTerms");
        let listed = list(
            required.get("nodeSelectorTerms"),
            &|| terms_at.clone(),
            RULE,
        )?;
        terms.extend(
            listed
                .iter()
                .enumerate()
                .map(|(i, term)| (format!("{terms_at}[{i}]"), term)),
        );
    }
    let preferred_at = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution");
    let preferred = list(
        node.get("preferredDuringSchedulingIgnoredDuringExecution"),
        &|| preferred_at.clone(),
        RULE,
    )?;
    for (i, weighted) in preferred.iter().enumerate() {
        let weighted_at = format!("{preferred_at}[{i}]");
        if let Some(weighted) = object(Some(weighted), &|| weighted_at.clone(), RULE)?
            && let Some(term) = weighted.get("preference")
        {
            terms.push((format!("{weighted_at}.preference"), term));
        }
    }
    for (term_at, term) in terms {
        let Some(term) = object(Some(term), &|| term_at.clone(), RULE)? else {
            continue;
        };
        for field in ["matchExpressions", "matchFields"] {
            let field_at = format!("{term_at}.{field}");
            for (j, requirement) in list(term.get(field), &|| field_at.clone(), RULE)?
                .iter()
                .enumerate()
            {
                let at = format!("{field_at}[{j}]");
                let Some(requirement) = object(Some(requirement), &|| at.clone(), RULE)? else {
                    continue;
                };
                let key_at = || format!("{at}.key");
                let Some(key) = string(requirement.get("key"), &key_at, RULE)? else {
                    continue;
                };
                let operator = string(
                    requirement.get("operator"),
                    &|| format!("{at}.operator"),
                    RULE,
                )?;
                // DoesNotExist only keeps pods off the nodes with the key.
                if operator != Some("DoesNotExist") && refused_key(rules, key) {
                    return refuse(key_at(), RULE, node_label_reason(key, rules));
                }
            }
        }
    }
    Ok(())
}

fn pod_affinity(rules: &Scheduling, spec: &Value, at: &str, namespace: &str) -> Checked {
    const RULE: &str = "wasmop/podAffinityNamespaces";
    if rules.cross_namespace_affinity {
        return Ok(());
    }
    let affinity_at = format!("{at}.affinity");
    let Some(affinity) = object(spec.get("affinity"), &|| affinity_at.clone(), RULE)? else {
        return Ok(());
    };
    for kind in ["podAffinity", "podAntiAffinity"] {
        let kind_at = format!("{affinity_at}.{kind}");
        let Some(terms) = object(affinity.get(kind), &|| kind_at.clone(), RULE)? else {
            continue;
        };
        let required_at = format!("{kind_at}.requiredDuringSchedulingIgnoredDuringExecution");
        let required = list(
            terms.get("requiredDuringSchedulingIgnoredDuringExecution"),
            &|| required_at.clone(),
            RULE,
        )?;
        for (i, term) in required.iter().enumerate() {
            affinity_term(Some(term), &format!("{required_at}[{i}]"), namespace)?;
        }
        let preferred_at = format!("{kind_at}.preferredDuringSchedulingIgnoredDuringExecution");
        let preferred = list(
            terms.get("preferredDuringSchedulingIgnoredDuringExecution"),
            &|| preferred_at.clone(),
            RULE,
        )?;
        for (i, weighted) in preferred.iter().enumerate() {
            let weighted_at = format!("{preferred_at}[{i}]");
            if let Some(weighted) = object(Some(weighted), &|| weighted_at.clone(), RULE)? {
                affinity_term(
                    weighted.get("podAffinityTerm"),
                    &format!("{weighted_at}.podAffinityTerm"),
                    namespace,
                )?;
            }
        }
    }
    Ok(())
}

/// One pod affinity term at `at` of a pod in `namespace`: its namespaces are the pod's own only.
fn affinity_term(term: Option<&Value>, at: &str, namespace: &str) -> Checked {
    const RULE: &str = "wasmop/podAffinityNamespaces";
    const RELAX: &str = "a policy may allow it with scheduling.crossNamespaceAffinity";
    let Some(term) = object(term, &|| at.to_string(), RULE)? else {
        return Ok(());
    };
    // Any selector, the empty one (every namespace) included; only `null` means none.
    if term.get("namespaceSelector").is_some_and(|s| !s.is_null()) {
        return refuse(
            format!("{at}.namespaceSelector"),
            RULE,
            format!(
                "a namespaceSelector ({{}} selects every namespace) places pods by other \
                 namespaces' pods, which tells where other tenants' pods run; a pod's \
                 (anti-)affinity reaches its own namespace's pods only ({RELAX})"
            ),
        );
    }
    let namespaces_at = format!("{at}.namespaces");
    let namespaces = list(term.get("namespaces"), &|| namespaces_at.clone(), RULE)?;
    for (i, name) in namespaces.iter().enumerate() {
        let name_at = || format!("{namespaces_at}[{i}]");
        match string(Some(name), &name_at, RULE)? {
            Some(name) if !namespace.is_empty() && name == namespace => {}
            // An empty name is the API server's to reject; refused here all the same.
            shown => {
                let shown = shown.unwrap_or_default();
                let what = if namespace.is_empty() {
                    format!("{shown:?} is named where the pod's own namespace is not known")
                } else {
                    format!("{shown:?} is not the pod's own namespace {namespace:?}")
                };
                return refuse(
                    name_at(),
                    RULE,
                    format!(
                        "{what}: placing pods by other namespaces' pods tells where other \
                         tenants' pods run; leave namespaces empty for the pod's own ({RELAX})"
                    ),
                );
            }
        }
    }
    Ok(())
}

fn runtime_class(rules: &Scheduling, spec: &Value, at: &str) -> Checked {
    const RULE: &str = "wasmop/runtimeClass";
    let path = || format!("{at}.runtimeClassName");
    match string(spec.get("runtimeClassName"), &path, RULE)? {
        Some(class) if !rules.runtime_classes.iter().any(|c| c == class) => refuse(
            path(),
            RULE,
            format!(
                "{class:?} is not one of the policy's scheduling.runtimeClasses ({}): a runtime \
                 handler is node configuration the cluster admin chooses",
                listed(&rules.runtime_classes)
            ),
        ),
        _ => Ok(()),
    }
}

fn scheduler(rules: &Scheduling, spec: &Value, at: &str) -> Checked {
    const RULE: &str = "wasmop/scheduler";
    let path = || format!("{at}.schedulerName");
    match string(spec.get("schedulerName"), &path, RULE)? {
        Some(name) if name != DEFAULT_SCHEDULER && !rules.schedulers.iter().any(|s| s == name) => {
            refuse(
                path(),
                RULE,
                format!(
                    "{name:?} is not {DEFAULT_SCHEDULER} nor one of the policy's \
                     scheduling.schedulers ({}): another scheduler places pods past the default \
                     scheduler's rules, as nodeName does",
                    listed(&rules.schedulers)
                ),
            )
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const AT: &str = "spec.template.spec";
    /// The pod's own namespace.
    const NS: &str = "team-a";

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_string()).collect()
    }

    /// A policy that lists, in each of its lists, `names`.
    fn listing(names: &[&str]) -> Scheduling {
        Scheduling {
            priority_classes: Some(strings(names)),
            tolerations: strings(names),
            node_labels: strings(names),
            runtime_classes: strings(names),
            schedulers: strings(names),
            cross_namespace_affinity: false,
        }
    }

    fn node_terms(requirements: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [requirements]}}}})
    }

    const REQUIRED: &str = "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";

    #[test]
    fn the_defaults_refuse_what_pins_or_preempts_and_name_field_and_rule() {
        let rules = Scheduling::default();
        // Every row is refused by default: (spec, path, rule).
        let cases: Vec<(Value, String, &str)> = vec![
            (
                json!({"priorityClassName": "system-node-critical"}),
                format!("{AT}.priorityClassName"),
                "wasmop/priorityClass",
            ),
            (
                json!({"priorityClassName": "system-cluster-critical"}),
                format!("{AT}.priorityClassName"),
                "wasmop/priorityClass",
            ),
            (
                json!({"priorityClassName": 7}),
                format!("{AT}.priorityClassName"),
                "wasmop/priorityClass",
            ),
            (
                json!({"tolerations": [{"operator": "Exists"}]}),
                format!("{AT}.tolerations[0]"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": [{"key": "", "operator": "Exists", "effect": "NoExecute"}]}),
                format!("{AT}.tolerations[0]"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": [{"key": "node.kubernetes.io/not-ready"},
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}),
                format!("{AT}.tolerations[1].key"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": [{"key": "node-role.kubernetes.io/master"}]}),
                format!("{AT}.tolerations[0].key"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": [{"key": "dedicated", "value": "team-b"}]}),
                format!("{AT}.tolerations[0].key"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable"}]}),
                format!("{AT}.tolerations[0].key"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": [{"key": "node.kubernetes.io/out-of-service"}]}),
                format!("{AT}.tolerations[0].key"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": {"key": "x"}}),
                format!("{AT}.tolerations"),
                "wasmop/tolerations",
            ),
            (
                json!({"tolerations": ["x"]}),
                format!("{AT}.tolerations[0]"),
                "wasmop/tolerations",
            ),
            (
                json!({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}),
                format!("{AT}.nodeSelector[\"node-role.kubernetes.io/control-plane\"]"),
                "wasmop/nodeLabels",
            ),
            (
                json!({"nodeSelector": {"disk": "ssd", "kubernetes.io/hostname": "node-1"}}),
                format!("{AT}.nodeSelector[\"kubernetes.io/hostname\"]"),
                "wasmop/nodeLabels",
            ),
            (
                json!({"nodeSelector": {"kubernetes.io/role": "master"}}),
                format!("{AT}.nodeSelector[\"kubernetes.io/role\"]"),
                "wasmop/nodeLabels",
            ),
            (
                json!({"nodeSelector": ["x"]}),
                format!("{AT}.nodeSelector"),
                "wasmop/nodeLabels",
            ),
            (
                node_terms(json!({"matchExpressions": [
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]})),
                format!("{REQUIRED}.matchExpressions[0].key"),
                "wasmop/nodeLabels",
            ),
            (
                node_terms(json!({"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n-2", "n-3"]}]})),
                format!("{REQUIRED}.matchExpressions[0].key"),
                "wasmop/nodeLabels",
            ),
            (
                node_terms(json!({"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]})),
                format!("{REQUIRED}.matchFields[0].key"),
                "wasmop/nodeLabels",
            ),
            (
                json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]},
                        {"key": "node-role.kubernetes.io/infra", "operator": "Exists"}]}}]}}}),
                format!(
                    "{AT}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[1].key"
                ),
                "wasmop/nodeLabels",
            ),
            (
                json!({"affinity": {"nodeAffinity": "anywhere"}}),
                format!("{AT}.affinity.nodeAffinity"),
                "wasmop/nodeLabels",
            ),
            (
                json!({"runtimeClassName": "runc-unconfined"}),
                format!("{AT}.runtimeClassName"),
                "wasmop/runtimeClass",
            ),
            (
                json!({"schedulerName": "my-scheduler"}),
                format!("{AT}.schedulerName"),
                "wasmop/scheduler",
            ),
            (
                json!({"schedulerName": false}),
                format!("{AT}.schedulerName"),
                "wasmop/scheduler",
            ),
        ];
        for (spec, path, rule) in cases {
            let breach = check(&rules, &spec, AT, NS).unwrap_or_else(|| panic!("{spec} passed"));
            assert_eq!(
                (breach.path.as_str(), breach.rule.as_str()),
                (path.as_str(), rule),
                "{spec}: {}",
                breach.reason
            );
        }
    }

    #[test]
    fn the_defaults_allow_ordinary_scheduling() {
        let rules = Scheduling::default();
        for spec in [
            json!({}),
            json!({"priorityClassName": "high", "schedulerName": "default-scheduler",
                "runtimeClassName": ""}),
            json!({"priorityClassName": null, "schedulerName": null, "tolerations": null}),
            json!({"tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists"},
                {"key": "node.kubernetes.io/disk-pressure"}, {"key": "node.kubernetes.io/pid-pressure"},
                {"key": "node.kubernetes.io/network-unavailable"}]}),
            json!({"nodeSelector": {"disk": "ssd", "topology.kubernetes.io/zone": "a",
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}),
            node_terms(json!({"matchExpressions": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]})),
            // Spreading and pod (anti-)affinity choose no node (the SDK spreads by hostname).
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}}),
        ] {
            assert_eq!(check(&rules, &spec, AT, NS), None, "{spec}");
        }
    }

    #[test]
    fn policy_lists_relax_each_rule() {
        // Each spec is refused by default and allowed by the policy listing `names`.
        let cases: Vec<(Value, &[&str])> = vec![
            (
                json!({"priorityClassName": "system-cluster-critical"}),
                &["system-cluster-critical"],
            ),
            (
                json!({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}),
                &["node-role.kubernetes.io/control-plane"],
            ),
            (json!({"tolerations": [{"operator": "Exists"}]}), &["*"]),
            (
                json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable"}]}),
                &["node.kubernetes.io/unschedulable"],
            ),
            (
                json!({"nodeSelector": {"node-role.kubernetes.io/infra": ""}}),
                &["node-role.kubernetes.io/infra"],
            ),
            (
                node_terms(
                    json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}),
                ),
                &["metadata.name"],
            ),
            (
                json!({"nodeSelector": {"kubernetes.io/hostname": "n"}}),
                &["*"],
            ),
            (json!({"runtimeClassName": "gvisor"}), &["gvisor"]),
            (json!({"schedulerName": "volcano"}), &["volcano"]),
        ];
        for (spec, names) in cases {
            assert!(
                check(&Scheduling::default(), &spec, AT, NS).is_some(),
                "{spec}"
            );
            assert_eq!(
                check(&listing(names), &spec, AT, NS),
                None,
                "{spec} under {names:?}"
            );
            // Another name does not do.
            assert!(
                check(&listing(&["other"]), &spec, AT, NS).is_some(),
                "{spec}"
            );
        }
    }

    #[test]
    fn listed_priority_classes_are_the_only_ones() {
        let rules = listing(&["gold"]);
        assert_eq!(
            check(&rules, &json!({"priorityClassName": "gold"}), AT, NS),
            None
        );
        assert_eq!(
            check(&rules, &json!({}), AT, NS),
            None,
            "the global default"
        );
        let breach =
            check(&rules, &json!({"priorityClassName": "silver"}), AT, NS).expect("not listed");
        assert_eq!(breach.rule, "wasmop/priorityClass");
        assert!(breach.reason.contains("(gold)"), "{}", breach.reason);
        let none = Scheduling {
            priority_classes: Some(Vec::new()),
            ..Scheduling::default()
        };
        let breach =
            check(&none, &json!({"priorityClassName": "high"}), AT, NS).expect("empty list");
        assert!(breach.reason.contains("(none)"), "{}", breach.reason);
    }

    /// A pod spec with `term` as the first term of `kind` (`podAffinity` or `podAntiAffinity`),
    /// required (`preferred` false) or preferred (weighted).
    fn pod_term(kind: &str, preferred: bool, term: Value) -> Value {
        if preferred {
            json!({"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}]}}})
        } else {
            json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
        }
    }

    /// Where the first term of `kind` is, as [`pod_term`] writes it.
    fn term_at(kind: &str, preferred: bool) -> String {
        if preferred {
            format!(
                "{AT}.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm"
            )
        } else {
            format!("{AT}.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[0]")
        }
    }

    /// Issue 38: a pod (anti-)affinity term that reaches other namespaces' pods, in every place
    /// a term can be, is refused by default with its field; the policy's
    /// `crossNamespaceAffinity` lets each through.
    #[test]
    fn pod_affinity_reaches_only_the_pods_own_namespace() {
        let selects = json!({"matchLabels": {"app": "db"}});
        let host = "kubernetes.io/hostname";
        // (term, the field refused under it)
        let refused: Vec<(Value, &str)> = vec![
            (
                json!({"labelSelector": selects, "topologyKey": host, "namespaces": ["team-b"]}),
                ".namespaces[0]",
            ),
            // The own namespace beside another does not hide it.
            (
                json!({"labelSelector": selects, "topologyKey": host,
                    "namespaces": [NS, "kube-system"]}),
                ".namespaces[1]",
            ),
            // `{}` selects every namespace.
            (
                json!({"labelSelector": selects, "topologyKey": host, "namespaceSelector": {}}),
                ".namespaceSelector",
            ),
            (
                json!({"labelSelector": selects, "topologyKey": host,
                    "namespaceSelector": {"matchLabels": {"team": "b"}}}),
                ".namespaceSelector",
            ),
            // With the own namespace listed, the selector still adds the others.
            (
                json!({"topologyKey": host, "namespaces": [NS],
                    "namespaceSelector": {"matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "Exists"}]}}),
                ".namespaceSelector",
            ),
            // What the guard cannot read is not let through.
            (
                json!({"topologyKey": host, "namespaces": "team-b"}),
                ".namespaces",
            ),
            (
                json!({"topologyKey": host, "namespaces": [7]}),
                ".namespaces[0]",
            ),
            (
                json!({"topologyKey": host, "namespaces": [""]}),
                ".namespaces[0]",
            ),
            (json!("anywhere"), ""),
        ];
        let open = Scheduling {
            cross_namespace_affinity: true,
            ..Scheduling::default()
        };
        for kind in ["podAffinity", "podAntiAffinity"] {
            for preferred in [false, true] {
                for (term, field) in &refused {
                    let spec = pod_term(kind, preferred, term.clone());
                    let breach = check(&Scheduling::default(), &spec, AT, NS)
                        .unwrap_or_else(|| panic!("{spec} passed"));
                    assert_eq!(
                        (breach.path.as_str(), breach.rule.as_str()),
                        (
                            format!("{}{field}", term_at(kind, preferred)).as_str(),
                            "wasmop/podAffinityNamespaces"
                        ),
                        "{spec}: {}",
                        breach.reason
                    );
                    // A refusal says how a policy relaxes it, unless the value was unreadable.
                    let unreadable = ["is not a list", "is not a string", "is not an object"]
                        .iter()
                        .any(|end| breach.reason.ends_with(end));
                    assert!(
                        unreadable || breach.reason.contains("scheduling.crossNamespaceAffinity"),
                        "{}",
                        breach.reason
                    );
                    assert_eq!(check(&open, &spec, AT, NS), None, "{spec} under the policy");
                    // Every other list allowing everything does not relax this rule.
                    assert!(check(&listing(&["*"]), &spec, AT, NS).is_some(), "{spec}");
                }
            }
        }
        let breach = check(
            &Scheduling::default(),
            &pod_term("podAffinity", false, refused[0].0.clone()),
            AT,
            NS,
        )
        .expect("another namespace");
        assert!(
            breach
                .reason
                .starts_with("\"team-b\" is not the pod's own namespace \"team-a\""),
            "{}",
            breach.reason
        );
        // Malformed blocks around the terms are refused too.
        for (spec, path) in [
            (
                json!({"affinity": {"podAffinity": ["x"]}}),
                format!("{AT}.affinity.podAffinity"),
            ),
            (
                json!({"affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"namespaces": ["b"]}}}}),
                format!(
                    "{AT}.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ),
            ),
            (
                json!({"affinity": {"podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": ["x"]}}}),
                format!(
                    "{AT}.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
                ),
            ),
        ] {
            let breach =
                check(&Scheduling::default(), &spec, AT, NS).unwrap_or_else(|| panic!("{spec}"));
            assert_eq!(breach.path, path, "{spec}");
        }
    }

    #[test]
    fn same_namespace_pod_affinity_passes() {
        let host = "kubernetes.io/hostname";
        for term in [
            json!({"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": host}),
            json!({"topologyKey": host, "namespaces": []}),
            json!({"topologyKey": host, "namespaces": null, "namespaceSelector": null}),
            json!({"topologyKey": host, "namespaces": [NS]}),
            json!({"topologyKey": host, "namespaces": [NS, NS]}),
            json!({"topologyKey": "topology.kubernetes.io/zone", "matchLabelKeys": ["pod-template-hash"]}),
            json!(null),
        ] {
            for kind in ["podAffinity", "podAntiAffinity"] {
                for preferred in [false, true] {
                    let spec = pod_term(kind, preferred, term.clone());
                    assert_eq!(check(&Scheduling::default(), &spec, AT, NS), None, "{spec}");
                }
            }
        }
        for spec in [
            json!({"affinity": {"podAffinity": null, "podAntiAffinity": {}}}),
            json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1}]}}}),
        ] {
            assert_eq!(check(&Scheduling::default(), &spec, AT, NS), None, "{spec}");
        }
    }

    #[test]
    fn without_the_pods_namespace_no_term_may_name_one() {
        // A backup Job's check does not know its namespace: naming any is refused.
        let spec = pod_term(
            "podAntiAffinity",
            false,
            json!({"topologyKey": "kubernetes.io/hostname", "namespaces": [NS]}),
        );
        let breach = check(&Scheduling::default(), &spec, AT, "").expect("refused");
        assert!(
            breach
                .reason
                .contains("where the pod's own namespace is not known"),
            "{}",
            breach.reason
        );
        let empty = pod_term(
            "podAntiAffinity",
            false,
            json!({"topologyKey": "kubernetes.io/hostname"}),
        );
        assert_eq!(check(&Scheduling::default(), &empty, AT, ""), None);
    }
}
