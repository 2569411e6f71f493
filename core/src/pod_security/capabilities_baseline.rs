//! `capabilities_baseline` (baseline): containers may add only capabilities of the default set.
//! Port of upstream `check_capabilities_baseline.go` (`capabilitiesBaseline_1_0`, the latest).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Reader, containers_phrase, join_quote};

const REASON: &str = "non-default capabilities";

/// Upstream's `capabilities_allowed_1_0`: the container runtimes' default set.
pub(super) const ALLOWED: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Forbids `securityContext.capabilities.add` beyond [`ALLOWED`].
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let found = evaluate(&mut r);
    r.finish(REASON, found)
}

/// The check on a reader; `capabilities_restricted` runs it for Windows pods.
pub(super) fn evaluate(r: &mut Reader<'_>) -> Option<Finding> {
    let mut bad = Vec::new();
    let mut forbidden = BTreeSet::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        let Some(capabilities) = c
            .security_context(r)
            .and_then(|sc| sc.object(r, "capabilities"))
        else {
            continue;
        };
        let mut valid = true;
        for (path, capability) in capabilities.strings(r, "add") {
            if !ALLOWED.contains(&capability) {
                valid = false;
                forbidden.insert(capability);
                paths.push(path);
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    (!bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers_phrase(&bad),
                join_quote(&forbidden)
            ),
            paths,
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_capabilities_baseline_test.go`.
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
                    ]})),
                    "non-default capabilities",
                    r#"containers "a", "b" must not include "BAR", "BAZ", "FOO" in securityContext.capabilities.add"#,
                    &[
                        "spec.containers[0].securityContext.capabilities.add[0]",
                        "spec.containers[0].securityContext.capabilities.add[1]",
                        "spec.containers[1].securityContext.capabilities.add[0]",
                        "spec.containers[1].securityContext.capabilities.add[1]",
                    ],
                ),
                allowed(
                    "the default set",
                    pod(
                        json!({ "containers": [{ "name": "a", "securityContext": { "capabilities": {
                        "add": super::ALLOWED, "drop": ["ALL"]
                    } } }] }),
                    ),
                ),
                forbidden(
                    "a capability that is not a string",
                    pod(
                        json!({ "containers": [{ "name": "a", "securityContext": { "capabilities": {
                        "add": ["CHOWN", ["SYS_ADMIN"]]
                    } } }] }),
                    ),
                    "non-default capabilities",
                    "spec.containers[0].securityContext.capabilities.add[1] must be a string, not an array",
                    &["spec.containers[0].securityContext.capabilities.add[1]"],
                ),
            ],
        );
    }
}
