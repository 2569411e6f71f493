//! `plugin run`: a component's capabilities called on an App and observed objects from files,
//! with the host's sandbox and guard; by default the whole reconcile (see [`super::reconcile`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{
    blocking,
    oci::load_bytes,
    prepare, print_value, read_objects,
    reconcile::{ReconcileOnce, reconcile_once},
};
use wasmop_core::{
    guard::{self, PlanPolicy},
    observed::BACKUP_SLOT_LABEL,
};

use crate::{
    cli::RunCapability,
    plugin::{Capability, input::AppContext, limits::CallLimits, sandbox::CallTags},
};

/// What `wasmop plugin run` was asked to do.
pub(super) struct RunRequest {
    /// The App file.
    pub(super) app: PathBuf,
    /// The observed objects' file or directory.
    pub(super) observed: Option<PathBuf>,
    pub(super) which: RunCapability,
    /// `--now`, RFC 3339.
    pub(super) now: Option<String>,
    pub(super) policy: PlanPolicy,
    pub(super) json: bool,
}

/// What `wasmop plugin run --live` was asked to do.
pub(super) struct LiveRequest {
    /// `NAMESPACE/NAME` of the App.
    pub(super) target: String,
    /// Print the changes rather than the decision.
    pub(super) diff: bool,
    /// `--now`, RFC 3339.
    pub(super) now: Option<String>,
    /// `--policy`; without it, the policy that governs the App's namespace.
    pub(super) policy: Option<PlanPolicy>,
    pub(super) json: bool,
}

/// The whole reconcile of a live App: read from the cluster, decided by the plugin under the
/// host's sandbox and guard, printed as the decision or (`--diff`) as what it would change.
pub(super) async fn run_live(plugin: &str, request: LiveRequest) -> anyhow::Result<()> {
    let bytes = load_bytes(plugin).await?;
    let label = plugin.to_string();
    let (engine, compiled) = blocking(move || prepare(&label, &bytes)).await?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster of the current kubeconfig")?;
    let (namespace, _) = super::diff::parse_target(&request.target)?;
    let (policy_name, policy) = match request.policy {
        Some(policy) => ("the given policy".to_string(), policy),
        None => super::diff::policy_of(&client, namespace).await?,
    };
    let live = super::diff::read_live(&client, &request.target, &policy).await?;
    let now_ms = now_millis(request.now.as_deref())?;
    let limits = limits_of(&live.app);
    // The source as the host names it in the App's status, so that a build that changes
    // nothing shows no status change either.
    let reference = live
        .app
        .pointer("/status/plugin/ref")
        .and_then(Value::as_str)
        .unwrap_or(plugin)
        .to_string();
    let (plugin, app, observed, rules) = (
        reference,
        live.app.clone(),
        live.observed.clone(),
        policy.clone(),
    );
    let decision = blocking(move || {
        reconcile_once(ReconcileOnce {
            plugin: &plugin,
            engine: &engine,
            compiled: &compiled,
            app: &app,
            observed: &observed,
            now_ms,
            limits,
            policy: &rules,
            policy_name: &policy_name,
        })
    })
    .await
    .with_context(|| format!("reconciling {}", request.target))?;
    if request.diff {
        print!(
            "{}",
            super::diff::diff(&client, &live, &policy, &decision).await?
        );
        return Ok(());
    }
    print_value(&decision, request.json)
}

/// `--now` in milliseconds since the epoch; now when absent.
fn now_millis(now: Option<&str>) -> anyhow::Result<i64> {
    Ok(match now {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text)
            .with_context(|| format!("--now {text:?} is not RFC 3339"))?
            .timestamp_millis(),
        None => chrono::Utc::now().timestamp_millis(),
    })
}

/// The call limits the App asks for, clamped as the host clamps them.
fn limits_of(app: &Value) -> CallLimits {
    CallLimits::with_overrides(
        app.pointer("/spec/limits/timeoutMs")
            .and_then(Value::as_u64)
            .map(|v| v.min(u64::from(u32::MAX)) as u32),
        app.pointer("/spec/limits/memoryMib")
            .and_then(Value::as_u64)
            .map(|v| v.min(u64::from(u32::MAX)) as u32),
    )
}

pub(super) async fn run_capabilities(plugin: &str, request: RunRequest) -> anyhow::Result<()> {
    let bytes = load_bytes(plugin).await?;
    let label = plugin.to_string();
    blocking(move || run_sync(&label, &bytes, &request)).await
}

/// The plan rules of the one PluginPolicy in `path`.
pub(super) fn read_policy(path: &Path) -> anyhow::Result<PlanPolicy> {
    let mut docs = read_objects(path)?;
    if docs.len() != 1 {
        bail!(
            "{} must hold exactly one PluginPolicy, found {} objects",
            path.display(),
            docs.len()
        );
    }
    let policy: crate::policy::PluginPolicy = serde_json::from_value(docs.remove(0))
        .with_context(|| format!("{} is not a valid PluginPolicy", path.display()))?;
    Ok(policy.spec.plan_rules())
}

fn run_sync(plugin: &str, bytes: &[u8], request: &RunRequest) -> anyhow::Result<()> {
    let RunRequest {
        app: app_path,
        observed,
        which,
        now,
        policy,
        json: json_out,
    } = request;
    let (observed, now, which, json_out) = (observed.as_deref(), now.as_deref(), *which, *json_out);
    let (engine, compiled) = prepare(plugin, bytes)?;
    let mut apps = read_objects(app_path)?;
    if apps.len() != 1 {
        bail!(
            "{} must hold exactly one App, found {} objects",
            app_path.display(),
            apps.len()
        );
    }
    let mut app = apps.remove(0);
    // An App or an instance of a kind bound to a plugin: its apiVersion and kind are the
    // parent's, which owner references and the parent-kind label name.
    for field in ["apiVersion", "kind"] {
        if app
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            bail!("{}: the object has no {field}", app_path.display());
        }
    }
    // The host hands plugins the App as the API server stores it: with namespace and uid.
    let metadata = app
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .context("the App has no metadata")?;
    metadata.entry("namespace").or_insert(json!("default"));
    metadata
        .entry("uid")
        .or_insert(json!("00000000-0000-0000-0000-000000000000"));
    metadata.entry("generation").or_insert(json!(1));
    let namespace = app
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let app_name = app
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .context("the App has no metadata.name")?
        .to_string();
    let kind_mark = wasmop_core::stamp::AppRef {
        api_version: app["apiVersion"].as_str().unwrap_or_default().to_string(),
        kind: app["kind"].as_str().unwrap_or_default().to_string(),
        name: app_name.clone(),
        namespace: namespace.clone(),
        uid: String::new(),
        generation: None,
    }
    .kind_mark();
    let parent = guard::ParentLabels {
        name: &app_name,
        kind_mark: &kind_mark,
    };
    let desired = app
        .pointer("/spec/version")
        .and_then(Value::as_str)
        .context("the App has no spec.version")?
        .to_string();
    let rolled_out = app
        .pointer("/status/version")
        .and_then(Value::as_str)
        .map(str::to_string);
    let observed = match observed {
        Some(path) => read_objects(path)?,
        None => Vec::new(),
    };
    let now_ms = now_millis(now)?;
    let limits = limits_of(&app);
    if which == RunCapability::Reconcile {
        let decision = reconcile_once(ReconcileOnce {
            plugin,
            engine: &engine,
            compiled: &compiled,
            app: &app,
            observed: &observed,
            now_ms,
            limits,
            policy,
            policy_name: "the given policy",
        })?;
        return print_value(&decision, json_out);
    }
    let cx = AppContext::new(&app, &observed, now_ms);
    let tags = || CallTags {
        plugin: compiled.label(),
        app: format!("{namespace}/cli"),
    };
    let wanted = |c: Capability, r: RunCapability| {
        which == r || (which == RunCapability::All && compiled.capabilities.contains(&c))
    };
    if which != RunCapability::All {
        let capability = match which {
            RunCapability::Plan => Capability::SpecDiff,
            RunCapability::Health => Capability::Health,
            RunCapability::Backup => Capability::Backup,
            RunCapability::Upgrade => Capability::Upgrade,
            RunCapability::Finalize => Capability::Finalize,
            RunCapability::All | RunCapability::Reconcile => unreachable!("handled above"),
        };
        if !compiled.capabilities.contains(&capability) {
            bail!("{} does not implement {capability}", compiled.label());
        }
    }

    let mut out = serde_json::Map::new();
    // The claims the plan holds, which a backup Job may mount as the host's would.
    let mut planned_claims = std::collections::BTreeSet::new();
    if wanted(Capability::SpecDiff, RunCapability::Plan) {
        let plan = compiled.call_plan(
            &engine,
            &limits,
            tags(),
            &cx,
            rolled_out.as_deref(),
            &desired,
        )?;
        let guarded = guard::check(
            policy,
            parent,
            &namespace,
            &compiled.metadata.owns,
            plan.objects,
        )?;
        planned_claims.extend(
            guarded
                .iter()
                .filter(|g| g.object.kind() == "PersistentVolumeClaim")
                .map(|g| g.object.name().to_string()),
        );
        let objects: Vec<Value> = guarded.into_iter().map(|g| g.object.to_value()).collect();
        out.insert("plan".into(), json!({"objects": objects, "requeueAfterMs": plan.requeue_after.map(|d| d.as_millis() as u64)}));
    }
    if wanted(Capability::Health, RunCapability::Health) {
        let version = rolled_out.clone().unwrap_or_else(|| desired.clone());
        let report = compiled.call_health(&engine, &limits, tags(), &cx, &version)?;
        let conditions: Vec<Value> = report
            .conditions
            .iter()
            .map(|c| json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message}))
            .collect();
        out.insert(
            "health".into(),
            json!({
                "state": format!("{:?}", report.state), "message": report.message,
                "rolloutComplete": report.rollout_complete, "conditions": conditions,
            }),
        );
    }
    if wanted(Capability::Backup, RunCapability::Backup) {
        let last = last_completed_slot(&observed);
        let decision = compiled.call_backup(&engine, &limits, tags(), &cx, last.as_deref())?;
        if let Some((slot, job)) = &decision.run {
            let accounts: std::collections::BTreeSet<String> = observed
                .iter()
                .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ServiceAccount"))
                .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            let claims: std::collections::BTreeSet<String> = observed
                .iter()
                .filter(|o| o.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim"))
                .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string)
                .chain(planned_claims)
                .collect();
            guard::check_job(policy, parent, slot, job, &accounts, &claims)?;
        }
        out.insert(
            "backup".into(),
            json!({
                "run": decision.run.map(|(slot, job)| json!({"slot": slot, "job": job.to_value()})),
                "expire": decision.expire,
                "requeueAfterMs": decision.requeue_after.map(|d| d.as_millis() as u64),
            }),
        );
    }
    if wanted(Capability::Upgrade, RunCapability::Upgrade) {
        let from = rolled_out.clone().unwrap_or_else(|| desired.clone());
        let decision = compiled.call_upgrade(&engine, &limits, tags(), &cx, &from, &desired)?;
        out.insert(
            "upgrade".into(),
            json!({"from": from, "to": desired, "decision": format!("{decision:?}")}),
        );
    }
    if wanted(Capability::Finalize, RunCapability::Finalize) {
        let claims: Vec<Value> = observed
            .iter()
            .filter(|o| o.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim"))
            .cloned()
            .collect();
        let decision =
            compiled.call_finalize(&engine, &limits, tags(), &cx.with_observed(&claims))?;
        let names = |refs: &[crate::plugin::call::ObjectRef]| {
            refs.iter()
                .map(|r| format!("{}/{}", r.kind, r.name))
                .collect::<Vec<_>>()
        };
        out.insert(
            "finalize".into(),
            json!({"delete": names(&decision.delete), "keep": names(&decision.keep)}),
        );
    }
    print_value(&Value::Object(out), json_out)
}

/// The newest slot among observed backup Jobs that succeeded.
fn last_completed_slot(observed: &[Value]) -> Option<String> {
    observed
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Job"))
        .filter(|o| {
            o.pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > 0
        })
        .filter_map(|o| {
            o.pointer(&format!(
                "/metadata/labels/{}",
                BACKUP_SLOT_LABEL.replace('/', "~1")
            ))
        })
        .filter_map(|slot| slot.as_str().map(str::to_string))
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_slot_label_is_read_from_jobs() {
        let jobs = vec![
            json!({"kind": "Job", "metadata": {"labels": {BACKUP_SLOT_LABEL: "20261202-000000"}}, "status": {"succeeded": 1}}),
            json!({"kind": "Job", "metadata": {"labels": {BACKUP_SLOT_LABEL: "20261202-060000"}}, "status": {}}),
        ];
        assert_eq!(
            last_completed_slot(&jobs).as_deref(),
            Some("20261202-000000")
        );
    }
}
