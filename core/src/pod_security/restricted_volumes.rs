//! `restrictedVolumes` (restricted, overrides `hostPathVolumes`): volumes may use only the
//! listed inline sources. Port of upstream `check_restrictedVolumes.go`
//! (`restrictedVolumes_1_0`, the latest). Upstream allows a volume as soon as one source is
//! allowed; here a volume with several sources (which the API server rejects) fails when any of
//! them is restricted, so a `hostPath` next to an `emptyDir` fails restricted as it fails
//! baseline.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Reader, join_quote, pluralize};

const REASON: &str = "restricted volume types";

/// The volume sources restricted allows (upstream's list).
pub(super) const ALLOWED: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other volume sources, in upstream's order of naming them.
pub(super) const RESTRICTED: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

/// Forbids volumes that set a restricted source, or no known source (`"unknown"`).
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    let mut paths = Vec::new();
    if let Some(spec) = r.spec() {
        for volume in spec.objects(&mut r, "volumes") {
            let mut allowed = false;
            for source in ALLOWED {
                allowed |= volume.object(&mut r, source).is_some();
            }
            if let Some(source) = RESTRICTED.iter().find(|s| volume.get(s).is_some()) {
                names.push(volume.name());
                types.insert(*source);
                paths.push(volume.at(source));
            } else if !allowed {
                names.push(volume.name());
                types.insert("unknown");
                paths.push(volume.path.clone());
            }
        }
    }
    let found = (!names.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} {} {} {} {}",
                pluralize("volume", "volumes", names.len()),
                join_quote(&names),
                pluralize("uses", "use", names.len()),
                pluralize(
                    "restricted volume type",
                    "restricted volume types",
                    types.len()
                ),
                join_quote(&types)
            ),
            paths,
        )
    });
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{allowed, forbidden, pod, run};
    use super::{ALLOWED, RESTRICTED};

    /// `check_restrictedVolumes_test.go`: a1–a9 of each allowed type, b1–b21 of each
    /// restricted type, c1 of none.
    #[test]
    fn upstream_cases() {
        let mut volumes: Vec<Value> = ALLOWED
            .iter()
            .enumerate()
            .map(|(i, source)| json!({ "name": format!("a{}", i + 1), *source: {} }))
            .collect();
        volumes.extend(
            RESTRICTED
                .iter()
                .enumerate()
                .map(|(i, source)| json!({ "name": format!("b{}", i + 1), *source: {} })),
        );
        volumes.push(json!({ "name": "c1" }));
        let mut paths: Vec<String> = RESTRICTED
            .iter()
            .enumerate()
            .map(|(i, source)| format!("spec.volumes[{}].{source}", i + ALLOWED.len()))
            .collect();
        paths.push(format!("spec.volumes[{}]", volumes.len() - 1));
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        run(
            super::check,
            vec![
                forbidden(
                    "host path volumes",
                    pod(json!({ "volumes": volumes })),
                    "restricted volume types",
                    concat!(
                        "volumes ",
                        r#""b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10", "b11", "b12", "b13", "b14", "b15", "b16", "b17", "b18", "b19", "b20", "b21", "c1""#,
                        " use restricted volume types ",
                        r#""awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "#,
                        r#""hostPath", "iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "unknown", "vsphereVolume""#,
                    ),
                    &paths,
                ),
                allowed(
                    "allowed types only",
                    pod(json!({ "volumes": [
                        { "name": "a", "configMap": { "name": "c" } },
                        { "name": "b", "emptyDir": {}, "unknownField": 1 },
                    ]})),
                ),
                // Not upstream, which allows it: an allowed source does not cover a restricted one.
                forbidden(
                    "hostPath beside emptyDir",
                    pod(
                        json!({ "volumes": [{ "name": "v", "emptyDir": {}, "hostPath": { "path": "/" } }] }),
                    ),
                    "restricted volume types",
                    r#"volume "v" uses restricted volume type "hostPath""#,
                    &["spec.volumes[0].hostPath"],
                ),
                forbidden(
                    "an allowed source of the wrong type",
                    pod(json!({ "volumes": [{ "name": "v", "emptyDir": "yes" }] })),
                    "restricted volume types",
                    r#"volume "v" uses restricted volume type "unknown"; spec.volumes[0].emptyDir must be an object, not a string"#,
                    &["spec.volumes[0]", "spec.volumes[0].emptyDir"],
                ),
            ],
        );
    }
}
