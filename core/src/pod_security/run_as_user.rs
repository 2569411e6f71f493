//! `runAsUser` (restricted): neither the pod nor a container may set `runAsUser: 0`, unless the
//! pod runs in a user namespace (`hostUsers: false`). Port of upstream `check_runAsUser.go`
//! (`runAsUser1_35`, the latest).

use serde_json::Value;

use super::{Finding, Reader, containers_phrase};

const REASON: &str = "runAsUser=0";

/// Forbids `runAsUser: 0` (an `int64`, as in the API) at pod and container level; a pod with
/// `hostUsers: false` is allowed.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = if r.user_namespace() {
        None
    } else {
        evaluate(&mut r)
    };
    r.finish(REASON, found)
}

/// Upstream's `runAsUser1_23`.
fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad_setters = Vec::new();
    let mut paths = Vec::new();
    if let Some(sc) = r.pod_security_context()
        && sc.integer(r, "runAsUser", true) == Some(0)
    {
        bad_setters.push("pod".to_string());
        paths.push(sc.at("runAsUser"));
    }
    let mut bad = Vec::new();
    for c in r.containers() {
        if let Some(sc) = c.security_context(r)
            && sc.integer(r, "runAsUser", true) == Some(0)
        {
            bad.push(c.name);
            paths.push(sc.at("runAsUser"));
        }
    }
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    (!bad_setters.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!("{} must not set runAsUser=0", bad_setters.join(" and ")),
            paths,
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_runAsUser_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "pod runAsUser=0",
                    pod(
                        json!({ "securityContext": { "runAsUser": 0 }, "containers": [{ "name": "a" }] }),
                    ),
                    "runAsUser=0",
                    "pod must not set runAsUser=0",
                    &["spec.securityContext.runAsUser"],
                ),
                allowed(
                    "pod runAsUser=non-zero",
                    pod(
                        json!({ "securityContext": { "runAsUser": 1000 }, "containers": [{ "name": "a" }] }),
                    ),
                ),
                allowed(
                    "pod runAsUser=nil",
                    pod(
                        json!({ "securityContext": { "runAsUser": null }, "containers": [{ "name": "a" }] }),
                    ),
                ),
                forbidden(
                    "containers runAsUser=0",
                    pod(json!({
                        "securityContext": { "runAsUser": 1000 },
                        "containers": [
                            { "name": "a" },
                            { "name": "b", "securityContext": {} },
                            { "name": "c", "securityContext": { "runAsUser": 0 } },
                            { "name": "d", "securityContext": { "runAsUser": 0 } },
                            { "name": "e", "securityContext": { "runAsUser": 1 } },
                            { "name": "f", "securityContext": { "runAsUser": 1 } },
                        ],
                    })),
                    "runAsUser=0",
                    r#"containers "c", "d" must not set runAsUser=0"#,
                    &[
                        "spec.containers[2].securityContext.runAsUser",
                        "spec.containers[3].securityContext.runAsUser",
                    ],
                ),
                allowed(
                    "containers runAsUser=non-zero",
                    pod(json!({ "containers": [
                        { "name": "c", "securityContext": { "runAsUser": 1 } },
                        { "name": "d", "securityContext": { "runAsUser": 2 } },
                        { "name": "e", "securityContext": { "runAsUser": 3 } },
                        { "name": "f", "securityContext": { "runAsUser": 4 } },
                    ]})),
                ),
                allowed(
                    "host users false allowed",
                    pod(json!({ "hostUsers": false })),
                ),
                forbidden(
                    "pod and container, and a float",
                    pod(json!({
                        "securityContext": { "runAsUser": 0 },
                        "initContainers": [{ "name": "i", "securityContext": { "runAsUser": 0 } }],
                        "containers": [{ "name": "a", "securityContext": { "runAsUser": 0.5 } }],
                    })),
                    "runAsUser=0",
                    r#"pod and container "i" must not set runAsUser=0; spec.containers[0].securityContext.runAsUser must be a 64-bit integer, not a fractional number"#,
                    &[
                        "spec.securityContext.runAsUser",
                        "spec.initContainers[0].securityContext.runAsUser",
                        "spec.containers[0].securityContext.runAsUser",
                    ],
                ),
            ],
        );
    }
}
