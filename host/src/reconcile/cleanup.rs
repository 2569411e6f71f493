//! Deletion: the plugin's `finalize` decides which retained objects (claims) go with the App;
//! owned objects go through their owner references. Runs behind the `wasmop.dev/cleanup`
//! finalizer, which stays until the decision is carried out.

use std::collections::BTreeSet;

use k8s_openapi::{api::core::v1::PersistentVolumeClaim, jiff::Timestamp};
use kube::{Api, ResourceExt, api::DeleteParams, runtime::controller::Action};
use serde_json::Value;
use wasmop_core::Event;

use super::{
    Context, Error, FINALIZER, app_key,
    execute::publish,
    prepare::{call_limits, governing},
};
use crate::{
    app::App,
    plugin::{Capability, input::AppContext, sandbox::CallTags, source::SourceRef},
};

/// Asks the plugin which retained objects (claims) to delete; owned objects go with
/// the App through their owner references. Without a plugin or a `finalize` capability,
/// everything retained is kept: losing data needs an explicit decision.
pub async fn cleanup_app(app: &App, ctx: &Context) -> Result<Action, Error> {
    ctx.failures.succeeded(&app_key(app));
    let namespace = app.namespace().unwrap_or_default();
    let retained: Vec<Value> = ctx
        .stores
        .observe(&namespace, &app.name_any(), &app.uid().unwrap_or_default())
        .into_iter()
        .filter(|o| o.kind == "PersistentVolumeClaim")
        .map(|o| o.json)
        .collect();
    let retained_names: Vec<String> = retained
        .iter()
        .filter_map(|o| {
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    // A refused namespace never loaded the App's plugin, and deleting the App must not load it
    // either; a namespace not resolved yet is waited for.
    let waiting = |message: String| Error::Waiting {
        app: app_key(app),
        message,
    };
    let policy = match governing(ctx, &namespace) {
        None => return Err(waiting("the namespace's policy is not known yet".into())),
        Some(Err(reason)) => {
            let message = format!(
                "kept {} retained objects without calling the plugin: {reason}",
                retained.len()
            );
            publish(ctx, app, &Event::normal("Finalized", message)).await;
            return Ok(Action::await_change());
        }
        Some(Ok(policy)) => policy,
    };
    // A source the policy refuses (another registry, an unsigned kind of source) is never
    // loaded for the finalizer either: deleting an App must not be a way around the policy.
    let source = SourceRef::from_spec(&namespace, &app.spec.plugin, &policy.rules.oci).ok();
    if let Some(Err(reason)) = source.as_ref().map(|s| policy.rules.allows_source(s)) {
        let message = format!(
            "kept {} retained objects without calling the plugin: {reason} (under {})",
            retained.len(),
            policy.name
        );
        publish(ctx, app, &Event::normal("Finalized", message)).await;
        return Ok(Action::await_change());
    }
    let state = source.as_ref().map(|s| {
        // After a restart the registry is empty: load the plugin before deciding anything.
        ctx.plugins.acquire(s, &namespace)
    });
    // The plugin decides what deletion does (retention): until it is loaded (as after every
    // restart) or while its source fails, deletion waits rather than skipping `finalize`.
    if let (Some(source), Some(state)) = (&source, &state)
        && state.current.is_none()
    {
        let why = match &state.last_error {
            None => format!("plugin {source} is loading"),
            Some(err) => format!(
                "plugin {source} cannot be loaded ({}): {err}; remove the finalizer \
                 {FINALIZER} to delete without it",
                err.reason()
            ),
        };
        if state.last_error.is_some() {
            publish(ctx, app, &Event::warning("FinalizeWaiting", why.clone())).await;
        }
        return Err(waiting(why));
    }
    let loaded = state.and_then(|s| s.current);
    let Some(loaded) = loaded.filter(|l| l.compiled.capabilities.contains(&Capability::Finalize))
    else {
        let note = format!(
            "kept {} retained objects (no finalize decision)",
            retained.len()
        );
        publish(ctx, app, &Event::normal("Finalized", note)).await;
        return Ok(Action::await_change());
    };
    let input = AppContext::new(app, &retained, Timestamp::now().as_millisecond());
    let tg = CallTags {
        plugin: loaded.compiled.label(),
        app: app_key(app),
    };
    // The App's own limits hold for finalize as for every other call.
    let limits = call_limits(app, &loaded);
    let decision = loaded
        .run("finalize", &namespace, limits.memory_bytes, move |p, e| {
            p.call_finalize(e, &limits, tg, &input)
        })
        .await;
    let decision = match decision {
        Ok(decision) => decision,
        Err(err) => {
            // Keep the finalizer: deleting data on a plugin fault would be worse than waiting.
            let note = format!(
                "{err}; deletion waits for finalize (raise spec.limits if it needs more time, or \
                 remove the finalizer {FINALIZER} to delete without it)"
            );
            publish(ctx, app, &Event::warning("FinalizeFailed", note)).await;
            return Err(Error::Finalizer {
                app: app_key(app),
                message: err.to_string(),
            });
        }
    };
    tracing::info!(
        app = %app_key(app),
        delete = ?decision.delete.iter().map(|o| &o.name).collect::<Vec<_>>(),
        keep = ?decision.keep.iter().map(|o| &o.name).collect::<Vec<_>>(),
        "finalize decision"
    );
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut deleted = Vec::new();
    // Only what the plugin was shown: a decision cannot reach another App's or a user's claims.
    let offered: BTreeSet<&str> = retained_names.iter().map(String::as_str).collect();
    for object in decision
        .delete
        .iter()
        .filter(|o| o.kind == "PersistentVolumeClaim" && offered.contains(o.name.as_str()))
    {
        crate::write::before_write("delete", "PersistentVolumeClaim");
        match pvcs.delete(&object.name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(object.name.clone()),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Kube {
                    app: app_key(app),
                    what: format!("deleting claim {}", object.name),
                    source,
                });
            }
        }
    }
    let note = format!(
        "deleted claims [{}], kept {}",
        deleted.join(", "),
        decision.keep.len()
    );
    publish(ctx, app, &Event::normal("Finalized", note)).await;
    Ok(Action::await_change())
}
