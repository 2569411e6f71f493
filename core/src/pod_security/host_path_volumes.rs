//! `hostPathVolumes` (baseline): no `hostPath` volumes.
//! Port of upstream `check_hostPathVolumes.go` (`hostPathVolumes_1_0`, the latest).

use serde_json::Value;

use super::{Finding, Reader, join_quote, pluralize};

const REASON: &str = "hostPath volumes";

/// Forbids any volume with a `hostPath` source (of whatever JSON type, other than `null`).
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut names = Vec::new();
    let mut paths = Vec::new();
    if let Some(spec) = r.spec() {
        for volume in spec.objects(&mut r, "volumes") {
            if volume.get("hostPath").is_some() {
                names.push(volume.name());
                paths.push(volume.at("hostPath"));
            }
        }
    }
    let found = (!names.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} {}",
                pluralize("volume", "volumes", names.len()),
                join_quote(&names)
            ),
            paths,
        )
    });
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_hostPathVolumes_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "host path volumes",
                    pod(json!({ "volumes": [
                        { "name": "a", "hostPath": {} },
                        { "name": "b", "hostPath": {} },
                        { "name": "c", "emptyDir": {} },
                    ]})),
                    "hostPath volumes",
                    r#"volumes "a", "b""#,
                    &["spec.volumes[0].hostPath", "spec.volumes[1].hostPath"],
                ),
                allowed(
                    "null hostPath",
                    pod(json!({ "volumes": [{ "name": "a", "hostPath": null, "emptyDir": {} }] })),
                ),
                forbidden(
                    "volumes not a list",
                    pod(json!({ "volumes": { "name": "a", "hostPath": {} } })),
                    "hostPath volumes",
                    "spec.volumes must be an array, not an object",
                    &["spec.volumes"],
                ),
            ],
        );
    }
}
