//! The guard's rules for pod volumes that are claims, so that a pod reaches no volume its App
//! does not create, as a planned claim may not ([`fields::claim`]):
//! - an `ephemeral` volume's `volumeClaimTemplate` becomes a PersistentVolumeClaim, so it gets
//!   exactly a planned claim's rules: no `volumeName`, `dataSource` or `dataSourceRef` in its
//!   `spec` ([`fields::claim`]), and its `metadata` the rules of any planned object's
//!   ([`fields::metadata`]: no `wasmop.dev/*` label but `wasmop.dev/app` = this App, which the
//!   host would take for one of the App's claims);
//! - a `persistentVolumeClaim` volume names a claim the App creates: one the same plan holds,
//!   or for a backup Job a claim labelled with the App (the host's claim cache). Not a name
//!   shaped like a planned StatefulSet's claims (`<template>-<statefulset>-<ordinal>`): such a
//!   name can be another App's claim (`data-billing-db-0` is also template `data-billing` of a
//!   set `db`). Mounting another App's claim
//!   would read or overwrite its data, which is why binding or cloning one is refused; the
//!   guard sees plans, not the cluster, so a claim made by hand for the App is not enough. A
//!   StatefulSet's own pods mount its `volumeClaimTemplates` by template name (in
//!   `volumeMounts`), which needs no volume and no check.
//!
//! ConfigMap volumes (and `configMapRef`/`configMapKeyRef`) may name any ConfigMap of the
//! namespace, planned or not: ConfigMaps hold no secrets by Kubernetes' own contract ("use a
//! Secret for confidential data"), whoever may create an App may usually read them, and a
//! ConfigMap volume is read-only, so a pod can neither learn nor change more through one than
//! its App's author can.

use serde_json::Value;

use super::{Breach, Owned, fields};

/// Volume sources that name storage existing outside the namespace by its address or id (an
/// NFS export, an iSCSI or Fibre Channel target, a cloud disk's id, a Ceph pool) or that make
/// the node fetch or run something (`gitRepo`, CVE-2024-10220; `flexVolume`'s driver). The Pod
/// Security Standards allow them at `baseline` ("inline volumes" are not a privilege
/// escalation of the node), but a tenant's pod that names another tenant's export or disk reads
/// its data as a claim with `volumeName` would, which no level lets a plan do; so a pod uses
/// one only where the policy lists it (`inlineVolumes`).
pub const INLINE_STORAGE: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "iscsi",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

/// The first volume of the pod `spec` at `at` that names storage outside the namespace
/// ([`INLINE_STORAGE`]) and is not among the `allowed` sources.
pub(super) fn inline(spec: &Value, at: &str, allowed: &[String]) -> Option<Breach> {
    let volumes = spec.get("volumes").and_then(Value::as_array)?;
    for (i, volume) in volumes.iter().enumerate() {
        for source in INLINE_STORAGE {
            if volume.get(*source).is_some_and(|v| !v.is_null())
                && !allowed.iter().any(|a| a == source)
            {
                return Some(Breach {
                    path: format!("{at}.volumes[{i}].{source}"),
                    rule: "wasmop/inlineVolume".into(),
                    reason: format!(
                        "a {source} volume names storage outside the namespace (another \
                         tenant's, perhaps); a pod uses one only where the policy lists it in \
                         inlineVolumes, and otherwise claims a new volume"
                    ),
                });
            }
        }
    }
    None
}

/// The first breach in the volumes of the pod `spec` at `at` (like `spec.template.spec`);
/// `host_labels` are the `wasmop.dev/*` labels an ephemeral claim may carry (as in
/// [`fields::metadata`]).
pub(super) fn check(
    spec: &Value,
    at: &str,
    host_labels: &[(&str, &str)],
    owned: &Owned,
) -> Option<Breach> {
    let volumes = spec.get("volumes").and_then(Value::as_array)?;
    for (i, volume) in volumes.iter().enumerate() {
        let at = format!("{at}.volumes[{i}]");
        if let Some(template) = volume.pointer("/ephemeral/volumeClaimTemplate") {
            let at = format!("{at}.ephemeral.volumeClaimTemplate");
            if let Some(breach) = fields::claim(
                template.get("spec").unwrap_or(&Value::Null),
                &format!("{at}.spec"),
            ) {
                return Some(breach);
            }
            if let Some(meta) = template.get("metadata").and_then(Value::as_object)
                && let Some(breach) = fields::metadata(meta, &format!("{at}.metadata"), host_labels)
            {
                return Some(breach);
            }
        }
        if let Some(source) = volume.get("persistentVolumeClaim").filter(|s| !s.is_null()) {
            let name = source
                .get("claimName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !owned.has_claim(name) {
                return Some(Breach {
                    path: format!("{at}.persistentVolumeClaim.claimName"),
                    rule: "wasmop/claimSource".into(),
                    reason: format!(
                        "{name:?} is not a claim this App creates: a pod may mount only a claim \
                         the same plan holds (a StatefulSet's pods use its claim templates; an \
                         ephemeral volume is its pod's), not another App's"
                    ),
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::core::v1::{Volume, VolumeProjection};
    use serde_json::{Map, json};

    use super::{
        super::{PlanPolicy, pods, secrets},
        *,
    };
    use crate::pod_security::Level;

    const AT: &str = "spec.template.spec";
    const HOST: &[(&str, &str)] = &[(fields::APP_LABEL, "kv")];

    fn owned() -> Owned {
        Owned {
            accounts: BTreeSet::from(["mine".to_string()]),
            claims: BTreeSet::from(["kv-backups".to_string()]),
        }
    }

    fn with_volume(volume: Value) -> Value {
        json!({"volumes": [{"name": "ok", "emptyDir": {}}, volume]})
    }

    #[test]
    fn ephemeral_claims_get_the_claim_rules_and_claims_are_the_apps() {
        let ephemeral = |template: Value| {
            with_volume(json!({"name": "e", "ephemeral": {"volumeClaimTemplate": template}}))
        };
        let pvc = |name: &str| {
            with_volume(json!({"name": "p", "persistentVolumeClaim": {"claimName": name}}))
        };
        let e = "spec.template.spec.volumes[1].ephemeral.volumeClaimTemplate";
        let claim = "spec.template.spec.volumes[1].persistentVolumeClaim.claimName";
        let cases: Vec<(Value, String, &str)> = vec![
            (
                ephemeral(json!({"spec": {"volumeName": "pv-1", "storageClassName": ""}})),
                format!("{e}.spec.volumeName"),
                "wasmop/claimSource",
            ),
            (
                ephemeral(
                    json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "theirs"}}}),
                ),
                format!("{e}.spec.dataSource"),
                "wasmop/claimSource",
            ),
            (
                ephemeral(
                    json!({"spec": {"dataSourceRef": {"kind": "VolumeSnapshot", "name": "theirs"}}}),
                ),
                format!("{e}.spec.dataSourceRef"),
                "wasmop/claimSource",
            ),
            (
                ephemeral(
                    json!({"metadata": {"labels": {"wasmop.dev/app": "someone-else"}}, "spec": {}}),
                ),
                format!("{e}.metadata.labels[\"wasmop.dev/app\"]"),
                "wasmop/metadata",
            ),
            (
                ephemeral(
                    json!({"metadata": {"annotations": {"wasmop.dev/applied": "x"}}, "spec": {}}),
                ),
                format!("{e}.metadata.annotations[\"wasmop.dev/applied\"]"),
                "wasmop/metadata",
            ),
            (
                ephemeral(json!({"metadata": {"ownerReferences": []}, "spec": {}})),
                format!("{e}.metadata.ownerReferences"),
                "wasmop/metadata",
            ),
            (
                pvc("other-app-data"),
                claim.to_string(),
                "wasmop/claimSource",
            ),
            (pvc(""), claim.to_string(), "wasmop/claimSource"),
            (
                with_volume(json!({"name": "p", "persistentVolumeClaim": {}})),
                claim.to_string(),
                "wasmop/claimSource",
            ),
            (
                with_volume(json!({"name": "p", "persistentVolumeClaim": {"claimName": 7}})),
                claim.to_string(),
                "wasmop/claimSource",
            ),
            // Not planned: names shaped like a StatefulSet's claims prove nothing (another
            // App's `data-billing-kv-0` is template `data-billing` of a set `kv` too).
            (pvc("data-kv"), claim.to_string(), "wasmop/claimSource"),
            (pvc("data-kv-0"), claim.to_string(), "wasmop/claimSource"),
            (
                pvc("data-billing-kv-0"),
                claim.to_string(),
                "wasmop/claimSource",
            ),
        ];
        for (spec, path, rule) in cases {
            let breach =
                check(&spec, AT, HOST, &owned()).unwrap_or_else(|| panic!("{spec} passed"));
            assert_eq!(
                (breach.path.as_str(), breach.rule.as_str()),
                (path.as_str(), rule),
                "{spec}"
            );
        }
        for spec in [
            json!({}),
            ephemeral(
                json!({"metadata": {"labels": {"wasmop.dev/app": "kv", "app": "x"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            ),
            ephemeral(json!({"spec": {"volumeName": null, "dataSource": null}})),
            pvc("kv-backups"),
            with_volume(json!({"name": "c", "configMap": {"name": "any-config-map"}})),
        ] {
            assert_eq!(check(&spec, AT, HOST, &owned()), None, "{spec}");
        }
    }

    // --- Every volume source of the core API is decided ---------------------------------

    /// Every source of `v1.Volume` with the most restrictive level that allows it by name
    /// (upstream's `restrictedVolumes` and `hostPathVolumes`): `Restricted`, every level;
    /// `Baseline`, baseline and privileged; `Privileged`, only privileged. Whether it reads a
    /// Secret is [`secrets::VOLUME_SECRETS`].
    const LEVELS: &[(&str, Level)] = &[
        ("awsElasticBlockStore", Level::Baseline),
        ("azureDisk", Level::Baseline),
        ("azureFile", Level::Baseline),
        ("cephfs", Level::Baseline),
        ("cinder", Level::Baseline),
        ("configMap", Level::Restricted),
        ("csi", Level::Restricted),
        ("downwardAPI", Level::Restricted),
        ("emptyDir", Level::Restricted),
        ("ephemeral", Level::Restricted),
        ("fc", Level::Baseline),
        ("flexVolume", Level::Baseline),
        ("flocker", Level::Baseline),
        ("gcePersistentDisk", Level::Baseline),
        ("gitRepo", Level::Baseline),
        ("glusterfs", Level::Baseline),
        ("hostPath", Level::Privileged),
        ("image", Level::Restricted),
        ("iscsi", Level::Baseline),
        ("nfs", Level::Baseline),
        ("persistentVolumeClaim", Level::Restricted),
        ("photonPersistentDisk", Level::Baseline),
        ("portworxVolume", Level::Baseline),
        ("projected", Level::Restricted),
        ("quobyte", Level::Baseline),
        ("rbd", Level::Baseline),
        ("scaleIO", Level::Baseline),
        ("secret", Level::Restricted),
        ("storageos", Level::Baseline),
        ("vsphereVolume", Level::Baseline),
    ];

    /// Fields of volume sources named like a Secret that name none, and why.
    const NOT_SECRET_REFERENCES: &[(&str, &str, &str)] = &[(
        "cephfs",
        "secretFile",
        "a path on the node (its own keyring, as rbd's keyring): no Secret of the namespace",
    )];

    /// What each projected volume source (`v1.VolumeProjection`) is to the guard.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Projection {
        /// Allowed: public or the pod's own data.
        Plain,
        /// A credential of the pod's ServiceAccount: only for a ServiceAccount the plan
        /// creates (`wasmop/serviceAccount`).
        Account,
        /// A Secret (`wasmop/secrets`).
        Secret,
    }

    const PROJECTIONS: &[(&str, Projection)] = &[
        // Public CA certificates.
        ("clusterTrustBundle", Projection::Plain),
        ("configMap", Projection::Plain),
        ("downwardAPI", Projection::Plain),
        // A key and a certificate that a signer issues to the pod, as its ServiceAccount.
        ("podCertificate", Projection::Account),
        ("secret", Projection::Secret),
        ("serviceAccountToken", Projection::Account),
    ];

    /// The JSON schema of `T` from k8s-openapi, with its definitions.
    fn schema<T: schemars::JsonSchema>() -> Value {
        schemars::SchemaGenerator::default()
            .into_root_schema_for::<T>()
            .to_value()
    }

    /// The properties of `schema` (following one `$ref` into `root`'s `$defs`).
    fn properties<'a>(root: &'a Value, schema: &'a Value) -> &'a Map<String, Value> {
        let schema = match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => reference
                .strip_prefix("#/$defs/")
                .and_then(|name| root.pointer(&format!("/$defs/{name}")))
                .unwrap_or_else(|| panic!("{reference} is not in the schema's $defs")),
            None => schema,
        };
        schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("no properties in {schema}"))
    }

    fn names(map: &Map<String, Value>, except: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = map
            .keys()
            .filter(|k| !except.contains(&k.as_str()))
            .cloned()
            .collect();
        names.sort();
        names
    }

    fn sorted(table: impl Iterator<Item = &'static str>) -> Vec<String> {
        let mut names: Vec<String> = table.map(str::to_string).collect();
        names.sort();
        names
    }

    #[test]
    fn every_volume_source_of_the_core_api_is_decided() {
        let root = schema::<Volume>();
        let sources = properties(&root, &root);
        assert_eq!(
            names(sources, &["name"]),
            sorted(LEVELS.iter().map(|(s, _)| *s)),
            "k8s-openapi's Volume has other sources than LEVELS: decide each new one (the \
             level that allows it, and in secrets::VOLUME_SECRETS whether it names a Secret)"
        );
        // Every field named like a Secret is a reference in VOLUME_SECRETS or explained (but
        // those of a source that is a Secret as a whole).
        let mut named_secret = Vec::new();
        let whole = |source: &str| secrets::VOLUME_SECRETS.contains(&(source, ""));
        for (source, schema) in sources.iter().filter(|(s, _)| *s != "name" && !whole(s)) {
            for field in properties(&root, schema).keys() {
                if field.to_ascii_lowercase().contains("secret") {
                    named_secret.push((source.clone(), field.clone()));
                }
            }
        }
        let decided: BTreeSet<(String, String)> = secrets::VOLUME_SECRETS
            .iter()
            .filter(|(_, field)| !field.is_empty())
            .map(|(s, f)| (s.to_string(), f.to_string()))
            .chain(
                NOT_SECRET_REFERENCES
                    .iter()
                    .map(|(s, f, _)| (s.to_string(), f.to_string())),
            )
            .collect();
        assert_eq!(
            named_secret.into_iter().collect::<BTreeSet<_>>(),
            decided,
            "volume source fields named like a Secret: each must be in secrets::VOLUME_SECRETS \
             or NOT_SECRET_REFERENCES"
        );
        let projections = schema::<VolumeProjection>();
        assert_eq!(
            names(properties(&projections, &projections), &[]),
            sorted(PROJECTIONS.iter().map(|(s, _)| *s)),
            "k8s-openapi's VolumeProjection has other sources than PROJECTIONS: decide each new one"
        );
    }

    /// A pod template that passes restricted and every wasmop rule, with `volume` and the
    /// ServiceAccount `account` (`None`: default, without a token).
    fn template(volume: Value, account: Option<&str>) -> Value {
        let mut spec = json!({
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "i", "securityContext":
                {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [volume],
        });
        if let Some(account) = account {
            spec["serviceAccountName"] = json!(account);
            spec["automountServiceAccountToken"] = json!(true);
        }
        json!({"metadata": {"labels": {"app": "x"}}, "spec": spec})
    }

    /// Runs the guard's pod rules on every source of `v1.Volume` at every level, with and
    /// without Secrets, with and without the source's Secret references set, and checks the
    /// outcome against the tables: refused by the level exactly where [`LEVELS`] says, for a
    /// Secret exactly where [`secrets::VOLUME_SECRETS`] says, otherwise allowed.
    #[test]
    fn storage_outside_the_namespace_is_mounted_only_where_the_policy_lists_it() {
        let nfs = json!({"volumes": [{"name": "ok", "emptyDir": {}},
            {"name": "n", "nfs": {"server": "filer.example", "path": "/exports/team-b"}}]});
        let breach = inline(&nfs, AT, &[]).expect("refused by default");
        assert_eq!(
            (breach.path.as_str(), breach.rule.as_str()),
            ("spec.template.spec.volumes[1].nfs", "wasmop/inlineVolume")
        );
        assert_eq!(inline(&nfs, AT, &["nfs".to_string()]), None);
        assert!(inline(&nfs, AT, &["iscsi".to_string()]).is_some());
    }

    #[test]
    fn each_volume_source_is_allowed_or_refused_as_the_tables_say() {
        let root = schema::<Volume>();
        let sources = properties(&root, &root);
        let mut wrong = Vec::new();
        for (source, allowed_up_to) in LEVELS {
            let refs: Vec<&str> = secrets::VOLUME_SECRETS
                .iter()
                .filter(|(s, f)| s == source && !f.is_empty())
                .map(|(_, f)| *f)
                .collect();
            let is_secret = secrets::VOLUME_SECRETS.contains(&(*source, ""));
            for with_refs in [false, true] {
                let mut value = match *source {
                    "persistentVolumeClaim" => json!({"claimName": "kv-backups"}),
                    "ephemeral" => json!({"volumeClaimTemplate": {"spec": {}}}),
                    _ => json!({}),
                };
                if with_refs {
                    let fields = properties(&root, &sources[*source]);
                    for field in &refs {
                        value[*field] = match fields[*field].get("type").and_then(Value::as_str) {
                            Some("string") => json!("s"),
                            _ => json!({"name": "s"}),
                        };
                    }
                }
                let volume = json!({"name": "v", *source: value});
                for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
                    for allow_secrets in [false, true] {
                        let policy = PlanPolicy {
                            pod_security: level,
                            allow_secrets,
                            ..PlanPolicy::default()
                        };
                        let expected = if level > *allowed_up_to {
                            Some(if *source == "hostPath" && level == Level::Baseline {
                                "podSecurity/hostPathVolumes"
                            } else {
                                "podSecurity/restrictedVolumes"
                            })
                        } else if !allow_secrets && (is_secret || (with_refs && !refs.is_empty())) {
                            Some("wasmop/secrets")
                        } else if INLINE_STORAGE.contains(source) {
                            Some("wasmop/inlineVolume")
                        } else {
                            None
                        };
                        let got = pods::check(
                            &policy,
                            &template(volume.clone(), None),
                            "spec.template",
                            "ns",
                            HOST,
                            &owned(),
                        );
                        if got.as_ref().map(|b| b.rule.as_str()) != expected {
                            wrong.push(format!(
                                "{source} (refs {with_refs}) at {level}, secrets {allow_secrets}: \
                                 expected {expected:?}, got {got:?}"
                            ));
                        }
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn each_projected_source_is_allowed_or_refused_as_the_table_says() {
        let value = |source: &str| match source {
            "serviceAccountToken" => json!({"path": "token"}),
            "podCertificate" => json!({"signerName": "example.com/signer", "keyType": "ED25519",
                "credentialBundlePath": "creds.pem"}),
            _ => json!({}),
        };
        for (source, kind) in PROJECTIONS {
            let volume = json!({"name": "p", "projected": {"sources": [{*source: value(source)}]}});
            for (account, allow_secrets) in [
                (None, false),
                (None, true),
                (Some("mine"), false),
                (Some("mine"), true),
            ] {
                let policy = PlanPolicy {
                    allow_secrets,
                    ..PlanPolicy::default()
                };
                let expected = match kind {
                    Projection::Account if account.is_none() => Some("wasmop/serviceAccount"),
                    Projection::Secret if !allow_secrets => Some("wasmop/secrets"),
                    _ => None,
                };
                let got = pods::check(
                    &policy,
                    &template(volume.clone(), account),
                    "spec.template",
                    "ns",
                    HOST,
                    &owned(),
                );
                assert_eq!(
                    got.as_ref().map(|b| b.rule.as_str()),
                    expected,
                    "{source} as {account:?}, secrets {allow_secrets}: {got:?}"
                );
                if let Some(breach) = got {
                    assert_eq!(
                        breach.path,
                        format!("spec.template.spec.volumes[0].projected.sources[0].{source}")
                    );
                }
            }
        }
    }
}
