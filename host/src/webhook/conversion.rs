//! The conversion webhook of one bound kind: a `ConversionReview` (objects of the kind, all to
//! one `apiVersion`) answered by the binding's plugin's `convert`, one call per object, each
//! object in the namespace it belongs to (its policy, its share of the memory budget).
//!
//! A conversion has no failure policy: when the plugin cannot answer, the review fails with a
//! message naming the object, the binding and the plugin, and the API server fails the read or
//! write that needed it.

use std::{collections::HashMap, sync::Arc, time::Duration};

use serde_json::Value;
use wasmop_core::admission::ConvertRequest;

use super::{
    admit::Unanswered,
    review::{CONVERSION_API_VERSION, ConversionReview, conversion_review},
    target::{Targets, exports},
};
use crate::{
    binding::PluginBinding,
    plugin::{limits::CallLimits, registry::LoadedPlugin, sandbox::CallTags},
};

/// The most objects one review may carry: the API server converts a list page at a time
/// (500 by default, `--max-requests-inflight` permitting); more is not a request it sends.
pub const MAX_OBJECTS: usize = 5000;

/// Answers `body`, a review sent to the conversion webhook of binding `binding_name`.
pub async fn review(
    targets: &Targets,
    binding_name: &str,
    body: &[u8],
) -> Result<Value, Unanswered> {
    let review: ConversionReview = serde_json::from_slice(body).map_err(|err| Unanswered {
        status: axum::http::StatusCode::BAD_REQUEST,
        message: format!("not a ConversionReview: {err}"),
    })?;
    let bad = |message: String| Unanswered {
        status: axum::http::StatusCode::BAD_REQUEST,
        message,
    };
    if review.api_version != CONVERSION_API_VERSION {
        return Err(bad(format!(
            "ConversionReview {}: only {CONVERSION_API_VERSION} is answered",
            review.api_version
        )));
    }
    let request = review
        .request
        .ok_or_else(|| bad("ConversionReview without a request".into()))?;
    if request.objects.len() > MAX_OBJECTS {
        return Err(bad(format!(
            "{} objects in one ConversionReview, over {MAX_OBJECTS}",
            request.objects.len()
        )));
    }
    let result = match targets.binding(binding_name) {
        Ok(binding) => {
            convert_all(
                targets,
                &binding,
                &request.desired_api_version,
                &request.objects,
            )
            .await
        }
        Err(message) => Err(message),
    };
    Ok(conversion_review(
        &request.uid,
        result.map_err(|message| super::admit::bounded(&message)),
    ))
}

async fn convert_all(
    targets: &Targets,
    binding: &Arc<PluginBinding>,
    desired: &str,
    objects: &[Box<serde_json::value::RawValue>],
) -> Result<Vec<Value>, String> {
    let name = binding.metadata.name.as_deref().unwrap_or_default();
    let kind = &binding.spec.kind;
    let group = desired.split_once('/').map(|(g, _)| g).unwrap_or_default();
    if group != kind.group {
        return Err(format!(
            "PluginBinding {name} binds {kind}: it does not convert to {desired}"
        ));
    }
    let mut plugins: HashMap<String, Arc<LoadedPlugin>> = HashMap::new();
    let mut converted = Vec::with_capacity(objects.len());
    for raw in objects {
        let object: Value =
            serde_json::from_str(raw.get()).map_err(|err| format!("an object: {err}"))?;
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let object_name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if object.get("kind").and_then(Value::as_str) != Some(kind.kind.as_str()) {
            return Err(format!(
                "{namespace}/{object_name}: not a {kind}, which PluginBinding {name} binds"
            ));
        }
        if object.get("apiVersion").and_then(Value::as_str) == Some(desired) {
            converted.push(object);
            continue;
        }
        let loaded = match plugins.get(&namespace) {
            Some(loaded) => Arc::clone(loaded),
            None => {
                let loaded = targets
                    .plugin(binding, &namespace, Duration::from_secs(5))
                    .await?;
                plugins.insert(namespace.clone(), Arc::clone(&loaded));
                loaded
            }
        };
        let label = loaded.compiled.label();
        if !exports(&loaded, "convert") {
            return Err(format!(
                "PluginBinding {name}: plugin {label} does not export convert"
            ));
        }
        let mut limits = CallLimits::with_overrides(
            binding.spec.limits.as_ref().and_then(|l| l.timeout_ms),
            binding.spec.limits.as_ref().and_then(|l| l.memory_mib),
        );
        limits.memory_bytes = limits
            .memory_bytes
            .min(loaded.engine().budget().max_call_bytes());
        let call = ConvertRequest {
            object: raw.get().to_string(),
            desired_api_version: desired.to_string(),
        };
        let tags = CallTags {
            plugin: label.clone(),
            app: format!("{namespace}/{object_name}"),
        };
        let object = loaded
            .run(
                "convert",
                &namespace,
                limits.memory_bytes,
                move |plugin, engine| plugin.call_convert(engine, &limits, tags, &call),
            )
            .await
            .map_err(|err| {
                format!(
                    "{} {namespace}/{object_name} to {desired}: PluginBinding {name}: plugin \
                     {label}: {err}",
                    kind.kind
                )
            })?;
        converted.push(object);
    }
    Ok(converted)
}
