//! `procMount_restricted` (restricted, overrides `procMount`): containers keep the default
//! `/proc` masks, in a user namespace too. Port of upstream `check_procMount_restricted.go`
//! (`procMount_1_0` from 1.35, the latest).

use serde_json::Value;

use super::{
    Finding, Reader,
    proc_mount_baseline::{REASON, unmasked},
};

/// Forbids `securityContext.procMount` other than `Default`, whatever `hostUsers` says.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = unmasked(&mut r);
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{forbidden, pod, run};

    /// `check_procMount_restricted_test.go`: the same case with and without a user namespace.
    #[test]
    fn upstream_cases() {
        let cases = [true, false].map(|host_users| {
            forbidden(
                "procMount",
                pod(json!({
                    "containers": [
                        { "name": "a" },
                        { "name": "b", "securityContext": {} },
                        { "name": "c", "securityContext": { "procMount": "Default" } },
                        { "name": "d", "securityContext": { "procMount": "Unmasked" } },
                        { "name": "e", "securityContext": { "procMount": "other" } },
                    ],
                    "hostUsers": host_users,
                })),
                "procMount",
                r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other""#,
                &[
                    "spec.containers[3].securityContext.procMount",
                    "spec.containers[4].securityContext.procMount",
                ],
            )
        });
        run(super::check, cases.into());
    }
}
