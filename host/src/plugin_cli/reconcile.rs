//! `plugin run --capability reconcile`: the host's decision for one App (or an instance of any
//! kind bound to a plugin), from files.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wasmop_core::guard;

use crate::{
    plugin::{
        Capability, compiled::CompiledPlugin, component_calls::ComponentCalls,
        engine::PluginEngine, input::AppContext, limits::CallLimits,
    },
    reconcile::prepare::plugin_status_of,
};

/// What `plugin run --capability reconcile` decides on.
pub(super) struct ReconcileOnce<'a> {
    pub(super) plugin: &'a str,
    pub(super) engine: &'a PluginEngine,
    pub(super) compiled: &'a CompiledPlugin,
    pub(super) app: &'a Value,
    pub(super) observed: &'a [Value],
    pub(super) now_ms: i64,
    pub(super) limits: CallLimits,
    pub(super) policy: &'a guard::PlanPolicy,
    /// How rejections name the policy (`PluginPolicy team-a`, `the built-in default`).
    pub(super) policy_name: &'a str,
}

/// The host's decision for the App, as the host makes it ([`wasmop_core::decide()`] with the
/// host's guard): the objects it would apply (stamped), prune, the backup Job, the status, the
/// events. The observed objects stand for the cluster: a planned object found there but not
/// owned by the App is refused as the host refuses it. A decision the host would back off
/// from (a plugin fault, a rejected plan) is an error naming the cause.
pub(super) fn reconcile_once(run: ReconcileOnce<'_>) -> anyhow::Result<Value> {
    use wasmop_core::{
        Requeue,
        decide::{self, PluginState},
        observed::visible_to,
    };
    // Into service now, as the host would put it (the decision keeps the App's own
    // `loadedAt` when the digest is the one it already runs).
    let plugin = PluginState::Serving {
        label: run.compiled.label(),
        status: plugin_status_of(
            run.plugin.to_string(),
            run.compiled,
            chrono::DateTime::from_timestamp_millis(run.now_ms).map(|t| t.to_rfc3339()),
        ),
        newer_refused: None,
        uncached: None,
    };
    let now = k8s_openapi::jiff::Timestamp::from_millisecond(run.now_ms)
        .context("--now is out of range")?;
    let snapshot =
        wasmop_core::snapshot::from_json(run.app, run.observed.iter().cloned(), now, plugin)?;
    let app_ref = snapshot.app.clone();
    let metadata = &run.compiled.metadata;
    let visible = visible_to(
        &snapshot.observed,
        &metadata.owns,
        &metadata.observes,
        run.compiled.capabilities.contains(&Capability::Backup),
    );
    let cx = AppContext::new(run.app, visible.map(|o| &o.json), run.now_ms);
    let check = guard::AppCheck {
        policy: run.policy.clone(),
        policy_name: run.policy_name.to_string(),
        app: app_ref.name.clone(),
        kind_mark: app_ref.kind_mark(),
        namespace: app_ref.namespace.clone(),
        owns: metadata.owns.clone(),
        // RBAC bindings are not read here (`--live` included): the host refuses a planned
        // ServiceAccount a binding names, which this run does not show.
        bound: guard::Bound::default(),
    };
    let mut calls = ComponentCalls::here(
        run.compiled,
        run.engine,
        std::sync::Arc::new(cx),
        run.limits,
        format!("{}/cli", app_ref.namespace),
    );
    let mut decision = decide::decide(&snapshot, &mut calls, &check);
    // The observed objects are the cluster: adopting one that exists and is not the App's is
    // refused, as the host's executor refuses it.
    if let Some(foreign) = decision.adopt.iter().find(|key| {
        snapshot
            .observed
            .iter()
            .any(|o| o.api_version == key.api_version && o.kind == key.kind && o.name == key.name)
    }) {
        let failure = wasmop_core::Failure::new(
            wasmop_core::conditions::reason::PLAN_REJECTED,
            format!("plan rejected: {foreign} already exists and is not managed by this App"),
        );
        decision = decide::failed(&snapshot, failure);
    }
    if decision.requeue == Requeue::Backoff {
        let degraded = decision
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == wasmop_core::conditions::DEGRADED)
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default();
        bail!("{degraded}");
    }
    let keys = |keys: &[wasmop_core::ObjectKey]| -> Vec<String> {
        keys.iter().map(ToString::to_string).collect()
    };
    Ok(json!({
        "apply": decision.apply,
        "adopt": keys(&decision.adopt),
        "inPlace": decision.in_place,
        "prune": keys(&decision.prune),
        "backup": decision.backup_start.as_ref().map(|(slot, job)| json!({"slot": slot, "job": job})),
        "expire": keys(&decision.backup_expire),
        "status": decision.status,
        "events": decision.events.iter().map(|e| json!({
            "type": if e.warning { "Warning" } else { "Normal" },
            "reason": e.reason,
            "note": e.note,
        })).collect::<Vec<_>>(),
        "requeueAfterSeconds": match decision.requeue {
            Requeue::After(after) => after.as_secs(),
            Requeue::Backoff => 0,
        },
    }))
}
