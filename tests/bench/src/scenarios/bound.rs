//! Bound kinds (issue 40): what a kind a `PluginBinding` binds costs the host with no instance,
//! what an instance of it costs against a kvstore App with the same spec, and how long a new
//! binding takes to serve an instance that was waiting for it.
//!
//! One release host (the wasm variant) watches two fresh namespaces, the instances' and the
//! Apps', so that both are measured on the same process, and serves only this run's bindings
//! (`--binding-selector`). Every kind is a `KVStore` of a group of its own, its CRD and
//! ClusterRole printed by `wasmop plugin crd` and applied before the host starts. Every binding
//! binds the same kvstore image, which the host loads for the first instance it serves: a kind
//! with no instance costs its controllers alone (one per watched namespace, each with its watch
//! and cache), and the compiled plugin is counted once (the plugins scenario measures that). In
//! order, reading the host's memory each time it has not reconciled for 10 s:
//! 1. the host alone;
//! 2. K kinds bound, each binding Valid, no instance: per kind;
//! 3. one more kind, whose CRD and one instance exist before its binding: the seconds from the
//!    binding's create until it is Valid and until the instance is Ready, loading the plugin;
//! 4. the same for one more kind, the plugin loaded: what a binding itself takes;
//! 5. N instances of the first kind, all Ready: per instance;
//! 6. N kvstore Apps with the same spec in the other namespace, all Ready: per App.
//!
//! Then it cleans up, after a failure too: the instances are deleted while the host runs (their
//! deletion runs the plugin's `finalize`), then the bindings, which the host releases once no
//! instance of their kind is left, then the CRDs, the roles and the namespaces. Groups and
//! names carry the run's stamp, so that an earlier run's leftovers cannot make this run's
//! bindings `AlreadyBound`.

use std::{
    collections::HashSet,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use k8s_openapi::{
    api::rbac::v1::ClusterRole,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
    runtime::wait::{await_condition, conditions},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;
use wasmop_host::{app::App, binding::PluginBinding};

use super::{
    Env, Variant, admin_kubeconfig, component, component_path, create_namespace, delete_namespace,
    log, push, settle, var,
};
use crate::{
    Args,
    host::{Host, HostSpec, Memory},
    workload::{self, Tracker},
};

/// The label that selects this run's bindings for its host: the instances' namespace.
const LABEL: &str = "bench.wasmop.dev/namespace";

/// How long the cleanup waits for the host to finalize what it serves before it removes the
/// finalizers itself: nothing the run made may outlive it.
const RELEASE: Duration = Duration::from_secs(300);

/// The scenario's results.
#[derive(Debug, Serialize)]
pub struct BoundKinds {
    /// Kinds measured with no instance (K); two more were bound besides, each timed from its
    /// binding to its one instance Ready.
    pub kinds: usize,
    /// Instances of one bound kind, and as many kvstore Apps (N).
    pub instances: usize,
    /// Namespaces the host watched: each bound kind runs a controller, with its watch and
    /// cache, per watched namespace.
    pub namespaces: usize,
    /// The host's memory after each step, in order.
    pub steps: Vec<BoundStep>,
    /// Resident MiB per bound kind with no instance.
    pub per_kind_mib: Option<f64>,
    /// A binding for a kind with one instance waiting, the first instance of the plugin: the
    /// time includes loading it.
    pub first_ready_loading: FirstReady,
    /// The same with the plugin loaded: what a binding itself takes to serve.
    pub first_ready: FirstReady,
    /// Resident MiB per instance of a bound kind (`None`: `--bound-instances 0`).
    pub per_instance_mib: Option<f64>,
    /// Resident MiB per kvstore App with the same spec, on the same host.
    pub per_app_mib: Option<f64>,
    /// Per instance against per App.
    pub instance_to_app: Option<f64>,
}

/// A binding created for a kind whose one instance was waiting for it.
#[derive(Debug, Serialize)]
pub struct FirstReady {
    /// Seconds from the binding's create until it was Valid.
    pub valid_s: f64,
    /// Seconds from the binding's create until the instance was Ready.
    pub ready_s: f64,
    /// Whether the plugin it loaded came from the host's compiled cache (`false`: compiled),
    /// as the host logged it; `None` when it loaded nothing or the log did not say.
    pub from_cache: Option<bool>,
}

/// The host's memory once settled after one step.
#[derive(Debug, Serialize)]
pub struct BoundStep {
    /// What the step added.
    pub step: String,
    /// How many of it (kinds, instances, Apps): what the memory it added is divided by (0:
    /// nothing to divide, as the host alone or a kind with its instance).
    pub items: usize,
    /// The host's memory, MiB.
    pub memory: Memory,
    /// Resident MiB the step added against the one before, per item.
    pub per_item_mib: Option<f64>,
    /// Anonymous MiB the step added against the one before, per item.
    pub per_item_anon_mib: Option<f64>,
    /// Seconds until what the step made was Valid (bindings) or Ready (instances, Apps).
    pub ready_s: Option<f64>,
}

/// One kind of the scenario and the names of what it makes.
struct Kind {
    /// `bench-<i>-<stamp>.bench.example.com`.
    group: String,
    /// The PluginBinding's name, `bench-<i>-<stamp>`.
    binding: String,
    /// The CRD's name, `kvstores.<group>`.
    crd: String,
    /// The ClusterRole `wasmop plugin crd` prints with it.
    role: String,
    /// The CRD and the role, as `wasmop plugin crd` printed them.
    yaml: String,
}

impl Kind {
    /// Kind `i` of run `stamp`, its CRD and role printed by `wasmop plugin crd` (a compile of
    /// the plugin each).
    async fn render(i: usize, stamp: u32, wasmop: &Path, plugin: &Path) -> anyhow::Result<Self> {
        let binding = format!("bench-{i}-{stamp:x}");
        let group = format!("{binding}.bench.example.com");
        let crd = format!("kvstores.{group}");
        let role = format!("wasmop-{crd}");
        let out = tokio::process::Command::new(wasmop)
            .args(["plugin", "crd"])
            .arg(plugin)
            .args(["--group", &group, "--kind", "KVStore"])
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {} plugin crd", wasmop.display()))?;
        ensure!(
            out.status.success(),
            "wasmop plugin crd --group {group}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let yaml = String::from_utf8(out.stdout)
            .with_context(|| format!("wasmop plugin crd --group {group}: not UTF-8"))?;
        // The cleanup deletes these by name: they must be what was printed.
        for name in [&crd, &role] {
            ensure!(
                yaml.contains(&format!("name: {name}\n")),
                "wasmop plugin crd --group {group} printed no object named {name}"
            );
        }
        Ok(Self {
            group,
            binding,
            crd,
            role,
            yaml,
        })
    }

    /// Server-side-applies the CRD and the role with `kubectl`, as a team would, and waits
    /// until the CRD is Established.
    async fn apply(&self, env: &Env) -> anyhow::Result<()> {
        let file = env.dir.join(format!("{}.yaml", self.crd));
        std::fs::write(&file, &self.yaml).with_context(|| format!("writing {}", file.display()))?;
        let out = tokio::process::Command::new(var("WASMOP_KUBECTL")?)
            .arg("--kubeconfig")
            .arg(admin_kubeconfig()?)
            .args([
                "apply",
                "--server-side",
                "--field-manager=wasmop-bench",
                "-f",
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .await
            .context("running kubectl");
        let _ = std::fs::remove_file(&file);
        let out = out?;
        ensure!(
            out.status.success(),
            "kubectl apply of CRD {} and ClusterRole {}: {}",
            self.crd,
            self.role,
            String::from_utf8_lossy(&out.stderr)
        );
        let crds: Api<CustomResourceDefinition> = Api::all(env.admin.clone());
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(crds, &self.crd, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {} not Established after 60 s", self.crd))?
        .with_context(|| format!("watching CRD {}", self.crd))?;
        Ok(())
    }

    /// The kind's instances in `namespace`.
    fn instances(&self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, "v1", "KVStore"),
            "kvstores",
        );
        Api::namespaced_with(client.clone(), namespace, &resource)
    }

    /// The binding of the kind to `image`, labelled for the host of `namespace`.
    fn binding(&self, image: &str, namespace: &str) -> anyhow::Result<PluginBinding> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
            "metadata": {"name": self.binding, "labels": {LABEL: namespace}},
            "spec": {
                "kind": {"group": self.group, "version": "v1", "kind": "KVStore"},
                "plugin": {"image": image},
            },
        }))?)
    }
}

/// Runs the scenario with `--bound-kinds` K and `--bound-instances` N (K + 2 kinds in all), its
/// names stamped with `stamp`, and cleans up after it.
pub(super) async fn run(env: &Env, args: &Args, stamp: u32) -> anyhow::Result<BoundKinds> {
    let k = usize::from(args.bound_kinds);
    let n = args.bound_instances;
    let namespace = format!("bench-bound-{stamp:x}");
    let apps_namespace = format!("bench-bound-apps-{stamp:x}");
    log(format!(
        "bound kinds: {k} + 2 kinds in {namespace}, {n} instances against {n} kvstore Apps in \
         {apps_namespace}"
    ));
    // What needs no cluster first: a plugin or binary that cannot print a CRD fails here.
    let (wasmop, plugin) = (env.binary(Variant::Wasm)?, component_path("kvstore.wasm")?);
    let rendering = Instant::now();
    let mut kinds = Vec::new();
    for i in 0..k + 2 {
        kinds.push(Kind::render(i, stamp, &wasmop, &plugin).await?);
    }
    log(format!(
        "bound kinds: {} CRDs printed in {:.0?}",
        kinds.len(),
        rendering.elapsed()
    ));
    create_namespace(&env.admin, &namespace).await?;
    create_namespace(&env.admin, &apps_namespace).await?;
    let measured = serve(env, args, &kinds, &namespace, &apps_namespace).await;
    let removed = remove(env, &kinds).await;
    delete_namespace(&env.admin, &namespace).await?;
    delete_namespace(&env.admin, &apps_namespace).await?;
    let measured = measured?;
    removed?;
    Ok(measured)
}

/// Applies the kinds, starts the host, measures, and releases what the host serves before
/// stopping it.
async fn serve(
    env: &Env,
    args: &Args,
    kinds: &[Kind],
    namespace: &str,
    apps_namespace: &str,
) -> anyhow::Result<BoundKinds> {
    for kind in kinds {
        kind.apply(env).await?;
    }
    let image = push(env, "bound/kvstore", &component("kvstore.wasm")?).await?;
    let mut spec = env.host_spec(Variant::Wasm, namespace, args.concurrency)?;
    spec.more_namespaces = vec![apps_namespace.to_string()];
    spec.binding_selector = Some(format!("{LABEL}={namespace}"));
    let host = Host::start(&spec).await?;
    let measured = measure(env, args, &host, &spec, kinds, &image).await;
    let released = release(env, kinds, namespace).await;
    let stopped = host.stop().await;
    // The measurement's error first: the cleanup's may follow from it.
    let measured = measured?;
    released?;
    stopped?;
    Ok(measured)
}

/// The steps, on a running host started as `spec` says: instances in its namespace, Apps in
/// the other it watches.
async fn measure(
    env: &Env,
    args: &Args,
    host: &Host,
    spec: &HostSpec,
    kinds: &[Kind],
    image: &str,
) -> anyhow::Result<BoundKinds> {
    let namespace = spec.namespace.as_str();
    let apps_namespace = spec
        .more_namespaces
        .first()
        .context("the host watches no namespace for the Apps")?;
    let (k, n) = (kinds.len() - 2, args.bound_instances);
    let timeout = Duration::from_secs(args.timeout_secs);
    let bindings: Api<PluginBinding> = Api::all(env.admin.clone());
    let mut steps = Vec::new();
    record(host, &mut steps, "the host, no kind bound".into(), 0, None).await?;

    // A kind with no instance loads no plugin: what it costs is its controllers alone.
    let valid = bind(&bindings, &kinds[..k], image, namespace, timeout).await?;
    record(
        host,
        &mut steps,
        format!("{k} kinds bound, no instance"),
        k,
        Some(valid),
    )
    .await?;
    let per_kind_mib = steps.last().and_then(|s| s.per_item_mib);

    // A binding for a kind with an instance waiting: how soon it is served. The first loads
    // the plugin (the host's compiled cache may hold it: the log says), the second finds it
    // loaded.
    let from = std::fs::metadata(&spec.log).map_or(0, |m| m.len());
    let mut loading = first_ready(env, &bindings, &kinds[k], image, namespace, timeout).await?;
    loading.from_cache = crate::host::plugin_loaded_from_cache(&spec.log, from, "kvstore")?;
    record(
        host,
        &mut steps,
        "1 more kind bound, its one instance Ready (the plugin loaded for it)".into(),
        0,
        Some(loading.ready_s),
    )
    .await?;
    let loaded = first_ready(env, &bindings, &kinds[k + 1], image, namespace, timeout).await?;
    record(
        host,
        &mut steps,
        "1 more kind bound, its one instance Ready".into(),
        0,
        Some(loaded.ready_s),
    )
    .await?;

    // N instances of one kind, then N Apps with the same spec, on the same host.
    let (mut per_instance_mib, mut per_app_mib) = (None, None);
    if n > 0 {
        let instances = kinds[0].instances(&env.admin, namespace);
        let objects = (0..n)
            .map(|i| workload::kvstore_instance(&kinds[0].group, &format!("i-{i:05}"), 1))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let start = Instant::now();
        let mut ready = Tracker::watch(instances.clone(), start, vec![Box::new(instance_ready)]);
        create_all(instances, objects, args.concurrency.into()).await?;
        let ready_s = ready
            .all(0, n, timeout, "Ready instances")
            .await?
            .as_secs_f64();
        drop(ready);
        record(
            host,
            &mut steps,
            format!("{n} instances of one kind"),
            n,
            Some(ready_s),
        )
        .await?;
        per_instance_mib = steps.last().and_then(|s| s.per_item_mib);

        let apps: Api<App> = Api::namespaced(env.admin.clone(), apps_namespace);
        let objects = (0..n)
            .map(|i| workload::kvstore_app(&format!("kv-{i:05}"), image, 1))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let start = Instant::now();
        let mut ready = Tracker::watch(apps.clone(), start, vec![Box::new(workload::ready)]);
        create_all(apps, objects, args.concurrency.into()).await?;
        let ready_s = ready.all(0, n, timeout, "Ready Apps").await?.as_secs_f64();
        drop(ready);
        record(
            host,
            &mut steps,
            format!("{n} kvstore Apps, the same spec"),
            n,
            Some(ready_s),
        )
        .await?;
        per_app_mib = steps.last().and_then(|s| s.per_item_mib);
    }
    Ok(BoundKinds {
        kinds: k,
        instances: n,
        namespaces: 2,
        steps,
        per_kind_mib,
        first_ready_loading: loading,
        first_ready: loaded,
        per_instance_mib,
        per_app_mib,
        instance_to_app: per_instance_mib.zip(per_app_mib).map(|(i, a)| i / a),
    })
}

/// Creates one instance of `kind`, then its binding; returns how long the binding took to be
/// Valid and the instance to be Ready, from the binding's create.
async fn first_ready(
    env: &Env,
    bindings: &Api<PluginBinding>,
    kind: &Kind,
    image: &str,
    namespace: &str,
    timeout: Duration,
) -> anyhow::Result<FirstReady> {
    let instances = kind.instances(&env.admin, namespace);
    instances
        .create(
            &PostParams::default(),
            // Named after its kind: the two timed kinds' instances share the namespace, and
            // two parents of one name plan objects of one name (the second would be refused).
            &workload::kvstore_instance(&kind.group, &kind.binding, 1)?,
        )
        .await
        .with_context(|| format!("creating KVStore {} of {}", kind.binding, kind.group))?;
    let start = Instant::now();
    let mut ready = Tracker::watch(instances, start, vec![Box::new(instance_ready)]);
    let valid_s = bind(
        bindings,
        std::slice::from_ref(kind),
        image,
        namespace,
        timeout,
    )
    .await?;
    let ready_s = ready
        .all(0, 1, timeout, "the first instance Ready")
        .await?
        .as_secs_f64();
    log(format!(
        "bound kinds: binding {} Valid after {valid_s:.2} s, its instance Ready after \
         {ready_s:.2} s",
        kind.binding
    ));
    Ok(FirstReady {
        valid_s,
        ready_s,
        from_cache: None,
    })
}

/// Waits until the host has settled, reads its memory and records the step.
async fn record(
    host: &Host,
    steps: &mut Vec<BoundStep>,
    step: String,
    items: usize,
    ready_s: Option<f64>,
) -> anyhow::Result<()> {
    let settled = settle(host).await?;
    let memory = host.memory_mib()?;
    let per = |now: f64, before: f64| (now - before) / items as f64;
    let (per_item_mib, per_item_anon_mib) = match steps.last() {
        Some(before) if items > 0 => (
            Some(per(memory.rss, before.memory.rss)),
            Some(per(memory.anon, before.memory.anon)),
        ),
        _ => (None, None),
    };
    log(format!(
        "bound kinds: {step}: settled after {settled:.0?}, {memory:?} MiB, per item {per_item_mib:?}"
    ));
    steps.push(BoundStep {
        step,
        items,
        memory,
        per_item_mib,
        per_item_anon_mib,
        ready_s,
    });
    Ok(())
}

/// Creates the bindings of `kinds` and waits until each is Valid; returns the seconds that
/// took. If one is not, the error says why (its condition's reason and message).
async fn bind(
    bindings: &Api<PluginBinding>,
    kinds: &[Kind],
    image: &str,
    namespace: &str,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let names: HashSet<String> = kinds.iter().map(|k| k.binding.clone()).collect();
    let start = Instant::now();
    let mut valid = Tracker::watch(
        bindings.clone(),
        start,
        vec![Box::new(move |b: &PluginBinding| {
            names.contains(&b.name_any()) && is_valid(b)
        })],
    );
    for kind in kinds {
        bindings
            .create(&PostParams::default(), &kind.binding(image, namespace)?)
            .await
            .with_context(|| format!("creating PluginBinding {}", kind.binding))?;
    }
    match valid
        .all(0, kinds.len(), timeout, "Valid PluginBindings")
        .await
    {
        Ok(took) => Ok(took.as_secs_f64()),
        Err(err) => {
            let mut why = Vec::new();
            for kind in kinds {
                let binding = bindings
                    .get(&kind.binding)
                    .await
                    .with_context(|| format!("reading PluginBinding {}", kind.binding))?;
                if !is_valid(&binding) {
                    let condition = binding
                        .status
                        .iter()
                        .flat_map(|s| &s.conditions)
                        .find(|c| c.type_ == "Valid")
                        .map(|c| format!("{}: {}", c.reason, c.message));
                    why.push(format!(
                        "{}: {}",
                        kind.binding,
                        condition.as_deref().unwrap_or("not checked yet")
                    ));
                }
            }
            bail!("{err:#}; {}", why.join("; "))
        }
    }
}

/// Whether a binding's `Valid` condition is True.
fn is_valid(binding: &PluginBinding) -> bool {
    binding.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Valid" && c.status == "True")
    })
}

/// Whether an instance of a bound kind is Ready.
fn instance_ready(instance: &DynamicObject) -> bool {
    workload::condition_true(&instance.data["status"], "Ready")
}

/// Creates `objects` with `api`, `concurrency` at a time, as the workload creates its Apps.
async fn create_all<K>(api: Api<K>, objects: Vec<K>, concurrency: usize) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    workload::bounded(objects, concurrency, |object| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("creating {}", object.name_any()))?;
            Ok(())
        }
    })
    .await
}

/// Deletes every instance of the kinds in `namespace` while the host runs (their deletion runs
/// the plugin's `finalize`), then the bindings, which the host releases once no instance is
/// left. What is not gone within [`RELEASE`] loses its finalizers.
async fn release(env: &Env, kinds: &[Kind], namespace: &str) -> anyhow::Result<()> {
    let all = ListParams::default();
    for kind in kinds {
        let instances = kind.instances(&env.admin, namespace);
        present(
            instances
                .delete_collection(&DeleteParams::default(), &all)
                .await,
        )
        .with_context(|| format!("deleting the KVStores of {}", kind.group))?;
    }
    for kind in kinds {
        let what = format!("KVStores of {}", kind.group);
        gone(&kind.instances(&env.admin, namespace), &all, &what).await?;
    }
    let bindings: Api<PluginBinding> = Api::all(env.admin.clone());
    for kind in kinds {
        present(
            bindings
                .delete(&kind.binding, &DeleteParams::default())
                .await,
        )
        .with_context(|| format!("deleting PluginBinding {}", kind.binding))?;
    }
    let ours = ListParams::default().labels(&format!("{LABEL}={namespace}"));
    gone(&bindings, &ours, "PluginBindings").await
}

/// Deletes the CRDs and the ClusterRoles `wasmop plugin crd` printed with them.
async fn remove(env: &Env, kinds: &[Kind]) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(env.admin.clone());
    let roles: Api<ClusterRole> = Api::all(env.admin.clone());
    for kind in kinds {
        present(crds.delete(&kind.crd, &DeleteParams::background()).await)
            .with_context(|| format!("deleting CRD {}", kind.crd))?;
        present(roles.delete(&kind.role, &DeleteParams::background()).await)
            .with_context(|| format!("deleting ClusterRole {}", kind.role))?;
    }
    Ok(())
}

/// Waits until `api` lists nothing with `list`, for at most [`RELEASE`]; what is left then
/// loses its finalizers, so that nothing the run made outlives it.
async fn gone<K>(api: &Api<K>, list: &ListParams, what: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + RELEASE;
    loop {
        let left = match api.list_metadata(list).await {
            Ok(left) => left.items,
            // The kind is not served (its CRD was never applied): nothing to wait for.
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(()),
            Err(err) => return Err(err).with_context(|| format!("listing the {what}")),
        };
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            log(format!(
                "bound kinds: {} {what} left after {RELEASE:?}; removing their finalizers",
                left.len()
            ));
            for object in left {
                let name = object.name_any();
                present(
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await,
                )
                .with_context(|| format!("removing the finalizers of {name} ({what})"))?;
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A request's result, a 404 taken as done: the cleanup deletes what may never have been made.
fn present<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(err) => Err(err),
    }
}
