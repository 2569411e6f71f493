//! The shadow plans of a rollout: every instance decided twice, by the stable digest and by
//! the candidate, with the same snapshot and the same decision core as a reconcile, and nothing
//! written; [`wasmop_core::rollout::judge`] says what each pair means for the rollout.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use kube::api::DynamicObject;
use wasmop_core::{
    Decision,
    rollout::{Shadow, Verdict, judge},
};

use crate::{
    parent::{Parent, ParentKind},
    reconcile::{
        Context,
        execute::decide_prepared,
        prepare::{Resolved, prepare_resolved, resolve_plugin_at},
    },
};

/// How long one instance's plans wait for a version still loading (the stable one, loaded from
/// the host's cache after a restart) before the instance counts as refused.
const LOAD_WAIT: Duration = Duration::from_secs(60);

/// Plans every instance of `instances` with `stable` and with `candidate`, `concurrency` at a
/// time.
pub(crate) async fn plan_all(
    ctx: &Arc<Context>,
    kind: &Arc<ParentKind>,
    instances: Vec<Arc<DynamicObject>>,
    stable: &str,
    candidate: &str,
    concurrency: usize,
) -> Shadow {
    let verdicts = futures::stream::iter(instances)
        .map(|object| {
            let (ctx, kind) = (Arc::clone(ctx), Arc::clone(kind));
            async move {
                let parent = Parent::from_instance(&object, kind);
                let verdict = plan_one(&ctx, &parent, stable, candidate).await;
                let meta = &parent.app.metadata;
                let key = format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                );
                (key, verdict)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    Shadow {
        digest: candidate.to_string(),
        verdicts,
    }
}

async fn plan_one(ctx: &Context, parent: &Parent, stable: &str, candidate: &str) -> Verdict {
    let theirs = match decide_at(ctx, parent, stable).await {
        Ok(decision) => decision,
        Err(message) => {
            return Verdict::Refused {
                reason: "ShadowFailed".into(),
                message: format!("the version in service could not plan it: {message}"),
            };
        }
    };
    match decide_at(ctx, parent, candidate).await {
        Ok(ours) => judge(&theirs, &ours),
        Err(message) => Verdict::Refused {
            reason: "ShadowFailed".into(),
            message,
        },
    }
}

/// Whether the version `digest` (the stable one), deciding for `parent` now, finds it Degraded:
/// then a moved instance Degraded on the candidate is so by its own doing (its spec, its
/// workload), not the candidate's. A decision that cannot be made excuses nothing.
pub(crate) async fn degraded_on(ctx: &Context, parent: &Parent, digest: &str) -> bool {
    decide_at(ctx, parent, digest).await.is_ok_and(|decision| {
        decision
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == wasmop_core::conditions::DEGRADED && c.status == "True")
    })
}

/// The decision for `parent` by the version `digest` of its binding's plugin, written nowhere.
async fn decide_at(ctx: &Context, parent: &Parent, digest: &str) -> Result<Decision, String> {
    let started = tokio::time::Instant::now();
    let resolved = loop {
        match resolve_plugin_at(parent, ctx, Some(digest)) {
            Resolved::Holding(wasmop_core::PluginState::Loading { message })
                if started.elapsed() < LOAD_WAIT =>
            {
                tracing::debug!(parent = %parent.key(), %message, "shadow plans wait for a version");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Resolved::PolicyUnknown if started.elapsed() < LOAD_WAIT => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            resolved => break resolved,
        }
    };
    let prepared = prepare_resolved(parent, ctx, resolved).await;
    match decide_prepared(parent, prepared).await {
        Ok(Some((_, decision, _))) => Ok(decision),
        Ok(None) => Err("the namespace's policy is not known yet".into()),
        Err(err) => Err(err.to_string()),
    }
}
