//! Deletion, performed: reads what the deletion decision needs (the App's plugin as a reconcile
//! finds it, its owned workloads from the caches, its claims listed from the API server just
//! now), lets [`wasmop_core::decide_deletion`] decide, and carries the decision out: the
//! workloads that make claims are deleted in the foreground first, the claims `finalize` chose
//! after them. Runs behind the [`FINALIZER`](super::FINALIZER), which stays until a decision releases it.

use std::sync::Arc;

use k8s_openapi::{
    api::{apps::v1::StatefulSet, core::v1::PersistentVolumeClaim},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams},
};
use wasmop_core::{
    Deletion, Finalizer, Snapshot,
    decide::NoPlugin,
    decide_deletion,
    observed::{APP_LABEL, ObservedObject, labelled_for},
    stamp::AppRef,
};

use super::{
    Context, Error, Next,
    execute::publish,
    prepare::{Resolved, call_limits, resolve_plugin},
};
use crate::{
    parent::Parent,
    plugin::{component_calls::ComponentCalls, input::AppContext},
};

/// Decides and performs one pass of deleting `app`. `Ok` releases the finalizer (kube's
/// helper removes it next); an `Error::Waiting` keeps it and looks again soon.
pub async fn cleanup(parent: &Parent, ctx: &Context) -> Result<Next, Error> {
    let app = &parent.app;
    let (key, label) = (parent.key(), parent.describe());
    let namespace = parent.namespace();
    let (plugin, loaded) = match resolve_plugin(parent, ctx) {
        Resolved::PolicyUnknown => {
            return Err(Error::Waiting {
                app: label,
                message: "the namespace's policy is not known yet".into(),
            });
        }
        Resolved::Holding(plugin) => (plugin, None),
        Resolved::Serving { plugin, loaded, .. } => (plugin, Some(loaded)),
    };
    let app_ref = parent.app_ref();
    let mut observed = ctx.stores.observe(&app_ref);
    // The claims as the API server has them now, not as the cache last saw them: a claim a
    // workload made just before it stopped must be among those `finalize` decides about.
    observed.retain(|o| !(o.api_version == "v1" && o.kind == "PersistentVolumeClaim"));
    let claims = list_claims(ctx, &app_ref)
        .await
        .map_err(|source| Error::Kube {
            app: label.clone(),
            what: "listing its claims".into(),
            source,
        })?;
    let retained: Vec<serde_json::Value> = claims.iter().map(|c| c.json.clone()).collect();
    observed.extend(claims);
    let now = Timestamp::now();
    let snapshot = Snapshot {
        app: app_ref,
        desired_version: app.spec.version.clone(),
        previous: app.status.clone().unwrap_or_default(),
        observed,
        now,
        created: app.metadata.creation_timestamp.as_ref().map(|t| t.0),
        plugin,
    };
    let deletion = match loaded {
        None => decide_deletion(&snapshot, &mut NoPlugin),
        Some(loaded) => {
            let input = AppContext::new(&parent.object, &retained, now.as_millisecond());
            // The App's own limits hold for finalize as for every other call.
            let limits = call_limits(app, &loaded);
            let mut calls = ComponentCalls::budgeted(
                loaded,
                Arc::new(input),
                limits,
                namespace.clone(),
                key.clone(),
            );
            // The plugin call blocks (it waits for its sandbox thread).
            tokio::task::spawn_blocking(move || decide_deletion(&snapshot, &mut calls))
                .await
                .map_err(|err| Error::Internal {
                    app: label.clone(),
                    message: format!("the deletion's decision did not finish: {err}"),
                })?
        }
    };
    tracing::info!(
        parent = %key,
        stop = ?deletion.stop.iter().map(ToString::to_string).collect::<Vec<_>>(),
        delete = ?deletion.delete.iter().map(|k| &k.name).collect::<Vec<_>>(),
        finalizer = ?deletion.finalizer,
        "deletion decision"
    );
    perform(parent, ctx, &namespace, deletion).await
}

/// The claims labelled with the App (by name and kind, [`wasmop_core::observed`]), listed
/// from the API server.
async fn list_claims(ctx: &Context, app: &AppRef) -> Result<Vec<ObservedObject>, kube::Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &app.namespace);
    let listed = api
        .list(&ListParams::default().labels(&format!("{APP_LABEL}={}", app.name)))
        .await?;
    let mark = app.kind_mark();
    Ok(listed
        .items
        .into_iter()
        .filter(|claim| {
            labelled_for(
                |k| claim.labels().get(k).map(String::as_str),
                &app.name,
                &mark,
            )
        })
        .filter_map(|claim| {
            let mut json = serde_json::to_value(claim).ok()?;
            if let Some(map) = json.as_object_mut() {
                map.insert("apiVersion".into(), "v1".into());
                map.insert("kind".into(), "PersistentVolumeClaim".into());
            }
            ObservedObject::from_value(json, &app.uid)
        })
        .collect())
}

/// Carries out `deletion`: the workloads first (in the foreground: each is gone only once its
/// pods are), then the claims, then the events; the finalizer as the decision says.
async fn perform(
    app: &Parent,
    ctx: &Context,
    namespace: &str,
    deletion: Deletion,
) -> Result<Next, Error> {
    let (key, label) = (app.key(), app.describe());
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    for workload in &deletion.stop {
        // The core stops only StatefulSets (the workloads that make claims).
        if (workload.api_version.as_str(), workload.kind.as_str()) != ("apps/v1", "StatefulSet") {
            return Err(Error::Internal {
                app: label,
                message: format!("the deletion asked to stop {workload}, which is no StatefulSet"),
            });
        }
        match sets
            .delete(&workload.name, &DeleteParams::foreground())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Kube {
                    app: label,
                    what: format!("deleting {workload}"),
                    source,
                });
            }
        }
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    for claim in &deletion.delete {
        match pvcs.delete(&claim.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Kube {
                    app: label,
                    what: format!("deleting claim {}", claim.name),
                    source,
                });
            }
        }
    }
    for event in &deletion.events {
        publish(ctx, app, event).await;
    }
    match deletion.finalizer {
        Finalizer::Release => {
            ctx.failures.succeeded(&key);
            Ok(Next::AwaitChange)
        }
        Finalizer::Wait(message) => {
            ctx.failures.succeeded(&key);
            Err(Error::Waiting {
                app: label,
                message,
            })
        }
        Finalizer::Retry(message) => Err(Error::Finalizer {
            app: label,
            message,
        }),
    }
}
