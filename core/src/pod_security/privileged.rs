//! `privileged` (baseline): containers must not set `securityContext.privileged=true`.
//! Port of upstream `check_privileged.go` (`privileged_1_0`, the latest version).

use serde_json::Value;

use super::{Finding, Reader, containers_phrase};

const REASON: &str = "privileged";

/// Forbids `privileged: true` on any container.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut bad = Vec::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        if let Some(sc) = c.security_context(&mut r)
            && sc.boolean(&mut r, "privileged") == Some(true)
        {
            bad.push(c.name);
            paths.push(sc.at("privileged"));
        }
    }
    let found = (!bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} must not set securityContext.privileged=true",
                containers_phrase(&bad)
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

    /// `check_privileged_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "privileged",
                    pod(json!({ "containers": [
                        { "name": "a" },
                        { "name": "b", "securityContext": {} },
                        { "name": "c", "securityContext": { "privileged": false } },
                        { "name": "d", "securityContext": { "privileged": true } },
                        { "name": "e", "securityContext": { "privileged": true } },
                    ]})),
                    "privileged",
                    r#"containers "d", "e" must not set securityContext.privileged=true"#,
                    &[
                        "spec.containers[3].securityContext.privileged",
                        "spec.containers[4].securityContext.privileged",
                    ],
                ),
                forbidden(
                    "init and ephemeral containers are visited too",
                    pod(json!({
                        "ephemeralContainers": [{ "name": "x", "securityContext": { "privileged": true } }],
                        "initContainers": [{ "name": "i", "securityContext": { "privileged": true } }],
                    })),
                    "privileged",
                    r#"containers "i", "x" must not set securityContext.privileged=true"#,
                    &[
                        "spec.initContainers[0].securityContext.privileged",
                        "spec.ephemeralContainers[0].securityContext.privileged",
                    ],
                ),
                forbidden(
                    "wrong type",
                    pod(
                        json!({ "containers": [{ "name": "a", "securityContext": { "privileged": 1 } }] }),
                    ),
                    "privileged",
                    "spec.containers[0].securityContext.privileged must be a boolean, not a number",
                    &["spec.containers[0].securityContext.privileged"],
                ),
                allowed(
                    "unset or false",
                    pod(json!({ "containers": [
                        { "name": "a", "securityContext": { "privileged": false } },
                        { "name": "b", "securityContext": { "privileged": null } },
                    ]})),
                ),
            ],
        );
    }
}
