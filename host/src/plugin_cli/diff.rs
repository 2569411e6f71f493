//! `plugin run --live NAMESPACE/NAME [--diff]`: a plugin's reconcile of an App as it is in the
//! cluster, and with `--diff` what that reconcile would change there, object by object. It
//! reads the cluster and applies nothing: each planned object goes through a server-side apply
//! in dry-run mode (`dryRun=All`, the host's field manager), so the API server's defaulting,
//! validation and admission shape the preview exactly as they would shape the write.

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams},
    core::GroupVersionKind,
    discovery::{ApiResource, pinned_kind},
};
use serde_json::Value;

use crate::{app::App, crd_install::FIELD_MANAGER};

/// The App `namespace/name` and the objects the host's caches would hold for it: those
/// labelled with it, of the kinds the plugin owns or observes, and backup Jobs and claims.
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

/// Reads the App and its objects from the cluster of the current kubeconfig.
pub(super) async fn read_live(
    client: &Client,
    target: &str,
    kinds: &[String],
) -> anyhow::Result<Live> {
    let (namespace, name) = parse_target(target)?;
    let app = Api::<App>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading the App {namespace}/{name}"))?;
    let app = serde_json::to_value(app)?;
    let mut kinds: BTreeSet<&str> = kinds.iter().map(String::as_str).collect();
    kinds.extend(["batch/v1/Job", "v1/PersistentVolumeClaim"]);
    let labelled =
        ListParams::default().labels(&format!("{}={name}", wasmop_core::observed::APP_LABEL));
    let mut observed = Vec::new();
    for kind in kinds {
        let resource = resource(client, kind).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let list = api
            .list(&labelled)
            .await
            .with_context(|| format!("listing {kind} in {namespace}"))?;
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

/// `apps/v1/StatefulSet` (or `v1/Service`, as plugins name kinds) resolved by discovery.
async fn resource(client: &Client, kind: &str) -> anyhow::Result<ApiResource> {
    let (api_version, kind_name) = kind
        .rsplit_once('/')
        .with_context(|| format!("{kind:?} is not apiVersion/kind"))?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind_name);
    let (resource, _) = pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("the API server does not serve {kind}"))?;
    Ok(resource)
}

/// What applying `decision` (as [`super::reconcile::reconcile_once`] prints it) would change in
/// the App's namespace, one line per object and one per changed field, each field named by its
/// path. Objects go through a dry-run server-side apply. Planned objects the host would not
/// write (already as planned, by the digest it stamps on what it applies) are counted.
pub(super) async fn diff(client: &Client, live: &Live, decision: &Value) -> anyhow::Result<String> {
    let namespace = live
        .app
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let mut out = String::new();
    let dry_run = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    for planned in decision["apply"].as_array().into_iter().flatten() {
        let kind = format!(
            "{}/{}",
            planned["apiVersion"].as_str().unwrap_or_default(),
            planned["kind"].as_str().unwrap_or_default()
        );
        let name = planned
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let resource = resource(client, &kind).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let current = api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {kind} {name}"))?;
        let applied = api
            .patch(name, &dry_run, &Patch::Apply(planned))
            .await
            .with_context(|| format!("dry-run apply of {kind} {name}"))?;
        let applied = comparable(serde_json::to_value(applied)?);
        match current {
            None => out.push_str(&format!("+ {kind} {name} (created)\n")),
            Some(current) => {
                let mut changes = Vec::new();
                changed_fields(
                    "",
                    &comparable(serde_json::to_value(current)?),
                    &applied,
                    &mut changes,
                );
                if changes.is_empty() {
                    out.push_str(&format!("= {kind} {name}\n"));
                } else {
                    out.push_str(&format!("~ {kind} {name}\n"));
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
    for key in decision["prune"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "- {} (pruned)\n",
            key.as_str().unwrap_or_default()
        ));
    }
    if let Some(backup) = decision.get("backup").filter(|b| !b.is_null()) {
        out.push_str(&format!(
            "+ batch/v1/Job {} (backup for slot {})\n",
            backup
                .pointer("/job/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            backup["slot"].as_str().unwrap_or_default()
        ));
    }
    for key in decision["expire"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "- {} (backup expired)\n",
            key.as_str().unwrap_or_default()
        ));
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
        out.push_str(&format!(
            "! Event {} {}: {}\n",
            event["type"].as_str().unwrap_or_default(),
            event["reason"].as_str().unwrap_or_default(),
            event["note"].as_str().unwrap_or_default()
        ));
    }
    Ok(out)
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
        if path.is_empty() {
            key.to_string()
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
    fn a_live_target_is_namespace_and_name() {
        assert_eq!(parse_target("team-a/cache").ok(), Some(("team-a", "cache")));
        for bad in ["cache", "/cache", "team-a/", "a/b/c"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
