//! The chaos soak (`tests/chaos.sh --minutes M [--seed S]`; an ignored test, which `tests/run.sh`
//! runs last for 2.5 minutes with a fixed seed): for M minutes a seeded random schedule creates,
//! changes and deletes Apps of kvstore (from an OCI tag) and hello (from a ConfigMap), swaps
//! their plugins to good and broken versions, `kill -9`s the host, restarts kube-apiserver and
//! takes the registry down.
//! Then the faults stop, the plugins are healed, and the invariants are checked:
//!
//! - every App Ready at its latest generation and version (some are upgraded a minor);
//! - every App's main object present, and every object labelled for an App controlled by it;
//! - every deleted App gone; claims as kvstore's retention policy says: `Delete` removes the
//!   data claims and keeps the backups claim, `Retain` keeps every claim;
//! - the objects the host does not own unchanged;
//! - each backup slot of an App run at most once (every backup Job seen during the run is
//!   recorded, including those later expired);
//! - no panic in any host's log.
//!
//! It prints what it did by kind, the time to converge after the last fault, each invariant's
//! result and the seed, and fails on any violation. The schedule is a function of the seed; the
//! timing of what the host does is not, so a replay repeats the faults, not the interleaving.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use k8s_openapi::{
    ByteString,
    api::{
        batch::v1::Job,
        core::v1::{ConfigMap, PersistentVolumeClaim},
    },
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use wasmop_host::{app::App, plugin::source::oci::OciSource};

use crate::{
    apps::{Host, app},
    harness::{Local, TestNamespace, component, plugin_configmap, unique, wait_for},
};

/// The label every object of an App carries.
const APP_LABEL: &str = "wasmop.dev/app";
/// Most Apps alive at once.
const MAX_APPS: usize = 30;
/// How long the Apps may take to converge once the faults stopped.
const CONVERGE: Duration = Duration::from_secs(300);

/// xorshift64*: a small deterministic generator, so a seed replays the schedule.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration between `lo` and `hi` seconds.
    fn secs(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo * 1000 + self.below((hi - lo) * 1000 + 1))
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        let len = u64::try_from(items.len()).ok()?;
        items.get(usize::try_from(self.below(len)).ok()?)
    }
}

/// The plugin an App runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plugin {
    Kvstore,
    Hello,
}

/// What the soak knows of an App it created.
#[derive(Debug, Clone)]
struct Tracked {
    plugin: Plugin,
    uid: String,
    retain: bool,
    /// `spec.version`, which `status.version` must reach.
    version: &'static str,
    /// The App's claims when it was deleted: uid and name.
    claims: Vec<(String, String)>,
}

/// The actions, by weight.
const ACTIONS: [(&str, u64); 9] = [
    ("create", 18),
    ("update", 26),
    ("upgrade", 4),
    ("delete", 9),
    ("swap-kvstore", 8),
    ("swap-hello", 6),
    ("host-kill", 8),
    ("apiserver-restart", 4),
    ("registry-outage", 6),
];

fn pick_action(rng: &mut Rng) -> &'static str {
    let total: u64 = ACTIONS.iter().map(|(_, w)| w).sum();
    let mut roll = rng.below(total);
    for (name, weight) in ACTIONS {
        if roll < weight {
            return name;
        }
        roll -= weight;
    }
    "update"
}

/// The soak's running state.
struct Soak {
    local: Local,
    client: Client,
    ns: String,
    apps: Api<App>,
    rng: Rng,
    live: BTreeMap<String, Tracked>,
    deleted: BTreeMap<String, Tracked>,
    next_app: usize,
    done: BTreeMap<&'static str, usize>,
    skipped: BTreeMap<&'static str, usize>,
    host: Option<Host>,
    host_down_until: Option<Instant>,
    hosts_started: usize,
    host_args: Vec<String>,
    registry_down_until: Option<Instant>,
    last_fault: Option<Instant>,
    kvstore_tag: String,
    pusher: OciSource,
}

impl Soak {
    fn identity(&self) -> String {
        format!("{}-{}", self.ns, self.hosts_started)
    }

    async fn start_host(&mut self) -> anyhow::Result<()> {
        self.hosts_started += 1;
        let identity = self.identity();
        let args: Vec<&str> = self.host_args.iter().map(String::as_str).collect();
        self.host = Some(Host::start_with(&self.local, &self.ns, &args, &identity).await?);
        self.host_down_until = None;
        Ok(())
    }

    /// Ends the faults whose time is up: the registry comes back, the host restarts.
    async fn heal_due(&mut self, now: Instant) -> anyhow::Result<()> {
        if self.registry_down_until.is_some_and(|t| t <= now) {
            crate::faults::cluster(&["start", "registry"]).await?;
            self.registry_down_until = None;
            self.last_fault = Some(Instant::now());
        }
        if self.host_down_until.is_some_and(|t| t <= now) {
            self.start_host().await?;
            self.last_fault = Some(Instant::now());
        }
        Ok(())
    }

    fn spec(&mut self, name: &str, plugin: Plugin) -> anyhow::Result<App> {
        match plugin {
            Plugin::Kvstore => {
                let retention = if self.rng.below(2) == 0 {
                    "Retain"
                } else {
                    "Delete"
                };
                let mut config = json!({"replicas": 1 + self.rng.below(2), "retention": retention});
                if self.rng.below(3) == 0 {
                    config["backup"] = json!({"schedule": "* * * * *", "retain": 2});
                }
                app(name, json!({"image": self.kvstore_tag}), "7.2.4", config)
            }
            Plugin::Hello => {
                let plugin = json!({"configMap": {"name": "hello-plugin", "key": "plugin.wasm"}});
                app(name, plugin, "1.0.0", json!({"message": "hi"}))
            }
        }
    }

    /// Brings what the soak knows in line with the server after a call failed mid-fault (its
    /// answer lost, not necessarily its effect): Apps deleted or being deleted move to the
    /// deleted ones.
    async fn resync(&mut self) -> anyhow::Result<()> {
        let on_server = apps_by_name(&self.apps).await?;
        let gone: Vec<String> = self
            .live
            .keys()
            .filter(|name| {
                on_server
                    .get(*name)
                    .is_none_or(|a| a.metadata.deletion_timestamp.is_some())
            })
            .cloned()
            .collect();
        for name in gone {
            if let Some(tracked) = self.live.remove(&name) {
                self.deleted.insert(name, tracked);
            }
        }
        Ok(())
    }

    /// One action; `Ok(false)` when it could not be done now (skipped, not a failure).
    async fn act(&mut self, action: &'static str) -> anyhow::Result<bool> {
        match action {
            "create" => {
                if self.live.len() >= MAX_APPS {
                    return Ok(false);
                }
                let plugin = if self.rng.below(2) == 0 {
                    Plugin::Kvstore
                } else {
                    Plugin::Hello
                };
                let name = format!("app-{:03}", self.next_app);
                self.next_app += 1;
                let spec = self.spec(&name, plugin)?;
                let retain = spec
                    .spec
                    .config
                    .as_ref()
                    .and_then(|c| c.get("retention"))
                    .and_then(|r| r.as_str())
                    == Some("Retain");
                let version = match plugin {
                    Plugin::Kvstore => "7.2.4",
                    Plugin::Hello => "1.0.0",
                };
                let created = self.apps.create(&PostParams::default(), &spec).await?;
                let uid = created.uid().unwrap_or_default();
                self.live.insert(
                    name,
                    Tracked {
                        plugin,
                        uid,
                        retain,
                        version,
                        claims: Vec::new(),
                    },
                );
            }
            "upgrade" => {
                // One minor up, which kvstore's gate allows once the replicas are ready.
                let names: Vec<String> = self
                    .live
                    .iter()
                    .filter(|(_, t)| t.version == "7.2.4")
                    .map(|(name, _)| name.clone())
                    .collect();
                let Some(name) = self.rng.pick(&names).cloned() else {
                    return Ok(false);
                };
                let patch = json!({"spec": {"version": "7.3.0"}});
                self.apps
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                if let Some(tracked) = self.live.get_mut(&name) {
                    tracked.version = "7.3.0";
                }
            }
            "update" => {
                let names: Vec<String> = self.live.keys().cloned().collect();
                let Some(name) = self.rng.pick(&names).cloned() else {
                    return Ok(false);
                };
                let patch = match self.live[&name].plugin {
                    Plugin::Kvstore => json!({"spec": {"config": {
                        "replicas": 1 + self.rng.below(3),
                        "maxmemory": format!("{}mb", 64 + self.rng.below(64)),
                    }}}),
                    Plugin::Hello => json!({"spec": {"config": {
                        "message": format!("m{}", self.rng.below(1000)),
                    }}}),
                };
                self.apps
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
            }
            "delete" => {
                let names: Vec<String> = self.live.keys().cloned().collect();
                let Some(name) = self.rng.pick(&names).cloned() else {
                    return Ok(false);
                };
                let claims: Vec<(String, String)> =
                    Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &self.ns)
                        .list(&ListParams::default().labels(&format!("{APP_LABEL}={name}")))
                        .await?
                        .into_iter()
                        .map(|c| (c.uid().unwrap_or_default(), c.name_any()))
                        .collect();
                self.apps.delete(&name, &DeleteParams::default()).await?;
                if let Some(mut tracked) = self.live.remove(&name) {
                    tracked.claims = claims;
                    self.deleted.insert(name, tracked);
                }
            }
            "swap-kvstore" => {
                if self.registry_down_until.is_some() {
                    return Ok(false);
                }
                let file = match self.rng.below(3) {
                    0 => "kvstore.wasm",
                    1 => "kvstore-v2.wasm",
                    _ => "wrong-world.wasm",
                };
                self.pusher
                    .push_unchecked(&self.kvstore_tag, &component(file)?)
                    .await?;
            }
            "swap-hello" => {
                let file = if self.rng.below(2) == 0 {
                    "hello.wasm"
                } else {
                    "wrong-world.wasm"
                };
                set_hello(&self.client, &self.ns, file).await?;
            }
            "host-kill" => {
                let Some(host) = self.host.take() else {
                    return Ok(false);
                };
                host.kill().await?;
                self.host_down_until = Some(Instant::now() + self.rng.secs(0, 8));
                self.last_fault = Some(Instant::now());
            }
            "apiserver-restart" => {
                let down = self.rng.secs(5, 20);
                crate::faults::cluster(&["kill", "kube-apiserver"]).await?;
                tokio::time::sleep(down).await;
                crate::faults::cluster(&["start", "kube-apiserver"]).await?;
                wait_for(
                    "the API server to be ready again",
                    Duration::from_secs(60),
                    || async { Ok(crate::faults::api_ready(&self.client).await.then_some(())) },
                )
                .await?;
                self.last_fault = Some(Instant::now());
            }
            "registry-outage" => {
                if self.registry_down_until.is_some() {
                    return Ok(false);
                }
                crate::faults::cluster(&["kill", "registry"]).await?;
                self.registry_down_until = Some(Instant::now() + self.rng.secs(5, 30));
                self.last_fault = Some(Instant::now());
            }
            other => anyhow::bail!("unknown action {other}"),
        }
        Ok(true)
    }
}

/// The namespace's Apps as the API server has them, by name.
async fn apps_by_name(apps: &Api<App>) -> anyhow::Result<BTreeMap<String, App>> {
    Ok(apps
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|a| (a.name_any(), a))
        .collect())
}

/// Puts the component `file` into the hello Apps' plugin ConfigMap.
async fn set_hello(client: &Client, ns: &str, file: &str) -> anyhow::Result<()> {
    let bytes = component(file)?;
    let patch = json!({"binaryData": {"plugin.wasm": ByteString(bytes)}});
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "hello-plugin",
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// Every backup Job seen while the soak runs: Job uid -> (App uid, slot).
type SeenJobs = Arc<Mutex<BTreeMap<String, (String, String)>>>;

/// Lists the backup Jobs every second until aborted, recording each one.
fn record_backup_jobs(jobs: Api<Job>, seen: SeenJobs) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Ok(list) = jobs
                .list(&ListParams::default().labels("wasmop.dev/backup-slot"))
                .await
                && let Ok(mut seen) = seen.lock()
            {
                for job in list {
                    let owner = job
                        .owner_references()
                        .iter()
                        .find(|o| o.controller == Some(true))
                        .map(|o| o.uid.clone())
                        .unwrap_or_default();
                    let slot = job
                        .labels()
                        .get("wasmop.dev/backup-slot")
                        .cloned()
                        .unwrap_or_default();
                    seen.insert(job.uid().unwrap_or_default(), (owner, slot));
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// The objects labelled for an App: (what, App label, controller uid).
async fn labelled_objects(
    client: &Client,
    ns: &str,
) -> anyhow::Result<Vec<(String, String, Option<String>)>> {
    Ok(crate::faults::labelled_objects(client, ns)
        .await?
        .into_iter()
        .map(|(what, app, owners, _)| {
            let controller = owners
                .into_iter()
                .find(|r| r.controller == Some(true))
                .map(|r| r.uid);
            (what, app, controller)
        })
        .collect())
}

#[tokio::test]
#[ignore = "the chaos soak: run it with tests/chaos.sh --minutes M [--seed S]"]
async fn soak() -> anyhow::Result<()> {
    let minutes: f64 = std::env::var("WASMOP_CHAOS_MINUTES")
        .ok()
        .map(|m| m.parse())
        .transpose()
        .context("WASMOP_CHAOS_MINUTES")?
        .unwrap_or(10.0);
    let seed: u64 = match std::env::var("WASMOP_CHAOS_SEED") {
        Ok(seed) if !seed.is_empty() => seed.parse().context("WASMOP_CHAOS_SEED")?,
        _ => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    let replay = format!("tests/chaos.sh --minutes {minutes} --seed {seed}");
    eprintln!("chaos soak: {minutes} min, seed {seed} (replay: {replay})");

    let local = Local::discover()?;
    let client = local.client().await?;
    // Right after `cluster.sh up` the API server may still refuse writes for a moment.
    let ns = wait_for(
        "the API server to create the soak's namespace",
        Duration::from_secs(60),
        || async { Ok(TestNamespace::create(&client, "chaos").await.ok()) },
    )
    .await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.create(
        &PostParams::default(),
        &plugin_configmap("hello-plugin", "hello.wasm")?,
    )
    .await?;
    // Objects the host must never touch: one unlabelled, one labelled for an App-to-be but
    // owned by nobody.
    let mut foreign = BTreeMap::new();
    for (name, labels) in [
        ("foreign-plain", json!({})),
        ("foreign-labelled", json!({APP_LABEL: "app-000"})),
    ] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))?;
        let created = cms.create(&PostParams::default(), &cm).await?;
        foreign.insert(name.to_string(), created.resource_version());
    }
    let kvstore_tag = format!("{}/chaos/{}:live", local.registry, unique("kvstore"));
    let pusher = OciSource::new(None, vec![])?;
    pusher
        .push_unchecked(&kvstore_tag, &component("kvstore.wasm")?)
        .await?;
    let cache = std::env::temp_dir().join(unique("wasmop-chaos-cache"));
    let key = cache.with_extension("key");
    std::fs::write(&key, "c".repeat(64))?;
    let host_args = vec![
        "--cache-dir".to_string(),
        cache.display().to_string(),
        "--cache-key-file".to_string(),
        key.display().to_string(),
    ];
    let seen: SeenJobs = Arc::default();
    let recorder = record_backup_jobs(Api::namespaced(client.clone(), &ns.name), seen.clone());
    let restarts: crate::faults::Restarts = Arc::default();
    let supervisor = crate::faults::supervise_controllers(restarts.clone());

    let mut soak = Soak {
        local,
        client: client.clone(),
        ns: ns.name.clone(),
        apps: apps.clone(),
        rng: Rng::new(seed),
        live: BTreeMap::new(),
        deleted: BTreeMap::new(),
        next_app: 0,
        done: BTreeMap::new(),
        skipped: BTreeMap::new(),
        host: None,
        host_down_until: None,
        hosts_started: 0,
        host_args,
        registry_down_until: None,
        last_fault: None,
        kvstore_tag,
        pusher,
    };
    soak.start_host().await?;
    for _ in 0..10 {
        soak.act("create").await?;
    }

    let started = Instant::now();
    let end = started + Duration::from_secs_f64(minutes * 60.0);
    let mut failed_actions = Vec::new();
    while Instant::now() < end {
        soak.heal_due(Instant::now()).await?;
        let action = pick_action(&mut soak.rng);
        let at = started.elapsed().as_secs();
        match soak.act(action).await {
            Ok(true) => {
                if ["host-kill", "apiserver-restart", "registry-outage"].contains(&action) {
                    eprintln!("t+{at}s {action} ({} Apps)", soak.live.len());
                }
                *soak.done.entry(action).or_default() += 1;
            }
            Ok(false) => *soak.skipped.entry(action).or_default() += 1,
            // An API call refused mid-fault is the weather, not a finding; a fault that could
            // not be injected or healed is.
            Err(err)
                if ["create", "update", "upgrade", "delete", "swap-hello"].contains(&action) =>
            {
                *soak.skipped.entry(action).or_default() += 1;
                failed_actions.push(format!("{action}: {err:#}"));
                // Best effort: the next failure tries again.
                let _ = soak.resync().await;
            }
            Err(err) => return Err(err.context(format!("{action} (seed {seed})"))),
        }
        let pause = soak.rng.secs(1, 4);
        tokio::time::sleep(pause).await;
    }

    // The faults stop: the registry and the host come back, the plugins are good again.
    soak.registry_down_until = soak.registry_down_until.map(|_| Instant::now());
    soak.host_down_until = soak.host_down_until.map(|_| Instant::now());
    soak.heal_due(Instant::now()).await?;
    soak.pusher
        .push_unchecked(&soak.kvstore_tag, &component("kvstore-v2.wasm")?)
        .await?;
    set_hello(&client, &ns.name, "hello.wasm").await?;
    let healed = Instant::now();
    let since_fault = soak.last_fault.unwrap_or(healed);

    let live = soak.live.clone();
    let deleted = soak.deleted.clone();
    let healed_digest = |plugin: Plugin| -> anyhow::Result<String> {
        let file = match plugin {
            Plugin::Kvstore => "kvstore-v2.wasm",
            Plugin::Hello => "hello.wasm",
        };
        Ok(wasmop_host::plugin::Digest::of(&component(file)?).to_string())
    };
    let digests = [
        (Plugin::Kvstore, healed_digest(Plugin::Kvstore)?),
        (Plugin::Hello, healed_digest(Plugin::Hello)?),
    ];
    // Converged: every App at its generation and version, Available and PluginReady True on the
    // healed plugin, every deleted App gone; twice in a row, a second apart.
    let settled = || async {
        let on_server = apps_by_name(&apps).await?;
        let pending = live.iter().any(|(name, tracked)| {
            let Some(app) = on_server.get(name) else {
                return true;
            };
            let status = app.status.clone().unwrap_or_default();
            let condition_true =
                |type_: &str| crate::apps::condition(app, type_).is_some_and(|c| c.0 == "True");
            let digest = digests
                .iter()
                .find(|(p, _)| *p == tracked.plugin)
                .map(|(_, d)| d.as_str());
            status.observed_generation != app.metadata.generation
                || status.version.as_deref() != Some(app.spec.version.as_str())
                || !condition_true("Available")
                || !condition_true("PluginReady")
                || status.plugin.as_ref().map(|p| p.digest.as_str()) != digest
        });
        let lingering = deleted.keys().any(|name| on_server.contains_key(name));
        Ok::<_, anyhow::Error>(!pending && !lingering)
    };
    let converged = wait_for(
        "every App converged on the healed plugins and every deleted App gone",
        CONVERGE,
        || async {
            if !settled().await? {
                return Ok(None);
            }
            let at = Instant::now();
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(settled().await?.then_some(at))
        },
    )
    .await;

    // Invariants.
    let mut results: Vec<(&str, Vec<String>)> = Vec::new();
    let mut ready = Vec::new();
    let all = apps_by_name(&apps).await?;
    for (name, tracked) in &live {
        match all.get(name) {
            None => ready.push(format!("App {name} is gone")),
            Some(app) => {
                let status = app.status.clone().unwrap_or_default();
                if status.observed_generation != app.metadata.generation {
                    ready.push(format!(
                        "App {name}: observedGeneration {:?}, generation {:?}",
                        status.observed_generation, app.metadata.generation
                    ));
                }
                for type_ in ["Available", "PluginReady"] {
                    let condition = crate::apps::condition(app, type_);
                    if condition.as_ref().is_none_or(|c| c.0 != "True") {
                        ready.push(format!("App {name}: {type_} is {condition:?}"));
                    }
                }
                // The server's spec.version: an upgrade whose answer was lost still happened.
                if status.version.as_deref() != Some(app.spec.version.as_str()) {
                    ready.push(format!(
                        "App {name}: status.version {:?}, spec.version {} (the soak asked for {})",
                        status.version, app.spec.version, tracked.version
                    ));
                }
                if app.uid().as_deref() != Some(tracked.uid.as_str()) {
                    ready.push(format!("App {name} was replaced"));
                }
            }
        }
    }
    results.push(("every App Ready at its latest generation", ready));

    // The garbage collector removes a deleted App's objects shortly after the App goes: give it
    // a minute before anything left counts as left behind.
    let present: BTreeSet<String> = all.keys().cloned().collect();
    let _ = wait_for(
        "the objects of deleted Apps to be collected",
        Duration::from_secs(60),
        || async {
            let objects = labelled_objects(&client, &ns.name).await?;
            let orphans = objects
                .iter()
                .filter(|(what, app, _)| {
                    what != "ConfigMap foreign-labelled" && !present.contains(app)
                })
                .count();
            Ok((orphans == 0).then_some(()))
        },
    )
    .await;
    let objects = labelled_objects(&client, &ns.name).await?;
    let mut owned = Vec::new();
    for (name, tracked) in &live {
        let main = match tracked.plugin {
            Plugin::Kvstore => format!("StatefulSet {name}"),
            Plugin::Hello => format!("Deployment {name}"),
        };
        if !objects.iter().any(|(what, _, _)| *what == main) {
            owned.push(format!("App {name}: {main} missing"));
        }
    }
    for (what, app_name, controller) in &objects {
        if what == "ConfigMap foreign-labelled" {
            continue;
        }
        // The server's Apps, not only those the soak tracks: a create whose answer was lost
        // mid-fault still made an App.
        match all.get(app_name) {
            Some(app) if controller.as_deref() == app.uid().as_deref() => {}
            Some(_) => owned.push(format!("{what}: not controlled by App {app_name}")),
            None => owned.push(format!("{what}: left behind by deleted App {app_name}")),
        }
    }
    results.push(("every planned object present and owned", owned));

    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let mut retention = Vec::new();
    for (name, tracked) in &soak.deleted {
        if all.contains_key(name) {
            retention.push(format!("deleted App {name} still exists"));
            continue;
        }
        // kvstore's policy (plugins/kvstore/src/finalize.rs): `Delete` deletes the data claims
        // (`data-<app>-<ordinal>`) and keeps the backups claim; `Retain` keeps every claim.
        let data_prefix = format!("data-{name}-");
        let left = pvcs
            .list(&ListParams::default().labels(&format!("{APP_LABEL}={name}")))
            .await?
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| c.name_any().starts_with(&data_prefix))
            .count();
        if tracked.plugin == Plugin::Kvstore && !tracked.retain && left > 0 {
            retention.push(format!("App {name} (Delete): {left} data claims left"));
        }
    }
    // Each claim a deleted App had that its policy keeps is still there, and not being deleted.
    let kept: BTreeMap<String, bool> = pvcs
        .list(&ListParams::default().labels(APP_LABEL))
        .await?
        .into_iter()
        .map(|c| {
            (
                c.uid().unwrap_or_default(),
                c.metadata.deletion_timestamp.is_none(),
            )
        })
        .collect();
    let mut retained = 0;
    for (name, tracked) in &soak.deleted {
        let data_prefix = format!("data-{name}-");
        let keeps = |claim: &str| tracked.retain || !claim.starts_with(&data_prefix);
        for (uid, claim) in tracked.claims.iter().filter(|(_, c)| keeps(c)) {
            match kept.get(uid) {
                Some(true) => retained += 1,
                Some(false) => retention.push(format!(
                    "claim {claim} of App {name}, which its policy keeps, is being deleted"
                )),
                None => retention.push(format!(
                    "claim {claim} of App {name}, which its policy keeps, was deleted"
                )),
            }
        }
    }
    results.push((
        "deleted Apps gone, claims as their retention says",
        retention,
    ));

    let mut untouched = Vec::new();
    for (name, version) in &foreign {
        match cms.get_opt(name).await? {
            None => untouched.push(format!("ConfigMap {name} was deleted")),
            Some(cm) if &cm.resource_version() != version => untouched.push(format!(
                "ConfigMap {name} changed: {version:?} -> {:?}",
                cm.resource_version()
            )),
            Some(_) => {}
        }
    }
    results.push(("nothing foreign touched", untouched));

    recorder.abort();
    supervisor.abort();
    let restarts = restarts.lock().map(|r| r.clone()).unwrap_or_default();
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut slots: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (owner, slot) in seen.values() {
        *slots.entry((owner.clone(), slot.clone())).or_default() += 1;
    }
    let twice: Vec<String> = slots
        .iter()
        .filter(|(_, runs)| **runs > 1)
        .map(|((owner, slot), runs)| format!("App uid {owner} slot {slot} ran {runs} times"))
        .collect();
    results.push(("each backup slot run at most once", twice));

    let mut panics = Vec::new();
    for n in 1..=soak.hosts_started {
        let path = std::env::temp_dir().join(format!("{}-{n}-host.log", ns.name));
        let Ok(log) = std::fs::read_to_string(&path) else {
            panics.push(format!("{}: no log to read", path.display()));
            continue;
        };
        panics.extend(
            log.lines()
                .filter(|l| l.contains("panicked"))
                .map(|l| format!("{}: {l}", path.display())),
        );
    }
    results.push(("no panic in any host log", panics));

    // The summary.
    eprintln!("\n=== chaos soak summary (seed {seed}) ===");
    eprintln!("ran {:.1} min", started.elapsed().as_secs_f64() / 60.0);
    eprintln!("done:    {:?}", soak.done);
    eprintln!("skipped: {:?}", soak.skipped);
    eprintln!(
        "Apps: {} alive at the end, {} deleted ({retained} claims their policy keeps checked kept); \
         {} host processes; {} backup Jobs seen in {} slots",
        live.len(),
        soak.deleted.len(),
        soak.hosts_started,
        seen.len(),
        slots.len()
    );
    if !restarts.is_empty() {
        eprintln!("control-plane components that exited and were started again: {restarts:?}");
    }
    if !failed_actions.is_empty() {
        eprintln!(
            "{} actions refused mid-fault, e.g. {}",
            failed_actions.len(),
            failed_actions[0]
        );
    }
    match &converged {
        Ok(at) => eprintln!(
            "converged {:.1}s after the plugins were healed, {:.1}s after the last fault",
            at.duration_since(healed).as_secs_f64(),
            at.duration_since(since_fault).as_secs_f64()
        ),
        Err(err) => eprintln!("did not converge within {CONVERGE:?}: {err:#}"),
    }
    let mut violations = 0;
    for (invariant, problems) in &results {
        if problems.is_empty() {
            eprintln!("  ok    {invariant}");
        } else {
            violations += problems.len();
            eprintln!("  FAIL  {invariant}: {} violations", problems.len());
            for problem in problems.iter().take(10) {
                eprintln!("          {problem}");
            }
        }
    }
    drop(soak.host.take());
    if violations > 0 || converged.is_err() {
        anyhow::bail!("{violations} invariant violations (seed {seed}; replay: {replay})");
    }
    let _ = std::fs::remove_dir_all(&cache);
    let _ = std::fs::remove_file(&key);
    ns.delete().await
}
