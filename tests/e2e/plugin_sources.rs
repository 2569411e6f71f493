//! Plugin sources against the real registry and API server: a tag pushed again swaps the
//! plugin live, a broken push never replaces the good version, a ConfigMap update swaps within
//! two seconds, and a restart with the registry down loads from the compiled cache.

use std::{
    collections::BTreeMap,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use k8s_openapi::{ByteString, api::core::v1::ConfigMap};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use wasmop_host::plugin::{
    Digest,
    cache::Cache,
    engine::PluginEngine,
    metrics::PluginMetrics,
    registry::PluginRegistry,
    source::{
        OciRef, SourceRef,
        oci::{OciSource, reach::PrivateNetworks},
    },
    watch::SourceWatcher,
};

use crate::harness::{Local, TestNamespace, component, free_port, unique, wait_for};

const POLL: Duration = Duration::from_millis(500);

fn runtime(
    cache: Option<Cache>,
    client: Option<kube::Client>,
) -> anyhow::Result<(Arc<PluginRegistry>, Arc<SourceWatcher>)> {
    let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let registry = PluginRegistry::new(engine, cache, PluginMetrics::unregistered());
    // The tests' registries are on loopback, which the host reaches only where allowed.
    let oci = Arc::new(
        OciSource::new(None, vec![])?.with_private_networks(PrivateNetworks::parse("127.0.0.0/8")?),
    );
    let watcher = SourceWatcher::new(registry.clone(), oci, client, POLL, None);
    Ok((registry, watcher))
}

async fn wait_for_digest(
    registry: &PluginRegistry,
    source: &SourceRef,
    digest: &Digest,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    wait_for(&format!("{source} to serve {digest}"), timeout, || async {
        Ok(registry
            .get(source)
            .current
            .filter(|c| c.compiled.digest == *digest)
            .map(|_| ()))
    })
    .await?;
    Ok(start.elapsed())
}

#[tokio::test]
async fn a_tag_pushed_again_swaps_live_and_a_bad_push_keeps_the_good_version() -> anyhow::Result<()>
{
    let local = Local::discover()?;
    let reference = format!("{}/e2e/{}:1.0", local.registry, unique("swap"));
    let pusher = OciSource::new(None, vec![])?;
    let (hello, kvstore, broken) = (
        component("hello.wasm")?,
        component("kvstore.wasm")?,
        component("wrong-world.wasm")?,
    );

    pusher.push_unchecked(&reference, &hello).await?;
    let (registry, watcher) = runtime(None, None)?;
    let source = SourceRef::Oci(OciRef::anonymous(reference.clone()));
    watcher.ensure(&source, "default");
    wait_for_digest(
        &registry,
        &source,
        &Digest::of(&hello),
        Duration::from_secs(30),
    )
    .await?;

    pusher.push_unchecked(&reference, &kvstore).await?;
    let swap = wait_for_digest(
        &registry,
        &source,
        &Digest::of(&kvstore),
        POLL + Duration::from_secs(5),
    )
    .await?;
    eprintln!("OCI tag swap observed {swap:?} after the push returned (poll interval {POLL:?})");
    assert_eq!(
        registry
            .get(&source)
            .current
            .map(|c| c.compiled.metadata.name.clone())
            .as_deref(),
        Some("kvstore")
    );

    pusher.push_unchecked(&reference, &broken).await?;
    let error = wait_for(
        "the broken push to be rejected",
        Duration::from_secs(10),
        || async { Ok(registry.get(&source).last_error) },
    )
    .await?;
    assert_eq!(error.reason(), "IncompatibleWorld", "{error}");
    let state = registry.get(&source);
    assert_eq!(
        state.current.map(|c| c.compiled.digest.clone()),
        Some(Digest::of(&kvstore)),
        "kept the last good version"
    );
    // A source nobody asks for any more is unloaded.
    watcher.forget_idle(Duration::ZERO);
    assert!(
        registry.get(&source).current.is_none(),
        "an idle source must be unloaded"
    );
    Ok(())
}

#[tokio::test]
async fn a_configmap_update_swaps_within_two_seconds() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-cm").await?;
    // A ConfigMap holds at most 1 MiB, so the ConfigMap variant swaps between the small plugins.
    let (hello, fault) = (component("hello.wasm")?, component("fault_plugin.wasm")?);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let config_map = |bytes: &[u8]| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("plugin".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "plugin.wasm".to_string(),
            ByteString(bytes.to_vec()),
        )])),
        ..Default::default()
    };
    api.create(&PostParams::default(), &config_map(&hello))
        .await?;

    let (registry, watcher) = runtime(None, Some(client.clone()))?;
    let source = SourceRef::ConfigMap {
        namespace: ns.name.clone(),
        name: "plugin".into(),
        key: "plugin.wasm".into(),
    };
    watcher.ensure(&source, "default");
    wait_for_digest(
        &registry,
        &source,
        &Digest::of(&hello),
        Duration::from_secs(30),
    )
    .await?;

    let start = Instant::now();
    api.patch(
        "plugin",
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&config_map(&fault)),
    )
    .await?;
    wait_for_digest(
        &registry,
        &source,
        &Digest::of(&fault),
        Duration::from_secs(2),
    )
    .await?;
    eprintln!(
        "ConfigMap swap observed {:?} after the update was sent",
        start.elapsed()
    );

    api.patch(
        "plugin",
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&config_map(b"not wasm")),
    )
    .await?;
    let error = wait_for(
        "the bad ConfigMap to be rejected",
        Duration::from_secs(5),
        || async { Ok(registry.get(&source).last_error) },
    )
    .await?;
    assert_eq!(error.reason(), "NotAComponent", "{error}");
    assert_eq!(
        registry
            .get(&source)
            .current
            .map(|c| c.compiled.digest.clone()),
        Some(Digest::of(&fault))
    );
    ns.delete().await
}

/// A registry of this test's own, so that stopping it affects no other test.
pub struct PrivateRegistry {
    child: tokio::process::Child,
    /// `127.0.0.1:port`.
    pub addr: String,
    dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl PrivateRegistry {
    /// Stops the registry process.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// Starts the stopped registry again on its address, with its storage as it was.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.child = Self::spawn(&self.dir.0.join("config.yml"))?;
        Self::wait_serving(&self.addr).await
    }

    /// Points `repository:tag` at the manifest `digest` in the storage directly, as a push
    /// would: for a stopped registry, whose tag then moved while nobody could see it.
    pub fn move_tag(&self, repository: &str, tag: &str, digest: &str) -> anyhow::Result<()> {
        let link = self
            .dir
            .0
            .join("data/docker/registry/v2/repositories")
            .join(repository)
            .join("_manifests/tags")
            .join(tag)
            .join("current/link");
        anyhow::ensure!(
            link.is_file(),
            "no tag {repository}:{tag} at {}",
            link.display()
        );
        std::fs::write(&link, digest)?;
        Ok(())
    }

    fn spawn(config: &std::path::Path) -> anyhow::Result<tokio::process::Child> {
        Ok(tokio::process::Command::new("/usr/bin/docker-registry")
            .arg("serve")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?)
    }

    async fn wait_serving(addr: &str) -> anyhow::Result<()> {
        let url = format!("http://{addr}/v2/");
        let http = reqwest::Client::new();
        // With auth, an anonymous `/v2/` is a 401: serving all the same.
        wait_for(
            "the private registry to serve",
            Duration::from_secs(20),
            || async {
                let status = http.get(&url).send().await?.status();
                Ok(
                    (status.is_success() || status == reqwest::StatusCode::UNAUTHORIZED)
                        .then_some(()),
                )
            },
        )
        .await
    }

    /// Starts a registry with its own storage on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_configured(None).await
    }

    /// Starts one that asks for HTTP basic auth (`user`, `password`), as an htpasswd file
    /// written by Debian's `htpasswd -B` gives the Debian registry.
    pub async fn start_with_basic_auth(user: &str, password: &str) -> anyhow::Result<Self> {
        Self::start_configured(Some((user, password))).await
    }

    async fn start_configured(basic_auth: Option<(&str, &str)>) -> anyhow::Result<Self> {
        let dir = TempDir(std::env::temp_dir().join(unique("wasmop-registry")));
        std::fs::create_dir_all(&dir.0)?;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut yaml = format!(
            "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: {addr}}}\n",
            dir.0.join("data").display()
        );
        if let Some((user, password)) = basic_auth {
            let htpasswd = dir.0.join("htpasswd");
            let out = tokio::process::Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .await
                .context("running htpasswd: run deploy/local/setup.sh interop")?;
            anyhow::ensure!(
                out.status.success(),
                "htpasswd: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(&htpasswd, &out.stdout)?;
            yaml.push_str(&format!(
                "auth: {{htpasswd: {{realm: wasmop-test, path: {}}}}}\n",
                htpasswd.display()
            ));
        }
        let config = dir.0.join("config.yml");
        std::fs::write(&config, yaml)?;
        let child = Self::spawn(&config)?;
        Self::wait_serving(&addr).await?;
        Ok(Self { child, addr, dir })
    }
}

#[tokio::test]
async fn a_restart_with_the_registry_down_loads_from_the_compiled_cache() -> anyhow::Result<()> {
    let mut private = PrivateRegistry::start().await?;
    let reference = format!("{}/plugins/kvstore:1.0", private.addr);
    let kvstore = component("kvstore.wasm")?;
    OciSource::new(None, vec![])?
        .push_unchecked(&reference, &kvstore)
        .await?;
    let cache_dir = TempDir(std::env::temp_dir().join(unique("wasmop-cache")));
    let source = SourceRef::Oci(OciRef::anonymous(reference.clone()));

    {
        let (registry, watcher) = runtime(Some(Cache::open(&cache_dir.0)?), None)?;
        watcher.ensure(&source, "default");
        wait_for_digest(
            &registry,
            &source,
            &Digest::of(&kvstore),
            Duration::from_secs(30),
        )
        .await?;
        watcher.forget_idle(Duration::ZERO);
    }

    private.stop().await?;
    let (registry, watcher) = runtime(Some(Cache::open(&cache_dir.0)?), None)?;
    let start = Instant::now();
    watcher.ensure(&source, "default");
    wait_for_digest(
        &registry,
        &source,
        &Digest::of(&kvstore),
        Duration::from_secs(10),
    )
    .await?;
    let loaded = registry.get(&source).current.expect("loaded");
    assert!(
        loaded.compiled.from_cache,
        "the compiled artifact came from the cache"
    );
    eprintln!(
        "restart with the registry down: serving after {:?}, artifact load {:?}",
        start.elapsed(),
        loaded.compiled.compile_time
    );
    // The failing polls are known, and kept from the Apps the cache serves: a registry down
    // across a restart is no news to them (record_poll_failure).
    let error = wait_for(
        "the unreachable registry to be noticed",
        Duration::from_secs(10),
        || async { Ok(registry.get(&source).poll_failing) },
    )
    .await?;
    assert_eq!(error.reason(), "FetchFailed", "{error}");
    assert!(
        registry.get(&source).last_error.is_none(),
        "the Apps are not told of a registry down for less than the grace"
    );
    Ok(())
}

/// A host restarted while its plugin cannot load (registry down, empty cache) must not let an
/// App's deletion skip the plugin's `finalize`: the finalizer stays until a host that can load
/// the plugin (here, one with the compiled cache) finalizes, and the claims of a
/// `retention: Delete` App then go.
#[tokio::test]
async fn deletion_waits_for_the_plugin_across_a_restart() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kube::{ResourceExt, api::DeleteParams};
    use serde_json::json;
    use wasmop_host::app::App;

    use crate::apps::{Host, app, live_claims, ready_at, wait_app};

    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-final").await?;
    let mut registry = PrivateRegistry::start().await?;
    let reference = format!("{}/plugins/kvstore:1.0", registry.addr);
    OciSource::new(None, vec![])?
        .push_unchecked(&reference, &component("kvstore.wasm")?)
        .await?;
    let cache = TempDir(std::env::temp_dir().join(unique("wasmop-final-cache")));
    let key = std::env::temp_dir().join(unique("wasmop-final-key"));
    std::fs::write(&key, unique("key").repeat(4))?;
    let (cache_arg, key_arg) = (cache.0.display().to_string(), key.display().to_string());
    let cached = [
        "--cache-dir",
        cache_arg.as_str(),
        "--cache-key-file",
        key_arg.as_str(),
    ];

    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let claims = || live_claims(&pvcs, "kv");
    {
        let _host = Host::start_with(&local, &ns.name, &cached, &unique("final-1")).await?;
        let config = json!({"replicas": 1, "retention": "Delete"});
        apps.create(
            &PostParams::default(),
            &app("kv", json!({"image": reference}), "7.2.4", config)?,
        )
        .await?;
        wait_app(
            &apps,
            "kv",
            "Ready",
            Duration::from_secs(60),
            ready_at(1, "7.2.4"),
        )
        .await?;
        wait_for("its claim", Duration::from_secs(30), || async {
            Ok((claims().await? >= 1).then_some(()))
        })
        .await?;
    }

    // Registry down, and a host with an empty cache: the plugin cannot load.
    registry.stop().await?;
    {
        let _host = Host::start(&local, &ns.name).await?;
        apps.delete("kv", &DeleteParams::default()).await?;
        tokio::time::sleep(Duration::from_secs(8)).await;
        let waiting = apps
            .get_opt("kv")
            .await?
            .ok_or_else(|| anyhow::anyhow!("the App went without its plugin's finalize"))?;
        assert!(
            waiting
                .finalizers()
                .iter()
                .any(|f| f == "wasmop.dev/cleanup"),
            "the finalizer was removed while the plugin could not load"
        );
        assert!(claims().await? >= 1, "claims went without finalize");
    }

    // A host that can load the plugin from its compiled cache finalizes: the App and, under
    // retention Delete, its claims go.
    let _host = Host::start_with(&local, &ns.name, &cached, &unique("final-3")).await?;
    wait_for(
        "the App to be finalized",
        Duration::from_secs(60),
        || async { Ok(apps.get_opt("kv").await?.is_none().then_some(())) },
    )
    .await?;
    wait_for("its claims to go", Duration::from_secs(30), || async {
        Ok((claims().await? == 0).then_some(()))
    })
    .await?;
    let _ = std::fs::remove_file(&key);
    ns.delete().await
}
