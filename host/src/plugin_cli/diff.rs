//! `plugin run --live NAMESPACE/NAME [--diff]`: a plugin's reconcile of an App as it is in the
//! cluster, and with `--diff` what that reconcile would change there, object by object. It
//! reads the cluster and applies nothing: each planned object goes through a server-side apply
//! in dry-run mode (`dryRun=All`, the host's field manager), so the API server's defaulting,
//! validation and admission shape the preview exactly as they would shape the write.

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::Value;
use wasmop_core::{ObjectKey, guard::PlanPolicy, kind::Kind};

use crate::{
    app::App,
    controller::kinds::{TABLE, api_resource},
    policy::{PluginPolicy, Resolution, resolve},
    reconcile::execute::is_managed_by,
    write::FIELD_MANAGER,
};

/// The App `namespace/name` and the objects the host's caches would hold for it: those
/// labelled with it, of the kinds the host watches (and the policy's `extraKinds`). Which of
/// them the plugin is shown is decided as the host decides it, by its `owns` and `observes`.
pub(super) struct Live {
    /// The App as the API server returns it.
    pub(super) app: Value,
    /// Its objects.
    pub(super) observed: Vec<Value>,
}

/// `NAMESPACE/NAME` split.
pub(super) fn parse_target(target: &str) -> anyhow::Result<(&str, &str)> {
    match target.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => bail!("--live {target:?} must be NAMESPACE/NAME of an App"),
    }
}

/// The rules the host holds the namespace's plans to (the governing PluginPolicy's plan rules,
/// or the built-in default's) and how rejections name them. The host's own namespace is unknown
/// here, so it is not refused as the host refuses it.
pub(super) async fn policy_of(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<(String, PlanPolicy)> {
    let policies = Api::<PluginPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing PluginPolicies (pass --policy FILE to use one instead)")?;
    let labels = Api::<Namespace>::all(client.clone())
        .get(namespace)
        .await
        .with_context(|| format!("reading namespace {namespace}"))?
        .labels()
        .clone();
    match resolve(&policies.items, namespace, &labels, None) {
        Resolution::Governed {
            policy: Some(name),
            rules,
        } => Ok((format!("PluginPolicy {name}"), rules.plan)),
        Resolution::Governed {
            policy: None,
            rules,
        } => Ok(("the built-in default".into(), rules.plan)),
        Resolution::Refused { reason } => bail!("{reason}"),
    }
}

/// Reads the App and its objects from the cluster of the current kubeconfig.
pub(super) async fn read_live(
    client: &Client,
    target: &str,
    policy: &PlanPolicy,
) -> anyhow::Result<Live> {
    let (namespace, name) = parse_target(target)?;
    let app = Api::<App>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading the App {namespace}/{name}"))?;
    let app = serde_json::to_value(app)?;
    let labelled =
        ListParams::default().labels(&format!("{}={name}", wasmop_core::observed::APP_LABEL));
    // The host's kinds only, never the plugin's say: a plugin declaring Secrets must not get
    // this command to read them with the user's credentials.
    let mut kinds: Vec<&Kind> = TABLE.iter().map(|row| &row.kind).collect();
    for extra in &policy.extra_kinds {
        if !kinds
            .iter()
            .any(|k| k.is_kind_of(&extra.api_version(), &extra.kind))
        {
            kinds.push(extra);
        }
    }
    let mut observed = Vec::new();
    for kind in kinds {
        let resource = api_resource(kind);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let list = api.list(&labelled).await.with_context(|| {
            format!(
                "listing {}/{} in {namespace}",
                kind.api_version(),
                kind.kind
            )
        })?;
        for mut object in list.items {
            // A list's items carry no type; the decision core reads it from the object.
            object.types = Some(kube::core::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            });
            observed.push(serde_json::to_value(object)?);
        }
    }
    Ok(Live { app, observed })
}

/// What applying `decision` (as [`super::reconcile::reconcile_once`] prints it) would change in
/// the App's namespace, one line per object and one per changed field, each field named by its
/// path. Objects go through a dry-run server-side apply. Planned objects the host would not
/// write (already as planned, by the digest it stamps on what it applies) are counted.
pub(super) async fn diff(
    client: &Client,
    live: &Live,
    policy: &PlanPolicy,
    decision: &Value,
) -> anyhow::Result<String> {
    let text = |pointer: &str| {
        live.app
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let app = wasmop_core::stamp::AppRef {
        api_version: text("/apiVersion"),
        kind: text("/kind"),
        name: text("/metadata/name"),
        namespace: text("/metadata/namespace"),
        uid: text("/metadata/uid"),
        generation: None,
    };
    let namespace = app.namespace.clone();
    let mut out = String::new();
    let dry_run = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    // Read everything first: the host refuses the plan if a planned object exists and is not
    // the App's (when it comes to that object: what its waves created before stays).
    let mut reads = Vec::new();
    for planned in decision["apply"].as_array().into_iter().flatten() {
        let (api_version, kind) = (
            planned["apiVersion"].as_str().unwrap_or_default(),
            planned["kind"].as_str().unwrap_or_default(),
        );
        let key = ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: planned
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        // The decision passed the guard, so each kind is one the policy lets plans hold.
        let resource = api_resource(
            policy
                .kind(api_version, kind)
                .with_context(|| format!("{api_version}/{kind} is not a kind plans may hold"))?,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let current = api
            .get_opt(&key.name)
            .await
            .with_context(|| format!("reading {}", printable(&key.to_string())))?;
        reads.push((planned, key, api, current));
    }
    let foreign: Vec<&ObjectKey> = reads
        .iter()
        .filter(|(_, key, _, current)| {
            current
                .as_ref()
                .is_some_and(|c| !is_managed_by(c, key, &app))
        })
        .map(|(_, key, _, _)| key)
        .collect();
    if !foreign.is_empty() {
        for key in foreign {
            out.push_str(&format!(
                "! refused: {} exists and is not managed by this App\n",
                printable(&key.to_string())
            ));
        }
        out.push_str(
            "! the host would refuse the plan (PlanRejected) at the first of these, having \
             created only what comes before it in the plan's waves\n",
        );
        return Ok(out);
    }
    for (planned, key, api, current) in reads {
        let label = printable(&format!("{}/{} {}", key.api_version, key.kind, key.name));
        let applied = api
            .patch(&key.name, &dry_run, &Patch::Apply(planned))
            .await
            .with_context(|| format!("dry-run apply of {label}"))?;
        let applied = comparable(serde_json::to_value(applied)?);
        match current {
            None => out.push_str(&format!("+ {label} (created)\n")),
            Some(current) => {
                let mut changes = Vec::new();
                changed_fields(
                    "",
                    &comparable(serde_json::to_value(current)?),
                    &applied,
                    &mut changes,
                );
                if changes.is_empty() {
                    out.push_str(&format!("= {label}\n"));
                } else {
                    out.push_str(&format!("~ {label}\n"));
                    for change in changes {
                        out.push_str(&format!("    {change}\n"));
                    }
                }
            }
        }
    }
    let in_place = decision["inPlace"].as_u64().unwrap_or_default();
    if in_place > 0 {
        out.push_str(&format!(
            "= {in_place} more planned object{} already as planned\n",
            if in_place == 1 { "" } else { "s" }
        ));
    }
    let key_text = |key: &Value| printable(key.as_str().unwrap_or_default());
    for key in decision["prune"].as_array().into_iter().flatten() {
        out.push_str(&format!("- {} (pruned)\n", key_text(key)));
    }
    if let Some(backup) = decision.get("backup").filter(|b| !b.is_null()) {
        out.push_str(&format!(
            "+ batch/v1/Job {} (backup for slot {})\n",
            key_text(backup.pointer("/job/metadata/name").unwrap_or(&Value::Null)),
            key_text(&backup["slot"])
        ));
    }
    for key in decision["expire"].as_array().into_iter().flatten() {
        out.push_str(&format!("- {} (backup expired)\n", key_text(key)));
    }
    let mut status = Vec::new();
    changed_fields(
        "status",
        live.app.get("status").unwrap_or(&Value::Null),
        &decision["status"],
        &mut status,
    );
    if status.is_empty() {
        out.push_str("= App status\n");
    } else {
        out.push_str("~ App status\n");
        for change in status {
            out.push_str(&format!("    {change}\n"));
        }
    }
    for event in decision["events"].as_array().into_iter().flatten() {
        // Reasons and notes carry the plugin's words: printed quoted, escapes and all.
        out.push_str(&format!(
            "! Event {} {}: {}\n",
            key_text(&event["type"]),
            key_text(&event["reason"]),
            short(&event["note"])
        ));
    }
    Ok(out)
}

/// `text` with control characters escaped, so that nothing a plugin wrote can move the
/// terminal's cursor or hide a line of the report.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_unicode().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// An object without what every write changes by itself (resourceVersion, managedFields, the
/// generation, timestamps) and without its status, which the host does not apply.
fn comparable(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            metadata.remove(key);
        }
    }
    if let Some(object) = object.as_object_mut() {
        object.remove("status");
    }
    object
}

/// Appends `path: old -> new`, `path: + new` and `path: - old` for every leaf that differs
/// between `before` and `after`.
fn changed_fields(path: &str, before: &Value, after: &Value, out: &mut Vec<String>) {
    let join = |key: &str| {
        let key = printable(key);
        if path.is_empty() {
            key
        } else {
            format!("{path}.{key}")
        }
    };
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
            for key in keys {
                let (old, new) = (
                    b.get(key.as_str()).unwrap_or(&Value::Null),
                    a.get(key.as_str()).unwrap_or(&Value::Null),
                );
                changed_fields(&join(key), old, new, out);
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for i in 0..b.len().max(a.len()) {
                let (old, new) = (
                    b.get(i).unwrap_or(&Value::Null),
                    a.get(i).unwrap_or(&Value::Null),
                );
                changed_fields(&format!("{path}[{i}]"), old, new, out);
            }
        }
        (old, new) if old == new => {}
        (Value::Null, new) => out.push(format!("{path}: + {}", short(new))),
        (old, Value::Null) => out.push(format!("{path}: - {}", short(old))),
        (old, new) => out.push(format!("{path}: {} -> {}", short(old), short(new))),
    }
}

/// A value on one line, long ones cut.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        format!("{}...", text.chars().take(117).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn changed_fields_name_each_leaf_by_its_path() {
        let before =
            json!({"spec": {"replicas": 1, "template": {"labels": {"a": "x"}}}, "list": [1, 2]});
        let after =
            json!({"spec": {"replicas": 3, "template": {"labels": {"b": "y"}}}, "list": [1]});
        let mut out = Vec::new();
        changed_fields("", &before, &after, &mut out);
        assert_eq!(
            out,
            vec![
                "list[1]: - 2",
                "spec.replicas: 1 -> 3",
                "spec.template.labels.a: - \"x\"",
                "spec.template.labels.b: + \"y\"",
            ]
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("ok\x1b[3A\n"), "ok\\u{1b}[3A\\u{a}");
    }

    #[test]
    fn a_live_target_is_namespace_and_name() {
        assert_eq!(parse_target("team-a/cache").ok(), Some(("team-a", "cache")));
        for bad in ["cache", "/cache", "team-a/", "a/b/c"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
