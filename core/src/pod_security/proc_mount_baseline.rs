//! `procMount` (baseline; upstream's ID for `procMount_baseline`): containers keep the default
//! `/proc` masks unless the pod runs in a user namespace (`hostUsers: false`). Port of upstream
//! `check_procMount_baseline.go` (`procMount1_35baseline`, the latest).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Reader, containers_phrase, join_quote};

/// Upstream's reason, shared with `procMount_restricted`.
pub(super) const REASON: &str = "procMount";

/// Forbids `securityContext.procMount` other than `Default`, unless `hostUsers` is false.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = if r.user_namespace() {
        None
    } else {
        unmasked(&mut r)
    };
    r.finish(REASON, found)
}

/// Upstream's `procMount_1_0`: forbids any `procMount` other than `Default`.
pub(super) fn unmasked(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        let Some(sc) = c.security_context(r) else {
            continue;
        };
        if let Some(proc_mount) = sc.string(r, "procMount")
            && proc_mount != "Default"
        {
            bad.push(c.name);
            types.insert(proc_mount);
            paths.push(sc.at("procMount"));
        }
    }
    (!bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} must not set securityContext.procMount to {}",
                containers_phrase(&bad),
                join_quote(&types)
            ),
            paths,
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{allowed, forbidden, pod, run};

    fn containers(host_users: Value) -> Value {
        pod(json!({
            "containers": [
                { "name": "a" },
                { "name": "b", "securityContext": {} },
                { "name": "c", "securityContext": { "procMount": "Default" } },
                { "name": "d", "securityContext": { "procMount": "Unmasked" } },
                { "name": "e", "securityContext": { "procMount": "other" } },
            ],
            "hostUsers": host_users,
        }))
    }

    /// `check_procMount_baseline_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "procMount",
                    containers(json!(true)),
                    "procMount",
                    r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other""#,
                    &[
                        "spec.containers[3].securityContext.procMount",
                        "spec.containers[4].securityContext.procMount",
                    ],
                ),
                allowed("procMount with userns", containers(json!(false))),
                forbidden(
                    "hostUsers unset is not a user namespace",
                    containers(Value::Null),
                    "procMount",
                    r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other""#,
                    &[
                        "spec.containers[3].securityContext.procMount",
                        "spec.containers[4].securityContext.procMount",
                    ],
                ),
                forbidden(
                    "hostUsers of the wrong type is not a user namespace",
                    containers(json!("false")),
                    "procMount",
                    r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other"; spec.hostUsers must be a boolean, not a string"#,
                    &[
                        "spec.containers[3].securityContext.procMount",
                        "spec.containers[4].securityContext.procMount",
                        "spec.hostUsers",
                    ],
                ),
            ],
        );
    }
}
