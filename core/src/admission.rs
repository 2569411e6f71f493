//! Admission and conversion by a plugin (the `validate` and `convert` capabilities): what the
//! host's webhooks ask of a plugin about one instance of a bound kind, and the rules its answer
//! must pass before the API server is told. Pure, like [`crate::answers`], and applied by the
//! host's call layer and the SDK's `Fixture` alike, so a plugin's native test fails where the
//! host would refuse the answer, with the host's words.
//!
//! - A [`Verdict`] ([`check_verdict`]) fits the call's output cap, holds at most
//!   [`MAX_VIOLATIONS`] violations and [`MAX_WARNINGS`] warnings, each message or warning at most
//!   [`MAX_MESSAGE_BYTES`], each field path at most [`MAX_FIELD_BYTES`], and none of it with
//!   control characters (the API server hands them on to a user's terminal).
//! - A converted object ([`check_converted`]) fits the output cap, is a JSON object at the
//!   desired `apiVersion`, of the same `kind`, with its `metadata` unchanged but for labels and
//!   annotations: the API server keeps nothing else of a conversion's metadata and fails the
//!   request when the uid differs, so a plugin that changes more has a bug worth reporting
//!   where it is made.

use serde_json::Value;

use crate::answers::AnswerError;

/// The operation the API server admits, as its AdmissionReview names it (`CREATE`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// The object is being created.
    Create,
    /// The object is being replaced or patched.
    Update,
    /// The object is being deleted.
    Delete,
    /// A connection to a subresource (`exec`, `proxy`...).
    Connect,
}

/// What `validate.validate` is asked about one instance of a bound kind.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateRequest {
    /// What the API server is asked to do.
    pub operation: Operation,
    /// The object as it would be written, as JSON text; on delete, the object being deleted.
    pub object: String,
    /// The stored object as JSON text, on update.
    pub old_object: Option<String>,
    /// The groups of the user asking, when the kind's binding asks for them.
    pub user_groups: Option<Vec<String>>,
    /// The host's clock, milliseconds since the Unix epoch.
    pub now_ms: i64,
}

/// One reason to refuse an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Violation {
    /// Dotted path of the offending field, e.g. `spec.replicas`; empty for the whole object.
    pub field: String,
    /// A sentence for the user.
    pub message: String,
}

/// A plugin's judgement of one object: allowed when it has no violations; the warnings are
/// shown either way.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// Why the object may not be written; empty: it may.
    pub violations: Vec<Violation>,
    /// Sentences `kubectl` shows the user.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Allowed, without warnings; add to it with [`Verdict::deny`] and [`Verdict::warn`].
    pub fn allow() -> Self {
        Self::default()
    }

    /// With one more violation: `field` (a dotted path such as `spec.replicas`) may not be as
    /// it is, because of `message`.
    pub fn deny(mut self, field: impl Into<String>, message: impl Into<String>) -> Self {
        self.violations.push(Violation {
            field: field.into(),
            message: message.into(),
        });
        self
    }

    /// With one more warning.
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Whether the object may be written: no violations.
    pub fn allowed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// What `convert.convert` is asked: one instance of a bound kind, to another of its versions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConvertRequest {
    /// The object as JSON text, at the version its `apiVersion` names.
    pub object: String,
    /// `group/version` to convert it to.
    pub desired_api_version: String,
}

/// Most violations in one verdict: the API server writes them all into the one message of its
/// refusal, and a user reads the first few; more is a plugin listing every field it saw.
pub const MAX_VIOLATIONS: usize = 64;

/// Most warnings in one verdict: the API server ignores warnings past 4 KiB in all of a
/// request's warnings, and `kubectl` prints each on its own line.
pub const MAX_WARNINGS: usize = 16;

/// Longest violation message or warning, as [`crate::status::MAX_MESSAGE_BYTES`]: one
/// sentence for a user, not a document.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Longest violation field path: as long as a printer column's JSONPath may be, far past any
/// path into a configuration.
pub const MAX_FIELD_BYTES: usize = 256;

/// Metadata fields a conversion may change: the API server takes these two from the converted
/// object and keeps the rest of the original's.
const CONVERTIBLE_METADATA: [&str; 2] = ["labels", "annotations"];

/// Checks what `validate.validate` returned: see the module docs.
pub fn check_verdict(verdict: &Verdict, max_output_bytes: usize) -> Result<(), AnswerError> {
    let size = verdict
        .violations
        .iter()
        .map(|v| v.field.len() + v.message.len())
        .chain(verdict.warnings.iter().map(String::len))
        .sum();
    if size > max_output_bytes {
        return Err(AnswerError::OverOutputCap {
            field: "violations, warnings".into(),
            size,
            max: max_output_bytes,
        });
    }
    for (field, count, max) in [
        ("violations", verdict.violations.len(), MAX_VIOLATIONS),
        ("warnings", verdict.warnings.len(), MAX_WARNINGS),
    ] {
        if count > max {
            return Err(AnswerError::TooMany {
                field: field.into(),
                count,
                max,
            });
        }
    }
    let texts = verdict
        .violations
        .iter()
        .enumerate()
        .flat_map(|(i, v)| {
            [
                (format!("violations[{i}].field"), &v.field, MAX_FIELD_BYTES),
                (
                    format!("violations[{i}].message"),
                    &v.message,
                    MAX_MESSAGE_BYTES,
                ),
            ]
        })
        .chain(
            verdict
                .warnings
                .iter()
                .enumerate()
                .map(|(i, w)| (format!("warnings[{i}]"), w, MAX_MESSAGE_BYTES)),
        );
    for (field, text, max) in texts {
        let reason = if text.len() > max {
            format!("has {} bytes; at most {max}", text.len())
        } else if text.chars().any(char::is_control) {
            "holds control characters".to_string()
        } else {
            continue;
        };
        return Err(AnswerError::BadText { field, reason });
    }
    Ok(())
}

/// Checks what `convert.convert` returned for `request` (see the module docs) and returns it
/// parsed.
pub fn check_converted(
    request: &ConvertRequest,
    converted: &str,
    max_output_bytes: usize,
) -> Result<Value, AnswerError> {
    if converted.len() > max_output_bytes {
        return Err(AnswerError::OverOutputCap {
            field: "object".into(),
            size: converted.len(),
            max: max_output_bytes,
        });
    }
    let bad = |field: &str, reason: String| AnswerError::BadConversion {
        field: field.into(),
        reason,
    };
    let object: Value = serde_json::from_str(converted)
        .map_err(|err| bad("object", format!("is not valid JSON: {err}")))?;
    if !object.is_object() {
        return Err(bad("object", "is not a JSON object".into()));
    }
    // The host's own input: read as far as it goes, so a field it lacks must stay absent.
    let original: Value = serde_json::from_str(&request.object).unwrap_or(Value::Null);
    if object["apiVersion"] != request.desired_api_version.as_str() {
        return Err(bad(
            "apiVersion",
            format!(
                "has apiVersion {}; {:?} was asked for",
                object["apiVersion"], request.desired_api_version
            ),
        ));
    }
    if object["kind"] != original["kind"] {
        return Err(bad(
            "kind",
            format!(
                "has kind {}; the object was a {}",
                object["kind"], original["kind"]
            ),
        ));
    }
    let metadata = |value: &Value| match value.get("metadata") {
        Some(Value::Object(fields)) => Some(fields.clone()),
        _ => None,
    };
    let (Some(was), Some(is)) = (metadata(&original), metadata(&object)) else {
        return Err(bad("metadata", "has no metadata object".into()));
    };
    let names = was.keys().chain(is.keys());
    for name in names.filter(|n| !CONVERTIBLE_METADATA.contains(&n.as_str())) {
        if was.get(name) != is.get(name) {
            let shown =
                |v: Option<&Value>| v.map_or_else(|| "absent".to_string(), Value::to_string);
            return Err(bad(
                &format!("metadata.{name}"),
                format!(
                    "changed metadata.{name} from {} to {}; a conversion changes no metadata \
                     but labels and annotations",
                    shown(was.get(name)),
                    shown(is.get(name))
                ),
            ));
        }
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CAP: usize = 4096;

    fn assert_refused(
        result: Result<impl std::fmt::Debug, AnswerError>,
        field: &str,
        message: &str,
    ) {
        match result {
            Err(err) => {
                assert_eq!(err.field(), field, "{err}");
                assert_eq!(err.to_string(), message);
            }
            Ok(answer) => panic!("{answer:?} passed; expected {field}: {message}"),
        }
    }

    #[test]
    fn operations_are_named_as_the_api_server_names_them() {
        let names: Vec<String> = [
            Operation::Create,
            Operation::Update,
            Operation::Delete,
            Operation::Connect,
        ]
        .iter()
        .map(|o| serde_json::to_string(o).expect("serializes"))
        .collect();
        assert_eq!(
            names,
            [r#""CREATE""#, r#""UPDATE""#, r#""DELETE""#, r#""CONNECT""#]
        );
        let update: Operation = serde_json::from_str(r#""UPDATE""#).expect("reads");
        assert_eq!(update, Operation::Update);
    }

    #[test]
    fn a_verdict_is_built_and_allows_without_violations() {
        let verdict = Verdict::allow().warn("deprecated");
        assert!(verdict.allowed());
        let verdict = verdict.deny("spec.replicas", "may not shrink");
        assert!(!verdict.allowed());
        assert_eq!(verdict.violations[0].field, "spec.replicas");
        assert_eq!(verdict.warnings, ["deprecated"]);
        check_verdict(&verdict, CAP).expect("within the rules");
    }

    #[test]
    fn verdicts_are_bounded() {
        let many = |n: usize| (0..n).fold(Verdict::allow(), |v, i| v.deny(format!("f{i}"), "no"));
        check_verdict(&many(MAX_VIOLATIONS), CAP).expect("64 violations");
        assert_refused(
            check_verdict(&many(MAX_VIOLATIONS + 1), CAP),
            "violations",
            "65 violations; at most 64",
        );
        let warnings = (0..17).fold(Verdict::allow(), |v, i| v.warn(format!("w{i}")));
        assert_refused(
            check_verdict(&warnings, CAP),
            "warnings",
            "17 warnings; at most 16",
        );
        assert_refused(
            check_verdict(&Verdict::allow().deny("a", "m".repeat(1025)), 1 << 20),
            "violations[0].message",
            "violations[0].message has 1025 bytes; at most 1024",
        );
        assert_refused(
            check_verdict(&Verdict::allow().deny("f".repeat(257), "m"), CAP),
            "violations[0].field",
            "violations[0].field has 257 bytes; at most 256",
        );
        assert_refused(
            check_verdict(&Verdict::allow().warn("ok").warn("\u{1b}[2Jcleared"), CAP),
            "warnings[1]",
            "warnings[1] holds control characters",
        );
        assert_refused(
            check_verdict(&Verdict::allow().deny("spec\nreplicas", "m"), CAP),
            "violations[0].field",
            "violations[0].field holds control characters",
        );
        assert_refused(
            check_verdict(
                &Verdict::allow()
                    .warn("w".repeat(1000))
                    .warn("w".repeat(1000)),
                1500,
            ),
            "violations, warnings",
            "2000 bytes of output is over the 1500 byte cap",
        );
        // The whole object.
        check_verdict(&Verdict::allow().deny("", "not today"), CAP).expect("an empty field");
    }

    fn kv(api_version: &str, spec: Value) -> Value {
        json!({
            "apiVersion": api_version, "kind": "KVStore",
            "metadata": {
                "name": "cache", "namespace": "shop", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"team": "a"}
            },
            "spec": spec, "status": {"version": "7.2.4"}
        })
    }

    fn request() -> ConvertRequest {
        ConvertRequest {
            object: kv("data.example.com/v1alpha1", json!({"size": "3"})).to_string(),
            desired_api_version: "data.example.com/v1".into(),
        }
    }

    #[test]
    fn a_conversion_keeps_kind_and_metadata() {
        let mut good = kv("data.example.com/v1", json!({"replicas": 3}));
        good["metadata"]["labels"]["converted"] = json!("yes");
        good["metadata"]["annotations"] = json!({"note": "free to change"});
        let converted =
            check_converted(&request(), &good.to_string(), CAP).expect("a good conversion");
        assert_eq!(converted, good);

        let with = |edit: fn(&mut Value)| {
            let mut object = kv("data.example.com/v1", json!({"replicas": 3}));
            edit(&mut object);
            check_converted(&request(), &object.to_string(), CAP)
        };
        assert_refused(
            with(|o| o["apiVersion"] = json!("data.example.com/v1alpha1")),
            "apiVersion",
            r#"converted object: has apiVersion "data.example.com/v1alpha1"; "data.example.com/v1" was asked for"#,
        );
        assert_refused(
            with(|o| o["kind"] = json!("Other")),
            "kind",
            r#"converted object: has kind "Other"; the object was a "KVStore""#,
        );
        for (field, value) in [
            ("name", json!("other")),
            ("namespace", json!("other")),
            ("uid", json!("u-2")),
            ("resourceVersion", json!("8")),
            ("generation", json!(3)),
            ("creationTimestamp", json!("2027-01-01T00:00:00Z")),
            ("finalizers", json!(["mine"])),
        ] {
            let mut object = kv("data.example.com/v1", json!({}));
            let was = object["metadata"].get(field).cloned();
            object["metadata"][field] = value.clone();
            let shown = was.map_or_else(|| "absent".to_string(), |v| v.to_string());
            assert_refused(
                check_converted(&request(), &object.to_string(), CAP),
                &format!("metadata.{field}"),
                &format!(
                    "converted object: changed metadata.{field} from {shown} to {value}; a \
                     conversion changes no metadata but labels and annotations"
                ),
            );
        }
        assert_refused(
            with(|o| {
                o["metadata"].as_object_mut().map(|m| m.remove("uid"));
            }),
            "metadata.uid",
            r#"converted object: changed metadata.uid from "u-1" to absent; a conversion changes no metadata but labels and annotations"#,
        );
        assert_refused(
            with(|o| o["metadata"] = json!("cache")),
            "metadata",
            "converted object: has no metadata object",
        );
    }

    #[test]
    fn a_conversion_is_a_json_object_within_the_cap() {
        assert_refused(
            check_converted(&request(), "[1]", CAP),
            "object",
            "converted object: is not a JSON object",
        );
        assert_refused(
            check_converted(&request(), "{", CAP),
            "object",
            "converted object: is not valid JSON: EOF while parsing an object at line 1 column 1",
        );
        let big = kv("data.example.com/v1", json!({"blob": "b".repeat(CAP)})).to_string();
        assert_refused(
            check_converted(&request(), &big, CAP),
            "object",
            &format!("{} bytes of output is over the {CAP} byte cap", big.len()),
        );
    }
}
