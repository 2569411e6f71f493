//! `sysctls` (baseline): only the safe, namespaced sysctls. Port of upstream `check_sysctls.go`
//! (`sysctlsV1Dot32`, the latest).

use serde_json::Value;

use super::{Finding, Reader};

const REASON: &str = "forbidden sysctls";

/// Upstream's `sysctlsAllowedV1Dot32`.
pub(super) const ALLOWED: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// Forbids `spec.securityContext.sysctls[*].name` outside [`ALLOWED`].
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut forbidden = Vec::new();
    let mut paths = Vec::new();
    if let Some(sc) = r.pod_security_context() {
        for sysctl in sc.objects(&mut r, "sysctls") {
            let name = sysctl.string(&mut r, "name").unwrap_or("");
            if !ALLOWED.contains(&name) {
                forbidden.push(name);
                paths.push(sysctl.at("name"));
            }
        }
    }
    let found = (!forbidden.is_empty()).then(|| Finding::new(REASON, forbidden.join(", "), paths));
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{Case, allowed, forbidden, pod, run};

    fn sysctls(sysctls: Value) -> Value {
        pod(json!({ "securityContext": { "sysctls": sysctls } }))
    }

    /// `check_sysctls_test.go`: its tables for 1.0, 1.27, 1.29 and 1.32, judged at the latest
    /// version, where every sysctl those tables add is allowed.
    #[test]
    fn upstream_cases() {
        let mut cases: Vec<Case> = vec![forbidden(
            "forbidden sysctls",
            sysctls(json!([{ "name": "a" }, { "name": "b" }])),
            "forbidden sysctls",
            "a, b",
            &[
                "spec.securityContext.sysctls[0].name",
                "spec.securityContext.sysctls[1].name",
            ],
        )];
        for (name, value) in [
            ("net.ipv4.ip_local_reserved_ports", "1024-4999"),
            ("net.ipv4.tcp_keepalive_time", "7200"),
            ("net.ipv4.tcp_fin_timeout", "60"),
            ("net.ipv4.tcp_keepalive_intvl", "75"),
            ("net.ipv4.tcp_keepalive_probes", "9"),
            ("net.ipv4.tcp_rmem", "4096 87380 16777216"),
            ("net.ipv4.tcp_wmem", "4096 65536 16777216"),
        ] {
            cases.push(allowed(
                "new supported sysctls",
                sysctls(json!([{ "name": name, "value": value }])),
            ));
        }
        cases.push(allowed(
            "every safe sysctl",
            sysctls(json!(
                super::ALLOWED
                    .iter()
                    .map(|name| json!({ "name": name, "value": "1" }))
                    .collect::<Vec<_>>()
            )),
        ));
        cases.push(forbidden(
            "an unnamed sysctl and a name of the wrong type",
            sysctls(json!([{ "value": "1" }, { "name": false }])),
            "forbidden sysctls",
            ", ; spec.securityContext.sysctls[1].name must be a string, not a boolean",
            &[
                "spec.securityContext.sysctls[0].name",
                "spec.securityContext.sysctls[1].name",
            ],
        ));
        run(super::check, cases);
    }
}
