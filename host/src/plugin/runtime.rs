//! The plugin runtime of a running host: the engine, the on-disk cache, the registry of loaded
//! plugins and the watcher of their sources, built once from the command line; reconciles
//! reach a plugin through [`PluginRuntime::acquire`].

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use kube::Client;
use prometheus_client::registry::Registry;
use tracing::info;

use super::{
    budget::MemoryBudget,
    cache::{Cache, CacheKey},
    compiler::{CompileLimits, Compiler},
    engine::PluginEngine,
    metrics::PluginMetrics,
    registry::{PluginRegistry, SourceState},
    source::{
        SourceRef,
        oci::{OciSource, reach::PrivateNetworks},
    },
    watch::SourceWatcher,
};
use crate::cli::RunArgs;

/// The plugin side of the host: engine, cache, loaded-plugin registry, source watcher.
#[derive(Clone)]
pub struct PluginRuntime {
    /// Loaded plugins by source.
    pub registry: Arc<PluginRegistry>,
    /// Follows the sources in use.
    pub watcher: Arc<SourceWatcher>,
    /// Versions [`Self::recall_in_background`] is loading: one task each, however many
    /// reconciles wait for it.
    recalling: Arc<std::sync::Mutex<std::collections::HashSet<(SourceRef, String)>>>,
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
        // Two slots per reconcile in flight: a reconcile calls the plugin a few times in a
        // row, and a swap loads a second version beside the first. wasmtime splits the pool
        // (and this bound) into one shard per core, up to 16: at least two per shard.
        let shards = std::thread::available_parallelism().map_or(16, |n| n.get().min(16));
        let warm_slots = u32::from(args.concurrency)
            .max(u32::try_from(shards).unwrap_or(16))
            .saturating_mul(2);
        let engine = PluginEngine::with_compiler(budget, compiler, warm_slots)
            .map_err(|err| anyhow::anyhow!("creating the wasmtime engine: {err:#}"))?;
        let dir = args.cache_dir.clone().unwrap_or_else(default_cache_dir);
        let key = match &args.cache_key_file {
            Some(path) => CacheKey::from_file(path)
                .with_context(|| format!("reading the cache key {}", path.display()))?,
            None => None,
        };
        let metrics = PluginMetrics::register(metrics);
        // The cache is an optimisation: a host whose cache directory cannot be opened (read-only,
        // full, wrong owner) serves from the plugins' sources and says so on every App.
        let registry = match Cache::bounded(&dir, args.cache_max_bytes) {
            Ok(mut cache) => {
                match key {
                    Some(key) => cache = cache.with_key(key),
                    None => info!(
                        "no cache key file (--cache-key-file): compiled plugins are \
                         authenticated with a key of this process's own, so a restart \
                         recompiles them"
                    ),
                }
                info!(dir = %dir.display(), fingerprint = engine.fingerprint(), "plugin cache");
                PluginRegistry::new(engine, Some(cache), metrics)
            }
            Err(err) => {
                let why = format!("the plugin cache {} cannot be opened: {err}", dir.display());
                tracing::error!(dir = %dir.display(), error = %err, "the plugin cache cannot be opened; every plugin will be fetched and compiled at each start");
                PluginRegistry::without_cache(engine, why, metrics)
            }
        };
        let private = PrivateNetworks::union(args.allow_private_registries.iter().cloned());
        info!(
            networks = %private,
            "private networks plugin registries may be reached in (--allow-private-registries; \
             besides, those a PluginPolicy's registries name)"
        );
        let oci = OciSource::new(
            args.registry_config.as_deref(),
            args.insecure_registries.clone(),
        )?
        .with_private_networks(private)
        .with_client(client.clone());
        let watcher = SourceWatcher::new(
            registry.clone(),
            Arc::new(oci),
            Some(client.clone()),
            args.poll_interval,
            args.file_root.clone(),
        );
        Ok(Self {
            registry,
            watcher,
            recalling: Arc::default(),
        })
    }

    /// The state of the plugin behind `source`, and a promise to follow it for an App of
    /// `namespace`: the first `acquire` of a source starts its fetch (after a restart the
    /// registry is empty), and the watcher offers every new version to the registry from then
    /// on, charging its compiles and pulls to the namespaces that asked.
    pub fn acquire(&self, source: &SourceRef, namespace: &str) -> SourceState {
        self.watcher.ensure(source, namespace);
        self.registry.get(source)
    }
}

impl PluginRuntime {
    /// Starts [`Self::recall`] of the version of `source` with `digest` in a task of its own,
    /// unless one is loading it already.
    pub fn recall_in_background(&self, source: &SourceRef, digest: &str) {
        let key = (source.clone(), digest.to_string());
        let fresh = self
            .recalling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        if !fresh {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(err) = this.recall(&key.0, &key.1).await {
                tracing::warn!(source = %key.0, digest = %key.1, error = %err, "loading an earlier plugin version for a rollout");
            }
            this.recalling
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
        });
    }

    /// Loads the version of `source` with `digest` beside the one in service, from the on-disk
    /// cache ([`PluginRegistry::recall`]): for an OCI source, only a digest the cache records
    /// this very source (its credentials and the keys that had to sign it) served, so that a
    /// version is never served unverified, nor one another tenant's source brought into the
    /// cache.
    pub async fn recall(
        &self,
        source: &SourceRef,
        digest: &str,
    ) -> Result<Arc<super::registry::LoadedPlugin>, super::LoadError> {
        if let Some(loaded) = self.registry.version(source, digest) {
            return Ok(loaded);
        }
        if let Some(err) = self.registry.recall_failure(source, digest) {
            return Err(err);
        }
        if let SourceRef::Oci(oci) = source {
            let key = match self.watcher.oci().cache_key(source, oci).await {
                Ok(key) => key,
                Err(err) => {
                    self.registry.recall_refused(source, digest, err.clone());
                    return Err(err);
                }
            };
            let served = super::Digest::parse(digest).ok().and_then(|parsed| {
                let recorded = self
                    .registry
                    .cache()?
                    .recall_ref(&super::watch::served_key(&key, &parsed))?;
                (recorded == parsed).then_some(())
            });
            if served.is_none() {
                let err = super::LoadError::Fetch {
                    source_ref: source.to_string(),
                    message: format!(
                        "{digest} is no longer the version the source offers, and the host's \
                         plugin cache has no record that this source served it (with these \
                         credentials and signature keys): it cannot be loaded again"
                    ),
                };
                self.registry.recall_refused(source, digest, err.clone());
                return Err(err);
            }
        }
        self.registry.recall(source, digest).await
    }
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"))
        .join("wasmop/plugins")
}
