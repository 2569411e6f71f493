//! The workload: N hello Apps and N/10 kvstore Apps; the objects their plugins plan (linked
//! natively, through the SDK's `Fixture::reconcile`, so the bare applier applies exactly what
//! the host would); creating and applying them with bounded concurrency; and timing when each
//! reaches a state, from a watch (no polling lists that would load the API server).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    discovery::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use wasmop_host::app::App;
use wasmop_sdk::testing::Fixture;

/// The App versions: hello tags its image with it; kvstore's upgrade gate reads it as semver.
pub const HELLO_VERSION: &str = "1.0";
/// See [`HELLO_VERSION`].
pub const KVSTORE_VERSION: &str = "7.2.4";

/// Which plugin an App runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    /// Deployment + Service.
    Hello,
    /// StatefulSet, Services, PDB, ConfigMap, ...
    Kvstore,
}

/// One App of the workload.
#[derive(Debug, Clone)]
pub struct AppDef {
    /// Its name.
    pub name: String,
    /// Its plugin.
    pub plugin: Plugin,
}

/// `hello` Apps `h-00000..`, and one kvstore App `kv-0000..` per `kv_every` of them.
pub fn apps(hello: usize, kvstore: usize) -> Vec<AppDef> {
    (0..hello)
        .map(|i| AppDef {
            name: format!("h-{i:05}"),
            plugin: Plugin::Hello,
        })
        .chain((0..kvstore).map(|i| AppDef {
            name: format!("kv-{i:04}"),
            plugin: Plugin::Kvstore,
        }))
        .collect()
}

fn config(plugin: Plugin) -> (Value, &'static str) {
    match plugin {
        Plugin::Hello => (json!({"replicas": 1}), HELLO_VERSION),
        Plugin::Kvstore => (json!({"replicas": 3}), KVSTORE_VERSION),
    }
}

/// The App object of `def`, its plugin from `image`.
pub fn app(def: &AppDef, image: &str) -> anyhow::Result<App> {
    let (config, version) = config(def.plugin);
    Ok(serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
        "metadata": {"name": def.name},
        "spec": {"plugin": {"image": image}, "version": version, "config": config},
    }))?)
}

/// A kvstore App with `replicas` members, otherwise as the workload's: the bound-kinds scenario
/// sets it against an instance of a bound kind with the same spec ([`kvstore_instance`]).
pub fn kvstore_app(name: &str, image: &str, replicas: u32) -> anyhow::Result<App> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
        "metadata": {"name": name},
        "spec": {
            "plugin": {"image": image},
            "version": KVSTORE_VERSION,
            "config": {"replicas": replicas},
        },
    }))?)
}

/// An instance of the `KVStore` kind of `group` (as `wasmop plugin crd` defines it): what its
/// author writes, the version and the configuration of a [`kvstore_app`] in one `spec`.
pub fn kvstore_instance(group: &str, name: &str, replicas: u32) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "KVStore",
        "metadata": {"name": name},
        "spec": {"version": KVSTORE_VERSION, "replicas": replicas},
    }))?)
}

/// Whether an object's `status.conditions` holds `type_` with status True (an instance of a
/// bound kind is read as a `DynamicObject`; its status is an App's).
pub fn condition_true(status: &Value, type_: &str) -> bool {
    status["conditions"].as_array().is_some_and(|conditions| {
        conditions
            .iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// What the host would apply for `def` in `namespace`, without owner references (the bare
/// applier has no App to own them, and the garbage collector would delete objects owned by a
/// uid that does not exist).
pub fn planned(def: &AppDef, namespace: &str) -> anyhow::Result<Vec<Value>> {
    let (config, version) = config(def.plugin);
    let mut app = serde_json::from_str::<Value>(&wasmop_sdk::testing::app(
        &def.name, namespace, version, config,
    ))?;
    app["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    app["metadata"]["generation"] = json!(1);
    let fixture = Fixture::new(app.to_string());
    let decision = match def.plugin {
        Plugin::Hello => fixture.reconcile::<hello::Hello>(),
        Plugin::Kvstore => fixture.reconcile::<kvstore::Kvstore>(),
    }
    .map_err(|e| anyhow::anyhow!("planning {}: {e}", def.name))?;
    if decision.apply.is_empty() {
        bail!(
            "{} plans nothing natively: {:?}",
            def.name,
            decision.status.conditions
        );
    }
    Ok(decision
        .apply
        .iter()
        .map(|object| {
            let mut value = object.to_value();
            if let Some(meta) = value["metadata"].as_object_mut() {
                meta.remove("ownerReferences");
            }
            value
        })
        .collect())
}

/// Runs `work` over `items` with at most `concurrency` at once; the first error wins.
pub async fn bounded<T, F, Fut>(items: Vec<T>, concurrency: usize, work: F) -> anyhow::Result<()>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items.into_iter().map(work))
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Creates the Apps, `concurrency` at a time.
pub async fn create_apps(
    client: &Client,
    namespace: &str,
    defs: &[AppDef],
    image_of: impl Fn(Plugin) -> String,
    concurrency: usize,
) -> anyhow::Result<()> {
    let api: Api<App> = Api::namespaced(client.clone(), namespace);
    let apps = defs
        .iter()
        .map(|d| app(d, &image_of(d.plugin)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    bounded(apps, concurrency, |app| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &app)
                .await
                .with_context(|| format!("creating App {}", app.name_any()))?;
            Ok(())
        }
    })
    .await
}

/// Server-side applies `objects` into `namespace` as `manager`, `concurrency` at a time: the
/// bare applier.
pub async fn apply_all(
    client: &Client,
    namespace: &str,
    objects: Vec<Value>,
    manager: &str,
    concurrency: usize,
) -> anyhow::Result<()> {
    let params = PatchParams::apply(manager).force();
    bounded(objects, concurrency, |object| {
        let (client, params) = (client.clone(), params.clone());
        async move {
            let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
            let (api_version, kind, name) = (
                text("/apiVersion"),
                text("/kind"),
                text("/metadata/name").to_string(),
            );
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let resource = ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk(group, version, kind),
                &plural(kind)?,
            );
            let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
            api.patch(&name, &params, &Patch::Apply(&object))
                .await
                .with_context(|| format!("applying {kind} {name}"))?;
            Ok(())
        }
    })
    .await
}

fn plural(kind: &str) -> anyhow::Result<String> {
    Ok(match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "Service" => "services",
        "ConfigMap" => "configmaps",
        "ServiceAccount" => "serviceaccounts",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "Job" => "jobs",
        "PersistentVolumeClaim" => "persistentvolumeclaims",
        other => bail!("the bare applier knows no plural for kind {other}"),
    }
    .to_string())
}

/// When each object of a watch first met a predicate.
pub struct Tracker {
    /// Name → time since the start, per mark.
    marks: tokio::sync::watch::Receiver<HashMap<(usize, String), Duration>>,
    task: tokio::task::JoinHandle<()>,
}

/// A predicate over a watched object.
pub type Mark<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

impl Tracker {
    /// Watches `api` from `start` and records, for each mark, when each object first met it.
    pub fn watch<K>(api: Api<K>, start: Instant, marks: Vec<Mark<K>>) -> Self
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let (tx, rx) = tokio::sync::watch::channel(HashMap::new());
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = stream.next().await {
                let Ok(object) = event else { continue };
                let name = object.name_any();
                let at = start.elapsed();
                tx.send_if_modified(|seen| {
                    let mut changed = false;
                    for (i, mark) in marks.iter().enumerate() {
                        let key = (i, name.clone());
                        if !seen.contains_key(&key) && mark(&object) {
                            seen.insert(key, at);
                            changed = true;
                        }
                    }
                    changed
                });
            }
        });
        Self { marks: rx, task }
    }

    /// Waits until `count` objects met mark `index`, then returns when the last of them did.
    pub async fn all(
        &mut self,
        index: usize,
        count: usize,
        timeout: Duration,
        what: &str,
    ) -> anyhow::Result<Duration> {
        let done = |seen: &HashMap<(usize, String), Duration>| {
            seen.iter().filter(|((i, _), _)| *i == index).count() >= count
        };
        let met_all = tokio::time::timeout(timeout, self.marks.wait_for(done))
            .await
            .is_ok_and(|r| r.is_ok());
        let seen = self.marks.borrow();
        let met: Vec<Duration> = seen
            .iter()
            .filter(|((i, _), _)| *i == index)
            .map(|(_, at)| *at)
            .collect();
        match met_all {
            true => Ok(met.into_iter().max().unwrap_or_default()),
            false => bail!(
                "timed out after {timeout:?} waiting for {what}: {} of {count}",
                met.len()
            ),
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether an App has been reconciled at its generation with its plugin serving (its plan
/// applied: the host writes `observedGeneration` after the objects; a reconcile that only held
/// while the plugin loaded writes it too, without `PluginReady=True`).
pub fn observed(app: &App) -> bool {
    let Some(status) = app.status.as_ref() else {
        return false;
    };
    status.observed_generation == app.metadata.generation
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == "PluginReady" && c.status == "True")
}

/// Whether an App is Ready.
pub fn ready(app: &App) -> bool {
    app.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")
}

/// The plugin digest an App runs.
pub fn digest(app: &App) -> Option<String> {
    app.status
        .as_ref()?
        .plugin
        .as_ref()
        .map(|p| p.digest.clone())
}

/// Whether a Deployment has all its replicas ready at its generation.
pub fn deployment_ready(d: &k8s_openapi::api::apps::v1::Deployment) -> bool {
    let status = d.status.as_ref();
    let want = d.spec.replicas.unwrap_or(1);
    status.and_then(|s| s.ready_replicas).unwrap_or(0) >= want
        && status.and_then(|s| s.observed_generation) == d.metadata.generation
}

/// Whether a StatefulSet has all its replicas ready at its generation.
pub fn statefulset_ready(s: &k8s_openapi::api::apps::v1::StatefulSet) -> bool {
    let status = s.status.as_ref();
    let want = s.spec.replicas.unwrap_or(1);
    status.and_then(|s| s.ready_replicas).unwrap_or(0) >= want
        && status.and_then(|s| s.observed_generation) == s.metadata.generation
}
