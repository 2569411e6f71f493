//! `wasmop run`: connect to the cluster, install the CRDs, serve probes, run until signalled.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use kube::Client;
use prometheus_client::registry::Registry;
use tracing::info;

use crate::{
    api_health::{ApiHealth, ApiHealthLayer},
    cli::RunArgs,
    controller, crd_install,
    leader::LeaderElector,
    plugin::{
        budget::MemoryBudget,
        cache::{Cache, CacheKey},
        compiler::{CompileLimits, Compiler},
        engine::PluginEngine,
        metrics::PluginMetrics,
        registry::PluginRegistry,
        source::oci::OciSource,
        watch::SourceWatcher,
    },
    policy::view::PolicyView,
    probes::Probes,
};

/// The plugin side of the host: engine, cache, loaded-plugin registry, source watcher.
pub struct PluginRuntime {
    /// Loaded plugins by source.
    pub registry: Arc<PluginRegistry>,
    /// Follows the sources in use.
    pub watcher: Arc<SourceWatcher>,
}

impl PluginRuntime {
    /// Builds the runtime from the command line and registers its metrics.
    pub fn start(args: &RunArgs, client: &Client, metrics: &mut Registry) -> anyhow::Result<Self> {
        let (budget, from) = match args.memory_budget {
            Some(bytes) => (MemoryBudget::new(bytes), "--memory-budget".to_string()),
            None => MemoryBudget::from_cgroup(),
        };
        info!(mib = budget.total_bytes() >> 20, from = %from, "plugin memory budget");
        let compiler = Compiler::worker(CompileLimits {
            memory_bytes: args.compile_memory,
            timeout: args.compile_timeout,
        })
        .context("finding the wasmop binary to run compile workers")?;
        let engine = PluginEngine::with_compiler(budget, compiler)
            .map_err(|err| anyhow::anyhow!("creating the wasmtime engine: {err:#}"))?;
        let dir = args.cache_dir.clone().unwrap_or_else(default_cache_dir);
        let mut cache = Cache::bounded(&dir, args.cache_max_bytes)
            .with_context(|| format!("opening the plugin cache {}", dir.display()))?;
        let key = match &args.cache_key_file {
            Some(path) => CacheKey::from_file(path)
                .with_context(|| format!("reading the cache key {}", path.display()))?,
            None => None,
        };
        match key {
            Some(key) => cache = cache.with_key(key),
            None => info!(
                "no cache key file (--cache-key-file): compiled plugins are authenticated with a \
                 key of this process's own, so a restart recompiles them"
            ),
        }
        info!(dir = %dir.display(), fingerprint = engine.fingerprint(), "plugin cache");
        let registry = PluginRegistry::new(engine, Some(cache), PluginMetrics::register(metrics));
        let oci = OciSource::new(
            args.registry_config.as_deref(),
            args.insecure_registries.clone(),
        )?
        .with_client(client.clone());
        let watcher = SourceWatcher::new(
            registry.clone(),
            Arc::new(oci),
            Some(client.clone()),
            args.poll_interval,
            args.file_root.clone(),
        );
        Ok(Self { registry, watcher })
    }
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"))
        .join("wasmop/plugins")
}

/// Runs the host until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let health = ApiHealth::new(args.unready_after, args.unhealthy_after);
    let config = kube::Config::infer()
        .await
        .context("reading the kubeconfig or in-cluster environment")?;
    let client = kube::client::ClientBuilder::try_from(config)
        .context("building a Kubernetes client")?
        .with_layer(&ApiHealthLayer(health.clone()))
        .build();
    let version = client
        .apiserver_version()
        .await
        .context("reaching the Kubernetes API server")?;
    info!(server = %version.git_version, "connected to the API server");

    if !args.skip_crd_install {
        crd_install::ensure_crds(&client)
            .await
            .context("installing the wasmop CRDs")?;
        info!("CRDs established");
    }

    let mut registry = Registry::with_prefix("wasmop");
    let runtime = PluginRuntime::start(&args, &client, &mut registry)?;
    let reconcile_metrics = crate::reconcile::execute::ReconcileMetrics::register(&mut registry);
    let probes = Probes::new(registry, runtime.registry.clone(), health.clone())
        .debug_from_anywhere(args.debug_from_anywhere);
    let api_probe = tokio::spawn(health.clone().probe_forever(client.clone()));
    let (addr, server) = probes
        .clone()
        .bind(args.listen)
        .await
        .with_context(|| format!("binding the probe server to {}", args.listen))?;
    info!(%addr, "serving /healthz, /readyz, /metrics and /debug/plugins");
    let server = tokio::spawn(server);

    // One signal ends everything: the controllers stop taking work and finish what is in flight.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let signals = {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            if let Err(err) = shutdown_signal().await {
                tracing::error!(error = %err, "signal handling");
            }
            info!("shutting down: finishing in-flight reconciles");
            let _ = stop_tx.send(true);
        })
    };

    if args.leader_elect {
        let identity =
            // Outside a Pod the pid alone is not unique (it is 1 in every container).
            std::env::var("POD_NAME").unwrap_or_else(|_| {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "wasmop".into());
                format!("{host}-{}", std::process::id())
            });
        let namespace = args
            .lease_namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let elector = LeaderElector::new(client.clone(), &namespace, "wasmop-leader", &identity);
        info!(%namespace, %identity, "waiting for the leader lease");
        // A standby is healthy and ready to take over; it turns not-ready once it leads, until
        // its caches have synced.
        probes.set_ready(true);
        let mut leading = tokio::select! {
            leading = elector.acquire() => leading,
            () = stopped(stop_rx.clone()) => { server.abort(); return Ok(()); }
        };
        probes.set_ready(false);
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            let _ = leading.wait_for(|leading| !*leading).await;
            tracing::error!("lost leadership; stopping");
            let _ = stop_tx.send(true);
        });
    }

    // Policies are read only once leading, so a standby never writes their status.
    let (policies, writers) = PolicyView::new(args.host_namespace.clone());
    let policy_task = tokio::spawn(policies.clone().run(client.clone(), writers));

    let namespaces: Vec<Option<String>> = if args.namespaces.is_empty() {
        vec![None]
    } else {
        args.namespaces.iter().cloned().map(Some).collect()
    };
    let pending = Arc::new(std::sync::atomic::AtomicUsize::new(namespaces.len()));
    let controllers = namespaces.into_iter().map(|namespace| {
        let (probes, pending) = (probes.clone(), pending.clone());
        let ready = move || {
            if pending.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                probes.set_ready(true);
            }
        };
        info!(
            namespace = namespace.as_deref().unwrap_or("<all>"),
            "starting the App controller"
        );
        let settings = controller::Settings {
            namespace,
            concurrency: args.concurrency,
            health: health.clone(),
            policies: policies.clone(),
            metrics: reconcile_metrics.clone(),
        };
        controller::run(
            client.clone(),
            &runtime,
            settings,
            ready,
            stopped(stop_rx.clone()),
        )
    });
    futures::future::join_all(controllers).await;
    probes.set_ready(false);
    api_probe.abort();
    policy_task.abort();
    signals.abort();
    server.abort();
    if !*stop_rx.borrow() {
        // The controllers only return on their own if their watch streams ended: nothing is
        // watched any more, so exit with an error for the kubelet to restart the host.
        anyhow::bail!("the App controller stopped without being asked to");
    }
    info!("stopped");
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT")?,
    }
    Ok(())
}
