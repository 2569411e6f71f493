//! The guard's rules for a pod template: the Pod Security Standards level of the policy
//! ([`pod_security`]), then wasmop's own rules, which hold at every level because they protect
//! what the namespace and the cluster already hold rather than the node:
//! - the pod runs as a ServiceAccount the same plan creates, or as `default` with
//!   `automountServiceAccountToken: false` (and then no projected token or pod certificate,
//!   both credentials of the account): a plugin must not borrow the credentials of another
//!   ServiceAccount in the namespace, the host's included;
//! - no `nodeName`, which bypasses the scheduler (and so admission that happens there);
//! - scheduling within the policy's bounds: no system priority, no tolerations but of node
//!   conditions, no node selection by role or name, no pod (anti-)affinity to other
//!   namespaces' pods, only listed runtime classes and schedulers ([`scheduling`]);
//! - volumes that are claims reach only claims the App creates, as a planned claim may not
//!   bind or clone another's: an ephemeral volume's claim template gets a planned claim's
//!   rules, and a `persistentVolumeClaim` volume names a claim of the same plan (or of its
//!   StatefulSets; for a backup Job, one labelled with the App), never another App's claim in
//!   the namespace ([`volumes`]). A pod may mount any ConfigMap of the namespace, planned or
//!   not: ConfigMaps are not secret by Kubernetes' own contract, and a ConfigMap volume is
//!   read-only (see [`volumes`]);
//! - no Secret, by volume (of any type that names one), projected source, `envFrom`,
//!   `secretKeyRef` or `imagePullSecrets`, unless the policy allows Secrets ([`secrets`]): the
//!   App author may not read Secrets through a plugin.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Breach, Owned, PlanPolicy, scheduling, secrets, volumes};
use crate::pod_security;

/// Checks the pod template at `at` (like `spec.template`) of an object in `namespace` (empty
/// when not known); the first breach. `host_labels` are the `wasmop.dev/*` labels its ephemeral
/// claims may carry, `owned` what its App creates.
pub(super) fn check(
    policy: &PlanPolicy,
    template: &Value,
    at: &str,
    namespace: &str,
    host_labels: &[(&str, &str)],
    owned: &Owned,
) -> Option<Breach> {
    if let Some(violation) = pod_security::check_pod_template(policy.pod_security, template)
        .into_iter()
        .next()
    {
        let paths: Vec<String> = violation
            .paths
            .iter()
            .map(|p| {
                if p == "." {
                    at.to_string()
                } else {
                    join(at, p)
                }
            })
            .collect();
        return Some(Breach {
            path: paths.join(", "),
            rule: format!("podSecurity/{}", violation.rule),
            reason: violation.reason,
        });
    }
    let spec = template.get("spec")?;
    let at = join(at, "spec");
    service_account(spec, &at, &owned.accounts)
        .or_else(|| node_name(spec, &at))
        .or_else(|| scheduling::check(&policy.scheduling, spec, &at, namespace))
        .or_else(|| volumes::check(spec, &at, host_labels, owned))
        .or_else(|| {
            (!policy.allow_secrets)
                .then(|| secrets::pod(spec, &at))
                .flatten()
        })
        .or_else(|| volumes::inline(spec, &at, &policy.inline_volumes))
}

fn breach(path: String, rule: &str, reason: String) -> Option<Breach> {
    Some(Breach {
        path,
        rule: rule.to_string(),
        reason,
    })
}

fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `at.field`, or `field` where `at` is the object itself (a Pod's template).
fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_string()
    } else {
        format!("{at}.{field}")
    }
}

fn service_account(spec: &Value, at: &str, planned: &BTreeSet<String>) -> Option<Breach> {
    const RULE: &str = "wasmop/serviceAccount";
    let name = text(spec.get("serviceAccountName"));
    // `serviceAccount` is the deprecated alias the API server still honours when
    // `serviceAccountName` is empty.
    let alias = text(spec.get("serviceAccount"));
    if let (Some(name), Some(alias)) = (name, alias)
        && name != alias
    {
        return breach(
            format!("{at}.serviceAccount"),
            RULE,
            format!("must equal serviceAccountName {name:?} (it is {alias:?})"),
        );
    }
    let (field, account) = match (name, alias) {
        (Some(name), _) => ("serviceAccountName", name),
        (None, Some(alias)) => ("serviceAccount", alias),
        (None, None) => ("serviceAccountName", "default"),
    };
    if account != "default" {
        if planned.contains(account) {
            return None;
        }
        return breach(
            format!("{at}.{field}"),
            RULE,
            format!(
                "ServiceAccount {account:?} is not created by this plan; a pod may run only as \
                 a ServiceAccount the plan creates, or as \"default\" with \
                 automountServiceAccountToken: false"
            ),
        );
    }
    if spec.get("automountServiceAccountToken") != Some(&Value::Bool(false)) {
        return breach(
            format!("{at}.automountServiceAccountToken"),
            RULE,
            "must be false for a pod running as the namespace's \"default\" ServiceAccount \
             (plan a ServiceAccount for pods that need a token)"
                .into(),
        );
    }
    for (i, volume) in list(spec.get("volumes")).iter().enumerate() {
        for (j, source) in list(volume.pointer("/projected/sources"))
            .iter()
            .enumerate()
        {
            // A pod certificate is issued to the pod as its ServiceAccount, as a token is.
            for credential in ["serviceAccountToken", "podCertificate"] {
                if is_set(source.get(credential)) {
                    return breach(
                        format!("{at}.volumes[{i}].projected.sources[{j}].{credential}"),
                        RULE,
                        "a pod running as the \"default\" ServiceAccount gets no token or \
                         certificate of it"
                            .into(),
                    );
                }
            }
        }
    }
    None
}

fn node_name(spec: &Value, at: &str) -> Option<Breach> {
    text(spec.get("nodeName")).and_then(|node| {
        breach(
            format!("{at}.nodeName"),
            "wasmop/nodeName",
            format!("{node:?}: pods are placed by the scheduler, not by a plugin"),
        )
    })
}

fn list(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn is_set(value: Option<&Value>) -> bool {
    value.is_some_and(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A template that passes restricted and every wasmop rule.
    fn good() -> Value {
        json!({
            "metadata": {"labels": {"app": "x"}},
            "spec": {
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "c", "image": "i",
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                }],
            },
        })
    }

    fn with(change: impl FnOnce(&mut Value)) -> Value {
        let mut template = good();
        change(&mut template);
        template
    }

    fn breach_of(policy: &PlanPolicy, template: &Value) -> Option<Breach> {
        let owned = Owned {
            accounts: BTreeSet::from(["mine".to_string()]),
            claims: BTreeSet::new(),
        };
        check(
            policy,
            template,
            "spec.template",
            "ns",
            &[(super::super::fields::APP_LABEL, "kv")],
            &owned,
        )
    }

    #[test]
    fn the_good_template_passes_and_each_rule_names_its_field() {
        let policy = PlanPolicy::default();
        assert_eq!(breach_of(&policy, &good()), None);
        let cases: Vec<(Value, &str, &str)> = vec![
            (
                with(|t| t["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true)),
                "spec.template.spec.containers[0].securityContext.privileged",
                "podSecurity/privileged",
            ),
            (
                with(|t| t["spec"]["hostNetwork"] = json!(true)),
                "spec.template.spec.hostNetwork",
                "podSecurity/hostNamespaces",
            ),
            (
                with(|t| t["spec"]["volumes"] = json!([{"name": "r", "hostPath": {"path": "/"}}])),
                "spec.template.spec.volumes[0].hostPath",
                "podSecurity/restrictedVolumes",
            ),
            (
                with(|t| t["spec"]["serviceAccountName"] = json!("wasmop")),
                "spec.template.spec.serviceAccountName",
                "wasmop/serviceAccount",
            ),
            (
                with(|t| t["spec"]["serviceAccount"] = json!("wasmop")),
                "spec.template.spec.serviceAccount",
                "wasmop/serviceAccount",
            ),
            (
                with(|t| {
                    t["spec"]["serviceAccountName"] = json!("mine");
                    t["spec"]["serviceAccount"] = json!("wasmop");
                }),
                "spec.template.spec.serviceAccount",
                "wasmop/serviceAccount",
            ),
            (
                with(|t| t["spec"]["automountServiceAccountToken"] = json!(true)),
                "spec.template.spec.automountServiceAccountToken",
                "wasmop/serviceAccount",
            ),
            (
                with(|t| {
                    t["spec"]["volumes"] = json!([{"name": "t", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token"}}
                    ]}}]);
                }),
                "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken",
                "wasmop/serviceAccount",
            ),
            (
                with(|t| {
                    t["spec"]["volumes"] = json!([{"name": "t", "projected": {"sources": [
                        {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519"}}
                    ]}}]);
                }),
                "spec.template.spec.volumes[0].projected.sources[0].podCertificate",
                "wasmop/serviceAccount",
            ),
            (
                with(|t| t["spec"]["priorityClassName"] = json!("system-node-critical")),
                "spec.template.spec.priorityClassName",
                "wasmop/priorityClass",
            ),
            (
                with(|t| {
                    t["spec"]["volumes"] =
                        json!([{"name": "d", "persistentVolumeClaim": {"claimName": "theirs"}}]);
                }),
                "spec.template.spec.volumes[0].persistentVolumeClaim.claimName",
                "wasmop/claimSource",
            ),
            (
                with(|t| t["spec"]["imagePullSecrets"] = json!([{"name": "registry"}])),
                "spec.template.spec.imagePullSecrets",
                "wasmop/secrets",
            ),
            (
                with(|t| t["spec"]["nodeName"] = json!("node-1")),
                "spec.template.spec.nodeName",
                "wasmop/nodeName",
            ),
            (
                with(|t| {
                    t["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "db"}}]);
                }),
                "spec.template.spec.volumes[0].secret",
                "wasmop/secrets",
            ),
            (
                with(|t| {
                    t["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "db"}}]);
                }),
                "spec.template.spec.containers[0].envFrom[0].secretRef",
                "wasmop/secrets",
            ),
            (
                with(|t| {
                    t["spec"]["containers"][0]["env"] = json!([{"name": "P", "valueFrom":
                        {"secretKeyRef": {"name": "db", "key": "p"}}}]);
                }),
                "spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef",
                "wasmop/secrets",
            ),
        ];
        for (template, path, rule) in cases {
            let breach = breach_of(&policy, &template).unwrap_or_else(|| panic!("{path} passed"));
            assert_eq!((breach.path.as_str(), breach.rule.as_str()), (path, rule));
        }
    }

    #[test]
    fn a_planned_service_account_may_mount_its_token_and_secrets_follow_the_policy() {
        let own = with(|t| {
            t["spec"]["serviceAccountName"] = json!("mine");
            t["spec"]["automountServiceAccountToken"] = json!(true);
        });
        assert_eq!(breach_of(&PlanPolicy::default(), &own), None);
        let secret = with(|t| {
            t["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "db"}}]);
        });
        let open = PlanPolicy {
            allow_secrets: true,
            ..PlanPolicy::default()
        };
        assert_eq!(breach_of(&open, &secret), None);
    }

    #[test]
    fn the_level_comes_from_the_policy() {
        let root = with(|t| t["spec"]["securityContext"]["runAsNonRoot"] = json!(false));
        let baseline = PlanPolicy {
            pod_security: pod_security::Level::Baseline,
            ..PlanPolicy::default()
        };
        assert_eq!(breach_of(&baseline, &root), None);
        let breach = breach_of(&PlanPolicy::default(), &root).expect("restricted forbids root");
        assert_eq!(breach.rule, "podSecurity/runAsNonRoot");
        assert!(breach.reason.contains("restricted"), "{}", breach.reason);
    }
}
