//! `allowPrivilegeEscalation` (restricted): every container must set
//! `allowPrivilegeEscalation: false`; Windows pods are exempt. Port of upstream
//! `check_allowPrivilegeEscalation.go` (`allowPrivilegeEscalation_1_25`, the latest).

use serde_json::Value;

use super::{Finding, Reader, containers_phrase};

const REASON: &str = "allowPrivilegeEscalation != false";

/// Requires `securityContext.allowPrivilegeEscalation: false` on each container of a
/// non-Windows pod.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = if r.windows() { None } else { evaluate(&mut r) };
    r.finish(REASON, found)
}

/// Upstream's `allowPrivilegeEscalation_1_8`.
fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad = Vec::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        let allowed = c
            .security_context(r)
            .and_then(|sc| sc.boolean(r, "allowPrivilegeEscalation"));
        if allowed != Some(false) {
            bad.push(c.name);
            paths.push(c.security_context_path("allowPrivilegeEscalation"));
        }
    }
    (!bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} must set securityContext.allowPrivilegeEscalation=false",
                containers_phrase(&bad)
            ),
            paths,
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_allowPrivilegeEscalation_test.go` (its 1.8 case is the first).
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "multiple containers",
                    pod(json!({ "containers": [
                        { "name": "a" },
                        { "name": "b", "securityContext": { "allowPrivilegeEscalation": null } },
                        { "name": "c", "securityContext": { "allowPrivilegeEscalation": true } },
                        { "name": "d", "securityContext": { "allowPrivilegeEscalation": false } },
                    ]})),
                    "allowPrivilegeEscalation != false",
                    r#"containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false"#,
                    &[
                        "spec.containers[0].securityContext.allowPrivilegeEscalation",
                        "spec.containers[1].securityContext.allowPrivilegeEscalation",
                        "spec.containers[2].securityContext.allowPrivilegeEscalation",
                    ],
                ),
                allowed(
                    "windows pod, admit without checking privilegeEscalation",
                    pod(json!({ "os": { "name": "windows" }, "containers": [{ "name": "a" }] })),
                ),
                forbidden(
                    "linux pod, reject if security context is not set",
                    pod(json!({ "os": { "name": "linux" }, "containers": [{ "name": "a" }] })),
                    "allowPrivilegeEscalation != false",
                    r#"container "a" must set securityContext.allowPrivilegeEscalation=false"#,
                    &["spec.containers[0].securityContext.allowPrivilegeEscalation"],
                ),
                forbidden(
                    "a security context that is not an object",
                    pod(json!({ "containers": [{ "name": "a", "securityContext": [] }] })),
                    "allowPrivilegeEscalation != false",
                    r#"container "a" must set securityContext.allowPrivilegeEscalation=false; spec.containers[0].securityContext must be an object, not an array"#,
                    &[
                        "spec.containers[0].securityContext.allowPrivilegeEscalation",
                        "spec.containers[0].securityContext",
                    ],
                ),
            ],
        );
    }
}
