//! Shared test harness: finds the local cluster and registry, makes throw-away namespaces, waits
//! on conditions with deadlines (never blind sleeps), and runs the `wasmop` binary.

use std::{
    collections::{BTreeMap, HashMap},
    ffi::OsString,
    future::Future,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use wasmop_host::{app::App, reconcile::FINALIZER};

/// The local cluster and registry `deploy/local/cluster.sh` started, as it describes them in
/// its state directory (`$WASMOP_LOCAL_STATE`, default `target/local/`), and nothing else: the
/// shell's `KUBECONFIG`, `WASMOP_REGISTRY` and `~/.kube/config` are never read, so a test can
/// only ever touch the cluster the test scripts started.
pub struct Local {
    /// Path of the kubeconfig for the local cluster.
    pub kubeconfig: PathBuf,
    /// `host:port` of the local OCI registry.
    pub registry: String,
    /// The API server's URL as `cluster.sh` wrote it (`https://127.0.0.1:PORT`); a kubeconfig
    /// naming any other server is refused before a request is sent.
    api_server: String,
    /// etcd's client URL (`http://127.0.0.1:PORT`), for a test that checks what is stored;
    /// `None` from an env file of an older `cluster.sh`.
    etcd: Option<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The local cluster's state directory: `$WASMOP_LOCAL_STATE`, as `cluster.sh` reads it.
pub fn local_state() -> PathBuf {
    std::env::var_os("WASMOP_LOCAL_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/local"))
}

/// Whether `host` (of a URL or a `host:port`) is a loopback address: everything the local
/// cluster serves listens on 127.0.0.1 only.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses to run a test binary built from another checkout than the one `cargo test` runs in.
/// Checkouts sharing one target dir (as `deploy/local/env.sh` sets it) build a test binary of
/// the same name, and cargo takes one built from another checkout as fresh while that
/// checkout's files are unchanged: its paths (this file's [`repo_root`], `cluster.sh`) are
/// that checkout's, so its fault tests would stop that checkout's cluster (seen: a run here
/// after a CI clone's reached the clone's certificates).
pub(crate) fn built_here() -> anyhow::Result<()> {
    let built = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(running) = std::env::var_os("CARGO_MANIFEST_DIR")
        && Path::new(&running) != built
    {
        bail!(
            "this test binary was built from {} but runs for {}: cargo reused another \
             checkout's build from the shared target dir; `touch tests/e2e/main.rs` and run \
             again",
            built.display(),
            Path::new(&running).display()
        );
    }
    Ok(())
}

impl Local {
    /// Reads the env file `deploy/local/cluster.sh` wrote in [`local_state`].
    pub fn discover() -> anyhow::Result<Self> {
        built_here()?;
        Self::discover_in(&local_state())
    }

    /// Reads the env file of the local cluster whose state directory is `state`.
    pub fn discover_in(state: &Path) -> anyhow::Result<Self> {
        let env_file = state.join("env");
        let text = std::fs::read_to_string(&env_file).with_context(|| {
            format!(
                "reading {}: start the local cluster with deploy/local/cluster.sh up",
                env_file.display()
            )
        })?;
        let file: HashMap<&str, &str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .filter_map(|line| line.split_once('='))
            .collect();
        let var = |name: &str| -> anyhow::Result<String> {
            file.get(name).map(|v| v.to_string()).with_context(|| {
                format!(
                    "{name} is not in {}: restart the local cluster with deploy/local/cluster.sh up",
                    env_file.display()
                )
            })
        };
        let registry = var("WASMOP_REGISTRY")?;
        let registry_host = registry
            .rsplit_once(':')
            .map_or(registry.as_str(), |(h, _)| h);
        if !is_loopback_host(registry_host) {
            bail!(
                "refusing registry {registry} from {}: the tests use only the local registry on \
                 loopback",
                env_file.display()
            );
        }
        let etcd = file.get("WASMOP_ETCD").map(|v| v.to_string());
        if let Some(url) = &etcd {
            let host = url
                .trim_start_matches("http://")
                .rsplit_once(':')
                .map_or(url.as_str(), |(h, _)| h);
            if !is_loopback_host(host) {
                bail!(
                    "refusing etcd {url} from {}: the tests use only the local etcd on loopback",
                    env_file.display()
                );
            }
        }
        Ok(Self {
            kubeconfig: PathBuf::from(var("KUBECONFIG")?),
            registry,
            api_server: var("WASMOP_APISERVER")?,
            etcd,
        })
    }

    /// A client for the local cluster, from its kubeconfig; an error naming the server, before
    /// any request, if the kubeconfig points anywhere but the local API server.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("building a client config from the local kubeconfig")?;
        self.ensure_local(&config)?;
        Client::try_from(config).context("building a client for the local cluster")
    }

    /// The same cluster through another kubeconfig (another identity on the same local API
    /// server; [`Local::client`] still refuses any other server).
    pub fn with_kubeconfig(&self, kubeconfig: PathBuf) -> Self {
        Self {
            kubeconfig,
            registry: self.registry.clone(),
            api_server: self.api_server.clone(),
            etcd: self.etcd.clone(),
        }
    }

    /// What etcd holds under `key` (a value the API server stored as JSON, as it stores custom
    /// resources), read through etcd's JSON gateway; `None` when nothing is there.
    pub async fn etcd_get(&self, key: &str) -> anyhow::Result<Option<serde_json::Value>> {
        use base64::Engine;
        let url = self
            .etcd
            .as_deref()
            .context("WASMOP_ETCD is not in the env file: restart the local cluster")?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let answer: serde_json::Value = reqwest::Client::new()
            .post(format!("{url}/v3/kv/range"))
            .json(&serde_json::json!({"key": b64.encode(key)}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let Some(value) = answer["kvs"][0]["value"].as_str() else {
            return Ok(None);
        };
        let bytes = b64.decode(value).context("etcd's value is not base64")?;
        Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
            format!("etcd's value at {key} is not JSON")
        })?))
    }

    /// The local API server's URL, `https://127.0.0.1:PORT`.
    pub fn api_server(&self) -> &str {
        &self.api_server
    }

    /// Refuses a client configuration for any API server but the local one.
    fn ensure_local(&self, config: &Config) -> anyhow::Result<()> {
        let server = config.cluster_url.to_string();
        let host = config.cluster_url.host().unwrap_or_default();
        if server.trim_end_matches('/') != self.api_server.trim_end_matches('/')
            || !is_loopback_host(host)
        {
            bail!(
                "refusing API server {server} (from {}): the tests use only the local cluster at \
                 {}",
                self.kubeconfig.display(),
                self.api_server
            );
        }
        Ok(())
    }
}

/// The local cluster's `kubectl` (its path from the state's env file), for `local`'s
/// kubeconfig.
pub fn kubectl(local: &Local) -> anyhow::Result<std::process::Command> {
    let env = std::fs::read_to_string(local.kubeconfig.with_file_name("env"))?;
    let path = env
        .lines()
        .find_map(|l| l.strip_prefix("export WASMOP_KUBECTL="))
        .context("WASMOP_KUBECTL missing from the env file")?;
    let mut command = std::process::Command::new(path);
    command.arg("--kubeconfig").arg(&local.kubeconfig);
    Ok(command)
}

/// A name unique to this test run, lower-case and DNS-safe.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{:x}{:05x}",
        std::process::id() & 0xfff,
        nanos & 0xfffff
    )
}

/// A namespace created for one test and deleted by [`TestNamespace::delete`] when it passes, so
/// that a failed test leaves its objects behind to look at.
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
    api: Api<Namespace>,
    client: Client,
}

impl TestNamespace {
    /// Creates a fresh namespace named after `prefix`.
    pub async fn create(client: &Client, prefix: &str) -> anyhow::Result<Self> {
        let api: Api<Namespace> = Api::all(client.clone());
        let name = unique(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"wasmop.dev/e2e": "true"}}
        }))?;
        api.create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(Self {
            name,
            api,
            client: client.clone(),
        })
    }

    /// Deletes the namespace (in the background; the test need not wait for finalization),
    /// after its Apps ([`release_apps`]): a namespace whose App keeps the host's finalizer
    /// while no host runs stays `Terminating` for ever.
    pub async fn delete(self) -> anyhow::Result<()> {
        release_apps(&self.client, &self.name)
            .await
            .with_context(|| format!("deleting the Apps of namespace {}", self.name))?;
        self.api
            .delete(&self.name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting namespace {}", self.name))?;
        Ok(())
    }
}

/// How long a running host of the test may take to finalize the Apps of a namespace being
/// deleted before [`release_apps`] removes their finalizer itself.
const FINALIZE: Duration = Duration::from_secs(20);

/// Deletes the Apps of `namespace` and sees them gone. A host of this test process that
/// watches the namespace ([`Watching`]) finalizes them as it would any App (given [`FINALIZE`]);
/// the host's finalizer is then removed from those still there, and from all of them at once
/// when no such host runs (the test stopped it, killed it or never ran one): nothing would ever
/// remove it, and the namespace's deletion would hang on them (issue 46 found 14 namespaces
/// `Terminating` after a green `tests/run.sh`). The namespace's deletion removes what they own.
async fn release_apps(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let apps: Api<App> = Api::namespaced(client.clone(), namespace);
    let names: Vec<String> = match apps.list(&ListParams::default()).await {
        Ok(list) => list.items.iter().map(ResourceExt::name_any).collect(),
        // No App resource: no host ever ran against this cluster.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(err) => return Err(err).context("listing the Apps"),
    };
    if names.is_empty() {
        return Ok(());
    }
    for name in &names {
        match apps.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err).with_context(|| format!("deleting App {name}")),
        }
    }
    if watched_by_a_host(namespace) {
        // Not finalized in time is not a failure of the test: what is left is released below.
        let _ = wait_for(
            "the test's host to finalize the deleted Apps",
            FINALIZE,
            || async {
                Ok(apps
                    .list(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            },
        )
        .await;
    }
    wait_for(
        "no App holding the host's finalizer",
        Duration::from_secs(30),
        || async {
            let mut held = 0;
            for app in apps.list(&ListParams::default()).await? {
                if !app.finalizers().iter().any(|f| f == FINALIZER) {
                    continue;
                }
                held += 1;
                let rest: Vec<&String> = app
                    .finalizers()
                    .iter()
                    .filter(|f| *f != FINALIZER)
                    .collect();
                // The resourceVersion makes a concurrent change (a host finalizing it after
                // all) a conflict, looked at again on the next round.
                let patch = serde_json::json!({"metadata": {
                    "finalizers": rest, "resourceVersion": app.resource_version(),
                }});
                match apps
                    .patch(
                        &app.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                {
                    Ok(_) => held -= 1,
                    Err(kube::Error::Api(status)) if [404, 409].contains(&status.code) => {}
                    Err(err) => return Err(err.into()),
                }
            }
            Ok((held == 0).then_some(()))
        },
    )
    .await
}

/// The hosts this test process runs, by a number of their own: the namespaces each watches,
/// `None` for the whole cluster.
static HOSTS: Mutex<BTreeMap<u64, Option<Vec<String>>>> = Mutex::new(BTreeMap::new());
static NEXT_HOST: AtomicU64 = AtomicU64::new(0);

/// That a host of this test process runs, and which namespaces it watches, for as long as this
/// lives (a [`crate::apps::Host`] holds one): [`TestNamespace::delete`] leaves the Apps of a
/// namespace that such a host watches to it to finalize.
pub struct Watching(u64);

impl Watching {
    /// From the host's command line: the values of its `--namespace`/`-n` options (repeated or
    /// comma-separated, as `wasmop run` takes them); none means the whole cluster.
    pub fn from_args(args: &[OsString]) -> Self {
        let mut namespaces = Vec::new();
        let mut args = args.iter().map(|a| a.to_string_lossy());
        while let Some(arg) = args.next() {
            let value = match arg.as_ref() {
                "--namespace" | "-n" => args.next().map(|v| v.to_string()),
                other => other.strip_prefix("--namespace=").map(str::to_string),
            };
            namespaces.extend(value.iter().flat_map(|v| v.split(',').map(str::to_string)));
        }
        let id = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut hosts) = HOSTS.lock() {
            hosts.insert(id, (!namespaces.is_empty()).then_some(namespaces));
        }
        Self(id)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Ok(mut hosts) = HOSTS.lock() {
            hosts.remove(&self.0);
        }
    }
}

/// Whether a host of this test process runs that watches `namespace`.
fn watched_by_a_host(namespace: &str) -> bool {
    HOSTS.lock().is_ok_and(|hosts| {
        hosts.values().any(|watched| {
            watched
                .as_ref()
                .is_none_or(|ns| ns.iter().any(|n| n == namespace))
        })
    })
}

/// Polls `probe` until it yields `Some`, failing with `what` and the last observation after
/// `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last;
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => last = "condition not met".into(),
            Err(err) => last = format!("{err:#}"),
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `wasmop` binary of this build: `tests/run.sh` builds it before the tests, next to the
/// test binary's `deps/` directory.
pub fn wasmop_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("WASMOP_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("locating the test binary")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("the test binary is not in a cargo target directory")?;
    let bin = profile_dir.join("wasmop");
    if !bin.is_file() {
        bail!(
            "{} is missing: build it with `cargo build -p wasmop-host` first",
            bin.display()
        );
    }
    Ok(bin)
}

/// A binary `deploy/local/setup.sh PART` built: `name` in the directory (or, with an empty
/// `name`, the file) that `var` names in the environment or in `target/local/tools.env`.
pub fn tool(var: &str, name: &str, part: &str) -> anyhow::Result<PathBuf> {
    let value = match std::env::var(var) {
        Ok(value) => value,
        Err(_) => {
            // Where setup.sh wrote it: $WASMOP_LOCAL_STATE, as Local::discover reads it.
            let env = local_state().join("tools.env");
            let text = std::fs::read_to_string(&env).with_context(|| {
                format!(
                    "reading {}: run deploy/local/setup.sh {part}",
                    env.display()
                )
            })?;
            let prefix = format!("export {var}=");
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .map(str::to_string)
                .with_context(|| {
                    format!(
                        "no {var} in {}: run deploy/local/setup.sh {part}",
                        env.display()
                    )
                })?
        }
    };
    Ok(if name.is_empty() {
        PathBuf::from(value)
    } else {
        Path::new(&value).join(name)
    })
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Where `tests/run.sh` builds components: `$CARGO_TARGET_DIR/wasm32-wasip2/release/FILE`.
pub fn component_path(file: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()?
            .ancestors()
            .nth(3)
            .context("the test binary is not in a cargo target directory")?
            .to_path_buf(),
    };
    Ok(dir.join("wasm32-wasip2/release").join(file))
}

/// The bytes of a component built by `tests/run.sh`.
pub fn component(file: &str) -> anyhow::Result<Vec<u8>> {
    let path = component_path(file)?;
    std::fs::read(&path).with_context(|| {
        format!(
            "reading {}: build the plugins with plugins/build.sh",
            path.display()
        )
    })
}

/// A ConfigMap `name` holding the component `file` (built by `tests/run.sh`) under the key
/// `plugin.wasm`, as an App's `spec.plugin.configMap` references it.
pub fn plugin_configmap(
    name: &str,
    file: &str,
) -> anyhow::Result<k8s_openapi::api::core::v1::ConfigMap> {
    Ok(k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        binary_data: Some(
            [(
                "plugin.wasm".to_string(),
                k8s_openapi::ByteString(component(file)?),
            )]
            .into(),
        ),
        ..Default::default()
    })
}

/// Waits until `url` answers with a success status.
pub async fn wait_http_ok(what: &str, url: &str, timeout: Duration) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    wait_for(what, timeout, || async {
        let response = http.get(url).send().await?;
        Ok(response.status().is_success().then_some(()))
    })
    .await
}

/// The sum over all label sets of the Prometheus series `name` at `url` (`/metrics`); 0 when
/// the host has not recorded any.
pub async fn metric_sum(url: &str, name: &str) -> anyhow::Result<f64> {
    let text = reqwest::get(url).await?.error_for_status()?.text().await?;
    let mut sum = 0.0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let series_name = series.split('{').next().unwrap_or(series);
        if series_name == name {
            sum += value.parse::<f64>()?;
        }
    }
    Ok(sum)
}

/// Runs `command`, returning whether it succeeded and its stdout and stderr together.
pub async fn run(mut command: std::process::Command) -> anyhow::Result<(bool, String)> {
    let out = tokio::task::spawn_blocking(move || command.output()).await??;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// `kubectl ARGS`, which must succeed; its output.
pub async fn kubectl_ok(local: &Local, args: &[&str]) -> anyhow::Result<String> {
    let mut command = kubectl(local)?;
    command.args(args);
    let (ok, said) = run(command).await?;
    if !ok {
        anyhow::bail!("kubectl {}: {said}", args.join(" "));
    }
    Ok(said)
}
