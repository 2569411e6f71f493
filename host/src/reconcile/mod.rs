//! The reconcile of one parent (an App, or an instance of a bound kind: [`crate::parent`]):
//! decide, then do.
//!
//! 1. [`prepare`]: the namespace's policy, the App's plugin reference and the state of its
//!    plugin, and a snapshot of the App's objects from the reflector caches ([`fetch`]);
//! 2. [`wasmop_core::decide()`]: the pure decision (upgrade gate → plan → guard
//!    ([`wasmop_core::guard`], under the policy's plan rules) → apply and prune → health →
//!    backup → status and events), calling the plugin through
//!    [`ComponentCalls`](crate::plugin::component_calls::ComponentCalls);
//! 3. [`execute`]: performs the decision: adoption check, server-side apply, prune, backup Job,
//!    status write, events.
//!
//! Level-triggered and idempotent: a second reconcile of an App already as decided writes
//! nothing. A failing plugin leaves the App's objects untouched and says why in its status;
//! other Apps are unaffected. Deletion runs the plugin's `finalize` behind the
//! `wasmop.dev/cleanup` finalizer ([`cleanup`]).

pub(crate) mod cleanup;
pub(crate) mod execute;
pub(crate) mod fetch;
#[cfg(feature = "native-plugins")]
mod native;
pub(crate) mod prepare;
pub(crate) mod status;

use std::{sync::Arc, time::Duration};

use kube::{
    Api, Client, Resource, ResourceExt,
    api::DynamicObject,
    runtime::{
        controller::Action,
        events::Recorder,
        finalizer::{self, finalizer},
    },
};

use crate::controller::kinds::Stores;
use serde::{Serialize, de::DeserializeOwned};

use crate::{
    api_health::ApiHealth,
    app::App,
    parent::{Parent, ParentKind, key_of},
    plugin::runtime::PluginRuntime,
    policy::view::PolicyView,
};

pub use wasmop_core::decide::{RESYNC, SHORT_REQUEUE};

/// When a parent is to be reconciled again if nothing changes before: what a reconcile and a
/// failure's policy return. The controller's own queue ([`crate::controller::priority`]) keeps
/// these, not kube-runtime's scheduler, so that they take their turn with the other requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Only a change brings the parent back.
    AwaitChange,
    /// After this long, unless a change comes first.
    After(Duration),
}

impl Next {
    /// The wait, if any.
    pub fn after(self) -> Option<Duration> {
        match self {
            Self::AwaitChange => None,
            Self::After(after) => Some(after),
        }
    }
}

/// The finalizer that guards an App's cleanup (the decision core's: deletion is decided there).
pub const FINALIZER: &str = wasmop_core::deletion::FINALIZER;

/// What every reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Reflector caches.
    pub stores: Stores,
    /// The plugins: loaded ones, and the sources they come from.
    pub plugins: PluginRuntime,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Consecutive failures per App, for exponential backoff.
    pub failures: Backoff,
    /// Consecutive writes per App that found their object changed since the host looked
    /// (`execute::WriteError::Changed`): a few are a race, retried at once; more are a cache that
    /// does not catch up, retried with the failures' backoff.
    pub changes: Backoff,
    /// The link to the API server and the reconciles in flight, for the probes.
    pub health: ApiHealth,
    /// Which PluginPolicy governs each namespace.
    pub policies: Arc<PolicyView>,
    /// Reconcile, apply and prune counts for `/metrics`.
    pub metrics: execute::ReconcileMetrics,
    /// The progressive bindings' rollouts: which digest serves each instance.
    pub rollouts: crate::rollout::Rollouts,
}

/// Exponential backoff per App: 5 s after the first failure, doubling to at most 5 minutes, and
/// forgotten on the first success. Applies both to failed reconciles and to Apps held by a
/// failing plugin, so a broken plugin is not called in a tight loop.
#[derive(Default)]
pub struct Backoff(std::sync::Mutex<std::collections::HashMap<String, u32>>);

/// Longest wait between retries of a failing App.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Backoff {
    /// Records a failure of `key` and returns how long to wait before the next attempt.
    pub fn failed(&self, key: &str) -> Duration {
        let count = self.count(key);
        SHORT_REQUEUE
            .saturating_mul(1 << (count - 1).min(10))
            .min(MAX_BACKOFF)
    }

    /// Records a failure of `key` and returns how many there were in a row, this one included.
    pub fn count(&self, key: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = map.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// Whether `key` failed since its last success.
    pub fn is_failing(&self, key: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(key)
    }

    /// Forgets the failures of `key`.
    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// Why a reconcile failed; the controller retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{app}: {what}: {source}")]
    Kube {
        /// The parent, as messages name it (`App team-a/cache`).
        app: String,
        /// What the host was doing.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deletion waits for something (the policy, the plugin) before it may finish. An error,
    /// not an `Ok` requeue: the finalizer helper removes the finalizer on any `Ok` from cleanup.
    #[error("{app}: deletion waits: {message}")]
    Waiting {
        /// The parent, as messages name it (`App team-a/cache`).
        app: String,
        /// What it waits for, and how to stop waiting.
        message: String,
    },
    /// The host itself failed (the decision's thread panicked): a bug, reported with the App.
    #[error("{app}: internal error: {message}")]
    Internal {
        /// The parent, as messages name it (`App team-a/cache`).
        app: String,
        /// What failed.
        message: String,
    },
    /// The finalizer helper failed.
    #[error("{app}: finalizer: {message}")]
    Finalizer {
        /// The parent, as messages name it (`App team-a/cache`).
        app: String,
        /// What failed.
        message: String,
    },
}

impl Error {
    /// The metrics label of this error.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "kube",
            Self::Waiting { .. } => "waiting",
            Self::Internal { .. } => "internal",
            Self::Finalizer { .. } => "finalizer",
        }
    }
}

/// What a reconcile of a bound kind's instance needs besides the [`Context`]: the kind.
pub struct BoundContext {
    /// What every reconcile needs.
    pub ctx: Arc<Context>,
    /// The bound kind and its binding.
    pub kind: Arc<ParentKind>,
}

/// Reconciles one App (the App controller's entry point).
pub async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Next, Error> {
    let api: Api<App> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let kind = ParentKind::app();
    reconcile_object(app, api, |app| Parent::from_app(app, kind.clone()), &ctx).await
}

/// Reconciles one instance of a bound kind (its controller's entry point).
pub async fn reconcile_instance(
    object: Arc<DynamicObject>,
    bound: Arc<BoundContext>,
) -> Result<Next, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        bound.ctx.client.clone(),
        &object.namespace().unwrap_or_default(),
        &bound.kind.resource,
    );
    // A binding being deleted serves the instances it has (their deletion needs it) and takes
    // no new one: the binding goes once the last is gone, and an instance it took in the
    // meantime would wait for a `finalize` no host runs any more.
    if bound.kind.binding.as_ref().is_some_and(|b| b.deleting)
        && object.meta().deletion_timestamp.is_none()
        && !object.finalizers().iter().any(|f| f == FINALIZER)
    {
        return Ok(Next::AwaitChange);
    }
    let kind = bound.kind.clone();
    reconcile_object(
        object,
        api,
        |object| Parent::from_instance(object, kind.clone()),
        &bound.ctx,
    )
    .await
}

/// The reconcile of a parent of any kind: the finalizer, then apply or cleanup.
async fn reconcile_object<K>(
    object: Arc<K>,
    api: Api<K>,
    parent_of: impl Fn(&K) -> Parent,
    ctx: &Context,
) -> Result<Next, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let first = parent_of(&object);
    let (key, label, mark) = (first.key(), first.describe(), first.kind.mark());
    let _running = ctx.health.reconcile_started(key.clone());
    let _active = ctx.metrics.active();
    let started = std::time::Instant::now();
    // Only a parent that carries the finalizer (the executor adds it when a decision needs it,
    // [`wasmop_core::deletion::needs_finalizer`]) goes through kube's finalizer helper, which
    // would otherwise add it to every parent. One without it that is being deleted goes with
    // nothing to do: its objects follow through their owner references.
    let result = if !object.finalizers().iter().any(|f| f == FINALIZER) {
        match object.meta().deletion_timestamp {
            Some(_) => Ok(Next::AwaitChange),
            None => apply_parent(&parent_of(&object), ctx).await,
        }
    } else {
        // kube's helper speaks `Action`, which says nothing readable about its requeue: the
        // `Next` travels beside it.
        let mut next = Next::AwaitChange;
        finalizer(&api, FINALIZER, object, |event| async {
            next = match event {
                finalizer::Event::Apply(object) => apply_parent(&parent_of(&object), ctx).await?,
                finalizer::Event::Cleanup(object) => {
                    cleanup::cleanup(&parent_of(&object), ctx).await?
                }
            };
            Ok(Action::await_change())
        })
        .await
        .map(|_| next)
        .map_err(|err| match err {
            finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
            other => Error::Finalizer {
                app: label,
                message: other.to_string(),
            },
        })
    };
    // `backoff`: the reconcile ran, but what it decided was a failure (a plugin fault, a plan
    // refused): the parent is retried with backoff like an error.
    let outcome = match &result {
        Err(_) => "error",
        Ok(_) if ctx.failures.is_failing(&key) => "backoff",
        Ok(_) => "success",
    };
    ctx.metrics.reconciled(outcome, &mark, started);
    result
}

/// What the App controller does after a failed reconcile.
pub fn error_policy(app: Arc<App>, error: &Error, ctx: Arc<Context>) -> Next {
    let key = key_of(
        &ParentKind::app(),
        &app.namespace().unwrap_or_default(),
        &app.name_any(),
    );
    failed(&key, error, &ctx)
}

/// What a bound kind's controller does after a failed reconcile.
pub fn error_policy_instance(
    object: Arc<DynamicObject>,
    error: &Error,
    bound: Arc<BoundContext>,
) -> Next {
    let key = key_of(
        &bound.kind,
        &object.namespace().unwrap_or_default(),
        &object.name_any(),
    );
    failed(&key, error, &bound.ctx)
}

fn failed(key: &str, error: &Error, ctx: &Context) -> Next {
    tracing::warn!(parent = %key, reason = error.metric_label(), error = %error, "reconcile failed");
    let after = ctx.failures.failed(key);
    ctx.health
        .reconcile_due(key.to_string(), std::time::Instant::now() + after);
    Next::After(after)
}

/// Decides and performs one reconcile of a live parent.
async fn apply_parent(parent: &Parent, ctx: &Context) -> Result<Next, Error> {
    let prepared = match prepare::prepare(parent, ctx).await {
        prepare::Prepared::PolicyUnknown => return Ok(Next::After(prepare::POLICY_WAIT)),
        prepared => prepared,
    };
    execute::decide_and_execute(parent, ctx, prepared).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap_and_resets() {
        let backoff = Backoff::default();
        let waits: Vec<u64> = (0..9).map(|_| backoff.failed("ns/a").as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff.failed("ns/b").as_secs(), 5, "per App");
        backoff.succeeded("ns/a");
        assert_eq!(backoff.failed("ns/a").as_secs(), 5);
    }
}
