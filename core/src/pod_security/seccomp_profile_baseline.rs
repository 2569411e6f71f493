//! `seccompProfile_baseline` (baseline): a seccomp profile, where set, is `RuntimeDefault` or
//! `Localhost`. Port of upstream `check_seccompProfile_baseline.go`
//! (`seccompProfileBaseline_1_19`, the latest: the field, not the alpha annotations of 1.0).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{FieldPath, Finding, Obj, Reader, containers_phrase, join_quote};

/// Upstream's reason, shared with `seccompProfile_restricted`.
pub(super) const REASON: &str = "seccompProfile";

/// Upstream's `validSeccomp`.
pub(super) fn valid(kind: &str) -> bool {
    kind == "Localhost" || kind == "RuntimeDefault"
}

/// The `type` of a set `seccompProfile` of this security context, `""` when unset.
pub(super) fn profile_type<'a>(
    r: &mut Reader<'_>,
    security_context: &Obj<'a>,
) -> Option<(FieldPath, &'a str)> {
    let profile = security_context.object(r, "seccompProfile")?;
    Some((profile.at("type"), profile.string(r, "type").unwrap_or("")))
}

/// Forbids a set `seccompProfile` of another type, at pod and container level.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = evaluate(&mut r);
    r.finish(REASON, found)
}

/// The check on a reader; `seccompProfile_restricted` runs it for Windows pods.
pub(super) fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut paths = Vec::new();
    if let Some(sc) = r.pod_security_context()
        && let Some((path, kind)) = profile_type(r, &sc)
        && !valid(kind)
    {
        bad_setters.push("pod".to_string());
        bad_values.insert(kind);
        paths.push(path);
    }
    let mut bad = Vec::new();
    for c in r.containers() {
        if let Some(sc) = c.security_context(r)
            && let Some((path, kind)) = profile_type(r, &sc)
            && !valid(kind)
        {
            bad.push(c.name);
            bad_values.insert(kind);
            paths.push(path);
        }
    }
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    (!bad_setters.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                bad_setters.join(" and "),
                join_quote(&bad_values)
            ),
            paths,
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{allowed, forbidden, pod, run};

    fn profiles() -> Vec<Value> {
        vec![
            json!({ "name": "a" }),
            json!({ "name": "b", "securityContext": {} }),
            json!({ "name": "c", "securityContext": { "seccompProfile": { "type": "Unconfined" } } }),
            json!({ "name": "d", "securityContext": { "seccompProfile": { "type": "Unconfined" } } }),
            json!({ "name": "e", "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } } }),
            json!({ "name": "f", "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } } }),
        ]
    }

    /// `check_seccompProfile_baseline_test.go`. Its 1.0 cases (the alpha annotations) are
    /// allowed at the latest version, which reads only the field.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                allowed(
                    "1.0: pod and containers seccomp annotations are not read any more",
                    json!({
                        "metadata": { "annotations": {
                            "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                            "container.seccomp.security.alpha.kubernetes.io/a": "unconfined",
                            "container.seccomp.security.alpha.kubernetes.io/b": "unknown",
                        } },
                        "spec": { "containers": [{ "name": "a" }, { "name": "b" }, { "name": "c" }] },
                    }),
                ),
                forbidden(
                    "pod seccomp invalid",
                    pod(json!({
                        "securityContext": { "seccompProfile": { "type": "Unconfined" } },
                        "containers": [{ "name": "a" }],
                    })),
                    "seccompProfile",
                    r#"pod must not set securityContext.seccompProfile.type to "Unconfined""#,
                    &["spec.securityContext.seccompProfile.type"],
                ),
                forbidden(
                    "containers seccomp invalid",
                    pod(json!({
                        "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } },
                        "containers": profiles(),
                    })),
                    "seccompProfile",
                    r#"containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
                    &[
                        "spec.containers[2].securityContext.seccompProfile.type",
                        "spec.containers[3].securityContext.seccompProfile.type",
                    ],
                ),
                forbidden(
                    "pod and containers seccomp invalid",
                    pod(json!({
                        "securityContext": { "seccompProfile": { "type": "Unconfined" } },
                        "containers": profiles(),
                    })),
                    "seccompProfile",
                    r#"pod and containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
                    &[
                        "spec.securityContext.seccompProfile.type",
                        "spec.containers[2].securityContext.seccompProfile.type",
                        "spec.containers[3].securityContext.seccompProfile.type",
                    ],
                ),
                forbidden(
                    "a profile without a type",
                    pod(json!({ "securityContext": { "seccompProfile": {} } })),
                    "seccompProfile",
                    r#"pod must not set securityContext.seccompProfile.type to """#,
                    &["spec.securityContext.seccompProfile.type"],
                ),
                allowed("unset", pod(json!({ "containers": [{ "name": "a" }] }))),
            ],
        );
    }
}
