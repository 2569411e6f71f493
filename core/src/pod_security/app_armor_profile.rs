//! `appArmorProfile` (baseline): AppArmor profiles, where set, are the runtime default or a
//! localhost profile, in the fields and in the deprecated beta annotations. Port of upstream
//! `check_appArmorProfile.go` (`appArmorProfile_1_0`, the latest).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Finding, Obj, Reader, containers_phrase, join_quote, pluralize};

/// Upstream's `corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix`.
const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Upstream's `allowedProfileType`.
fn allowed_type(kind: &str) -> bool {
    kind == "RuntimeDefault" || kind == "Localhost"
}

/// Upstream's `allowedAnnotationValue`.
fn allowed_annotation(profile: &str) -> bool {
    profile.is_empty() || profile == "runtime/default" || profile.starts_with("localhost/")
}

/// The `type` of a set `appArmorProfile`, `""` when unset, if it is not allowed.
fn bad_type<'a>(
    r: &mut Reader<'_>,
    security_context: &Obj<'a>,
) -> Option<(super::FieldPath, &'a str)> {
    let profile = security_context.object(r, "appArmorProfile")?;
    let kind = profile.string(r, "type").unwrap_or("");
    (!allowed_type(kind)).then(|| (profile.at("type"), kind))
}

/// Forbids other AppArmor profile types at pod and container level, and other values of the
/// `container.apparmor.security.beta.kubernetes.io/*` annotations.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut paths = Vec::new();
    if let Some(sc) = r.pod_security_context()
        && let Some((path, kind)) = bad_type(&mut r, &sc)
    {
        bad_setters.push("pod".to_string());
        bad_values.insert(kind.to_string());
        paths.push(path);
    }
    let mut bad = Vec::new();
    for c in r.containers() {
        if let Some(sc) = c.security_context(&mut r)
            && let Some((path, kind)) = bad_type(&mut r, &sc)
        {
            bad.push(c.name);
            bad_values.insert(kind.to_string());
            paths.push(path);
        }
    }
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    let mut annotations = Vec::new();
    if let Some(map) = r.annotations() {
        for (key, value) in map.map {
            if !key.starts_with(ANNOTATION_PREFIX) {
                continue;
            }
            match value {
                // A null annotation decodes to "", which is allowed.
                Value::Null => {}
                Value::String(profile) if allowed_annotation(profile) => {}
                Value::String(profile) => {
                    annotations.push((format!("{key}={}", go_quote(profile)), map.path.key(key)));
                }
                other => r.wrong(map.path.key(key), "a string", other),
            }
        }
    }
    let mut values: Vec<String> = bad_values.into_iter().collect();
    if !annotations.is_empty() {
        annotations.sort();
        bad_setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        for (formatted, path) in annotations {
            values.push(formatted);
            paths.push(path);
        }
    }
    let reason = pluralize(
        "forbidden AppArmor profile",
        "forbidden AppArmor profiles",
        values.len(),
    );
    let found = (!bad_setters.is_empty()).then(|| {
        Finding::new(
            reason,
            format!(
                "{} must not set AppArmor profile type to {}",
                bad_setters.join(" and "),
                join_quote(&values)
            ),
            paths,
        )
    });
    r.finish("forbidden AppArmor profile", found)
}

/// Go's `%q` (`strconv.Quote`) for a string: exact for ASCII; for other characters Go's
/// `unicode.IsPrint` is approximated (control, format, private-use and non-ASCII space
/// characters are escaped; every other character is kept).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

fn printable(c: char) -> bool {
    let n = c as u32;
    let format = matches!(
        n,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x202a..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    );
    let private_use = matches!(n, 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd);
    let noncharacter = matches!(n & 0xfffe, 0xfffe) || matches!(n, 0xfdd0..=0xfdef);
    !(c.is_control() || (c.is_whitespace() && c != ' ') || format || private_use || noncharacter)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{allowed, forbidden, pod, run};

    fn with_annotations(annotations: Value, spec: Value) -> Value {
        json!({ "metadata": { "annotations": annotations }, "spec": spec })
    }

    /// `check_appArmorProfile_test.go`: `TestCheckAppArmor_Allowed` and `_Forbidden`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                allowed(
                    "container with default AppArmor + extra annotations",
                    with_annotations(
                        json!({ "container.apparmor.security.beta.kubernetes.io/test": "runtime/default", "env": "prod" }),
                        json!({}),
                    ),
                ),
                allowed(
                    "container with local AppArmor + extra annotations",
                    with_annotations(
                        json!({ "container.apparmor.security.beta.kubernetes.io/test": "localhost/sec-profile01", "env": "dev" }),
                        json!({}),
                    ),
                ),
                allowed(
                    "container with no AppArmor annotations",
                    with_annotations(json!({ "env": "dev" }), json!({})),
                ),
                allowed("container with no annotations", pod(json!({}))),
                allowed(
                    "pod with runtime default",
                    pod(
                        json!({ "securityContext": { "appArmorProfile": { "type": "RuntimeDefault" } } }),
                    ),
                ),
                allowed(
                    "container with localhost profile",
                    pod(json!({ "containers": [{ "name": "foo", "securityContext": {
                        "appArmorProfile": { "type": "RuntimeDefault" }
                    } }] })),
                ),
                forbidden(
                    "unconfined pod",
                    pod(
                        json!({ "securityContext": { "appArmorProfile": { "type": "Unconfined" } } }),
                    ),
                    "forbidden AppArmor profile",
                    r#"pod must not set AppArmor profile type to "Unconfined""#,
                    &["spec.securityContext.appArmorProfile.type"],
                ),
                forbidden(
                    "unconfined container",
                    pod(json!({
                        "securityContext": { "appArmorProfile": { "type": "RuntimeDefault" } },
                        "containers": [{ "name": "foo", "securityContext": { "appArmorProfile": { "type": "Unconfined" } } }],
                    })),
                    "forbidden AppArmor profile",
                    r#"container "foo" must not set AppArmor profile type to "Unconfined""#,
                    &["spec.containers[0].securityContext.appArmorProfile.type"],
                ),
                forbidden(
                    "unconfined init container",
                    pod(json!({
                        "securityContext": { "appArmorProfile": { "type": "RuntimeDefault" } },
                        "containers": [{ "name": "foo" }],
                        "initContainers": [{ "name": "bar", "securityContext": { "appArmorProfile": { "type": "Unconfined" } } }],
                    })),
                    "forbidden AppArmor profile",
                    r#"container "bar" must not set AppArmor profile type to "Unconfined""#,
                    &["spec.initContainers[0].securityContext.appArmorProfile.type"],
                ),
                forbidden(
                    "multiple containers",
                    with_annotations(
                        json!({
                            "container.apparmor.security.beta.kubernetes.io/": "bogus",
                            "container.apparmor.security.beta.kubernetes.io/a": "",
                            "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                            "container.apparmor.security.beta.kubernetes.io/c": "localhost/",
                            "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
                            "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
                            "container.apparmor.security.beta.kubernetes.io/f": "unknown",
                        }),
                        json!({}),
                    ),
                    "forbidden AppArmor profiles",
                    concat!(
                        "annotations must not set AppArmor profile type to ",
                        r#""container.apparmor.security.beta.kubernetes.io/="bogus"", "#,
                        r#""container.apparmor.security.beta.kubernetes.io/e="unconfined"", "#,
                        r#""container.apparmor.security.beta.kubernetes.io/f="unknown"""#,
                    ),
                    &[
                        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/]",
                        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/e]",
                        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/f]",
                    ],
                ),
                forbidden(
                    "a profile without a type, and an annotation that is not a string",
                    with_annotations(
                        json!({ "container.apparmor.security.beta.kubernetes.io/a": 1, "other": 2 }),
                        json!({ "securityContext": { "appArmorProfile": {} } }),
                    ),
                    "forbidden AppArmor profile",
                    r#"pod must not set AppArmor profile type to ""; metadata.annotations[container.apparmor.security.beta.kubernetes.io/a] must be a string, not a number"#,
                    &[
                        "spec.securityContext.appArmorProfile.type",
                        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/a]",
                    ],
                ),
            ],
        );
    }

    #[test]
    fn go_quote_matches_strconv_quote() {
        for (raw, quoted) in [
            ("unconfined", r#""unconfined""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("\n\t\u{0}\u{7f}", r#""\n\t\x00\x7f""#),
            ("é✓", "\"é✓\""),
            ("\u{a0}\u{200b}\u{feff}", r#""\u00a0\u200b\ufeff""#),
            ("\u{10ffff}", r#""\U0010ffff""#),
        ] {
            assert_eq!(super::go_quote(raw), quoted, "{raw:?}");
        }
    }
}
