//! Wires the kube-runtime Controller: Apps, the reflectors of what they own (which both fill
//! the fetch caches and trigger reconciles), plugin swap notifications (which requeue every App
//! using the plugin), bounded concurrency and graceful shutdown.

use std::{future::Future, sync::Arc};

use futures::{Stream, StreamExt, future::BoxFuture};
use kube::{
    Client, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        events::{Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio_stream::wrappers::BroadcastStream;

use crate::{
    api_health::ApiHealth,
    app::App,
    plugin::runtime::PluginRuntime,
    plugin::source::{OciRules, SourceRef},
    policy::{Resolution, view::PolicyView},
    reconcile::{self, Context},
};

pub(crate) mod bound;
pub mod cache;
pub mod coalesce;
pub mod kinds;
pub mod priority;
pub mod reflect;
pub mod trim;
mod warm;
pub mod watch_backoff;

use self::{
    reflect::{api, ready_of, slim},
    watch_backoff::{NoDelay, WatchBackoff},
};

/// How the controller runs.
pub struct Settings {
    /// `None` watches the whole cluster; `Some(ns)` one namespace.
    pub namespace: Option<String>,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// How long the changes to an App's objects are gathered before it is reconciled once
    /// for all of them (see [`crate::controller::coalesce`]).
    pub coalesce: std::time::Duration,
    /// Where reconciles in flight are reported.
    pub health: ApiHealth,
    /// Which PluginPolicy governs each namespace; its changes re-reconcile the Apps they affect.
    pub policies: Arc<PolicyView>,
    /// The reconcile loop's metrics.
    pub metrics: reconcile::execute::ReconcileMetrics,
    /// The kinds valid PluginBindings bind, each served by a controller of its own.
    pub bound: tokio::sync::watch::Receiver<bound::Bound>,
    /// Whether the PluginBindings have been read once (`bound` says what they bind from then
    /// on): the warm-up waits for it.
    pub bindings_listed: tokio::sync::watch::Receiver<bool>,
    /// Whether this replica leads (always, without leader election). Until it does, the
    /// controller is a warm standby: its caches sync and stay current (the bound kinds' too),
    /// the plugins its Apps and bound kinds' instances use load, and nothing is reconciled or
    /// written.
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// The progressive bindings' rollouts (one for the host: a binding's rollout is one).
    pub rollouts: crate::rollout::Rollouts,
    /// Whether this scope's bound kinds' controllers drive their rollouts (the host's first
    /// scope's do; the others follow what it writes).
    pub drives_rollouts: bool,
}

/// Runs the controller until `shutdown` resolves, then lets in-flight reconciles finish.
/// `ready` is called once every cache has synced and the plugins the Apps and the bound kinds'
/// instances use have loaded (see [`warm`]); reconciles start once `settings.leading` is true
/// as well.
pub async fn run(
    client: Client,
    runtime: &PluginRuntime,
    settings: Settings,
    ready: impl FnOnce() + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_deref();
    // One stop for the App controller and every bound kind's.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_on = tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = {
        let mut stop_rx = stop_rx.clone();
        async move {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        }
    };

    // The App watch gets its own backoff, like every other watch, and the controller's shared
    // trigger backoff never waits: see `watch_backoff` for the deafness the shared one caused.
    // No App is reconciled before every cache has synced (as controller-runtime's workers wait
    // for theirs): against a half-filled cache a reconcile would take the objects it cannot see
    // yet for missing, read each one back and apply it again. Triggers are held until then,
    // not reconciles: a reconcile dispatched later reads the App as the cache has it then, and
    // a shutdown before the sync has no reconcile to wait for.
    let (synced, synced_rx) = tokio::sync::watch::channel(false);
    let (apps, apps_writer) = reflector::store();
    let app_stream = reflector::reflector(
        apps_writer,
        watcher(api::<App>(&client, ns), watcher::Config::default()).modify(slim),
    )
    .backoff(WatchBackoff::default())
    .applied_objects()
    .predicate_filter(parent_changed::<App>, Default::default());
    let app_stream = {
        let apps = apps.clone();
        after_sync(app_stream, synced_rx.clone(), move || {
            apps.state().iter().map(|app| Ok(App::clone(app))).collect()
        })
    };
    // The App watch's triggers go through the priority queue below with the other urgent ones:
    // the controller's own trigger stream is left empty.
    let app_triggers = app_stream.filter_map(|app| {
        futures::future::ready(match app {
            Ok(app) => Some(ObjectRef::from_obj(&app)),
            Err(err) => {
                tracing::debug!(error = %err, "App watch error");
                None
            }
        })
    });
    let controller = Controller::for_stream(futures::stream::pending(), apps.clone())
        .trigger_backoff(NoDelay)
        .with_config(ControllerConfig::default().concurrency(settings.concurrency));
    // Every kind of the kind table: its cache, and its changes as triggers, coalesced per
    // parent; an App's go to the App controller, a bound kind's instance's to its kind's.
    let (stores, object_changes) =
        crate::controller::kinds::start(&client, ns, &settings.metrics.cache);
    let routes: bound::Routes = Default::default();
    let object_changes = after_sync(
        crate::controller::coalesce::coalesce(object_changes, settings.coalesce),
        synced_rx.clone(),
        Vec::new,
    )
    .filter_map({
        let routes = routes.clone();
        move |key| {
            let app = (key.mark == wasmop_core::observed::APP_KIND_MARK)
                .then(|| ObjectRef::<App>::new(&key.name).within(&key.namespace));
            if app.is_none() {
                let routes = routes.lock().unwrap_or_else(|p| p.into_inner());
                // A kind no binding serves (any more): nothing to reconcile.
                if let Some(route) = routes.get(&key.mark) {
                    let _ = route.send(key);
                }
            }
            futures::future::ready(app)
        }
    });
    let swaps = after_sync(
        plugin_changes(runtime, apps.clone()),
        synced_rx.clone(),
        Vec::new,
    );
    // A source stays loaded while an App of this controller references it, however long that
    // App waits between reconciles. An App whose policy is not known yet counts as a user.
    {
        let apps = apps.clone();
        let policies = settings.policies.clone();
        runtime
            .watcher
            .add_users(Arc::new(move |source: &SourceRef| {
                apps.state().iter().any(|app| {
                    let namespace = app.namespace().unwrap_or_default();
                    let rules = match policies.resolve(&namespace) {
                        None => return true,
                        Some(Resolution::Governed { rules, .. }) => rules.source.oci,
                        Some(Resolution::Refused { .. }) => return false,
                    };
                    SourceRef::from_spec(&namespace, &app.spec.plugin, &rules)
                        .is_ok_and(|s| s == *source)
                })
            }));
    }
    // The bound kinds' sources are in use while they are bound.
    {
        let bound = settings.bound.clone();
        runtime
            .watcher
            .add_users(Arc::new(move |source: &SourceRef| {
                bound.borrow().values().any(|kind| {
                    kind.binding.as_ref().is_some_and(|b| {
                        SourceRef::from_spec(&b.source_namespace, &b.plugin, &OciRules::default())
                            .is_ok_and(|s| s.location() == source.location())
                    })
                })
            }));
    }
    let policy_moves = after_sync(
        policy_changes(
            settings.policies.clone(),
            apps.clone(),
            |app: &App| ObjectRef::from_obj(app),
            |app: &App| app.name_any(),
        ),
        synced_rx.clone(),
        Vec::new,
    );
    // An App deleted (or moved out of reach) is no longer due: the stall check of /healthz
    // looks only at Apps the cache still holds.
    let forget_deleted = {
        let (apps, health) = (apps.clone(), settings.health.clone());
        // Other namespaces' controllers share the health state: leave their Apps alone.
        let mine = settings.namespace.clone().map(|ns| format!("{ns}/"));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                let keys: std::collections::HashSet<String> = apps
                    .state()
                    .iter()
                    .map(|a| format!("{}/{}", a.namespace().unwrap_or_default(), a.name_any()))
                    .collect();
                // Bound kinds' keys (`<ns>/<Kind>.<group>/<name>`) are their controllers'.
                health.retain_due(|key| {
                    keys.contains(key)
                        || key.matches('/').count() != 1
                        || mine.as_ref().is_some_and(|p| !key.starts_with(p))
                });
            }
        })
    };

    let reporter = Reporter {
        controller: "wasmop".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        stores: stores.clone(),
        plugins: runtime.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        failures: Default::default(),
        changes: Default::default(),
        health: settings.health.clone(),
        policies: settings.policies.clone(),
        metrics: settings.metrics.clone(),
        rollouts: settings.rollouts.clone(),
    });
    // Which bound kinds are warm: each bound kind's controller runs from the start, filling its
    // cache and loading its plugin, and reconciles once the gate (`synced`) opens.
    let warmth = warm::Warmth::default();
    let sync: BoxFuture<'static, ()> = {
        let stores = stores.clone();
        let apps = apps.clone();
        let mut leading = settings.leading.clone();
        // Subscribed before the caches sync: a plugin loaded meanwhile is heard of.
        let changes = runtime.registry.subscribe();
        let mut waiting = {
            let (ctx, apps, bound, listed, warmth) = (
                ctx.clone(),
                apps.clone(),
                settings.bound.clone(),
                settings.bindings_listed.clone(),
                warmth.clone(),
            );
            let kind = crate::parent::ParentKind::app();
            let mut first = None;
            move || {
                let apps = apps.state();
                let parents = apps
                    .iter()
                    .map(|app| crate::parent::Parent::from_app(app, kind.clone()));
                // PluginBindings the host cannot list (an install without bound kinds' RBAC)
                // hold the warm-up for a while only, not for all of `WARM_UP_LIMIT`.
                let started = *first.get_or_insert_with(std::time::Instant::now);
                let unlisted = !*listed.borrow() && started.elapsed() < warm::BINDINGS_LISTING_WAIT;
                warm::loading(&ctx, parents)
                    + usize::from(unlisted)
                    + warmth.cold(bound.borrow().keys())
            }
        };
        Box::pin(async move {
            let mut waits: Vec<(std::borrow::Cow<'static, str>, BoxFuture<'static, ()>)> =
                vec![("apps".into(), ready_of(apps))];
            waits.extend(stores.sync_waits());
            let started = std::time::Instant::now();
            for (what, mut wait) in waits {
                // A cache that never syncs (a kind the host may not list) holds every App:
                // say which, once a minute, rather than stay silently unready.
                while tokio::time::timeout(std::time::Duration::from_secs(60), &mut wait)
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        cache = &*what,
                        waited_s = started.elapsed().as_secs(),
                        "cache has not synced yet; no App is reconciled until it has (can the host list and watch it?)"
                    );
                }
                tracing::debug!(cache = &*what, "cache synced");
            }
            tracing::info!("caches synced");
            warm::warm_up(&mut waiting, &leading, changes).await;
            ready();
            // A standby keeps its caches current (the reflectors run on) and loads the plugin
            // of every App that appears or changes meanwhile (`add_users` above keeps those
            // loaded; the bound kinds' controllers do the same for their instances), and takes
            // its first reconcile only once it leads: every parent, at once, against warm
            // caches.
            loop {
                tokio::select! {
                    leads = leading.wait_for(|leading| *leading) => match leads {
                        Ok(_) => break,
                        Err(_) => return,
                    },
                    () = tokio::time::sleep(warm::WARM_PASS) => {
                        waiting();
                    }
                }
            }
            synced.send_replace(true);
        })
    };
    // Aborted when the controller stops: a sync finishing after that (its writers dropped make
    // the waits resolve) must not report the host ready.
    let sync = tokio::spawn(sync);

    // The bound kinds' controllers start now: a standby's caches of their instances sync and
    // their plugins load while it waits; they reconcile once the gate opens, as the App
    // controller does.
    let bound_kinds = {
        let shared = Arc::new(bound::Shared {
            client: client.clone(),
            namespace: settings.namespace.clone(),
            ctx: ctx.clone(),
            runtime: runtime.clone(),
            concurrency: settings.concurrency,
            gate: synced_rx,
            warmth,
            drives_rollouts: settings.drives_rollouts,
        });
        tokio::spawn(bound::run(
            shared,
            settings.bound.clone(),
            routes,
            stop_rx.clone(),
        ))
    };
    // An App's own changes, its plugin's and its policy's go before its objects' changes.
    let (requests, queue) = priority::prioritize(
        futures::stream::select(futures::stream::select(app_triggers, swaps), policy_moves),
        object_changes,
        priority::handed(settings.concurrency),
        settings.metrics.queued.clone(),
    );
    let refer = |app: &App| ObjectRef::from_obj(app);
    controller
        .reconcile_on(requests)
        .graceful_shutdown_on(stopped)
        .run(
            queued(&queue, refer, reconcile::reconcile),
            queued_on_error(&queue, refer, reconcile::error_policy),
            ctx,
        )
        .for_each(|result| {
            queue.result(&result);
            async move {
                match result {
                    Ok((app, _)) => tracing::debug!(app = %app, "reconciled"),
                    Err(err) => tracing::debug!(error = %err, "reconcile error"),
                }
            }
        })
        .await;
    // The bound kinds' controllers stop with the App controller and finish their reconciles.
    let _ = bound_kinds.await;
    forget_deleted.abort();
    sync.abort();
    stop_on.abort();
}

/// One reconcile, as kube-runtime's controller runs it.
type Reconciling = BoxFuture<'static, Result<Action, reconcile::Error>>;

/// The reconciler for kube-runtime's controller, around `reconcile`: it reports the reconcile
/// done to `queue` and hands it the wait it returns, for the queue's timers ([`priority`]);
/// the controller is told `await_change`, so that nothing waits in its own scheduler. `refer`
/// names a parent for the queue.
pub(crate) fn queued<K, C, Fut>(
    queue: &priority::Handle<K>,
    refer: impl Fn(&K) -> ObjectRef<K> + Send + 'static,
    reconcile: impl Fn(Arc<K>, Arc<C>) -> Fut + Send + 'static,
) -> impl FnMut(Arc<K>, Arc<C>) -> Reconciling + Send + 'static
where
    K: kube::Resource + Send + Sync + 'static,
    K::DynamicType: Clone,
    C: Send + Sync + 'static,
    Fut: Future<Output = Result<reconcile::Next, reconcile::Error>> + Send + 'static,
{
    let queue = queue.clone();
    move |parent: Arc<K>, ctx: Arc<C>| -> Reconciling {
        let (queue, at) = (queue.clone(), refer(parent.as_ref()));
        let run = reconcile(parent, ctx);
        Box::pin(async move {
            // A failure is the error policy's to report.
            let next = run.await?;
            // The wait first: a request that waited meanwhile then replaces its timer.
            queue.requeue(at.clone(), next.after());
            queue.finished(at.namespace.as_deref(), &at.name);
            Ok(Action::await_change())
        })
    }
}

/// The error policy for kube-runtime's controller, around `error_policy`, as [`queued`].
pub(crate) fn queued_on_error<K, C>(
    queue: &priority::Handle<K>,
    refer: impl Fn(&K) -> ObjectRef<K> + Send + Sync + 'static,
    error_policy: impl Fn(Arc<K>, &reconcile::Error, Arc<C>) -> reconcile::Next + Send + Sync + 'static,
) -> impl Fn(Arc<K>, &reconcile::Error, Arc<C>) -> Action + Send + Sync + 'static
where
    K: kube::Resource + Send + Sync + 'static,
    K::DynamicType: Clone,
{
    let queue = queue.clone();
    move |parent: Arc<K>, error: &reconcile::Error, ctx: Arc<C>| {
        let at = refer(parent.as_ref());
        queue.requeue(at.clone(), error_policy(parent, error, ctx).after());
        queue.finished(at.namespace.as_deref(), &at.name);
        Action::await_change()
    }
}

/// `input`'s items from the moment `synced` turns true, led by what `on_open` gives then.
/// Items before that are dropped, not held: an App's watch can change without bound while a
/// cache never syncs (a kind the host may not list), and every App is reconciled when the gate
/// opens anyway (`on_open` of the App stream names each once). `input` is polled all along:
/// behind it are the reflectors that fill the caches being waited for.
fn after_sync<S>(
    input: S,
    synced: tokio::sync::watch::Receiver<bool>,
    on_open: impl FnOnce() -> Vec<S::Item> + Send + 'static,
) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    let input = Box::pin(input);
    let opened = futures::stream::once(async move {
        let mut synced = synced;
        let mut input = input;
        let mut ended = false;
        loop {
            tokio::select! {
                // The sync first: an item that comes once the caches have synced is never
                // taken for an early one.
                biased;
                // An error: the sync task is gone (the controller is stopping); what follows
                // is then the input itself, which ends with it.
                _ = synced.wait_for(|synced| *synced) => break,
                item = input.next(), if !ended => ended = item.is_none(),
            }
        }
        let rest = if ended {
            futures::stream::empty().boxed()
        } else {
            input.boxed()
        };
        futures::stream::iter(on_open()).chain(rest)
    });
    opened.flatten()
}

/// What about a parent (an App, a bound kind's instance) calls for a reconcile: its spec
/// (generation), others' finalizers and its deletion; not its status or the host's own
/// finalizer, so the host's own writes (the status, the finalizer a new parent's first
/// reconcile adds) do not reconcile it again.
pub(crate) fn parent_changed<K: ResourceExt>(app: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    app.meta().generation.hash(&mut hasher);
    app.finalizers()
        .iter()
        .filter(|f| *f != reconcile::FINALIZER)
        .for_each(|f| f.hash(&mut hasher));
    app.meta().deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// Every App whose plugin source changed (swap, load, failure), as reconcile requests.
fn plugin_changes(
    runtime: &PluginRuntime,
    apps: Store<App>,
) -> impl Stream<Item = ObjectRef<App>> + Send + 'static {
    BroadcastStream::new(runtime.registry.subscribe())
        // A receiver that fell behind lost changes it cannot name: every App is requeued.
        .map(|change| change.ok())
        .flat_map(move |changed: Option<SourceRef>| {
            // Which credentials and keys an App's source carries depends on its policy; every
            // App naming the same location is requeued, and reconciles against its own.
            let location = changed.map(|source| source.location());
            let users: Vec<ObjectRef<App>> = apps
                .state()
                .iter()
                .filter(|app| {
                    let Some(location) = &location else {
                        return true;
                    };
                    SourceRef::from_spec(
                        &app.namespace().unwrap_or_default(),
                        &app.spec.plugin,
                        &OciRules::default(),
                    )
                    .is_ok_and(|s| s.location() == *location)
                })
                .map(|app| ObjectRef::from_obj(app.as_ref()))
                .collect();
            futures::stream::iter(users)
        })
}

/// Every parent whose namespace is now governed differently (another policy, changed rules,
/// newly refused or allowed), or whose ServiceAccount names RBAC bindings now hold differently,
/// after each change of a policy, a namespace's labels or a binding. The first tick after the
/// caches sync requeues every parent once. `refer` names a parent for the controller,
/// `grantee` as RBAC bindings grant to it ([`crate::parent::Parent::grantee`]).
pub(crate) fn policy_changes<K>(
    policies: Arc<PolicyView>,
    parents: Store<K>,
    refer: impl Fn(&K) -> ObjectRef<K> + Send + 'static,
    grantee: impl Fn(&K) -> String + Send + 'static,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    type Governed = (Option<Resolution>, Option<wasmop_core::guard::Bound>);
    let last = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        ObjectRef<K>,
        Governed,
    >::new()));
    tokio_stream::wrappers::WatchStream::new(policies.subscribe()).flat_map(move |_| {
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        let mut moved: Vec<ObjectRef<K>> = Vec::new();
        let mut resolved = std::collections::HashMap::new();
        let mut now = std::collections::HashMap::new();
        for parent in parents.state() {
            let namespace = parent.namespace().unwrap_or_default();
            let resolution = resolved
                .entry(namespace.clone())
                .or_insert_with(|| policies.resolve(&namespace))
                .clone();
            let key = refer(parent.as_ref());
            let governed = (
                resolution,
                policies.bound(&namespace, &grantee(parent.as_ref())),
            );
            if governed.0.is_some() && last.get(&key) != Some(&governed) {
                moved.push(key.clone());
            }
            now.insert(key, governed);
        }
        // Parents gone are forgotten.
        *last = now;
        futures::stream::iter(moved)
    })
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        time::Duration,
    };

    use futures::StreamExt;
    use tokio::sync::{mpsc, watch};
    use tokio_stream::wrappers::UnboundedReceiverStream;

    use super::after_sync;

    /// Triggers that arrive before the caches synced are dropped, and the input is drained
    /// meanwhile (behind it, the reflectors fill the caches); the gate opens with what
    /// `on_open` names (every App, for the App stream) and then lets everything through.
    #[tokio::test(start_paused = true)]
    async fn triggers_before_the_sync_give_way_to_one_per_app_at_it() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (synced, synced_rx) = watch::channel(false);
        let read = Arc::new(AtomicUsize::new(0));
        let counted = UnboundedReceiverStream::new(rx).inspect({
            let read = Arc::clone(&read);
            move |_| {
                read.fetch_add(1, Ordering::SeqCst);
            }
        });
        let mut out = Box::pin(after_sync(counted, synced_rx, || vec![10, 20]));
        for item in [1, 2, 3] {
            tx.send(item).expect("the gate holds the receiver");
        }
        let early = tokio::time::timeout(Duration::from_secs(5), out.next()).await;
        assert!(early.is_err(), "a trigger went through before the sync");
        assert_eq!(
            read.load(Ordering::SeqCst),
            3,
            "the input was not drained while the gate was shut"
        );

        synced.send_replace(true);
        tx.send(4).expect("the gate holds the receiver");
        drop(tx);
        let all: Vec<i32> = out.collect().await;
        assert_eq!(all, [10, 20, 4]);
    }

    /// A gate whose sync task is gone (the controller stopping) opens rather than hold the
    /// stream shut forever.
    #[tokio::test(start_paused = true)]
    async fn a_gate_without_a_sync_task_opens() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (synced, synced_rx) = watch::channel(false);
        let mut out = Box::pin(after_sync(
            UnboundedReceiverStream::new(rx),
            synced_rx,
            || vec![0],
        ));
        drop(synced);
        assert_eq!(out.next().await, Some(0));
        tx.send(1).expect("the gate holds the receiver");
        assert_eq!(out.next().await, Some(1));
    }
}
