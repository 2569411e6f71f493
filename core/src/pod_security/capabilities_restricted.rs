//! `capabilities_restricted` (restricted, overrides `capabilities_baseline`): containers must
//! drop `ALL` and may add only `NET_BIND_SERVICE`. Port of upstream
//! `check_capabilities_restricted.go` (`capabilitiesRestricted_1_25`, the latest). Upstream
//! allows a Windows pod outright (the API server forbids capabilities on one); here a Windows
//! pod gets the baseline check this one overrides, so restricted stays at least as strict.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Reader, capabilities_baseline, containers_phrase, join_quote};

const REASON: &str = "unrestricted capabilities";

/// Requires `capabilities.drop` to include `ALL` and `capabilities.add` to be at most
/// `NET_BIND_SERVICE`.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = if r.windows() {
        capabilities_baseline::evaluate(&mut r)
    } else {
        evaluate(&mut r)
    };
    r.finish(REASON, found)
}

/// Upstream's `capabilitiesRestricted_1_22`.
fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut missing_drop_all = Vec::new();
    let mut adding_forbidden = Vec::new();
    let mut forbidden = BTreeSet::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        let Some(capabilities) = c
            .security_context(r)
            .and_then(|sc| sc.object(r, "capabilities"))
        else {
            missing_drop_all.push(c.name);
            paths.push(c.security_context_path("capabilities").child("drop"));
            continue;
        };
        if !capabilities
            .strings(r, "drop")
            .iter()
            .any(|(_, capability)| *capability == "ALL")
        {
            missing_drop_all.push(c.name);
            paths.push(capabilities.at("drop"));
        }
        let mut added_forbidden = false;
        for (path, capability) in capabilities.strings(r, "add") {
            if capability != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden.insert(capability);
                paths.push(path);
            }
        }
        if added_forbidden {
            adding_forbidden.push(c.name);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            r#"{} must set securityContext.capabilities.drop=["ALL"]"#,
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding_forbidden.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding_forbidden),
            join_quote(&forbidden)
        ));
    }
    (!details.is_empty()).then(|| Finding::new(REASON, details.join("; "), paths))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_capabilities_restricted_test.go` (its 1.22 case is the same as the first).
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "multiple containers",
                    pod(json!({ "containers": [
                        { "name": "a", "securityContext": { "capabilities": { "add": ["FOO", "BAR"] } } },
                        { "name": "b", "securityContext": { "capabilities": { "add": ["BAR", "BAZ"] } } },
                        { "name": "c", "securityContext": { "capabilities": {
                            "add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]
                        } } },
                    ]})),
                    "unrestricted capabilities",
                    r#"containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add"#,
                    &[
                        "spec.containers[0].securityContext.capabilities.drop",
                        "spec.containers[0].securityContext.capabilities.add[0]",
                        "spec.containers[0].securityContext.capabilities.add[1]",
                        "spec.containers[1].securityContext.capabilities.drop",
                        "spec.containers[1].securityContext.capabilities.add[0]",
                        "spec.containers[1].securityContext.capabilities.add[1]",
                        "spec.containers[2].securityContext.capabilities.add[1]",
                    ],
                ),
                allowed(
                    "windows pod, admit without checking capabilities",
                    pod(json!({ "os": { "name": "windows" }, "containers": [{ "name": "a" }] })),
                ),
                forbidden(
                    "linux pod, reject if security context is not set",
                    pod(json!({ "os": { "name": "linux" }, "containers": [{ "name": "a" }] })),
                    "unrestricted capabilities",
                    r#"container "a" must set securityContext.capabilities.drop=["ALL"]"#,
                    &["spec.containers[0].securityContext.capabilities.drop"],
                ),
                allowed(
                    "drop ALL, add NET_BIND_SERVICE",
                    pod(
                        json!({ "containers": [{ "name": "a", "securityContext": { "capabilities": {
                        "add": ["NET_BIND_SERVICE"], "drop": ["ALL"]
                    } } }] }),
                    ),
                ),
                // Not upstream: a Windows pod still gets the baseline check it overrides.
                forbidden(
                    "windows pod adding a non-default capability",
                    pod(
                        json!({ "os": { "name": "windows" }, "containers": [{ "name": "a",
                        "securityContext": { "capabilities": { "add": ["SYS_ADMIN"] } } }] }),
                    ),
                    "non-default capabilities",
                    r#"container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add"#,
                    &["spec.containers[0].securityContext.capabilities.add[0]"],
                ),
                forbidden(
                    "an os that is not an object is not windows",
                    pod(json!({ "os": "windows", "containers": [{ "name": "a" }] })),
                    "unrestricted capabilities",
                    r#"container "a" must set securityContext.capabilities.drop=["ALL"]; spec.os must be an object, not a string"#,
                    &[
                        "spec.containers[0].securityContext.capabilities.drop",
                        "spec.os",
                    ],
                ),
            ],
        );
    }
}
