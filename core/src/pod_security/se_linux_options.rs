//! `seLinuxOptions` (baseline): SELinux type only from the container types, no user, no role.
//! Port of upstream `check_seLinuxOptions.go` (`seLinuxOptions1_31`, the latest).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{FieldPath, Finding, Obj, Reader, containers_phrase, join_quote, pluralize};

const REASON: &str = "seLinuxOptions";

/// Upstream's `selinuxAllowedTypes1_31` (unset is `""`).
pub(super) const ALLOWED_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// What the bad options set, across pod and containers.
#[derive(Default)]
struct Bad<'a> {
    types: BTreeSet<&'a str>,
    user: bool,
    role: bool,
    paths: Vec<FieldPath>,
}

impl<'a> Bad<'a> {
    /// Upstream's `validSELinuxOptions`.
    fn valid(&mut self, r: &mut Reader<'_>, options: &Obj<'a>) -> bool {
        let mut valid = true;
        let kind = options.string(r, "type").unwrap_or("");
        if !ALLOWED_TYPES.contains(&kind) {
            valid = false;
            self.types.insert(kind);
            self.paths.push(options.at("type"));
        }
        if options.string(r, "user").is_some_and(|u| !u.is_empty()) {
            valid = false;
            self.user = true;
            self.paths.push(options.at("user"));
        }
        if options.string(r, "role").is_some_and(|u| !u.is_empty()) {
            valid = false;
            self.role = true;
            self.paths.push(options.at("role"));
        }
        valid
    }
}

/// Forbids `seLinuxOptions` (pod and containers) with another type, a user or a role.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut bad = Bad::default();
    let mut bad_setters = Vec::new();
    if let Some(options) = r
        .pod_security_context()
        .and_then(|sc| sc.object(&mut r, "seLinuxOptions"))
        && !bad.valid(&mut r, &options)
    {
        bad_setters.push("pod".to_string());
    }
    let mut bad_containers = Vec::new();
    for c in r.containers() {
        if let Some(options) = c
            .security_context(&mut r)
            .and_then(|sc| sc.object(&mut r, "seLinuxOptions"))
            && !bad.valid(&mut r, &options)
        {
            bad_containers.push(c.name);
        }
    }
    if !bad_containers.is_empty() {
        bad_setters.push(containers_phrase(&bad_containers));
    }
    let found = (!bad_setters.is_empty()).then(|| {
        let mut data = Vec::new();
        if !bad.types.is_empty() {
            data.push(format!(
                "{} {}",
                pluralize("type", "types", bad.types.len()),
                join_quote(&bad.types)
            ));
        }
        if bad.user {
            data.push("user may not be set".to_string());
        }
        if bad.role {
            data.push("role may not be set".to_string());
        }
        Finding::new(
            REASON,
            format!(
                "{} set forbidden securityContext.seLinuxOptions: {}",
                bad_setters.join(" and "),
                data.join("; ")
            ),
            bad.paths,
        )
    });
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{allowed, forbidden, pod, run};

    fn options(name: &str, options: Value) -> Value {
        json!({ "name": name, "securityContext": { "seLinuxOptions": options } })
    }

    fn good_containers() -> Vec<Value> {
        vec![
            options("a", json!({ "type": "container_t" })),
            options("b", json!({ "type": "container_init_t" })),
            options("c", json!({ "type": "container_kvm_t" })),
            options("d", json!({ "type": "container_engine_t" })),
        ]
    }

    fn bad_containers() -> Vec<Value> {
        let mut containers = good_containers();
        containers.push(options("e", json!({ "type": "bar" })));
        containers.push(options("f", json!({ "user": "bar" })));
        containers.push(options("g", json!({ "role": "baz" })));
        containers
    }

    fn bad_pod() -> Value {
        json!({ "seLinuxOptions": { "type": "foo", "user": "bar", "role": "baz" } })
    }

    /// `check_seLinuxOptions_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "invalid pod and containers",
                    pod(json!({ "securityContext": bad_pod(), "containers": bad_containers() })),
                    "seLinuxOptions",
                    r#"pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; user may not be set; role may not be set"#,
                    &[
                        "spec.securityContext.seLinuxOptions.type",
                        "spec.securityContext.seLinuxOptions.user",
                        "spec.securityContext.seLinuxOptions.role",
                        "spec.containers[4].securityContext.seLinuxOptions.type",
                        "spec.containers[5].securityContext.seLinuxOptions.user",
                        "spec.containers[6].securityContext.seLinuxOptions.role",
                    ],
                ),
                forbidden(
                    "invalid pod",
                    pod(json!({ "securityContext": bad_pod(), "containers": good_containers() })),
                    "seLinuxOptions",
                    r#"pod set forbidden securityContext.seLinuxOptions: type "foo"; user may not be set; role may not be set"#,
                    &[
                        "spec.securityContext.seLinuxOptions.type",
                        "spec.securityContext.seLinuxOptions.user",
                        "spec.securityContext.seLinuxOptions.role",
                    ],
                ),
                forbidden(
                    "invalid containers",
                    pod(json!({
                        "securityContext": { "seLinuxOptions": {} },
                        "containers": bad_containers(),
                    })),
                    "seLinuxOptions",
                    r#"containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: type "bar"; user may not be set; role may not be set"#,
                    &[
                        "spec.containers[4].securityContext.seLinuxOptions.type",
                        "spec.containers[5].securityContext.seLinuxOptions.user",
                        "spec.containers[6].securityContext.seLinuxOptions.role",
                    ],
                ),
                forbidden(
                    "bad type",
                    pod(json!({ "securityContext": { "seLinuxOptions": { "type": "bad" } } })),
                    "seLinuxOptions",
                    r#"pod set forbidden securityContext.seLinuxOptions: type "bad""#,
                    &["spec.securityContext.seLinuxOptions.type"],
                ),
                forbidden(
                    "bad user",
                    pod(json!({ "securityContext": { "seLinuxOptions": { "user": "bad" } } })),
                    "seLinuxOptions",
                    "pod set forbidden securityContext.seLinuxOptions: user may not be set",
                    &["spec.securityContext.seLinuxOptions.user"],
                ),
                forbidden(
                    "bad role",
                    pod(json!({ "securityContext": { "seLinuxOptions": { "role": "bad" } } })),
                    "seLinuxOptions",
                    "pod set forbidden securityContext.seLinuxOptions: role may not be set",
                    &["spec.securityContext.seLinuxOptions.role"],
                ),
                allowed(
                    "allowed types, empty user and role, any level",
                    pod(json!({
                        "securityContext": { "seLinuxOptions": { "type": "", "user": "", "role": "", "level": "s0:c1,c2" } },
                        "containers": good_containers(),
                    })),
                ),
                forbidden(
                    "a type that is not a string",
                    pod(json!({ "securityContext": { "seLinuxOptions": { "type": 7 } } })),
                    "seLinuxOptions",
                    "spec.securityContext.seLinuxOptions.type must be a string, not a number",
                    &["spec.securityContext.seLinuxOptions.type"],
                ),
            ],
        );
    }
}
