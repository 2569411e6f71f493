//! The validating webhook of one bound kind: an `AdmissionReview` for an instance, answered by
//! the binding's plugin's `validate`.
//!
//! What the plugin is never asked: a review of another kind than its binding's (refused: the
//! path names the binding, and the API server names the kind), a subresource, a delete, and an
//! update that changes neither the object's content nor anything but its metadata and status
//! (a finalizer, a label, the host's own status), or of an instance being deleted: those go
//! through, so that a rule an instance broke before the rule existed never holds up its
//! finalization. When the plugin cannot answer (not loaded, trapped, past its deadline), the
//! answer is an HTTP error naming the binding, the plugin and the cause, and the API server
//! applies the binding's failure policy.

use std::{sync::Arc, time::Duration};

use axum::http::StatusCode;
use serde_json::Value;
use wasmop_core::admission::{Operation, ValidateRequest, Verdict};

use super::{
    review::{
        ADMISSION_API_VERSION, AdmissionAnswer, AdmissionRequest, AdmissionReview, same_content,
    },
    target::{Targets, exports},
};
use crate::{
    binding::{AdmissionSettings, PluginBinding},
    plugin::{limits::CallLimits, sandbox::CallTags},
};

/// Why a review was not answered: the status and the text the API server reports (with the
/// binding's failure policy applied).
#[derive(Debug, Clone, PartialEq)]
pub struct Unanswered {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, naming the binding and the plugin.
    pub message: String,
}

impl Unanswered {
    fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 500, not 503: the API server's client reports a 500's body ("an error on the server
    /// (\"...\") has prevented the request from succeeding") but replaces a 503's with "the
    /// server is currently unable to handle the request", which names no plugin and no cause.
    fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

/// How much of the API server's timeout the plugin's call may take: the rest is for the
/// memory budget's wait, the HTTP round trip and the API server's own bookkeeping, so that an
/// answer that is late is the plugin's deadline (a message naming the plugin), not the API
/// server's (a bare "context deadline exceeded").
fn call_deadline(settings: &AdmissionSettings, configured: Duration) -> Duration {
    let timeout = Duration::from_secs(u64::try_from(settings.timeout_seconds()).unwrap_or(5));
    configured.min(timeout.mul_f64(0.6))
}

/// Answers `body`, a review sent to the webhook of binding `binding_name`.
pub async fn review(
    targets: &Targets,
    binding_name: &str,
    body: &[u8],
) -> Result<Value, Unanswered> {
    let review: AdmissionReview = serde_json::from_slice(body)
        .map_err(|err| Unanswered::bad_request(format!("not an AdmissionReview: {err}")))?;
    if review.api_version != ADMISSION_API_VERSION {
        return Err(Unanswered::bad_request(format!(
            "AdmissionReview {}: only {ADMISSION_API_VERSION} is answered",
            review.api_version
        )));
    }
    let request = review
        .request
        .ok_or_else(|| Unanswered::bad_request("AdmissionReview without a request"))?;
    let binding = targets
        .binding(binding_name)
        .map_err(Unanswered::unavailable)?;
    let answer = answer(targets, &binding, &request).await?;
    Ok(answer.review(&request.uid))
}

async fn answer(
    targets: &Targets,
    binding: &Arc<PluginBinding>,
    request: &AdmissionRequest,
) -> Result<AdmissionAnswer, Unanswered> {
    let name = binding.metadata.name.as_deref().unwrap_or_default();
    let kind = &binding.spec.kind;
    if request.kind.group != kind.group || request.kind.kind != kind.kind {
        return Err(Unanswered::bad_request(format!(
            "a review of another kind than PluginBinding {name}'s: refused"
        )));
    }
    let operation = match request.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        // Not registered for; let through if a configuration edited by hand sends them.
        "DELETE" | "CONNECT" => return Ok(AdmissionAnswer::allow()),
        other => {
            return Err(Unanswered::bad_request(format!(
                "unknown operation {other}"
            )));
        }
    };
    if !request.sub_resource.is_empty() {
        return Ok(AdmissionAnswer::allow());
    }
    let object = request
        .object
        .as_ref()
        .ok_or_else(|| Unanswered::bad_request("a review without its object"))?;
    if operation == Operation::Update {
        let parse = |raw: &serde_json::value::RawValue| {
            serde_json::from_str::<Value>(raw.get())
                .map_err(|err| Unanswered::bad_request(format!("object: {err}")))
        };
        // Not "any write to an instance being deleted": its spec could then change unchecked,
        // and finalization reads it. Removing a finalizer changes only metadata.
        let unchanged = match &request.old_object {
            Some(old) => same_content(&parse(old)?, &parse(object)?),
            None => false,
        };
        if unchanged {
            return Ok(AdmissionAnswer::allow());
        }
    }
    let settings = binding.spec.admission.clone().unwrap_or_default();
    let loaded = targets
        .plugin(binding, &request.namespace, Duration::from_secs(1))
        .await
        .map_err(Unanswered::unavailable)?;
    let label = loaded.compiled.label();
    if !exports(&loaded, "validate") {
        // The configuration outlived the capability (a new digest without it, until the
        // leader removes the configuration).
        return Ok(AdmissionAnswer::allow());
    }
    let mut limits = CallLimits::with_overrides(
        binding.spec.limits.as_ref().and_then(|l| l.timeout_ms),
        binding.spec.limits.as_ref().and_then(|l| l.memory_mib),
    );
    limits.deadline = call_deadline(&settings, limits.deadline);
    limits.memory_bytes = limits
        .memory_bytes
        .min(loaded.engine().budget().max_call_bytes());
    let call = ValidateRequest {
        operation,
        object: object.get().to_string(),
        old_object: request.old_object.as_ref().map(|o| o.get().to_string()),
        user_groups: settings
            .user_groups
            .unwrap_or(false)
            .then(|| request.user_info.groups.clone()),
        now_ms: chrono::Utc::now().timestamp_millis(),
    };
    let tags = CallTags {
        plugin: label.clone(),
        app: format!("{}/{}", request.namespace, request.name),
    };
    // The whole call, the wait for the memory budget included, within the API server's
    // timeout: an answer it no longer waits for is worth nothing.
    let timeout = Duration::from_secs(u64::try_from(settings.timeout_seconds()).unwrap_or(5));
    let call = loaded.run(
        "validate",
        &request.namespace,
        limits.memory_bytes,
        move |plugin, engine| plugin.call_validate(engine, &limits, tags, &call),
    );
    let verdict = match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(|err| err.to_string()),
        Err(_) => Err(format!("no answer within {}s", timeout.as_secs())),
    }
    .map_err(|err| {
        Unanswered::unavailable(bounded(&format!(
            "PluginBinding {name}: plugin {label} could not validate {} {}/{}: {err}",
            kind.kind, request.namespace, request.name
        )))
    })?;
    Ok(answer_of(&verdict, &kind.kind, request, &label))
}

/// The most of an error message the host sends back or logs: a plugin's message or trap output
/// can be long, and a reply body is shown whole to whoever ran `kubectl`.
const MAX_MESSAGE: usize = 2048;

/// `message` cut to [`MAX_MESSAGE`] bytes and without control characters (a terminal's escape
/// sequences), as status messages are.
pub fn bounded(message: &str) -> String {
    let clean: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.len() <= MAX_MESSAGE {
        return clean;
    }
    let mut end = MAX_MESSAGE;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &clean[..end])
}

/// The answer a verdict gives: refused with every violation's field and message, or allowed;
/// the warnings either way.
pub fn answer_of(
    verdict: &Verdict,
    kind: &str,
    request: &AdmissionRequest,
    label: &str,
) -> AdmissionAnswer {
    let allowed = verdict.allowed();
    let message = (!allowed).then(|| {
        let what = if request.name.is_empty() {
            format!("{kind} in {}", request.namespace)
        } else {
            format!("{kind} {}/{}", request.namespace, request.name)
        };
        let violations: Vec<String> = verdict
            .violations
            .iter()
            .map(|v| format!("{}: {}", v.field, v.message))
            .collect();
        format!(
            "{what} refused by plugin {label}: {}",
            violations.join("; ")
        )
    });
    AdmissionAnswer {
        allowed,
        message,
        causes: verdict
            .violations
            .iter()
            .map(|v| (v.field.clone(), v.message.clone()))
            .collect(),
        warnings: verdict.warnings.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_core::admission::Violation;

    fn request() -> AdmissionRequest {
        serde_json::from_value(serde_json::json!({
            "uid": "u",
            "kind": {"group": "data.acme.io", "version": "v1", "kind": "KVStore"},
            "resource": {"group": "data.acme.io", "version": "v1", "resource": "kvstores"},
            "name": "a", "namespace": "team-a", "operation": "CREATE",
            "object": {}
        }))
        .expect("reads")
    }

    #[test]
    fn a_refusal_names_the_instance_the_plugin_and_every_field() {
        let verdict = Verdict {
            violations: vec![
                Violation {
                    field: "spec.replicas".into(),
                    message: "must be odd".into(),
                },
                Violation {
                    field: "spec.storage".into(),
                    message: "cannot shrink".into(),
                },
            ],
            warnings: vec!["w".into()],
        };
        let answer = answer_of(&verdict, "KVStore", &request(), "kvstore@sha256:ab");
        assert!(!answer.allowed);
        assert_eq!(
            answer.message.as_deref(),
            Some(
                "KVStore team-a/a refused by plugin kvstore@sha256:ab: spec.replicas: must be \
                 odd; spec.storage: cannot shrink"
            )
        );
        assert_eq!(answer.causes.len(), 2);
        assert_eq!(answer.warnings, ["w"]);
        let allowed = answer_of(&Verdict::default(), "KVStore", &request(), "p");
        assert!(allowed.allowed && allowed.message.is_none());
    }

    #[test]
    fn the_plugin_gets_most_of_the_api_servers_timeout_and_never_more_than_its_deadline() {
        let five = AdmissionSettings::default();
        assert_eq!(
            call_deadline(&five, Duration::from_secs(10)),
            Duration::from_secs(3)
        );
        assert_eq!(
            call_deadline(&five, Duration::from_millis(500)),
            Duration::from_millis(500)
        );
        let thirty = AdmissionSettings {
            timeout_seconds: Some(99),
            ..Default::default()
        };
        assert_eq!(
            call_deadline(&thirty, Duration::from_secs(60)),
            Duration::from_secs(18)
        );
    }
}
