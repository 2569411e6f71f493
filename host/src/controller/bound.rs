//! The controllers of bound kinds: one kube-runtime Controller over `DynamicObject` for each
//! kind a valid `PluginBinding` binds ([`crate::binding::serve`] says which), started,
//! restarted and stopped as the bindings change. A kind found at run time is one
//! `ApiResource`, not a new code path: the reconcile is the App's ([`crate::reconcile`]), on
//! the instance read as a [`Parent`].
//!
//! Each controller's triggers are the App controller's, for its kind: changes of the objects
//! its instances own or label (routed here by kind mark from the kind table's watches), swaps
//! of the binding's plugin, and moves of the namespaces' policies.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use futures::{Stream, StreamExt};
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::{BroadcastStream, UnboundedReceiverStream};

use super::{
    after_sync, parent_changed, policy_changes,
    reflect::{ParentKey, ready_of, slim},
    warm::{self, Warmth},
    watch_backoff::{NoDelay, WatchBackoff},
};
use crate::{
    parent::{Parent, ParentKind, key_of},
    plugin::{
        runtime::PluginRuntime,
        source::{OciRules, SourceRef},
    },
    reconcile::{self, BoundContext, Context},
};

/// The kinds to serve, by kind mark: what the bindings say now.
pub type Bound = BTreeMap<String, Arc<ParentKind>>;

/// Where the kind table's triggers for each bound kind go, by kind mark.
pub(crate) type Routes = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<ParentKey>>>>;

/// What every bound kind's controller of one namespace scope shares.
pub(crate) struct Shared {
    /// The API client.
    pub client: Client,
    /// `None`: the whole cluster; `Some(ns)`: one namespace.
    pub namespace: Option<String>,
    /// What every reconcile needs.
    pub ctx: Arc<Context>,
    /// The plugins (for the swap triggers).
    pub runtime: PluginRuntime,
    /// Reconciles running at once, per kind.
    pub concurrency: u16,
    /// Whether reconciles may start (this replica leads, its caches synced and warm): until
    /// then each kind's cache fills and its plugin loads, and nothing is reconciled.
    pub gate: watch::Receiver<bool>,
    /// Where each kind says it is warm.
    pub warmth: Warmth,
    /// Whether this scope's controllers drive their progressive bindings' rollouts: one scope
    /// of the host does (the first), so that one driver writes each binding's rollout.
    pub drives_rollouts: bool,
}

/// One running controller.
struct Running {
    kind: Arc<ParentKind>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Runs a controller for each kind `bound` names until `stop` resolves, following its changes:
/// a kind no longer bound, or bound differently (another plugin, version, limits), has its
/// controller stopped gracefully (in-flight reconciles finish) and, if still bound, started
/// again with what the binding says now.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut bound: watch::Receiver<Bound>,
    routes: Routes,
    mut stop: watch::Receiver<bool>,
) {
    let mut running: HashMap<String, Running> = HashMap::new();
    loop {
        let wanted = bound.borrow_and_update().clone();
        let stale: Vec<String> = running
            .iter()
            .filter(|(mark, r)| wanted.get(*mark) != Some(&r.kind))
            .map(|(mark, _)| mark.clone())
            .collect();
        // Stopped together: each finishes its reconciles in flight, and one slow to do so holds
        // none of the others.
        let mut stopping = Vec::new();
        for mark in stale {
            if let Some(r) = running.remove(&mark) {
                lock(&routes).remove(&mark);
                let _ = r.stop.send(());
                stopping.push((mark, r.task));
            }
        }
        for (mark, task) in stopping {
            let _ = task.await;
            tracing::info!(kind = %mark, "stopped the controller of a bound kind");
        }
        for (mark, kind) in wanted {
            if running.contains_key(&mark) {
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            lock(&routes).insert(mark.clone(), tx);
            let (stop_tx, stop_rx) = oneshot::channel();
            tracing::info!(
                kind = %mark,
                namespace = shared.namespace.as_deref().unwrap_or("<all>"),
                "starting the controller of a bound kind"
            );
            let task = tokio::spawn(serve_kind(shared.clone(), kind.clone(), rx, stop_rx));
            running.insert(
                mark,
                Running {
                    kind,
                    stop: stop_tx,
                    task,
                },
            );
        }
        tokio::select! {
            changed = bound.changed() => if changed.is_err() { break },
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    lock(&routes).clear();
    let stopping: Vec<Running> = running.into_values().collect();
    for r in &stopping {
        tracing::debug!(kind = %r.kind.mark(), "stopping the controller of a bound kind");
    }
    let tasks: Vec<_> = stopping
        .into_iter()
        .map(|r| {
            let _ = r.stop.send(());
            r.task
        })
        .collect();
    futures::future::join_all(tasks).await;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The controller of one bound kind, until `stop`.
async fn serve_kind(
    shared: Arc<Shared>,
    kind: Arc<ParentKind>,
    triggers: mpsc::UnboundedReceiver<ParentKey>,
    stop: oneshot::Receiver<()>,
) {
    let resource = kind.resource.clone();
    let api: Api<DynamicObject> = match &shared.namespace {
        Some(ns) => Api::namespaced_with(shared.client.clone(), ns, &resource),
        None => Api::all_with(shared.client.clone(), &resource),
    };
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    // The kind's own gate: the replica's, and this kind's cache synced. Opened on a cache still
    // listing, `on_open` below would miss the instances not in the store yet, whose list items
    // the shut gate dropped; they would wait for a change of their own.
    let (open_tx, open) = watch::channel(false);
    let opener = {
        let (store, mut gate) = (store.clone(), shared.gate.clone());
        tokio::spawn(async move {
            ready_of(store).await;
            if gate.wait_for(|open| *open).await.is_ok() {
                open_tx.send_replace(true);
            }
            // The sender lives until the controller stops: a gate that closes without opening
            // (the replica stopping) must not open this one.
            std::future::pending::<()>().await;
        })
    };
    // Every trigger waits for the gate; the cache fills meanwhile (the reflector is polled all
    // along), and every instance is reconciled when the gate opens.
    let stream = after_sync(
        reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).modify(slim),
        )
        .backoff(WatchBackoff::default())
        .applied_objects()
        .predicate_filter(parent_changed::<DynamicObject>, Default::default()),
        open.clone(),
        {
            let store = store.clone();
            move || {
                store
                    .state()
                    .iter()
                    .map(|o| Ok(DynamicObject::clone(o)))
                    .collect()
            }
        },
    );
    let instance_triggers = {
        let resource = resource.clone();
        stream.filter_map(move |object| {
            futures::future::ready(match object {
                Ok(object) => Some(ObjectRef::from_obj_with(&object, resource.clone())),
                Err(err) => {
                    tracing::debug!(error = %err, "bound kind's watch error");
                    None
                }
            })
        })
    };
    let controller =
        Controller::for_stream_with(futures::stream::pending(), store.clone(), resource.clone())
            .trigger_backoff(NoDelay)
            .with_config(ControllerConfig::default().concurrency(shared.concurrency));
    let object_changes = {
        let resource = resource.clone();
        after_sync(
            UnboundedReceiverStream::new(triggers).map(move |key| {
                ObjectRef::new_with(&key.name, resource.clone()).within(&key.namespace)
            }),
            open.clone(),
            Vec::new,
        )
    };
    let warming = tokio::spawn(warm_kind(shared.clone(), kind.clone(), store.clone()));
    // A progressive binding's rollout: its driver requeues the instances whose digest may have
    // changed, as urgent requests.
    let (moves_tx, moves) = mpsc::unbounded_channel();
    let driving = kind
        .binding
        .as_ref()
        .filter(|b| b.rollout.is_some() && shared.drives_rollouts)
        .map(|_| {
            tokio::spawn(crate::rollout::driver::drive(
                crate::rollout::driver::Driver {
                    client: shared.client.clone(),
                    ctx: shared.ctx.clone(),
                    kind: kind.clone(),
                    store: store.clone(),
                    gate: open.clone(),
                    requeue: moves_tx,
                    concurrency: usize::from(shared.concurrency),
                },
            ))
        });
    let moves = after_sync(UnboundedReceiverStream::new(moves), open.clone(), Vec::new);
    let swaps = after_sync(
        plugin_changes(&shared.runtime, &kind, store.clone()),
        open.clone(),
        Vec::new,
    );
    let policy_moves = {
        let (kind, resource) = (kind.clone(), resource.clone());
        after_sync(
            policy_changes(
                shared.ctx.policies.clone(),
                store.clone(),
                move |o: &DynamicObject| ObjectRef::from_obj_with(o, resource.clone()),
                move |o: &DynamicObject| format!("{}/{}", kind.mark(), o.name_any()),
            ),
            open,
            Vec::new,
        )
    };
    // A deleted instance is no longer due: the stall check of /healthz looks only at instances
    // the cache still holds. Only this kind's keys are this task's to forget.
    let forget_deleted = {
        let (store, kind, health) = (store.clone(), kind.clone(), shared.ctx.health.clone());
        let prefix_ns = shared.namespace.clone().map(|ns| format!("{ns}/"));
        let marker = format!("/{}/", kind.mark());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                let keys: std::collections::HashSet<String> = store
                    .state()
                    .iter()
                    .map(|o| key_of(&kind, &o.namespace().unwrap_or_default(), &o.name_any()))
                    .collect();
                health.retain_due(|key| {
                    keys.contains(key)
                        || !key.contains(&marker)
                        || prefix_ns.as_ref().is_some_and(|p| !key.starts_with(p))
                });
            }
        })
    };
    let context = Arc::new(BoundContext {
        ctx: shared.ctx.clone(),
        kind: kind.clone(),
    });
    // As for Apps: an instance's own changes, its plugin's and its policy's go first.
    let (requests, queue) = crate::controller::priority::prioritize(
        futures::stream::select(
            futures::stream::select(instance_triggers, swaps),
            futures::stream::select(policy_moves, moves),
        ),
        object_changes,
        crate::controller::priority::handed(shared.concurrency),
        shared.ctx.metrics.queued.clone(),
    );
    let refer = {
        let resource = resource.clone();
        move |object: &DynamicObject| ObjectRef::from_obj_with(object, resource.clone())
    };
    controller
        .reconcile_on(requests)
        .graceful_shutdown_on(async move {
            let _ = stop.await;
        })
        .run(
            super::queued(&queue, refer.clone(), reconcile::reconcile_instance),
            super::queued_on_error(&queue, refer, reconcile::error_policy_instance),
            context,
        )
        .for_each(|result| {
            queue.result(&result);
            async move {
                match result {
                    Ok((object, _)) => tracing::debug!(instance = %object, "reconciled"),
                    Err(err) => tracing::debug!(error = %err, "reconcile error"),
                }
            }
        })
        .await;
    forget_deleted.abort();
    if let Some(driving) = driving {
        driving.abort();
        // What the next driver (the binding changed) or none (no longer progressive) says.
        if let Some(binding) = &kind.binding {
            shared.ctx.rollouts.forget(&binding.name);
            if let Ok(source) = SourceRef::from_spec(
                &binding.source_namespace,
                &binding.plugin,
                &OciRules::default(),
            ) {
                shared.ctx.plugins.registry.hold(
                    &binding.name,
                    &source.location(),
                    Default::default(),
                );
            }
        }
    }
    warming.abort();
    opener.abort();
    shared.warmth.forget(&kind.mark());
    // The kind is no longer served here: none of its instances is due (a stall check of
    // /healthz on them would restart the host for nothing).
    let marker = format!("/{}/", kind.mark());
    let prefix_ns = shared.namespace.clone().map(|ns| format!("{ns}/"));
    shared.ctx.health.retain_due(|key| {
        !key.contains(&marker) || prefix_ns.as_ref().is_some_and(|p| !key.starts_with(p))
    });
}

/// Until the gate opens: once the kind's cache has synced, loads the plugin its instances use
/// (as their reconciles would, under each namespace's policy) and says the kind is warm once
/// none waits for it, then goes on loading for instances that appear, every
/// [`warm::WARM_PASS`]. Once reconciles run, they load what they need.
async fn warm_kind(shared: Arc<Shared>, kind: Arc<ParentKind>, store: Store<DynamicObject>) {
    let mark = kind.mark();
    let mut gate = shared.gate.clone();
    tokio::select! {
        () = ready_of(store.clone()) => {}
        _ = gate.wait_for(|open| *open) => return,
    }
    let mut warm = false;
    loop {
        let instances = store.state();
        let parents = instances
            .iter()
            .map(|o| Parent::from_instance(o, kind.clone()));
        if warm::loading(&shared.ctx, parents) == 0 && !warm {
            tracing::debug!(kind = %mark, "warm: the bound kind's plugin is loaded");
            shared.warmth.warm(&mark);
            warm = true;
        }
        // Looked at often until warm (the replica's readiness waits for it), then as a
        // standby looks at its Apps.
        let pause = match warm {
            true => warm::WARM_PASS,
            false => std::time::Duration::from_millis(100),
        };
        tokio::select! {
            _ = gate.wait_for(|open| *open) => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Every instance of the kind when its binding's plugin changes (swap, load, failure), as
/// reconcile requests.
fn plugin_changes(
    runtime: &PluginRuntime,
    kind: &ParentKind,
    store: Store<DynamicObject>,
) -> impl Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    let location = kind.binding.as_ref().and_then(|b| {
        SourceRef::from_spec(&b.source_namespace, &b.plugin, &OciRules::default())
            .ok()
            .map(|s| s.location())
    });
    let resource = kind.resource.clone();
    BroadcastStream::new(runtime.registry.subscribe())
        // A receiver that fell behind lost changes it cannot name: every instance is requeued.
        .map(|change| change.ok())
        .flat_map(move |changed: Option<SourceRef>| {
            let ours = match &changed {
                None => true,
                Some(source) => location.as_ref() == Some(&source.location()),
            };
            let instances: Vec<ObjectRef<DynamicObject>> = match ours {
                false => Vec::new(),
                true => store
                    .state()
                    .iter()
                    .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
                    .collect(),
            };
            futures::stream::iter(instances)
        })
}
