//! What counts as using a Secret, which pods may do only under a policy with `allowSecrets`
//! (the App author may not read the namespace's Secrets through a plugin): a Secret volume or
//! projected source; every other volume source that names a Secret the kubelet reads for the
//! pod ([`VOLUME_SECRETS`]); `envFrom` and `secretKeyRef`; `imagePullSecrets`, with which the
//! kubelet pulls the pod's images. A ServiceAccount the plan creates may carry neither
//! `imagePullSecrets` (its pods would pull with them) nor `secrets` (the Secrets its pods may
//! mount, under the `kubernetes.io/enforce-mountable-secrets` annotation).

use serde_json::Value;

use super::Breach;

const RULE: &str = "wasmop/secrets";

/// Every volume source of the core API (`v1.Volume`) that names a Secret of the pod's namespace
/// for the kubelet to read, and its field that does (`""`: the source is the Secret). Checked
/// against k8s-openapi's `Volume` by `volumes::tests`: a source or a field named like a Secret
/// that upstream adds fails that test until it is decided here.
pub(super) const VOLUME_SECRETS: &[(&str, &str)] = &[
    // The storage account key.
    ("azureFile", "secretName"),
    ("cephfs", "secretRef"),
    ("cinder", "secretRef"),
    // Handed to the CSI driver on NodePublish.
    ("csi", "nodePublishSecretRef"),
    ("flexVolume", "secretRef"),
    // CHAP credentials.
    ("iscsi", "secretRef"),
    ("rbd", "secretRef"),
    ("scaleIO", "secretRef"),
    ("secret", ""),
    ("storageos", "secretRef"),
];

/// The projected volume source that is a Secret.
pub(super) const PROJECTED_SECRET: &str = "secret";

fn found(path: String, what: &str) -> Option<Breach> {
    Some(Breach {
        path,
        rule: RULE.into(),
        reason: format!("{what}: the policy does not let plugins use Secrets"),
    })
}

fn list(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Present and not `null`. An empty name counts: it is the API server's to reject, not the
/// guard's to let through.
fn is_set(value: Option<&Value>) -> bool {
    value.is_some_and(|v| !v.is_null())
}

/// Set to anything but `null` or an empty list: a list of pull secrets or Secrets (a value of
/// another type is refused as well, since the guard cannot tell what it names).
fn names_any(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => !items.is_empty(),
        Some(_) => true,
    }
}

/// The first use of a Secret in the pod `spec` at `at` (like `spec.template.spec`).
pub(super) fn pod(spec: &Value, at: &str) -> Option<Breach> {
    if names_any(spec.get("imagePullSecrets")) {
        return found(
            format!("{at}.imagePullSecrets"),
            "the kubelet pulls the pod's images with these Secrets",
        );
    }
    for (i, volume) in list(spec.get("volumes")).iter().enumerate() {
        for (source, field) in VOLUME_SECRETS {
            let Some(set) = volume.get(*source).filter(|s| !s.is_null()) else {
                continue;
            };
            if field.is_empty() {
                return found(format!("{at}.volumes[{i}].{source}"), "a Secret volume");
            }
            if is_set(set.get(*field)) {
                return found(
                    format!("{at}.volumes[{i}].{source}.{field}"),
                    &format!("the Secret of this {source} volume"),
                );
            }
        }
        for (j, projection) in list(volume.pointer("/projected/sources"))
            .iter()
            .enumerate()
        {
            if is_set(projection.get(PROJECTED_SECRET)) {
                return found(
                    format!("{at}.volumes[{i}].projected.sources[{j}].{PROJECTED_SECRET}"),
                    "a projected Secret",
                );
            }
        }
    }
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, container) in list(spec.get(key)).iter().enumerate() {
            let at = format!("{at}.{key}[{i}]");
            for (j, from) in list(container.get("envFrom")).iter().enumerate() {
                if is_set(from.get("secretRef")) {
                    return found(format!("{at}.envFrom[{j}].secretRef"), "envFrom a Secret");
                }
            }
            for (j, env) in list(container.get("env")).iter().enumerate() {
                if is_set(env.pointer("/valueFrom/secretKeyRef")) {
                    return found(
                        format!("{at}.env[{j}].valueFrom.secretKeyRef"),
                        "an environment variable from a Secret",
                    );
                }
            }
        }
    }
    None
}

/// A planned ServiceAccount's top-level `imagePullSecrets` and `secrets`.
pub(super) fn service_account(
    image_pull_secrets: Option<&Value>,
    secrets: Option<&Value>,
) -> Option<Breach> {
    if names_any(image_pull_secrets) {
        return found(
            "imagePullSecrets".into(),
            "the kubelet pulls the images of this ServiceAccount's pods with these Secrets",
        );
    }
    if names_any(secrets) {
        return found(
            "secrets".into(),
            "the Secrets this ServiceAccount's pods may use",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_secret_reference_names_its_field() {
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"imagePullSecrets": [{"name": "team-b-registry"}]}),
                "s.imagePullSecrets",
            ),
            (
                json!({"imagePullSecrets": {"name": "x"}}),
                "s.imagePullSecrets",
            ),
            (
                json!({"volumes": [{"name": "v", "secret": {"secretName": "db"}}]}),
                "s.volumes[0].secret",
            ),
            (
                json!({"volumes": [{"name": "v", "secret": {}}]}),
                "s.volumes[0].secret",
            ),
            (
                json!({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "azureFile": {"secretName": "", "shareName": "s"}}]}),
                "s.volumes[1].azureFile.secretName",
            ),
            (
                json!({"volumes": [{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "x"}}}]}),
                "s.volumes[0].csi.nodePublishSecretRef",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]}}]}),
                "s.volumes[0].projected.sources[1].secret",
            ),
            (
                json!({"initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "db"}}]}]}),
                "s.initContainers[0].envFrom[0].secretRef",
            ),
            (
                json!({"ephemeralContainers": [{"name": "e", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}}]}]}),
                "s.ephemeralContainers[0].env[0].valueFrom.secretKeyRef",
            ),
        ];
        for (spec, path) in cases {
            let breach = pod(&spec, "s").unwrap_or_else(|| panic!("{spec} passed"));
            assert_eq!((breach.path.as_str(), breach.rule.as_str()), (path, RULE));
        }
        for (source, field) in VOLUME_SECRETS.iter().filter(|(_, f)| !f.is_empty()) {
            let spec = json!({"volumes": [{"name": "v", *source: {*field: {"name": "x"}}}]});
            let breach = pod(&spec, "s").unwrap_or_else(|| panic!("{spec} passed"));
            assert_eq!(breach.path, format!("s.volumes[0].{source}.{field}"));
            // The same source without its reference reads no Secret.
            let spec = json!({"volumes": [{"name": "v", *source: {*field: null}}]});
            assert_eq!(pod(&spec, "s"), None, "{spec}");
        }
    }

    #[test]
    fn no_reference_no_secret() {
        for spec in [
            json!({}),
            json!({"imagePullSecrets": [], "volumes": [{"name": "c", "configMap": {"name": "c"}},
                {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "p", "projected": {"sources": [{"downwardAPI": {}}, {"configMap": {"name": "c"}}]}}],
                "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "c"}}],
                    "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}]}),
            json!({"imagePullSecrets": null}),
        ] {
            assert_eq!(pod(&spec, "s"), None, "{spec}");
        }
    }

    #[test]
    fn a_service_account_lends_no_secret() {
        let names = json!([{"name": "team-b-registry"}]);
        assert_eq!(service_account(None, None), None);
        assert_eq!(service_account(Some(&json!([])), Some(&Value::Null)), None);
        let breach = service_account(Some(&names), None).expect("pull secrets");
        assert_eq!(
            (breach.path.as_str(), breach.rule.as_str()),
            ("imagePullSecrets", RULE)
        );
        let breach = service_account(None, Some(&names)).expect("secrets");
        assert_eq!(breach.path, "secrets");
    }
}
