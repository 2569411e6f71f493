//! `hostProbesAndHostLifecycle` (baseline): probes and lifecycle handlers must not name a
//! `host`. Port of upstream `check_hostProbesAndhostLifecycle.go`
//! (`hostProbesAndHostLifecycleV1Dot34`, the latest).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{FieldPath, Finding, Obj, Reader, join_quote, pluralize};

const REASON: &str = "probe or lifecycle host";

/// Forbids a non-empty `httpGet.host` or `tcpSocket.host` in the liveness, readiness and
/// startup probes and the `postStart` and `preStop` handlers.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    // Upstream keeps both as sets: sorted, each name once.
    let mut bad = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let mut paths = Vec::new();
    for c in r.containers() {
        let mut handlers = Vec::new();
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            handlers.extend(c.obj.object(&mut r, probe));
        }
        if let Some(lifecycle) = c.obj.object(&mut r, "lifecycle") {
            for handler in ["postStart", "preStop"] {
                handlers.extend(lifecycle.object(&mut r, handler));
            }
        }
        for handler in handlers {
            if forbidden_hosts(&mut r, &handler, &mut hosts, &mut paths) {
                bad.insert(c.name);
            }
        }
    }
    let found = (!bad.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} {} {} {} {}",
                pluralize("container", "containers", bad.len()),
                join_quote(&bad),
                pluralize("uses", "use", bad.len()),
                pluralize(
                    "probe or lifecycle host",
                    "probe or lifecycle hosts",
                    hosts.len()
                ),
                join_quote(&hosts)
            ),
            paths,
        )
    });
    r.finish(REASON, found)
}

/// Upstream's `getForbiddenHostProbes` and `getForbiddenHostLifecycle`: whether the handler
/// names a host.
fn forbidden_hosts<'a>(
    r: &mut Reader<'_>,
    handler: &Obj<'a>,
    hosts: &mut BTreeSet<&'a str>,
    paths: &mut Vec<FieldPath>,
) -> bool {
    let mut found = false;
    for action in ["httpGet", "tcpSocket"] {
        if let Some(action) = handler.object(r, action)
            && let Some(host) = action.string(r, "host")
            && !host.is_empty()
        {
            hosts.insert(host);
            paths.push(action.at("host"));
            found = true;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{allowed, forbidden, pod, run};

    fn one(list: &str, container: Value) -> Value {
        pod(json!({ list: [container] }))
    }

    /// `check_hostProbesAndhostLifecycle_test.go`. Its emulation test (version 1.33 without
    /// this check) has no counterpart: only the latest version is ported.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                allowed(
                    "valid pod with unset hosts",
                    one(
                        "containers",
                        json!({
                            "name": "a",
                            "livenessProbe": { "httpGet": {} },
                            "readinessProbe": { "tcpSocket": {} },
                            "lifecycle": { "postStart": { "httpGet": {} } },
                        }),
                    ),
                ),
                forbidden(
                    "invalid pod with local host IP as probe host",
                    one(
                        "containers",
                        json!({
                            "name": "a",
                            "livenessProbe": { "httpGet": { "host": "127.0.0.1" } },
                            "readinessProbe": { "tcpSocket": { "host": "::1" } },
                            "startupProbe": { "httpGet": { "host": "localhost" } },
                        }),
                    ),
                    "probe or lifecycle host",
                    r#"container "a" uses probe or lifecycle hosts "127.0.0.1", "::1", "localhost""#,
                    &[
                        "spec.containers[0].livenessProbe.httpGet.host",
                        "spec.containers[0].readinessProbe.tcpSocket.host",
                        "spec.containers[0].startupProbe.httpGet.host",
                    ],
                ),
                forbidden(
                    "invalid httpget host in liveness probe",
                    one(
                        "containers",
                        json!({ "name": "a", "livenessProbe": { "httpGet": { "host": "invalid.host" } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "a" uses probe or lifecycle host "invalid.host""#,
                    &["spec.containers[0].livenessProbe.httpGet.host"],
                ),
                forbidden(
                    "invalid tcpsocket host in readiness probe",
                    one(
                        "containers",
                        json!({ "name": "b", "readinessProbe": { "tcpSocket": { "host": "invalid.host" } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "b" uses probe or lifecycle host "invalid.host""#,
                    &["spec.containers[0].readinessProbe.tcpSocket.host"],
                ),
                forbidden(
                    "invalid httpget host in startup probe",
                    one(
                        "containers",
                        json!({ "name": "c", "startupProbe": { "httpGet": { "host": "invalid.host" } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "c" uses probe or lifecycle host "invalid.host""#,
                    &["spec.containers[0].startupProbe.httpGet.host"],
                ),
                forbidden(
                    "invalid poststart tcpsocket host",
                    one(
                        "containers",
                        json!({ "name": "d", "lifecycle": { "postStart": { "tcpSocket": { "host": "invalid.host" } } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "d" uses probe or lifecycle host "invalid.host""#,
                    &["spec.containers[0].lifecycle.postStart.tcpSocket.host"],
                ),
                forbidden(
                    "invalid prestop httpget host",
                    one(
                        "containers",
                        json!({ "name": "e", "lifecycle": { "preStop": { "httpGet": { "host": "another.invalid.host" } } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "e" uses probe or lifecycle host "another.invalid.host""#,
                    &["spec.containers[0].lifecycle.preStop.httpGet.host"],
                ),
                forbidden(
                    "multiple containers with multiple invalid hosts",
                    pod(json!({ "containers": [
                        { "name": "valid" },
                        { "name": "invalid1", "livenessProbe": { "httpGet": { "host": "a.com" } } },
                        {
                            "name": "invalid2",
                            "lifecycle": { "preStop": { "tcpSocket": { "host": "b.com" } } },
                            "startupProbe": { "httpGet": { "host": "a.com" } },
                        },
                    ]})),
                    "probe or lifecycle host",
                    r#"containers "invalid1", "invalid2" use probe or lifecycle hosts "a.com", "b.com""#,
                    &[
                        "spec.containers[1].livenessProbe.httpGet.host",
                        "spec.containers[2].startupProbe.httpGet.host",
                        "spec.containers[2].lifecycle.preStop.tcpSocket.host",
                    ],
                ),
                forbidden(
                    "invalid ipv4 host in probe",
                    one(
                        "containers",
                        json!({ "name": "a", "livenessProbe": { "httpGet": { "host": "8.8.8.8" } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "a" uses probe or lifecycle host "8.8.8.8""#,
                    &["spec.containers[0].livenessProbe.httpGet.host"],
                ),
                forbidden(
                    "invalid ipv6 host in probe",
                    one(
                        "containers",
                        json!({ "name": "a", "livenessProbe": { "tcpSocket": { "host": "2001:4860:4860::8888" } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "a" uses probe or lifecycle host "2001:4860:4860::8888""#,
                    &["spec.containers[0].livenessProbe.tcpSocket.host"],
                ),
                forbidden(
                    "invalid host in initcontainer",
                    one(
                        "initContainers",
                        json!({ "name": "init", "livenessProbe": { "httpGet": { "host": "invalid.init.host" } } }),
                    ),
                    "probe or lifecycle host",
                    r#"container "init" uses probe or lifecycle host "invalid.init.host""#,
                    &["spec.initContainers[0].livenessProbe.httpGet.host"],
                ),
                forbidden(
                    "a host that is not a string",
                    one(
                        "ephemeralContainers",
                        json!({ "name": "x", "livenessProbe": { "httpGet": { "host": ["a"] } } }),
                    ),
                    "probe or lifecycle host",
                    "spec.ephemeralContainers[0].livenessProbe.httpGet.host must be a string, not an array",
                    &["spec.ephemeralContainers[0].livenessProbe.httpGet.host"],
                ),
            ],
        );
    }
}
