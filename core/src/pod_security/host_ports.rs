//! `hostPorts` (baseline): no container port may set a non-zero `hostPort`.
//! Port of upstream `check_hostPorts.go` (`hostPorts_1_0`, the latest).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Reader, containers_phrase, pluralize};

const REASON: &str = "hostPort";

/// Forbids `ports[*].hostPort` other than 0 (an `int32`, as in the API).
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut bad = Vec::new();
    // Upstream sorts the ports as strings.
    let mut ports = BTreeSet::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        let mut valid = true;
        for port in c.obj.objects(&mut r, "ports") {
            if let Some(host_port) = port.integer(&mut r, "hostPort", false)
                && host_port != 0
            {
                valid = false;
                ports.insert(host_port.to_string());
                paths.push(port.at("hostPort"));
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    let found = (!bad.is_empty()).then(|| {
        let ports: Vec<String> = ports.into_iter().collect();
        Finding::new(
            REASON,
            format!(
                "{} {} {} {}",
                containers_phrase(&bad),
                pluralize("uses", "use", bad.len()),
                pluralize("hostPort", "hostPorts", ports.len()),
                ports.join(", ")
            ),
            paths,
        )
    });
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_hostPorts_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "one container, one host port",
                    pod(json!({ "containers": [
                        { "name": "a", "ports": [{ "hostPort": 0 }] },
                        { "name": "b", "ports": [{ "hostPort": 0 }, { "hostPort": 20 }] },
                    ]})),
                    "hostPort",
                    r#"container "b" uses hostPort 20"#,
                    &["spec.containers[1].ports[1].hostPort"],
                ),
                forbidden(
                    "multiple containers, multiple host port",
                    pod(json!({ "containers": [
                        { "name": "a", "ports": [{ "hostPort": 0 }] },
                        { "name": "b", "ports": [{ "hostPort": 0 }, { "hostPort": 10 }, { "hostPort": 20 }] },
                        { "name": "c", "ports": [{ "hostPort": 0 }, { "hostPort": 10 }, { "hostPort": 30 }] },
                    ]})),
                    "hostPort",
                    r#"containers "b", "c" use hostPorts 10, 20, 30"#,
                    &[
                        "spec.containers[1].ports[1].hostPort",
                        "spec.containers[1].ports[2].hostPort",
                        "spec.containers[2].ports[1].hostPort",
                        "spec.containers[2].ports[2].hostPort",
                    ],
                ),
                allowed(
                    "no host port",
                    pod(
                        json!({ "containers": [{ "name": "a", "ports": [{ "containerPort": 80 }, { "hostPort": 0 }] }] }),
                    ),
                ),
                forbidden(
                    "not an int32",
                    pod(json!({ "containers": [{ "name": "a", "ports": [
                        { "hostPort": 0.0 }, { "hostPort": 4_294_967_296_u64 }, { "hostPort": "80" }
                    ] }] })),
                    "hostPort",
                    "spec.containers[0].ports[0].hostPort must be a 32-bit integer, not a fractional number; \
                     spec.containers[0].ports[1].hostPort must be a 32-bit integer, not an out-of-range number; \
                     spec.containers[0].ports[2].hostPort must be a 32-bit integer, not a string",
                    &[
                        "spec.containers[0].ports[0].hostPort",
                        "spec.containers[0].ports[1].hostPort",
                        "spec.containers[0].ports[2].hostPort",
                    ],
                ),
            ],
        );
    }
}
