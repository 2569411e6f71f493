//! `seccompProfile_restricted` (restricted, overrides `seccompProfile_baseline`): the pod or
//! every container must set a `RuntimeDefault` or `Localhost` seccomp profile. Port of upstream
//! `check_seccompProfile_restricted.go` (`seccompProfileRestricted_1_25`, the latest). Upstream
//! allows a Windows pod outright (the API server forbids seccomp profiles on one); here a
//! Windows pod gets the baseline check this one overrides, so restricted stays at least as
//! strict.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    Finding, Reader, containers_phrase, join_quote,
    seccomp_profile_baseline::{self, REASON, profile_type, valid},
};

/// Requires a valid seccomp profile type at pod level or on each container.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = if r.windows() {
        seccomp_profile_baseline::evaluate(&mut r)
    } else {
        evaluate(&mut r)
    };
    r.finish(REASON, found)
}

/// Upstream's `seccompProfileRestricted_1_19`. The paths name the bad types and the containers
/// that leave it unset without a valid pod-level profile, even where upstream's detail tells
/// only the first.
fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut paths = Vec::new();
    let mut pod_set = false;
    if let Some(sc) = r.pod_security_context()
        && let Some((path, kind)) = profile_type(r, &sc)
    {
        if valid(kind) {
            pod_set = true;
        } else {
            bad_setters.push("pod".to_string());
            bad_values.insert(kind);
            paths.push(path);
        }
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    let mut implicit_paths = Vec::new();
    for c in r.containers() {
        match c.security_context(r).and_then(|sc| profile_type(r, &sc)) {
            Some((path, kind)) if !valid(kind) => {
                explicitly_bad.push(c.name);
                bad_values.insert(kind);
                paths.push(path);
            }
            Some(_) => {}
            None if pod_set => {}
            None => {
                implicitly_bad.push(c.name);
                implicit_paths.push(c.security_context_path("seccompProfile").child("type"));
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
                "{} must not set securityContext.seccompProfile.type to {}",
                bad_setters.join(" and "),
                join_quote(&bad_values)
            ),
            paths,
        ));
    }
    (!implicitly_bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                r#"pod or {} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
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

    /// `check_seccompProfile_restricted_test.go` (its 1.19 cases are among these).
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "no explicit seccomp",
                    pod(json!({ "containers": [{ "name": "a" }] })),
                    "seccompProfile",
                    r#"pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
                    &["spec.containers[0].securityContext.seccompProfile.type"],
                ),
                allowed(
                    "no explicit seccomp, windows Pod",
                    pod(json!({ "os": { "name": "windows" }, "containers": [{ "name": "a" }] })),
                ),
                forbidden(
                    "no explicit seccomp, linux pod",
                    pod(json!({ "os": { "name": "linux" }, "containers": [{ "name": "a" }] })),
                    "seccompProfile",
                    r#"pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
                    &["spec.containers[0].securityContext.seccompProfile.type"],
                ),
                forbidden(
                    "pod seccomp invalid",
                    pod(json!({
                        "securityContext": { "seccompProfile": { "type": "Unconfined" } },
                        "containers": [{ "name": "a" }],
                    })),
                    "seccompProfile",
                    r#"pod must not set securityContext.seccompProfile.type to "Unconfined""#,
                    &[
                        "spec.securityContext.seccompProfile.type",
                        "spec.containers[0].securityContext.seccompProfile.type",
                    ],
                ),
                forbidden(
                    "containers seccomp invalid",
                    pod(json!({
                        "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } },
                        "containers": [
                            { "name": "a" },
                            { "name": "b", "securityContext": {} },
                            { "name": "c", "securityContext": { "seccompProfile": { "type": "Unconfined" } } },
                            { "name": "d", "securityContext": { "seccompProfile": { "type": "Unconfined" } } },
                            { "name": "e", "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } } },
                            { "name": "f", "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } } },
                        ],
                    })),
                    "seccompProfile",
                    r#"containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
                    &[
                        "spec.containers[2].securityContext.seccompProfile.type",
                        "spec.containers[3].securityContext.seccompProfile.type",
                    ],
                ),
                forbidden(
                    "pod nil, container fallthrough",
                    pod(json!({ "containers": [
                        { "name": "a" },
                        { "name": "b", "securityContext": {} },
                        { "name": "d", "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } } },
                        { "name": "e", "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } } },
                    ]})),
                    "seccompProfile",
                    r#"pod or containers "a", "b" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
                    &[
                        "spec.containers[0].securityContext.seccompProfile.type",
                        "spec.containers[1].securityContext.seccompProfile.type",
                    ],
                ),
                allowed(
                    "pod Localhost",
                    pod(json!({
                        "securityContext": { "seccompProfile": { "type": "Localhost", "localhostProfile": "p.json" } },
                        "containers": [{ "name": "a" }],
                    })),
                ),
                // Not upstream: a Windows pod still gets the baseline check it overrides.
                forbidden(
                    "windows pod with an unconfined profile",
                    pod(json!({
                        "os": { "name": "windows" },
                        "containers": [{ "name": "a", "securityContext": { "seccompProfile": { "type": "Unconfined" } } }],
                    })),
                    "seccompProfile",
                    r#"container "a" must not set securityContext.seccompProfile.type to "Unconfined""#,
                    &["spec.containers[0].securityContext.seccompProfile.type"],
                ),
            ],
        );
    }
}
