//! The reconcile of one App, one stage per module:
//! [`fetch`] → plan (the plugin) → [`guard`] → [`apply`] (and prune) → [`health`] →
//! [`backup`] → [`upgrade`] → [`status`]. Level-triggered and idempotent: running it twice changes nothing.
//! A failing plugin leaves the App's objects untouched and says why in its status; other Apps
//! are unaffected. Deletion runs the plugin's `finalize` behind the `wasmop.dev/cleanup`
//! finalizer.

pub mod apply;
pub mod backup;
pub mod fetch;
pub mod guard;
pub mod health;
pub mod pod_security;
pub mod status;
pub mod upgrade;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::{api::core::v1::PersistentVolumeClaim, jiff::Timestamp};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::DeleteParams,
    runtime::{
        controller::Action,
        events::{Event, EventType, Recorder},
        finalizer::{self, finalizer},
    },
};
use serde_json::Value;

use crate::{
    api_health::ApiHealth,
    app::{App, AppStatus, PluginStatus},
    plugin::{
        CallError,
        call::GateDecision,
        compile::CompiledPlugin,
        engine::PluginEngine,
        input::AppContext,
        limits::CallLimits,
        registry::{LoadedPlugin, PluginRegistry},
        sandbox::CallTags,
        source::SourceRef,
        watch::SourceWatcher,
    },
    policy::{Resolution, view::PolicyView},
};
use fetch::Stores;
use status::Cond;

/// The finalizer that guards an App's cleanup.
pub const FINALIZER: &str = "wasmop.dev/cleanup";

/// When nothing else asks for a reconcile, check again this often (level-triggered safety net).
const RESYNC: Duration = Duration::from_secs(300);
/// The shortest requeue a plugin may ask for (plan or backup), and the longest: a plugin
/// cannot make the host reconcile its App in a tight loop, nor further apart than the resync.
fn clamp_plugin_requeue(after: Duration) -> Duration {
    after.clamp(SHORT_REQUEUE, RESYNC)
}

/// While waiting for a plugin to load or a rollout to finish, look again this soon.
const SHORT_REQUEUE: Duration = Duration::from_secs(5);

/// What every reconcile needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Reflector caches.
    pub stores: Stores,
    /// Loaded plugins.
    pub plugins: Arc<PluginRegistry>,
    /// Follows the plugin sources in use.
    pub sources: Arc<SourceWatcher>,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Consecutive failures per App, for exponential backoff.
    pub failures: Backoff,
    /// The link to the API server and the reconciles in flight, for the probes.
    pub health: ApiHealth,
    /// Which PluginPolicy governs each namespace.
    pub policies: Arc<PolicyView>,
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
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = map.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        SHORT_REQUEUE
            .saturating_mul(1 << (*count - 1).min(10))
            .min(MAX_BACKOFF)
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
    #[error("App {app}: {what}: {source}")]
    Kube {
        /// `namespace/name` of the App.
        app: String,
        /// What the host was doing.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deletion waits for something (the policy, the plugin) before it may finish. An error,
    /// not an `Ok` requeue: the finalizer helper removes the finalizer on any `Ok` from cleanup.
    #[error("App {app}: deletion waits: {message}")]
    Waiting {
        /// `namespace/name` of the App.
        app: String,
        /// What it waits for, and how to stop waiting.
        message: String,
    },
    /// The finalizer helper failed.
    #[error("App {app}: finalizer: {message}")]
    Finalizer {
        /// `namespace/name` of the App.
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
            Self::Finalizer { .. } => "finalizer",
        }
    }
}

fn app_key(app: &App) -> String {
    format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any())
}

fn kube_err(app: &App, what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let app = app_key(app);
    let what = what.into();
    move |source| Error::Kube { app, what, source }
}

/// Reconciles one App (the controller's entry point).
pub async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = app.namespace().unwrap_or_default();
    let api: Api<App> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = app_key(&app);
    let _running = ctx.health.reconcile_started(key.clone());
    finalizer(&api, FINALIZER, app, |event| async {
        match event {
            finalizer::Event::Apply(app) => apply_app(&app, &ctx, &api).await,
            finalizer::Event::Cleanup(app) => cleanup_app(&app, &ctx).await,
        }
    })
    .await
    .map_err(|err| match err {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer {
            app: key,
            message: other.to_string(),
        },
    })
}

/// What the controller does after a failed reconcile.
pub fn error_policy(app: Arc<App>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(app = %app_key(&app), reason = error.metric_label(), error = %error, "reconcile failed");
    Action::requeue(ctx.failures.failed(&app_key(&app)))
}

fn tags(loaded: &LoadedPlugin, app: &App) -> CallTags {
    CallTags {
        plugin: loaded.compiled.label(),
        app: app_key(app),
    }
}

fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

/// Everything a reconcile decided, for the status writer.
struct Outcome {
    conditions: Vec<Cond>,
    version: Option<String>,
    upgrade: Option<crate::app::UpgradeStatus>,
    last_backup: Option<crate::app::BackupStatus>,
    requeue: Duration,
    /// `None` keeps the previous phase.
    phase: Option<&'static str>,
    /// Keep the previous conditions of the types `conditions` does not set.
    carry_conditions: bool,
}

impl Outcome {
    /// An outcome that changes only the conditions it names: versions, upgrade and backup
    /// records and every other condition stay as they were, so a host restart (plugins still
    /// loading) or a passing plugin failure does not reset what is known about the App.
    fn holding(
        previous: &AppStatus,
        conditions: Vec<Cond>,
        requeue: Duration,
        phase: Option<&'static str>,
    ) -> Self {
        Self {
            conditions,
            version: previous.version.clone(),
            upgrade: previous.upgrade.clone(),
            last_backup: previous.last_backup.clone(),
            requeue,
            phase,
            carry_conditions: true,
        }
    }
}

/// While the policy caches have not synced (start-up) or lack the App's namespace, look again
/// this soon, changing nothing: guessing a policy could apply a plan under the wrong one.
const POLICY_WAIT: Duration = Duration::from_secs(1);

/// The rules for the App's namespace, by name for messages (`None`: not known yet).
fn governing(ctx: &Context, namespace: &str) -> Option<Result<Governing, String>> {
    Some(match ctx.policies.resolve(namespace)? {
        Resolution::Governed { policy, rules } => Ok(Governing {
            name: match policy {
                Some(name) => format!("PluginPolicy {name}"),
                None => "the built-in default policy".into(),
            },
            rules,
        }),
        Resolution::Refused { reason } => Err(reason),
    })
}

/// The policy a reconcile holds the App's plugin to.
struct Governing {
    /// `PluginPolicy <name>` or `the built-in default policy`.
    name: String,
    rules: guard::Policy,
}

async fn apply_app(app: &App, ctx: &Context, api: &Api<App>) -> Result<Action, Error> {
    let previous = app.status.clone().unwrap_or_default();
    // The policy comes first: an App its namespace refuses does not even load its plugin.
    let policy = match governing(ctx, &app.namespace().unwrap_or_default()) {
        None => return Ok(Action::requeue(POLICY_WAIT)),
        Some(Ok(policy)) => policy,
        Some(Err(reason)) => {
            let conditions = vec![Cond::new("PluginReady", false, "NamespaceRefused", reason)];
            let outcome = Outcome::holding(&previous, conditions, RESYNC, Some("Failed"));
            return finish(app, ctx, api, &previous, None, outcome).await;
        }
    };
    let namespace = app.namespace().unwrap_or_default();
    let source = match SourceRef::from_spec(&namespace, &app.spec.plugin, &policy.rules.oci) {
        Ok(source) => source,
        Err(message) => {
            let conditions = vec![Cond::new("PluginReady", false, "InvalidSource", message)];
            let outcome = Outcome::holding(&previous, conditions, RESYNC, Some("Failed"));
            return finish(app, ctx, api, &previous, None, outcome).await;
        }
    };
    // A source the policy does not allow is never fetched.
    if let Err(reason) = policy.rules.allows_source(&source) {
        let message = format!("{reason} (under {})", policy.name);
        let conditions = vec![Cond::new("PluginReady", false, "SourceRefused", message)];
        let outcome = Outcome::holding(&previous, conditions, RESYNC, Some("Failed"));
        return finish(app, ctx, api, &previous, None, outcome).await;
    }
    ctx.sources.ensure(&source);
    let state = ctx.plugins.get(&source);
    let Some(loaded) = state.current.clone() else {
        let (reason, message) = match &state.last_error {
            Some(err) => (err.reason(), err.to_string()),
            None => ("Loading", format!("loading plugin {source}")),
        };
        let conditions = vec![Cond::new("PluginReady", false, reason, message)];
        // Still loading (as after every restart): nothing is known to be wrong with the App.
        let phase = state.last_error.as_ref().map(|_| "Failed");
        let outcome = Outcome::holding(&previous, conditions, SHORT_REQUEUE, phase);
        return finish(app, ctx, api, &previous, None, outcome).await;
    };
    let plugin_ready = match &state.last_error {
        None => Cond::new(
            "PluginReady",
            true,
            "Loaded",
            format!("{} serving", loaded.compiled.label()),
        ),
        Some(err) => Cond::new(
            "PluginReady",
            true,
            "LastGoodKept",
            format!(
                "{} serving; the newest version was refused: {err}",
                loaded.compiled.label()
            ),
        ),
    };

    let outcome =
        match run_stages(app, ctx, &loaded, &policy, plugin_ready.clone(), &previous).await? {
            Ok(outcome) => outcome,
            Err(failure) => {
                // A failing plugin or a rejected plan: touch nothing, say why, retry later.
                let conditions = vec![
                    plugin_ready,
                    Cond::new("Degraded", true, &failure.reason, failure.message.clone()),
                ];
                let wait = ctx.failures.failed(&app_key(app));
                let outcome = Outcome::holding(&previous, conditions, wait, Some("Degraded"));
                return finish(app, ctx, api, &previous, Some(&loaded), outcome).await;
            }
        };
    ctx.failures.succeeded(&app_key(app));
    finish(app, ctx, api, &previous, Some(&loaded), outcome).await
}

/// What every plugin call of one reconcile shares; `call` runs one on a blocking thread.
#[derive(Clone)]
struct Caller {
    loaded: Arc<LoadedPlugin>,
    input: Arc<AppContext>,
    limits: CallLimits,
    tags: CallTags,
}

impl Caller {
    async fn call<R, F>(&self, interface: &'static str, call: F) -> Result<R, CallError>
    where
        R: Send + 'static,
        F: FnOnce(
                &CompiledPlugin,
                &PluginEngine,
                &CallLimits,
                CallTags,
                &AppContext,
            ) -> Result<R, CallError>
            + Send
            + 'static,
    {
        let this = self.clone();
        self.loaded
            .run(
                interface,
                self.limits.memory_bytes,
                move |plugin, engine| {
                    call(plugin, engine, &this.limits, this.tags.clone(), &this.input)
                },
            )
            .await
    }
}

/// A failure that stops the stages without touching the App's objects.
struct Failure {
    reason: String,
    message: String,
}

impl From<CallError> for Failure {
    fn from(err: CallError) -> Self {
        Self {
            reason: err.reason().to_string(),
            message: err.to_string(),
        }
    }
}

async fn run_stages(
    app: &App,
    ctx: &Context,
    loaded: &Arc<LoadedPlugin>,
    governing: &Governing,
    plugin_ready: Cond,
    previous: &AppStatus,
) -> Result<Result<Outcome, Failure>, Error> {
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let uid = app.uid().unwrap_or_default();
    let policy = &governing.rules;
    let mut limits = CallLimits::with_overrides(
        app.spec.limits.as_ref().and_then(|l| l.timeout_ms),
        app.spec.limits.as_ref().and_then(|l| l.memory_mib),
    );
    // A cap the whole budget could not cover would wait forever; it gets what the budget has.
    limits.memory_bytes = limits
        .memory_bytes
        .min(loaded.engine().budget().max_call_bytes());
    let caps = &loaded.compiled.capabilities;
    use crate::plugin::Capability as C;

    // fetch
    let mut observed = ctx.stores.observe(&namespace, &name, &uid);
    let metadata = &loaded.compiled.metadata;
    let extra: Vec<&guard::Kind> = policy
        .extra_kinds
        .iter()
        .filter(|k| {
            let key = format!("{}/{}", k.api_version(), k.kind);
            metadata.owns.contains(&key) || metadata.observes.contains(&key)
        })
        .collect();
    if !extra.is_empty() {
        match fetch::observe_extra(&ctx.client, &namespace, &name, &uid, &extra).await {
            Ok(objects) => {
                observed.extend(objects);
                observed.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
            }
            Err(err) => {
                return Ok(Err(Failure {
                    reason: "ObserveFailed".into(),
                    message: format!("{err} (under {})", governing.name),
                }));
            }
        }
    }
    let visible = fetch::visible_to(
        &observed,
        &metadata.owns,
        &metadata.observes,
        caps.contains(&C::Backup),
    );
    let caller = Caller {
        loaded: Arc::clone(loaded),
        input: Arc::new(AppContext::new(app, visible.map(|o| &o.json), now_ms())),
        limits,
        tags: tags(loaded, app),
    };

    // upgrade: which version to render
    let desired = app.spec.version.clone();
    let mut upgrade_record = None;
    let mut gate_cond = Cond::new("UpgradeGated", false, "NoUpgrade", "");
    let render = match upgrade::step(
        &desired,
        previous.version.as_deref(),
        previous.upgrade.as_ref(),
    ) {
        upgrade::Step::Steady { version } => version,
        upgrade::Step::Rolling { from, to } => {
            gate_cond = Cond::new(
                "UpgradeGated",
                false,
                "Allowed",
                format!("rolling out {from} -> {to}"),
            );
            upgrade_record = previous.upgrade.clone();
            to
        }
        upgrade::Step::AskGate { from, to } => {
            let decision = if caps.contains(&C::Upgrade) {
                let (f, t) = (from.clone(), to.clone());
                match caller
                    .call("upgrade", move |p, e, l, tg, cx| {
                        p.call_upgrade(e, l, tg, cx, &f, &t)
                    })
                    .await
                {
                    Ok(decision) => decision,
                    Err(err) => return Ok(Err(err.into())),
                }
            } else {
                GateDecision::Allow
            };
            let (render, record) = upgrade::after_gate(&from, &to, &decision);
            gate_cond = match &decision {
                GateDecision::Allow => Cond::new(
                    "UpgradeGated",
                    false,
                    "Allowed",
                    format!("rolling out {from} -> {to}"),
                ),
                GateDecision::Wait(reason) => Cond::new(
                    "UpgradeGated",
                    true,
                    "Waiting",
                    format!("holding {from}: {reason}"),
                ),
                GateDecision::Deny(reason) => Cond::new(
                    "UpgradeGated",
                    true,
                    "Denied",
                    format!("{from} -> {to} refused: {reason}"),
                ),
            };
            if previous.upgrade.as_ref().map(|u| (&u.state, &u.to))
                != Some((&record.state, &record.to))
            {
                publish(
                    ctx,
                    app,
                    EventType::Normal,
                    "UpgradeGate",
                    &format!("{from} -> {to}: {}", record.state),
                )
                .await;
            }
            upgrade_record = Some(record);
            render
        }
    };

    // plan
    if !caps.contains(&C::SpecDiff) {
        return Ok(Err(Failure {
            reason: "CapabilityMissing".into(),
            message: format!(
                "{} does not implement spec-diff; nothing to plan",
                loaded.compiled.label()
            ),
        }));
    }
    let current = previous.version.clone();
    let plan = {
        let r = render.clone();
        match caller
            .call("spec-diff", move |p, e, l, tg, cx| {
                p.call_plan(e, l, tg, cx, current.as_deref(), &r)
            })
            .await
        {
            Ok(plan) => plan,
            Err(err) => return Ok(Err(err.into())),
        }
    };

    // guard
    let guarded = match guard::check(
        policy,
        &name,
        &namespace,
        &loaded.compiled.metadata.owns,
        plan.objects,
    ) {
        Ok(guarded) => guarded,
        Err(err) => {
            let message = format!("{err} (under {})", governing.name);
            publish(ctx, app, EventType::Warning, "PlanRejected", &message).await;
            return Ok(Err(Failure {
                reason: "PlanRejected".into(),
                message,
            }));
        }
    };
    // apiVersion, kind and name: two kinds of one name in different groups are different.
    let planned: BTreeSet<(String, String, String)> = guarded
        .iter()
        .map(|g| {
            (
                g.kind.api_version(),
                g.kind.kind.to_string(),
                g.object.name().to_string(),
            )
        })
        .collect();

    // apply, prune
    match apply::apply(&ctx.client, app, guarded, &observed).await {
        Ok(()) => {}
        Err(apply::ApplyError::Foreign { object }) => {
            let message =
                format!("plan rejected: {object} already exists and is not managed by this App");
            publish(ctx, app, EventType::Warning, "PlanRejected", &message).await;
            return Ok(Err(Failure {
                reason: "PlanRejected".into(),
                message,
            }));
        }
        Err(apply::ApplyError::Api { object, source }) => {
            if let kube::Error::Api(status) = &source
                && (status.code == 422 || status.code == 400)
            {
                let message = format!("applying {object}: {}", status.message);
                publish(ctx, app, EventType::Warning, "ApplyRejected", &message).await;
                return Ok(Err(Failure {
                    reason: "ApplyRejected".into(),
                    message,
                }));
            }
            return Err(Error::Kube {
                app: app_key(app),
                what: format!("applying {object}"),
                source,
            });
        }
    }
    let pruned = apply::prune(&ctx.client, app, policy, &planned, &observed)
        .await
        .map_err(|(object, source)| Error::Kube {
            app: app_key(app),
            what: format!("pruning {object}"),
            source,
        })?;
    if !pruned.is_empty() {
        publish(
            ctx,
            app,
            EventType::Normal,
            "Pruned",
            &format!("deleted {}", pruned.join(", ")),
        )
        .await;
    }

    // health
    let report = if caps.contains(&C::Health) {
        let r = render.clone();
        match caller
            .call("health", move |p, e, l, tg, cx| {
                p.call_health(e, l, tg, cx, &r)
            })
            .await
        {
            Ok(report) => Some(report),
            Err(err) => return Ok(Err(err.into())),
        }
    } else {
        None
    };
    let upgrading = upgrade_record
        .as_ref()
        .is_some_and(|u| u.state == "Allowed");
    let verdict = health::verdict(report, upgrading);
    let mut conditions = vec![plugin_ready];
    conditions.extend(verdict.conditions);
    let phase = verdict.phase;
    let mut version = previous.version.clone();
    let mut requeue = plan.requeue_after.map_or(RESYNC, clamp_plugin_requeue);
    if verdict.rollout_complete {
        if version.as_deref() != Some(render.as_str()) {
            let note = format!("version {render} rolled out");
            publish(ctx, app, EventType::Normal, "RolledOut", &note).await;
        }
        version = Some(render.clone());
    } else {
        requeue = requeue.min(SHORT_REQUEUE);
    }
    if version.as_deref() == Some(desired.as_str()) {
        upgrade_record = None;
        gate_cond = Cond::new("UpgradeGated", false, "NoUpgrade", "");
    }
    conditions.push(gate_cond);

    // backup
    let mut last_backup = previous.last_backup.clone();
    if caps.contains(&C::Backup) {
        let last_completed = backup::last_completed_slot(&observed);
        let lc = last_completed.clone();
        let decision = match caller
            .call("backup", move |p, e, l, tg, cx| {
                p.call_backup(e, l, tg, cx, lc.as_deref())
            })
            .await
        {
            Ok(decision) => decision,
            Err(err) => return Ok(Err(err.into())),
        };
        // A slot at or before the last one started never runs again, even once its Job expired
        // or was deleted (the Job's name alone guards a slot only while the Job exists).
        if let Some((slot, job)) = decision
            .run
            .filter(|(slot, _)| backup::is_new_slot(previous.last_backup.as_ref(), slot))
        {
            // A backup Job is a pod like any planned one: the same policy holds, and its pods
            // may run as the ServiceAccounts the App's plan created.
            let accounts: BTreeSet<String> = observed
                .iter()
                .filter(|o| o.kind == "ServiceAccount" && o.owned)
                .map(|o| o.name.clone())
                .collect();
            if let Err(err) = guard::check_job(policy, &name, &slot, &job, &accounts) {
                let message = format!("backup of slot {slot}: {err} (under {})", governing.name);
                publish(ctx, app, EventType::Warning, "PlanRejected", &message).await;
                return Ok(Err(Failure {
                    reason: "PlanRejected".into(),
                    message,
                }));
            }
            let (created, status) =
                backup::start(&ctx.client, app, &slot, job)
                    .await
                    .map_err(kube_err(
                        app,
                        format!("starting the backup Job of slot {slot}"),
                    ))?;
            if created {
                publish(
                    ctx,
                    app,
                    EventType::Normal,
                    "BackupStarted",
                    &format!("Job {} for slot {slot}", status.job),
                )
                .await;
            }
            last_backup = Some(status);
        }
        if let Some(backup) = &mut last_backup {
            backup.completed =
                last_completed.as_deref() == Some(backup.slot.as_str()) || backup.completed;
        }
        if !decision.expire.is_empty() {
            backup::expire(&ctx.client, app, &decision.expire, &observed)
                .await
                .map_err(kube_err(app, "expiring backup Jobs"))?;
        }
        if let Some(after) = decision.requeue_after {
            requeue = requeue.min(clamp_plugin_requeue(after));
        }
    }
    Ok(Ok(Outcome {
        conditions,
        version,
        upgrade: upgrade_record,
        last_backup,
        requeue,
        phase: Some(phase),
        carry_conditions: false,
    }))
}

async fn finish(
    app: &App,
    ctx: &Context,
    api: &Api<App>,
    previous: &AppStatus,
    loaded: Option<&Arc<LoadedPlugin>>,
    outcome: Outcome,
) -> Result<Action, Error> {
    let mut conditions = status::merge_conditions(
        &previous.conditions,
        outcome.conditions,
        app.metadata.generation,
        Timestamp::now(),
    );
    if outcome.carry_conditions {
        let kept: Vec<_> = previous
            .conditions
            .iter()
            .filter(|p| !conditions.iter().any(|c| c.type_ == p.type_))
            .cloned()
            .collect();
        conditions.extend(kept);
    }
    let plugin = match loaded {
        Some(loaded) => Some(PluginStatus {
            reference: loaded.source.to_string(),
            digest: loaded.compiled.digest.to_string(),
            short_digest: loaded.compiled.digest.short().to_string(),
            capabilities: loaded
                .compiled
                .capabilities
                .iter()
                .map(|c| c.interface().to_string())
                .collect(),
            loaded_at: Some(loaded.loaded_at.to_rfc3339()),
        }),
        None => previous.plugin.clone(),
    };
    if let (Some(old), Some(new)) = (&previous.plugin, &plugin)
        && old.digest != new.digest
    {
        publish(
            ctx,
            app,
            EventType::Normal,
            "PluginSwapped",
            &format!("{} -> {}", old.digest, new.digest),
        )
        .await;
    }
    for c in status::transitions(&previous.conditions, &conditions) {
        // Degraded and UpgradeGated are bad news when True; the others when not True.
        let bad_when_true = c.type_ == "Degraded" || c.type_ == "UpgradeGated";
        let kind = if bad_when_true == (c.status == "True") {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(
            ctx,
            app,
            kind,
            &c.type_,
            &format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message),
        )
        .await;
    }
    let status = AppStatus {
        observed_generation: app.metadata.generation,
        phase: outcome
            .phase
            .map(str::to_string)
            .or_else(|| previous.phase.clone())
            .or_else(|| Some("Pending".into())),
        version: outcome.version,
        plugin,
        conditions,
        last_backup: outcome.last_backup,
        upgrade: outcome.upgrade,
    };
    status::write(api, app, &status)
        .await
        .map_err(kube_err(app, "writing status"))?;
    Ok(Action::requeue(outcome.requeue))
}

async fn publish(ctx: &Context, app: &App, type_: EventType, reason: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &app.object_ref(&())).await {
        tracing::debug!(app = %app_key(app), error = %err, "publishing an event failed");
    }
}

/// Deletion: asks the plugin which retained objects (claims) to delete; owned objects go with
/// the App through their owner references. Without a plugin or a `finalize` capability,
/// everything retained is kept: losing data needs an explicit decision.
async fn cleanup_app(app: &App, ctx: &Context) -> Result<Action, Error> {
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
            publish(ctx, app, EventType::Normal, "Finalized", &message).await;
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
        publish(ctx, app, EventType::Normal, "Finalized", &message).await;
        return Ok(Action::await_change());
    }
    let state = source.as_ref().map(|s| {
        // After a restart the registry is empty: load the plugin before deciding anything.
        ctx.sources.ensure(s);
        ctx.plugins.get(s)
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
            publish(ctx, app, EventType::Warning, "FinalizeWaiting", &why).await;
        }
        return Err(waiting(why));
    }
    let loaded = state.and_then(|s| s.current);
    let Some(loaded) = loaded.filter(|l| {
        l.compiled
            .capabilities
            .contains(&crate::plugin::Capability::Finalize)
    }) else {
        publish(
            ctx,
            app,
            EventType::Normal,
            "Finalized",
            &format!(
                "kept {} retained objects (no finalize decision)",
                retained.len()
            ),
        )
        .await;
        return Ok(Action::await_change());
    };
    let input = AppContext::new(app, &retained, now_ms());
    let tg = tags(&loaded, app);
    let mut limits = CallLimits::default();
    limits.memory_bytes = limits
        .memory_bytes
        .min(loaded.engine().budget().max_call_bytes());
    let decision = loaded
        .run("finalize", limits.memory_bytes, move |p, e| {
            p.call_finalize(e, &limits, tg, &input)
        })
        .await;
    let decision = match decision {
        Ok(decision) => decision,
        Err(err) => {
            // Keep the finalizer: deleting data on a plugin fault would be worse than waiting.
            publish(
                ctx,
                app,
                EventType::Warning,
                "FinalizeFailed",
                &err.to_string(),
            )
            .await;
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
    let offered: std::collections::BTreeSet<&str> =
        retained_names.iter().map(String::as_str).collect();
    for object in decision
        .delete
        .iter()
        .filter(|o| o.kind == "PersistentVolumeClaim" && offered.contains(o.name.as_str()))
    {
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
    publish(
        ctx,
        app,
        EventType::Normal,
        "Finalized",
        &format!(
            "deleted claims [{}], kept {}",
            deleted.join(", "),
            decision.keep.len()
        ),
    )
    .await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_cannot_requeue_in_a_tight_loop_or_past_the_resync() {
        assert_eq!(clamp_plugin_requeue(Duration::ZERO), SHORT_REQUEUE);
        assert_eq!(
            clamp_plugin_requeue(Duration::from_millis(1)),
            SHORT_REQUEUE
        );
        assert_eq!(
            clamp_plugin_requeue(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        assert_eq!(clamp_plugin_requeue(Duration::from_secs(86_400)), RESYNC);
    }

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
