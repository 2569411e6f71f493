//! The API server's side of a webhook call: `AdmissionReview` and `ConversionReview` of
//! `admission.k8s.io/v1` and `apiextensions.k8s.io/v1`, only the fields the host reads and
//! writes (k8s.io/api admission/v1/types.go, apiextensions/v1/types_jsonschema.go's
//! `ConversionReview`). The objects stay raw JSON until a plugin gets them.

use serde::Deserialize;
use serde_json::{Value, json};

/// `admission.k8s.io/v1`.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
/// `apiextensions.k8s.io/v1`.
pub const CONVERSION_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// An `AdmissionReview` as the API server sends it.
#[derive(Debug, Deserialize)]
pub struct AdmissionReview {
    /// Must be [`ADMISSION_API_VERSION`]: the configurations name only `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The request; absent only in a malformed review.
    pub request: Option<AdmissionRequest>,
}

/// A group, version and kind.
#[derive(Debug, Deserialize, Clone, PartialEq, Eq)]
pub struct Gvk {
    /// The API group, empty for the core group.
    #[serde(default)]
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
}

/// A group, version and resource.
#[derive(Debug, Deserialize, Clone, PartialEq, Eq)]
pub struct Gvr {
    /// The API group.
    #[serde(default)]
    pub group: String,
    /// The version.
    pub version: String,
    /// The plural resource name.
    pub resource: String,
}

/// Who asks.
#[derive(Debug, Deserialize, Default)]
pub struct UserInfo {
    /// The user's name.
    #[serde(default)]
    pub username: String,
    /// The user's groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// One admission request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// The kind of the object, as the configuration matched it.
    pub kind: Gvk,
    /// The resource.
    pub resource: Gvr,
    /// The subresource, empty for the main resource.
    #[serde(default)]
    pub sub_resource: String,
    /// The object's name (may be empty on a create with `generateName`).
    #[serde(default)]
    pub name: String,
    /// The object's namespace.
    #[serde(default)]
    pub namespace: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// Who asks.
    #[serde(default)]
    pub user_info: UserInfo,
    /// The object after the request; absent on a delete.
    #[serde(default)]
    pub object: Option<Box<serde_json::value::RawValue>>,
    /// The object before the request, on an update or a delete.
    #[serde(default)]
    pub old_object: Option<Box<serde_json::value::RawValue>>,
}

/// What the host answers one admission request.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionAnswer {
    /// Whether the request may go on.
    pub allowed: bool,
    /// Why not: shown to the user after `admission webhook "..." denied the request: `.
    pub message: Option<String>,
    /// Each refused field and why, as `details.causes`.
    pub causes: Vec<(String, String)>,
    /// Warnings shown to the user whatever the answer.
    pub warnings: Vec<String>,
}

impl AdmissionAnswer {
    /// Allowed, without a word.
    pub fn allow() -> Self {
        Self {
            allowed: true,
            message: None,
            causes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The `AdmissionReview` carrying this answer to request `uid`.
    pub fn review(&self, uid: &str) -> Value {
        let mut response = json!({"uid": uid, "allowed": self.allowed});
        if !self.allowed {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|(field, message)| {
                    json!({"type": "FieldValueInvalid", "field": field, "message": message})
                })
                .collect();
            // 403 Forbidden, as the API server's own admission plugins refuse (PodSecurity's
            // "is forbidden: violates PodSecurity"): kubectl then prints the whole message,
            // which names the plugin, where for 422 Invalid it would print the causes alone.
            // The causes stay in the details for clients that read fields.
            let mut status = json!({"code": 403, "reason": "Forbidden", "status": "Failure"});
            if let Some(message) = &self.message {
                status["message"] = json!(message);
            }
            if !causes.is_empty() {
                status["details"] = json!({"causes": causes});
            }
            response["status"] = status;
        }
        if !self.warnings.is_empty() {
            response["warnings"] = json!(self.warnings);
        }
        json!({"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response})
    }
}

/// A `ConversionReview` as the API server sends it.
#[derive(Debug, Deserialize)]
pub struct ConversionReview {
    /// Must be [`CONVERSION_API_VERSION`].
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The request.
    pub request: Option<ConversionRequest>,
}

/// One conversion request: objects of one kind, all to one version.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// `group/version` wanted.
    #[serde(rename = "desiredAPIVersion")]
    pub desired_api_version: String,
    /// The objects, each whole.
    pub objects: Vec<Box<serde_json::value::RawValue>>,
}

/// The `ConversionReview` answering request `uid`: the converted objects, or the reason none
/// is given (the API server then fails the read or write with `message`).
pub fn conversion_review(uid: &str, result: Result<Vec<Value>, String>) -> Value {
    let response = match result {
        Ok(objects) => json!({
            "uid": uid,
            "convertedObjects": objects,
            "result": {"status": "Success"},
        }),
        Err(message) => json!({
            "uid": uid,
            "convertedObjects": [],
            "result": {"status": "Failure", "message": message},
        }),
    };
    json!({"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": response})
}

/// Whether `a` and `b` are the same but for their metadata and status: an update that changes
/// nothing else is not the plugin's to judge (a finalizer, a label or a status written by the
/// host must never be held up by a rule the object broke before the rule existed). Compared in
/// place, without copies.
pub fn same_content(a: &Value, b: &Value) -> bool {
    let skip = |k: &String| matches!(k.as_str(), "metadata" | "status");
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            a.keys().filter(|k| !skip(k)).count() == b.keys().filter(|k| !skip(k)).count()
                && a.iter()
                    .filter(|(k, _)| !skip(k))
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_as_the_api_server_sends_it_is_read() {
        let review: AdmissionReview = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "data.acme.io", "version": "v1", "kind": "KVStore"},
                "resource": {"group": "data.acme.io", "version": "v1", "resource": "kvstores"},
                "requestKind": {"group": "data.acme.io", "version": "v1", "kind": "KVStore"},
                "name": "a", "namespace": "team-a", "operation": "UPDATE",
                "userInfo": {"username": "alice", "groups": ["devs"]},
                "object": {"spec": {"replicas": 3}},
                "oldObject": {"spec": {"replicas": 1}},
                "dryRun": false
            }
        }))
        .expect("reads");
        let request = review.request.expect("a request");
        assert_eq!(request.kind.kind, "KVStore");
        assert_eq!(request.resource.resource, "kvstores");
        assert_eq!(request.user_info.groups, ["devs"]);
        assert_eq!(
            request.object.expect("object").get(),
            r#"{"spec":{"replicas":3}}"#
        );
    }

    #[test]
    fn a_refusal_names_each_field() {
        let answer = AdmissionAnswer {
            allowed: false,
            message: Some("spec.replicas: must be odd".into()),
            causes: vec![("spec.replicas".into(), "must be odd".into())],
            warnings: vec!["heads up".into()],
        };
        let review = answer.review("u1");
        assert_eq!(review["response"]["uid"], "u1");
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(review["response"]["status"]["code"], 403);
        assert_eq!(
            review["response"]["status"]["details"]["causes"][0]["field"],
            "spec.replicas"
        );
        assert_eq!(review["response"]["warnings"][0], "heads up");
        let allowed = AdmissionAnswer::allow().review("u2");
        assert!(allowed["response"].get("status").is_none());
    }

    #[test]
    fn content_leaves_out_metadata_and_status() {
        let a = json!({"apiVersion": "x/v1", "metadata": {"finalizers": ["f"]}, "spec": {"a": 1}, "status": {"r": 1}});
        let b = json!({"apiVersion": "x/v1", "metadata": {}, "spec": {"a": 1}});
        assert!(same_content(&a, &b));
        let c = json!({"apiVersion": "x/v1", "spec": {"a": 2}});
        assert!(!same_content(&a, &c));
        let d = json!({"apiVersion": "x/v1", "spec": {"a": 1}, "extra": true});
        assert!(!same_content(&a, &d) && !same_content(&d, &a));
    }

    #[test]
    fn a_failed_conversion_says_why() {
        let review = conversion_review("u", Err("no".into()));
        assert_eq!(review["response"]["result"]["status"], "Failure");
        assert_eq!(review["response"]["result"]["message"], "no");
        let ok = conversion_review("u", Ok(vec![json!({"a": 1})]));
        assert_eq!(ok["response"]["convertedObjects"][0]["a"], 1);
    }
}
