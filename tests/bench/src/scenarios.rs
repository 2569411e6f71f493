//! The scenarios, in the order one run takes them: per N, each variant's converge (and, for the
//! hosts, idle, swap storm and restart from cache); then the plugins scenario once, and the
//! bound-kinds scenario once ([`bound`]).

pub(crate) mod bound;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, bail};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::Namespace,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde::Serialize;
use serde_json::json;
use wasmop_host::{app::App, plugin::source::oci::OciSource};

pub use bound::BoundKinds;

use crate::{
    Args,
    audit::{AuditLog, Requests},
    host::{Host, HostSpec, offset_of, reconciled_after, reconciled_apps},
    workload::{self, AppDef, Plugin, Tracker},
};

/// One way of getting the workload's objects into the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// The objects applied directly.
    Bare,
    /// The host with Wasm plugins.
    Wasm,
    /// The host with the plugins linked natively.
    Native,
    /// The host with Wasm plugins, built from another commit (`WASMOP_BENCH_BASELINE` of
    /// tests/bench/run.sh): a change measured side by side with what it changes.
    Baseline,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::Wasm => "wasm",
            Variant::Native => "native",
            Variant::Baseline => "baseline",
        }
    }

    /// The API server user the variant acts as (the audit log counts by it).
    pub fn user(self) -> String {
        format!("wasmop-bench-{}", self.name())
    }
}

/// Everything one run measured.
#[derive(Debug, Serialize)]
pub struct Results {
    /// When the run started (RFC 3339, UTC).
    pub date: String,
    /// What it ran on.
    pub machine: Machine,
    /// The commit it ran.
    pub revision: String,
    /// The command line's settings.
    pub concurrency: u16,
    /// The wasm variant's allocator: mimalloc, as released, or glibc's malloc
    /// (`WASMOP_BENCH_ALLOCATOR=system`), under heaptrack with `WASMOP_BENCH_HEAP`.
    pub allocator: String,
    /// The commit the `baseline` variant was built from, if it ran.
    pub baseline: Option<String>,
    /// One per N and variant.
    pub runs: Vec<Run>,
    /// RSS against distinct plugins loaded.
    pub plugins: Vec<PluginsStep>,
    /// RSS per bound kind and per instance against per App, and the time from a binding to
    /// its kind's first Ready instance.
    pub bound_kinds: Option<BoundKinds>,
    /// Variants that could not run, and why.
    pub skipped: Vec<String>,
    /// Scenarios that failed after others had measured, and why: the results are written,
    /// then the run fails.
    pub failed: Vec<String>,
}

/// The machine.
#[derive(Debug, Serialize)]
pub struct Machine {
    /// `nproc`.
    pub cpus: usize,
    /// MemTotal, GiB.
    pub memory_gib: f64,
    /// The CPU model.
    pub cpu: String,
    /// `uname -r`.
    pub kernel: String,
}

/// One variant at one N.
#[derive(Debug, Serialize, Default)]
pub struct Run {
    /// bare, wasm or native.
    pub variant: String,
    /// hello Apps.
    pub hello: usize,
    /// kvstore Apps.
    pub kvstore: usize,
    /// Objects the plans hold, all Apps together.
    pub planned_objects: usize,
    /// Seconds from the first create (or apply) until every App was reconciled at its
    /// generation (bare: every object applied).
    pub converge_s: f64,
    /// Seconds from the first create until every App was Ready (bare: every workload ready).
    pub ready_s: f64,
    /// Seconds from the first create until the last planned object was written (bare: its
    /// converge): what the host's converge costs whatever its statuses say.
    pub objects_s: Option<f64>,
    /// The host's CPU seconds over the converge, until Ready (bare: none measured).
    pub host_cpu_s: Option<f64>,
    /// The host's CPU seconds until converged.
    pub converge_host_cpu_s: Option<f64>,
    /// CPU seconds kube-apiserver and etcd used until converged: the two cores are shared,
    /// and this is where a converge's time goes when the host is not busy.
    pub control_plane_cpu_s: Option<f64>,
    /// The host's resident memory once Ready, MiB.
    pub rss_mib: Option<f64>,
    /// The host's peak resident memory until then, MiB.
    pub rss_peak_mib: Option<f64>,
    /// Of the resident memory once Ready, the anonymous part (heap, stacks), MiB.
    pub rss_anon_mib: Option<f64>,
    /// Of the resident memory once Ready, the file-backed part (the binary's code, mapped
    /// compiled plugins), MiB.
    pub rss_file_mib: Option<f64>,
    /// Objects in the host's caches once Ready, and the MiB of their JSON
    /// (`wasmop_cache_objects`, `wasmop_cache_bytes`).
    pub cache_objects: Option<f64>,
    /// See `cache_objects`.
    pub cache_mib: Option<f64>,
    /// The variant's requests until Ready, by verb and resource.
    pub requests: Requests,
    /// Writes to planned objects per planned object.
    pub object_writes_per_object: f64,
    /// Writes to `apps/status` per App.
    pub status_writes_per_app: f64,
    /// Event writes per App.
    pub event_writes_per_app: f64,
    /// Reconciles the host ran until Ready.
    pub reconciles: Option<f64>,
    /// Plugin calls until Ready.
    pub plugin_calls: Option<f64>,
    /// Seconds to list everything the host watches in the namespace with a fresh client: the
    /// floor of a restart.
    pub list_s: Option<f64>,
    /// The idle host.
    pub idle: Option<Idle>,
    /// The swap storm.
    pub swap: Option<Swap>,
    /// The restart from the compiled cache.
    pub restart: Option<Restart>,
    /// A leader killed with a standby waiting: cold, then warm.
    pub failover: Vec<Failover>,
}

/// A leader `kill -9`ed with a standby waiting.
#[derive(Debug, Serialize)]
pub struct Failover {
    /// Whether the standby was warm (`--warm-standby`).
    pub warm: bool,
    /// Seconds from the standby's start until it was ready.
    pub standby_ready_s: f64,
    /// The standby's resident memory while it waited, MiB.
    pub standby_rss_mib: f64,
    /// Seconds from the kill until the standby led (the lease running out on its clock).
    pub led_after_kill_s: f64,
    /// Seconds from its leading until it had reconciled every App once.
    pub all_reconciled_s: f64,
}

/// An idle host with every App Ready.
#[derive(Debug, Serialize)]
pub struct Idle {
    /// Seconds measured.
    pub seconds: f64,
    /// CPU seconds per minute.
    pub cpu_s_per_min: f64,
    /// Requests per minute (watches that restart count).
    pub requests_per_min: f64,
    /// Writes per minute.
    pub writes_per_min: f64,
    /// Reconciles per minute.
    pub reconciles_per_min: f64,
}

/// A new digest for the plugin every hello App uses.
#[derive(Debug, Serialize)]
pub struct Swap {
    /// Seconds from the push until every hello App reported the new digest.
    pub seconds: f64,
    /// Writes in that time.
    pub writes: u64,
    /// Reconciles in that time.
    pub reconciles: f64,
}

/// The host killed and started again with the registry down.
#[derive(Debug, Serialize)]
pub struct Restart {
    /// Seconds from the start of the new process until it was ready.
    pub ready_s: f64,
    /// Seconds from the start of the new process until every App was reconciled once.
    pub all_reconciled_s: f64,
    /// Writes in that time.
    pub writes: u64,
}

/// RSS with `plugins` distinct plugins loaded (one App each).
#[derive(Debug, Serialize)]
pub struct PluginsStep {
    /// Distinct plugins.
    pub plugins: usize,
    /// Resident MiB once every App was Ready.
    pub rss_mib: f64,
}

/// What the run needs from its environment (`tests/bench/run.sh` sets it).
struct Env {
    admin: Client,
    registry: String,
    binaries: Vec<(Variant, PathBuf)>,
    dir: PathBuf,
    audit: AuditLog,
    root: PathBuf,
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set: run tests/bench/run.sh"))
}

/// The admin client of the local cluster, from the kubeconfig `deploy/local/cluster.sh` wrote
/// in `$WASMOP_LOCAL_STATE` (never the shell's `KUBECONFIG`), refused before any request if it
/// names an API server off loopback.
async fn local_admin() -> anyhow::Result<Client> {
    let path = admin_kubeconfig()?;
    let kubeconfig =
        Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let local = config
        .cluster_url
        .host()
        .and_then(|h| h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok())
        .is_some_and(|ip| ip.is_loopback());
    anyhow::ensure!(
        local,
        "refusing API server {} (from {}): the benchmark uses only the local cluster",
        config.cluster_url,
        path.display()
    );
    Ok(Client::try_from(config)?)
}

/// The local cluster's admin kubeconfig, as `deploy/local/cluster.sh` wrote it.
fn admin_kubeconfig() -> anyhow::Result<PathBuf> {
    Ok(PathBuf::from(var("WASMOP_LOCAL_STATE")?).join("kubeconfig"))
}

impl Env {
    /// CPU seconds kube-apiserver and etcd (as `deploy/local/cluster.sh` started them) have
    /// used so far.
    fn control_plane_cpu(&self) -> f64 {
        ["kube-apiserver", "etcd"]
            .iter()
            .filter_map(|name| {
                let pidfile = self.dir.join(format!("../pids/{name}.pid"));
                let text = std::fs::read_to_string(pidfile).ok()?;
                let pid: u32 = text.split_whitespace().next()?.parse().ok()?;
                crate::host::cpu_seconds_of(pid).ok()
            })
            .sum()
    }

    async fn discover() -> anyhow::Result<Self> {
        let mut binaries = vec![(Variant::Wasm, PathBuf::from(var("WASMOP_BIN")?))];
        if let Ok(native) = std::env::var("WASMOP_NATIVE_BIN") {
            binaries.push((Variant::Native, PathBuf::from(native)));
        }
        if let Ok(baseline) = std::env::var("WASMOP_BASELINE_BIN") {
            binaries.push((Variant::Baseline, PathBuf::from(baseline)));
        }
        Ok(Self {
            admin: local_admin().await?,
            registry: var("WASMOP_REGISTRY")?,
            binaries,
            dir: PathBuf::from(var("WASMOP_BENCH_DIR")?),
            audit: AuditLog::new(Path::new(&var("WASMOP_AUDIT_LOG")?)),
            root: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
        })
    }

    async fn client_as(&self, variant: Variant) -> anyhow::Result<Client> {
        let path = self.kubeconfig(variant);
        let kubeconfig =
            Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    fn kubeconfig(&self, variant: Variant) -> PathBuf {
        self.dir.join(format!("{}.kubeconfig", variant.name()))
    }

    /// The `wasmop` binary of a host variant.
    fn binary(&self, variant: Variant) -> anyhow::Result<PathBuf> {
        self.binaries
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, b)| b.clone())
            .with_context(|| format!("no binary for the {} variant", variant.name()))
    }

    fn host_spec(
        &self,
        variant: Variant,
        namespace: &str,
        concurrency: u16,
    ) -> anyhow::Result<HostSpec> {
        Ok(HostSpec {
            binary: self.binary(variant)?,
            kubeconfig: self.kubeconfig(variant),
            namespace: namespace.to_string(),
            more_namespaces: Vec::new(),
            binding_selector: None,
            cache_dir: self.dir.join(format!("cache-{}", variant.name())),
            cache_key_file: self.dir.join("cache.key"),
            concurrency,
            log: self.dir.join(format!("{namespace}.log")),
            pod_name: None,
            extra_args: Vec::new(),
        })
    }

    /// `deploy/local/cluster.sh stop|start registry`.
    async fn registry(&self, what: &str) -> anyhow::Result<()> {
        let status = tokio::process::Command::new(self.root.join("deploy/local/cluster.sh"))
            .args([what, "registry"])
            .stdin(std::process::Stdio::null())
            .status()
            .await?;
        if !status.success() {
            bail!("deploy/local/cluster.sh {what} registry failed");
        }
        Ok(())
    }
}

/// A component with a custom section that makes its digest unique to `tag`: the same plugin,
/// another version as far as the host can tell.
fn variant_of(component: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasmop-bench";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(tag.as_bytes());
    let mut out = component.to_vec();
    out.push(0); // custom section
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// Where `plugins/build.sh` put the component `file`.
fn component_path(file: &str) -> anyhow::Result<PathBuf> {
    Ok(PathBuf::from(var("CARGO_TARGET_DIR")?)
        .join("wasm32-wasip2/release")
        .join(file))
}

fn component(file: &str) -> anyhow::Result<Vec<u8>> {
    let path = component_path(file)?;
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

async fn push(env: &Env, repository: &str, bytes: &[u8]) -> anyhow::Result<String> {
    let reference = format!("{}/bench/{repository}:1", env.registry);
    OciSource::new(None, vec![env.registry.clone()])?
        .push_unchecked(&reference, bytes)
        .await
        .with_context(|| format!("pushing {reference}"))?;
    Ok(reference)
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Deletes the namespace and waits until it is gone, so that its deletion does not load the API
/// server during the next measurement. Apps lose their finalizers first: no host is running to
/// finalize them.
async fn delete_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let apps: Api<App> = Api::namespaced(client.clone(), name);
    let names: Vec<String> = apps
        .list_metadata(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|a| a.name_any())
        .collect();
    workload::bounded(names, 16, |app| {
        let apps = apps.clone();
        async move {
            apps.patch(
                &app,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    let api: Api<Namespace> = Api::all(client.clone());
    api.delete(name, &DeleteParams::background()).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while api.get_opt(name).await?.is_some() {
        if Instant::now() > deadline {
            eprintln!("[bench] namespace {name} still terminating after 600 s; going on");
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

fn log(text: impl AsRef<str>) {
    eprintln!("[bench {}] {}", now_utc(), text.as_ref());
}

fn now_utc() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%H:%M:%S")
        .to_string()
}

fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    Machine {
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        memory_gib: read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
            / 1024.0,
        cpu: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default(),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
    }
}

/// Runs every scenario the arguments ask for.
pub async fn run(args: &Args) -> anyhow::Result<Results> {
    let env = Env::discover().await?;
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&env.root)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let mut revision = git(&["rev-parse", "--short", "HEAD"]);
    // Figures of a tree with uncommitted changes are not the commit's.
    if !git(&["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        revision.push_str(" with uncommitted changes");
    }
    let allocator = match (
        std::env::var("WASMOP_BENCH_ALLOCATOR").as_deref(),
        std::env::var_os("WASMOP_BENCH_HEAP"),
    ) {
        (_, Some(_)) => "glibc malloc, a debug build under heaptrack",
        (Ok("system"), None) => "glibc malloc",
        _ => "mimalloc",
    }
    .to_string();
    let mut results = Results {
        date: k8s_openapi::jiff::Timestamp::now().to_string(),
        machine: machine(),
        revision,
        concurrency: args.concurrency,
        allocator,
        baseline: std::env::var("WASMOP_BENCH_BASELINE_REV").ok(),
        runs: Vec::new(),
        plugins: Vec::new(),
        bound_kinds: None,
        skipped: Vec::new(),
        failed: Vec::new(),
    };
    let stamp = std::process::id();
    let has_wasm = env.binaries.iter().any(|(v, _)| *v == Variant::Wasm);
    // 0 (or an empty list) skips: `--apps 0` runs only the scenarios after the converges.
    for n in args.apps.iter().copied().filter(|&n| n > 0) {
        for &variant in &args.variants {
            if variant != Variant::Bare && !env.binaries.iter().any(|(v, _)| *v == variant) {
                let why = format!(
                    "{}: no binary (tests/bench/run.sh builds it)",
                    variant.name()
                );
                if !results.skipped.contains(&why) {
                    results.skipped.push(why);
                }
                continue;
            }
            let namespace = format!("bench-{}-{n}-{stamp:x}", variant.name());
            log(format!(
                "{} with {n} hello and {} kvstore Apps in {namespace}",
                variant.name(),
                n / args.kv_every.max(1)
            ));
            let run = match variant {
                Variant::Bare => bare(&env, args, n, &namespace).await,
                host => hosted(&env, args, host, n, &namespace).await,
            }
            .with_context(|| format!("{} at N={n}", variant.name()))?;
            log(format!("{run:?}"));
            results.runs.push(run);
            delete_namespace(&env.admin, &namespace).await?;
        }
    }
    if args.plugins.iter().any(|&p| p > 0) && has_wasm {
        let namespace = format!("bench-plugins-{stamp:x}");
        results.plugins = plugins(&env, args, &namespace).await?;
        delete_namespace(&env.admin, &namespace).await?;
    }
    if args.bound_kinds > 0 && has_wasm {
        // Its failure is reported with the results, not instead of them: the runs before it
        // (up to an hour) are kept.
        match bound::run(&env, args, stamp).await {
            Ok(bound) => results.bound_kinds = Some(bound),
            Err(err) => {
                log(format!("bound kinds failed: {err:#}"));
                results.failed.push(format!("bound kinds: {err:#}"));
            }
        }
    }
    Ok(results)
}

fn workload_of(args: &Args, n: usize) -> Vec<AppDef> {
    workload::apps(n, n / args.kv_every.max(1))
}

fn counts(defs: &[AppDef]) -> (usize, usize) {
    let hello = defs.iter().filter(|d| d.plugin == Plugin::Hello).count();
    (hello, defs.len() - hello)
}

async fn bare(env: &Env, args: &Args, n: usize, namespace: &str) -> anyhow::Result<Run> {
    let defs = workload_of(args, n);
    let (hello, kvstore) = counts(&defs);
    let mut objects = Vec::new();
    for def in &defs {
        objects.extend(workload::planned(def, namespace)?);
    }
    let planned_objects = objects.len();
    create_namespace(&env.admin, namespace).await?;
    let client = env.client_as(Variant::Bare).await?;
    let timeout = Duration::from_secs(args.timeout_secs);
    let control_plane0 = env.control_plane_cpu();
    let (start, wall) = (Instant::now(), SystemTime::now());
    let mut deployments = Tracker::watch(
        Api::<Deployment>::namespaced(env.admin.clone(), namespace),
        start,
        vec![Box::new(workload::deployment_ready)],
    );
    let mut statefulsets = Tracker::watch(
        Api::<StatefulSet>::namespaced(env.admin.clone(), namespace),
        start,
        vec![Box::new(workload::statefulset_ready)],
    );
    // As many requests in flight as the host can have: its reconciles, each with up to
    // BARE_PER_RECONCILE reads or applies at once.
    workload::apply_all(
        &client,
        namespace,
        objects,
        "wasmop-bench-bare",
        usize::from(args.concurrency) * BARE_PER_RECONCILE,
    )
    .await?;
    let converge = start.elapsed();
    let control_plane_cpu_s = env.control_plane_cpu() - control_plane0;
    let ready = deployments
        .all(0, hello, timeout, "ready Deployments")
        .await?
        .max(
            statefulsets
                .all(0, kvstore, timeout, "ready StatefulSets")
                .await?,
        );
    let requests = env
        .audit
        .requests(&Variant::Bare.user(), wall, SystemTime::now())
        .await?;
    let list_s = list_everything(env, namespace).await?;
    Ok(Run {
        variant: "bare".into(),
        hello,
        kvstore,
        planned_objects,
        converge_s: converge.as_secs_f64(),
        objects_s: Some(converge.as_secs_f64()),
        ready_s: ready.as_secs_f64(),
        control_plane_cpu_s: Some(control_plane_cpu_s),
        object_writes_per_object: requests.object_writes() as f64 / planned_objects as f64,
        requests,
        list_s: Some(list_s),
        ..Default::default()
    })
}

/// Seconds a fresh client takes to list every kind the host watches in `namespace`, all at
/// once as the host's reflectors do.
async fn list_everything(env: &Env, namespace: &str) -> anyhow::Result<f64> {
    use k8s_openapi::api::{
        batch::v1::Job,
        core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service, ServiceAccount},
        policy::v1::PodDisruptionBudget,
    };
    let client = env.client_as(Variant::Bare).await?;
    let start = Instant::now();
    let lp = ListParams::default();
    macro_rules! list {
        ($($ty:ty),*) => {
            futures::try_join!($(
                async {
                    Api::<$ty>::namespaced(client.clone(), namespace).list(&lp).await.map(|_| ())
                }
            ),*)
        };
    }
    list!(
        App,
        StatefulSet,
        Deployment,
        Service,
        ConfigMap,
        ServiceAccount,
        PodDisruptionBudget,
        Job,
        Pod,
        PersistentVolumeClaim
    )?;
    Ok(start.elapsed().as_secs_f64())
}

async fn hosted(
    env: &Env,
    args: &Args,
    variant: Variant,
    n: usize,
    namespace: &str,
) -> anyhow::Result<Run> {
    let defs = workload_of(args, n);
    let (hello, kvstore) = counts(&defs);
    let mut planned_objects = 0;
    for def in &defs {
        planned_objects += workload::planned(def, namespace)?.len();
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    let tag = format!("{}-{n}", variant.name());
    let hello_bytes = component("hello.wasm")?;
    let hello_image = push(env, &format!("{tag}/hello"), &hello_bytes).await?;
    let kvstore_image = push(env, &format!("{tag}/kvstore"), &component("kvstore.wasm")?).await?;
    create_namespace(&env.admin, namespace).await?;
    let spec = env.host_spec(variant, namespace, args.concurrency)?;
    let host = Host::start(&spec).await?;
    let apps: Api<App> = Api::namespaced(env.admin.clone(), namespace);

    // Converge.
    let (cpu0, calls0) = (host.cpu_seconds()?, plugin_calls(&host).await?);
    let (control_plane0, host_cpu0) = (env.control_plane_cpu(), host.cpu_seconds()?);
    let (start, wall) = (Instant::now(), SystemTime::now());
    let mut tracker = Tracker::watch(
        apps.clone(),
        start,
        vec![Box::new(workload::observed), Box::new(workload::ready)],
    );
    workload::create_apps(
        &env.admin,
        namespace,
        &defs,
        |plugin| match plugin {
            Plugin::Hello => hello_image.clone(),
            Plugin::Kvstore => kvstore_image.clone(),
        },
        args.concurrency.into(),
    )
    .await?;
    let converge = tracker
        .all(
            0,
            defs.len(),
            timeout,
            "Apps reconciled at their generation",
        )
        .await?;
    let control_plane_cpu_s = env.control_plane_cpu() - control_plane0;
    let converge_host_cpu_s = host.cpu_seconds()? - host_cpu0;
    let ready = tracker.all(1, defs.len(), timeout, "Ready Apps").await?;
    let ready_wall = SystemTime::now();
    let cpu = host.cpu_seconds()? - cpu0;
    let memory = host.memory_mib()?;
    host.save_smaps(&format!("{}-{}", variant.name(), defs.len()))?;
    let cache_objects = host.metric("wasmop_cache_objects").await?;
    let cache_bytes = host.metric("wasmop_cache_bytes").await?;
    let reconciles = host.metric("wasmop_reconcile_total").await?;
    let calls = plugin_calls(&host).await? - calls0;
    let requests = env
        .audit
        .requests(&variant.user(), wall, ready_wall)
        .await?;
    let objects_s = env
        .audit
        .last_object_write(&variant.user(), wall, ready_wall)
        .await?
        .and_then(|at| at.duration_since(wall).ok())
        .map(|d| d.as_secs_f64());
    check_objects(env, namespace, hello, kvstore).await?;
    let list_s = list_everything(env, namespace).await?;

    // Idle, once the tail of the converge settled: Pods turning Ready and workload statuses
    // trigger reconciles for some seconds after the last App reported Ready.
    let settled = settle(&host).await?;
    log(format!(
        "{} N={n} settled {settled:.0?} after Ready",
        variant.name()
    ));
    let idle = {
        let (cpu0, rec0, wall0) = (
            host.cpu_seconds()?,
            host.metric("wasmop_reconcile_total").await?,
            SystemTime::now(),
        );
        tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
        let minutes = args.idle_secs as f64 / 60.0;
        let cpu = host.cpu_seconds()? - cpu0;
        let reconciles = host.metric("wasmop_reconcile_total").await? - rec0;
        let r = env
            .audit
            .requests(&variant.user(), wall0, SystemTime::now())
            .await?;
        Idle {
            seconds: args.idle_secs as f64,
            cpu_s_per_min: cpu / minutes,
            requests_per_min: r.total() as f64 / minutes,
            writes_per_min: r.writes() as f64 / minutes,
            reconciles_per_min: reconciles / minutes,
        }
    };
    log(format!("{} N={n} idle: {idle:?}", variant.name()));

    // Swap storm: the hello Apps' tag moves to a new digest.
    let swap = {
        let rec0 = host.metric("wasmop_reconcile_total").await?;
        let bytes = variant_of(&hello_bytes, &format!("swap-{namespace}"));
        let digest = format!("sha256:{}", sha256_hex(&bytes));
        let (start, wall) = (Instant::now(), SystemTime::now());
        let mut swapped = Tracker::watch(
            apps.clone(),
            start,
            vec![Box::new(move |app: &App| {
                workload::digest(app).as_deref() == Some(digest.as_str())
            })],
        );
        push(env, &format!("{tag}/hello"), &bytes).await?;
        let seconds = swapped
            .all(0, hello, timeout, "hello Apps on the new digest")
            .await?;
        let writes = env
            .audit
            .requests(&variant.user(), wall, SystemTime::now())
            .await?
            .writes();
        Swap {
            seconds: seconds.as_secs_f64(),
            writes,
            reconciles: host.metric("wasmop_reconcile_total").await? - rec0,
        }
    };
    log(format!("{} N={n} swap: {swap:?}", variant.name()));

    // Restart from the compiled cache, the registry down.
    env.registry("stop").await?;
    log("registry stopped; killing the host");
    let restart = async {
        host.kill().await?;
        log("host killed; starting it again");
        let log_from = std::fs::metadata(&spec.log).map(|m| m.len()).unwrap_or(0);
        let wall = SystemTime::now();
        let host = Host::start(&spec).await?;
        let ready_s = host.started.elapsed().as_secs_f64();
        let deadline = Instant::now() + timeout;
        let all = loop {
            // The Apps are `App.v1alpha1.wasmop.dev/h-00001.<namespace>` in the log.
            let seen = reconciled_apps(&spec.log, log_from, |app| {
                if app.contains("/kv-") {
                    "kvstore"
                } else {
                    "hello"
                }
            })?;
            if seen.len() >= defs.len() {
                break host.started.elapsed().as_secs_f64();
            }
            if Instant::now() > deadline {
                bail!(
                    "after the restart, {} of {} Apps were reconciled",
                    seen.len(),
                    defs.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let writes = env
            .audit
            .requests(&variant.user(), wall, SystemTime::now())
            .await?
            .writes();
        host.stop().await?;
        anyhow::Ok(Restart {
            ready_s,
            all_reconciled_s: all,
            writes,
        })
    }
    .await;
    env.registry("start").await?;
    let restart = restart?;
    log(format!("{} N={n} restart: {restart:?}", variant.name()));

    let mut failover = Vec::new();
    for warm in [false, true] {
        let one = fail_over(&spec, defs.len(), warm, timeout).await?;
        log(format!("{} N={n} failover: {one:?}", variant.name()));
        failover.push(one);
    }

    Ok(Run {
        variant: variant.name().into(),
        hello,
        kvstore,
        planned_objects,
        converge_s: converge.as_secs_f64(),
        objects_s,
        control_plane_cpu_s: Some(control_plane_cpu_s),
        converge_host_cpu_s: Some(converge_host_cpu_s),
        ready_s: ready.as_secs_f64(),
        host_cpu_s: Some(cpu),
        rss_mib: Some(memory.rss),
        rss_peak_mib: Some(memory.peak),
        rss_anon_mib: Some(memory.anon),
        rss_file_mib: Some(memory.file),
        cache_objects: Some(cache_objects),
        cache_mib: Some(cache_bytes / f64::from(1 << 20)),
        object_writes_per_object: requests.object_writes() as f64 / planned_objects as f64,
        status_writes_per_app: requests.status_writes() as f64 / defs.len() as f64,
        event_writes_per_app: requests.event_writes() as f64 / defs.len() as f64,
        requests,
        reconciles: Some(reconciles),
        plugin_calls: Some(calls),
        list_s: Some(list_s),
        idle: Some(idle),
        swap: Some(swap),
        restart: Some(restart),
        failover,
    })
}

/// A leader and a standby (`warm` or cold) on `spec`'s namespace, the leader `kill -9`ed once
/// it has reconciled all `apps`: how long the standby took to lead (the lease running out on
/// its clock) and then to reconcile every App once.
async fn fail_over(
    spec: &HostSpec,
    apps: usize,
    warm: bool,
    timeout: Duration,
) -> anyhow::Result<Failover> {
    let elect = |who: &str| {
        let mut spec = spec.clone();
        spec.pod_name = Some(format!("bench-{}-{who}", spec.namespace));
        spec.log = spec.log.with_extension(format!("{who}.log"));
        spec.extra_args = vec![
            "--leader-elect".into(),
            "--lease-namespace".into(),
            spec.namespace.clone(),
            "--warm-standby".into(),
            warm.to_string(),
        ];
        spec
    };
    let plugin_of = |app: &str| {
        if app.contains("/kv-") {
            "kvstore"
        } else {
            "hello"
        }
    };
    let (leader_spec, standby_spec) = (elect("leader"), elect("standby"));
    let _ = std::fs::remove_file(&leader_spec.log);
    let _ = std::fs::remove_file(&standby_spec.log);
    let leader = Host::start(&leader_spec).await?;
    let deadline = Instant::now() + timeout;
    while reconciled_after(&leader_spec.log, 0, 0, plugin_of)?.len() < apps {
        if Instant::now() > deadline {
            bail!(
                "the leader did not reconcile all {apps} Apps; see {}",
                leader_spec.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let standby = Host::start(&standby_spec).await?;
    let standby_ready_s = standby.started.elapsed().as_secs_f64();
    // Settled: the warm standby's plugins loaded, its caches synced.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let standby_rss_mib = standby.memory_mib()?.rss;
    let temperature = if warm { "warm" } else { "cold" };
    standby.save_smaps(&format!("{}-standby-{temperature}", spec.namespace))?;
    leader.kill().await?;
    let killed = Instant::now();
    let (led_at, leading) = loop {
        if let Some(at) = offset_of(&standby_spec.log, 0, "leading")? {
            break (at, Instant::now());
        }
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("the standby did not lead within 60 s of the kill");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let led_after_kill_s = killed.elapsed().as_secs_f64();
    let all_reconciled_s = loop {
        if reconciled_after(&standby_spec.log, 0, led_at, plugin_of)?.len() >= apps {
            break leading.elapsed().as_secs_f64();
        }
        if leading.elapsed() > timeout {
            bail!("the new leader did not reconcile all {apps} Apps");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    standby.stop().await?;
    Ok(Failover {
        warm,
        standby_ready_s,
        standby_rss_mib,
        led_after_kill_s,
        all_reconciled_s,
    })
}

/// The host's requests in flight per reconcile (`IN_FLIGHT` in host/src/reconcile/execute.rs).
const BARE_PER_RECONCILE: usize = 4;

/// The idle measurement starts once no reconcile ran for this long...
const QUIET: Duration = Duration::from_secs(10);
/// ...or after this long, whichever comes first.
const SETTLE_MAX: Duration = Duration::from_secs(180);

/// Waits until the host has not reconciled for [`QUIET`] (at most [`SETTLE_MAX`]); returns how
/// long that took.
async fn settle(host: &Host) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut last = host.metric("wasmop_reconcile_total").await?;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < QUIET && start.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = host.metric("wasmop_reconcile_total").await?;
        if now != last {
            (last, quiet_since) = (now, Instant::now());
        }
    }
    Ok(start.elapsed())
}

async fn plugin_calls(host: &Host) -> anyhow::Result<f64> {
    host.metric("wasmop_plugin_call_duration_seconds_count")
        .await
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every hello App has its Deployment and every kvstore App its StatefulSet.
async fn check_objects(
    env: &Env,
    namespace: &str,
    hello: usize,
    kvstore: usize,
) -> anyhow::Result<()> {
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=wasmop");
    let d = Api::<Deployment>::namespaced(env.admin.clone(), namespace)
        .list_metadata(&lp)
        .await?
        .items
        .len();
    let s = Api::<StatefulSet>::namespaced(env.admin.clone(), namespace)
        .list_metadata(&lp)
        .await?
        .items
        .len();
    if d != hello || s != kvstore {
        bail!(
            "{namespace}: {d} Deployments for {hello} hello Apps, {s} StatefulSets for {kvstore} kvstore Apps"
        );
    }
    Ok(())
}

/// RSS of one host as Apps with distinct plugins arrive: 1, 10, 50 (as `args.plugins` says).
async fn plugins(env: &Env, args: &Args, namespace: &str) -> anyhow::Result<Vec<PluginsStep>> {
    log(format!(
        "plugins: {:?} distinct in {namespace}",
        args.plugins
    ));
    let hello = component("hello.wasm")?;
    create_namespace(&env.admin, namespace).await?;
    let spec = env.host_spec(Variant::Wasm, namespace, args.concurrency)?;
    let host = Host::start(&spec).await?;
    let apps: Api<App> = Api::namespaced(env.admin.clone(), namespace);
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut tracker = Tracker::watch(
        apps.clone(),
        Instant::now(),
        vec![Box::new(workload::ready)],
    );
    let mut steps = Vec::new();
    let mut have = 0;
    let mut targets: Vec<usize> = args.plugins.iter().copied().filter(|&p| p > 0).collect();
    targets.sort_unstable();
    for target in targets {
        let mut created = Vec::new();
        for k in have..target {
            let image = push(
                env,
                &format!("plugins/p{k}"),
                &variant_of(&hello, &format!("p{k}-{namespace}")),
            )
            .await?;
            let def = AppDef {
                name: format!("p-{k:03}"),
                plugin: Plugin::Hello,
            };
            created.push(workload::app(&def, &image)?);
        }
        for app in created {
            apps.create(&PostParams::default(), &app).await?;
        }
        have = target;
        tracker.all(0, have, timeout, "Ready Apps").await?;
        // Loading settles (instances released, the compile workers gone) before reading RSS.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let memory = host.memory_mib()?;
        let rss = memory.rss;
        log(format!("plugins: {have} distinct, RSS {memory:?} MiB"));
        steps.push(PluginsStep {
            plugins: have,
            rss_mib: rss,
        });
    }
    host.stop().await?;
    Ok(steps)
}
