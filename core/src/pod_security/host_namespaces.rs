//! `hostNamespaces` (baseline): no `hostNetwork`, `hostPID` or `hostIPC`.
//! Port of upstream `check_hostNamespaces.go` (`hostNamespaces_1_0`, the latest).

use serde_json::Value;

use super::{Finding, Reader};

const REASON: &str = "host namespaces";

/// Forbids sharing the host's network, PID and IPC namespaces.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut shared = Vec::new();
    let mut paths = Vec::new();
    if let Some(spec) = r.spec() {
        for field in ["hostNetwork", "hostPID", "hostIPC"] {
            if spec.boolean(&mut r, field) == Some(true) {
                shared.push(format!("{field}=true"));
                paths.push(spec.at(field));
            }
        }
    }
    let found = (!shared.is_empty()).then(|| Finding::new(REASON, shared.join(", "), paths));
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_hostNamespaces_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "multiple host namespaces",
                    pod(json!({ "hostNetwork": true, "hostIPC": true, "hostPID": true })),
                    "host namespaces",
                    "hostNetwork=true, hostPID=true, hostIPC=true",
                    &["spec.hostNetwork", "spec.hostPID", "spec.hostIPC"],
                ),
                allowed(
                    "false",
                    pod(json!({ "hostNetwork": false, "hostIPC": false, "hostPID": null })),
                ),
                forbidden(
                    "wrong type",
                    pod(json!({ "hostNetwork": "true" })),
                    "host namespaces",
                    "spec.hostNetwork must be a boolean, not a string",
                    &["spec.hostNetwork"],
                ),
            ],
        );
    }
}
