//! `runAsNonRoot` (restricted): the pod or every container must set `runAsNonRoot: true`,
//! unless the pod runs in a user namespace (`hostUsers: false`). Port of upstream
//! `check_runAsNonRoot.go` (`runAsNonRoot1_35`, the latest).

use serde_json::Value;

use super::{Finding, Reader, containers_phrase};

const REASON: &str = "runAsNonRoot != true";

/// Requires `runAsNonRoot: true` at pod level or on each container, and forbids `false`
/// anywhere; a pod with `hostUsers: false` is allowed.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = if r.user_namespace() {
        None
    } else {
        evaluate(&mut r)
    };
    r.finish(REASON, found)
}

/// Upstream's `runAsNonRoot1_0`. The paths name the explicit `false`s and the containers that
/// leave it unset without a pod-level `true`, even where upstream's detail tells only the first.
fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad_setters = Vec::new();
    let mut paths = Vec::new();
    let mut pod_non_root = false;
    if let Some(sc) = r.pod_security_context() {
        match sc.boolean(r, "runAsNonRoot") {
            Some(false) => {
                bad_setters.push("pod".to_string());
                paths.push(sc.at("runAsNonRoot"));
            }
            Some(true) => pod_non_root = true,
            None => {}
        }
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    let mut implicit_paths = Vec::new();
    for c in r.containers() {
        match c
            .security_context(r)
            .and_then(|sc| sc.boolean(r, "runAsNonRoot"))
        {
            Some(false) => {
                explicitly_bad.push(c.name);
                paths.push(c.security_context_path("runAsNonRoot"));
            }
            Some(true) => {}
            None if pod_non_root => {}
            None => {
                implicitly_bad.push(c.name);
                implicit_paths.push(c.security_context_path("runAsNonRoot"));
            }
        }
    }
    if !explicitly_bad.is_empty() {
        bad_setters.push(containers_phrase(&explicitly_bad));
    }
    paths.extend(implicit_paths);
    if !bad_setters.is_empty() {
        return Some(Finding::new(
            REASON,
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                bad_setters.join(" and ")
            ),
            paths,
        ));
    }
    (!implicitly_bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicitly_bad)
            ),
            paths,
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_runAsNonRoot_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "no explicit runAsNonRoot",
                    pod(json!({ "containers": [{ "name": "a" }] })),
                    "runAsNonRoot != true",
                    r#"pod or container "a" must set securityContext.runAsNonRoot=true"#,
                    &["spec.containers[0].securityContext.runAsNonRoot"],
                ),
                forbidden(
                    "pod runAsNonRoot=false",
                    pod(json!({
                        "securityContext": { "runAsNonRoot": false },
                        "containers": [{ "name": "a" }],
                    })),
                    "runAsNonRoot != true",
                    "pod must not set securityContext.runAsNonRoot=false",
                    &[
                        "spec.securityContext.runAsNonRoot",
                        "spec.containers[0].securityContext.runAsNonRoot",
                    ],
                ),
                forbidden(
                    "containers runAsNonRoot=false",
                    pod(json!({
                        "securityContext": { "runAsNonRoot": true },
                        "containers": [
                            { "name": "a" },
                            { "name": "b", "securityContext": {} },
                            { "name": "c", "securityContext": { "runAsNonRoot": false } },
                            { "name": "d", "securityContext": { "runAsNonRoot": false } },
                            { "name": "e", "securityContext": { "runAsNonRoot": true } },
                            { "name": "f", "securityContext": { "runAsNonRoot": true } },
                        ],
                    })),
                    "runAsNonRoot != true",
                    r#"containers "c", "d" must not set securityContext.runAsNonRoot=false"#,
                    &[
                        "spec.containers[2].securityContext.runAsNonRoot",
                        "spec.containers[3].securityContext.runAsNonRoot",
                    ],
                ),
                forbidden(
                    "pod nil, container fallthrough",
                    pod(json!({ "containers": [
                        { "name": "a" },
                        { "name": "b", "securityContext": {} },
                        { "name": "d", "securityContext": { "runAsNonRoot": true } },
                        { "name": "e", "securityContext": { "runAsNonRoot": true } },
                    ]})),
                    "runAsNonRoot != true",
                    r#"pod or containers "a", "b" must set securityContext.runAsNonRoot=true"#,
                    &[
                        "spec.containers[0].securityContext.runAsNonRoot",
                        "spec.containers[1].securityContext.runAsNonRoot",
                    ],
                ),
                allowed(
                    "host users false allowed",
                    pod(json!({ "hostUsers": false })),
                ),
                forbidden(
                    "a pod-level value of the wrong type is not true",
                    pod(json!({
                        "securityContext": { "runAsNonRoot": "true" },
                        "containers": [{ "name": "a" }],
                    })),
                    "runAsNonRoot != true",
                    r#"pod or container "a" must set securityContext.runAsNonRoot=true; spec.securityContext.runAsNonRoot must be a boolean, not a string"#,
                    &[
                        "spec.containers[0].securityContext.runAsNonRoot",
                        "spec.securityContext.runAsNonRoot",
                    ],
                ),
            ],
        );
    }
}
