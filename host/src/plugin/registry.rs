//! The loaded-plugin registry: for each source reference, the version in service and why the
//! last attempt to replace it failed, if it did.
//!
//! A new version is compiled and validated beside the one in service and swapped in atomically;
//! callers hold an `Arc` to the version they started with, so in-flight calls finish on the old
//! one. A version that fails to load never replaces a good one, and the same bad digest is not
//! recompiled on every poll. Every change is broadcast so that dependents can requeue.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

use super::{
    CallError, Digest, LoadError,
    cache::Cache,
    charge::Charge,
    compile_queue::{CompileQueue, Superseded, Ticket},
    compiled::CompiledPlugin,
    engine::PluginEngine,
    metrics::PluginMetrics,
    source::{Fetched, SourceRef},
};

/// No call may hold its caller longer than this, whatever the guest does.
const WALL_CLOCK_CAP: std::time::Duration = super::limits::MAX_DEADLINE.saturating_mul(2);

/// Bad digests remembered per source, so that polling a broken tag does not recompile it.
const REMEMBERED_FAILURES: usize = 8;

/// Versions of one source kept loaded beside the one in service: a progressive rollout serves
/// some instances with the previous version while others move to the new one, and rolls back to
/// it without a compile ([`crate::rollout`]). Each is one compiled component in memory.
pub const KEPT_VERSIONS: usize = 2;

/// How long a version [`PluginRegistry::recall`] could not load is not tried again (a blob the
/// cache evicted comes back with the next fetch of it; the instances say why meanwhile).
const RECALL_RETRY: Duration = Duration::from_secs(30);

/// One plugin version in service for one source reference.
pub struct LoadedPlugin {
    /// Where it came from.
    pub source: SourceRef,
    /// The compiled, validated component.
    pub compiled: CompiledPlugin,
    /// When it went into service.
    pub loaded_at: DateTime<Utc>,
    engine: Arc<PluginEngine>,
    metrics: PluginMetrics,
}

impl LoadedPlugin {
    /// Runs a call on a blocking thread (wasmtime calls are synchronous; epoch interruption
    /// bounds them) and records its duration and outcome under `interface`. Its memory cap
    /// `memory_bytes` is reserved from the budget as `namespace`'s (the App's).
    pub async fn run<R, F>(
        self: &Arc<Self>,
        interface: &'static str,
        namespace: &str,
        memory_bytes: u64,
        call: F,
    ) -> Result<R, CallError>
    where
        R: Send + 'static,
        F: FnOnce(&CompiledPlugin, &PluginEngine) -> Result<R, CallError> + Send + 'static,
    {
        let this = Arc::clone(self);
        let plugin = self.compiled.label();
        let start = Instant::now();
        // The share is held by the thread, not this future: a call abandoned at the wall-clock
        // cap below still holds its memory until its thread is done with it.
        let reservation = match self
            .engine
            .budget()
            .reserve(namespace, memory_bytes, super::budget::MAX_WAIT)
            .await
        {
            Ok(reservation) => reservation,
            Err(source) => {
                let err = CallError::OverBudget {
                    plugin,
                    interface,
                    source,
                };
                self.metrics
                    .call(interface, start.elapsed().as_secs_f64(), Some(err.reason()));
                return Err(err);
            }
        };
        // Epoch interruption stops running Wasm, not a guest blocked inside a WASI call (a
        // sleep, say); the wall-clock cap frees the reconcile either way. The blocked thread
        // itself runs on until the guest's wait ends.
        let task = tokio::task::spawn_blocking(move || {
            let _held = reservation;
            call(&this.compiled, &this.engine)
        });
        let result = match tokio::time::timeout(WALL_CLOCK_CAP, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(CallError::Host {
                plugin,
                interface,
                message: format!("call task failed: {join}"),
            }),
            Err(_) => Err(CallError::DeadlineExceeded {
                plugin,
                interface,
                limit: WALL_CLOCK_CAP,
            }),
        };
        self.metrics.call(
            interface,
            start.elapsed().as_secs_f64(),
            result.as_ref().err().map(CallError::reason),
        );
        result
    }

    /// The engine the plugin was compiled for.
    pub fn engine(&self) -> &PluginEngine {
        &self.engine
    }
}

/// What the registry knows about one source reference.
#[derive(Clone, Default)]
pub struct SourceState {
    /// The version in service, if one ever loaded.
    pub current: Option<Arc<LoadedPlugin>>,
    /// Why the most recent fetch or load failed, if it did after the last success: what the
    /// Apps on the source are told.
    pub last_error: Option<LoadError>,
    /// How the source's polls have been failing since the last one that answered, whether the
    /// Apps have been told yet or not (see [`PluginRegistry::record_poll_failure`]).
    pub poll_failing: Option<LoadError>,
    /// When the version in service went into service (a reinstated one: when it went back).
    pub since: Option<Instant>,
}

/// What became of a version offered to the registry.
#[derive(Clone)]
pub enum Offer {
    /// The digest is already in service.
    Unchanged(Arc<LoadedPlugin>),
    /// The first version for this source.
    Loaded(Arc<LoadedPlugin>),
    /// A new version replaced the one with digest `from`.
    Swapped {
        /// The digest taken out of service.
        from: Digest,
        /// The version now in service.
        to: Arc<LoadedPlugin>,
    },
    /// The version failed; the previous one, if any, stays in service.
    Rejected(LoadError),
    /// A newer version of the source was offered before this one's turn came: this one was
    /// skipped (see [`CompileQueue`]).
    Superseded,
}

#[derive(Default)]
struct Entry {
    current: Option<Arc<LoadedPlugin>>,
    /// When `current` went into service.
    since: Option<Instant>,
    /// Earlier versions still loaded, newest first (at most [`KEPT_VERSIONS`]).
    kept: Vec<Arc<LoadedPlugin>>,
    last_error: Option<LoadError>,
    failed: Vec<(Digest, LoadError)>,
    /// Since when polls have been failing, and how the last one failed.
    polls_failing: Option<(Instant, LoadError)>,
}

impl Entry {
    /// Keeps `loaded` beside the version in service, newest first, dropping the oldest past
    /// [`KEPT_VERSIONS`] that no rollout holds (`held`: digests some instance is on).
    fn keep(&mut self, loaded: Arc<LoadedPlugin>, held: &BTreeSet<String>) {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.compiled.digest == loaded.compiled.digest)
        {
            return;
        }
        self.kept
            .retain(|k| k.compiled.digest != loaded.compiled.digest);
        self.kept.insert(0, loaded);
        while self.kept.len() > KEPT_VERSIONS {
            let Some(oldest) = self
                .kept
                .iter()
                .rposition(|k| !held.contains(k.compiled.digest.as_str()))
            else {
                // Every one is some instance's: a rollout holds at most its stable digest, its
                // candidate and the pins it allows (bounded by the digests it remembers).
                break;
            };
            self.kept.remove(oldest);
        }
    }

    fn state(&self) -> SourceState {
        SourceState {
            current: self.current.clone(),
            last_error: self.last_error.clone(),
            poll_failing: self.polls_failing.as_ref().map(|(_, e)| e.clone()),
            since: self.since,
        }
    }
}

/// One version of one source: the source and the digest.
type Version = (SourceRef, String);

/// All loaded plugins of the host.
pub struct PluginRegistry {
    engine: Arc<PluginEngine>,
    cache: Option<Cache>,
    /// Why a host that should have a cache has none (it could not be opened).
    cache_unavailable: Option<String>,
    metrics: PluginMetrics,
    entries: RwLock<HashMap<SourceRef, Entry>>,
    changes: broadcast::Sender<SourceRef>,
    /// Every new version's turn, and the compile slot.
    compiles: CompileQueue,
    /// Earlier versions being loaded by [`Self::recall`], one lock each.
    recalls: std::sync::Mutex<HashMap<Version, Arc<tokio::sync::Mutex<()>>>>,
    /// Earlier versions [`Self::recall`] could not load, why, and when.
    recall_failed: std::sync::Mutex<HashMap<Version, (Instant, LoadError)>>,
    /// Digests instances are on, by source location and holder ([`Self::hold`]).
    held: RwLock<HashMap<(SourceRef, String), BTreeSet<String>>>,
}

impl PluginRegistry {
    /// An empty registry compiling with `engine` and caching in `cache`.
    pub fn new(
        engine: Arc<PluginEngine>,
        cache: Option<Cache>,
        metrics: PluginMetrics,
    ) -> Arc<Self> {
        Self::build(engine, cache, None, metrics)
    }

    /// An empty registry of a host whose cache could not be opened (`why`): it loads every
    /// plugin from its source, and each loaded plugin says it is not cached.
    pub fn without_cache(
        engine: Arc<PluginEngine>,
        why: String,
        metrics: PluginMetrics,
    ) -> Arc<Self> {
        Self::build(engine, None, Some(why), metrics)
    }

    fn build(
        engine: Arc<PluginEngine>,
        cache: Option<Cache>,
        cache_unavailable: Option<String>,
        metrics: PluginMetrics,
    ) -> Arc<Self> {
        let (changes, _) = broadcast::channel(256);
        Arc::new(Self {
            engine,
            cache,
            cache_unavailable,
            metrics,
            entries: RwLock::new(HashMap::new()),
            changes,
            compiles: CompileQueue::new(),
            recalls: std::sync::Mutex::new(HashMap::new()),
            recall_failed: std::sync::Mutex::new(HashMap::new()),
            held: RwLock::new(HashMap::new()),
        })
    }

    /// The on-disk cache, if the host has one.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// The shared engine.
    pub fn engine(&self) -> &Arc<PluginEngine> {
        &self.engine
    }

    /// Notifications of every change of state of a source (swap, load, failure).
    pub fn subscribe(&self) -> broadcast::Receiver<SourceRef> {
        self.changes.subscribe()
    }

    /// The state of one source.
    pub fn get(&self, source: &SourceRef) -> SourceState {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(source).map(Entry::state).unwrap_or_default()
    }

    /// The state of every source, sorted by reference.
    pub fn snapshot(&self) -> Vec<(SourceRef, SourceState)> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = entries
            .iter()
            .map(|(s, e)| (s.clone(), e.state()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The version of `source` with `digest`, if it is loaded: the one in service or one kept
    /// beside it.
    pub fn version(&self, source: &SourceRef, digest: &str) -> Option<Arc<LoadedPlugin>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(source)?;
        entry
            .current
            .iter()
            .chain(entry.kept.iter())
            .find(|l| l.compiled.digest.to_string() == digest)
            .cloned()
    }

    /// Loads the version of `source` with `digest` from the on-disk cache, beside the one in
    /// service, without putting it in service: a rollout's stable version after a restart (the
    /// source now offers the new one). `digest` must be one the caller knows `source` served
    /// (the cache holds every source's blobs). Concurrent recalls of one version load it once.
    pub async fn recall(
        self: &Arc<Self>,
        source: &SourceRef,
        digest: &str,
    ) -> Result<Arc<LoadedPlugin>, LoadError> {
        if let Some(loaded) = self.version(source, digest) {
            return Ok(loaded);
        }
        let unavailable = |message: String| LoadError::Fetch {
            source_ref: source.to_string(),
            message,
        };
        let parsed = Digest::parse(digest).map_err(unavailable)?;
        let key = (source.clone(), digest.to_string());
        let _turn = {
            let lock = {
                let mut recalls = self.recalls.lock().unwrap_or_else(|p| p.into_inner());
                Arc::clone(recalls.entry(key.clone()).or_default())
            };
            lock.lock_owned().await
        };
        if let Some(loaded) = self.version(source, digest) {
            return Ok(loaded);
        }
        // Those that waited for the turn of one that failed fail with it.
        if let Some(err) = self.recall_failure(source, digest) {
            return Err(err);
        }
        let this = Arc::clone(self);
        let source_name = source.to_string();
        let compiled = tokio::task::spawn_blocking(move || {
            let Some(cache) = this.cache.as_ref() else {
                return Err(LoadError::Fetch {
                    source_ref: source_name,
                    message: format!(
                        "{parsed} is no longer served by the source and the host has no plugin \
                         cache to load it from"
                    ),
                });
            };
            let Some(bytes) = cache.load_blob(&parsed) else {
                return Err(LoadError::Fetch {
                    source_ref: source_name,
                    message: format!(
                        "{parsed} is no longer served by the source, nor in the host's plugin cache"
                    ),
                });
            };
            CompiledPlugin::prepare(&this.engine, Some(cache), &source_name, &bytes, parsed)
        })
        .await
        .unwrap_or_else(|join| Err(unavailable(format!("loading task failed: {join}"))));
        self.recalls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        let compiled = match compiled {
            Ok(compiled) => compiled,
            Err(err) => {
                self.recall_refused(source, digest, err.clone());
                return Err(err);
            }
        };
        let loaded = self.loaded(source, compiled);
        {
            let held = self.held(source);
            let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
            let entry = entries.entry(source.clone()).or_default();
            entry.keep(Arc::clone(&loaded), &held);
        }
        tracing::info!(source = %source, digest, "an earlier plugin version loaded beside the one in service");
        let _ = self.changes.send(source.clone());
        Ok(loaded)
    }

    /// `compiled`, of `source`, ready to serve from now.
    fn loaded(&self, source: &SourceRef, compiled: CompiledPlugin) -> Arc<LoadedPlugin> {
        Arc::new(LoadedPlugin {
            source: source.clone(),
            compiled,
            loaded_at: Utc::now(),
            engine: Arc::clone(&self.engine),
            metrics: self.metrics.clone(),
        })
    }

    /// Records that the version of `source` with `digest` cannot be recalled, and why: it is not
    /// tried again for [`RECALL_RETRY`], and the instances waiting for it say why.
    pub fn recall_refused(&self, source: &SourceRef, digest: &str, err: LoadError) {
        let mut failed = self.recall_failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.retain(|_, (at, _)| at.elapsed() < RECALL_RETRY);
        // Bounded besides: a few versions per source are ever recalled.
        if failed.len() >= 256 {
            failed.clear();
        }
        failed.insert((source.clone(), digest.to_string()), (Instant::now(), err));
        drop(failed);
        let _ = self.changes.send(source.clone());
    }

    /// Says which digests of the source at `location` ([`SourceRef::location`]) instances are
    /// on: those are never dropped from the versions kept loaded ([`KEPT_VERSIONS`] counts the
    /// others), so that a tag that keeps moving does not unload what a rollout serves.
    /// Each holder (a binding) says what it holds; a source keeps the union.
    pub fn hold(&self, holder: &str, location: &SourceRef, digests: BTreeSet<String>) {
        let mut held = self.held.write().unwrap_or_else(|p| p.into_inner());
        let key = (location.clone(), holder.to_string());
        if digests.is_empty() {
            held.remove(&key);
        } else {
            held.insert(key, digests);
        }
    }

    fn held(&self, source: &SourceRef) -> BTreeSet<String> {
        let location = source.location();
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((l, _), _)| *l == location)
            .flat_map(|(_, digests)| digests.iter().cloned())
            .collect()
    }

    /// Why loading the version of `source` with `digest` by [`Self::recall`] failed, if it did
    /// within [`RECALL_RETRY`].
    pub fn recall_failure(&self, source: &SourceRef, digest: &str) -> Option<LoadError> {
        self.recall_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(source.clone(), digest.to_string()))
            .filter(|(at, _)| at.elapsed() < RECALL_RETRY)
            .map(|(_, err)| err.clone())
    }

    /// Drops everything known about `source` (no App uses it any more). Callers holding its
    /// plugin keep it until they let go.
    pub fn forget(&self, source: &SourceRef) {
        self.entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(source);
        self.compiles.forget(source);
    }

    /// Records that fetching `source` failed; the version in service stays. Apps are told only
    /// when the failure is new or different: while a registry stays down, every poll fails the
    /// same way, and reconciling every App on the source at each poll would bypass their
    /// backoff for nothing.
    pub fn record_failure(&self, source: &SourceRef, error: LoadError) {
        self.metrics.load("error", error.reason());
        let changed = {
            let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
            let entry = entries.entry(source.clone()).or_default();
            let same = entry
                .last_error
                .as_ref()
                .is_some_and(|e| e.to_string() == error.to_string());
            entry.last_error = Some(error.clone());
            !same
        };
        if changed {
            tracing::warn!(source = %source, reason = error.reason(), error = %error, "plugin source failed; keeping the version in service");
            let _ = self.changes.send(source.clone());
        } else {
            tracing::debug!(source = %source, reason = error.reason(), "plugin source still failing");
        }
    }

    /// Records that polling `source` failed (its registry unreachable or refusing). With no
    /// version in service the Apps are told at once. With one, they are told only once polls
    /// have failed for `grace`: a registry that is down for a minute, or down while the host
    /// restarts from its cache, is no news to the Apps it serves (it used to rewrite the
    /// status of every App on the source, and again when the registry came back), while a
    /// tag deleted or credentials revoked still reach them. Until then the failure shows in
    /// the log, the load metrics and `/debug/plugins`.
    pub fn record_poll_failure(&self, source: &SourceRef, error: LoadError, grace: Duration) {
        let (serving, failing_for, first) = {
            let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
            let entry = entries.entry(source.clone()).or_default();
            let first = entry.polls_failing.is_none();
            let since = entry
                .polls_failing
                .as_ref()
                .map_or_else(Instant::now, |(since, _)| *since);
            entry.polls_failing = Some((since, error.clone()));
            (entry.current.is_some(), since.elapsed(), first)
        };
        if !serving || failing_for >= grace {
            self.record_failure(source, error);
            return;
        }
        self.metrics.load("error", error.reason());
        if first {
            tracing::warn!(source = %source, reason = error.reason(), error = %error, grace_s = grace.as_secs(), "polling the plugin source failed; serving the version in service, and the Apps are told if this lasts");
        } else {
            tracing::debug!(source = %source, reason = error.reason(), "polling the plugin source still fails");
        }
    }

    /// Compiles and validates `fetched` beside the version in service and swaps it in, or
    /// records why it was refused; charged to the shared sources (see [`Self::offer_charged`]).
    pub async fn offer(self: &Arc<Self>, source: &SourceRef, fetched: Fetched) -> Offer {
        self.offer_charged(source, Charge::Shared, fetched).await
    }

    /// [`Self::offer`], its compile charged to `charge`. The version takes its place in the
    /// [`CompileQueue`] at once, before the returned future is first polled: a source that
    /// keeps changing waits for its interval, and a version still waiting when a newer one of
    /// the same source is offered is skipped ([`Offer::Superseded`]), so a watcher may offer
    /// every version it sees without waiting for the one before.
    pub fn offer_charged(
        self: &Arc<Self>,
        source: &SourceRef,
        charge: Charge,
        fetched: Fetched,
    ) -> impl Future<Output = Offer> + Send + 'static {
        let ticket = self.compiles.submit(source, charge);
        let (this, source) = (Arc::clone(self), source.clone());
        async move { this.offer_in_turn(&source, ticket, fetched).await }
    }

    /// What becomes of `digest` without preparing it: in service already, or remembered as
    /// bad.
    fn settled(&self, source: &SourceRef, digest: &Digest) -> Option<Offer> {
        let known_bad = {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            let entry = entries.get(source);
            if let Some(current) = entry.and_then(|e| e.current.clone())
                && current.compiled.digest == *digest
            {
                drop(entries);
                self.clear_error(source);
                return Some(Offer::Unchanged(current));
            }
            if let Some(kept) = entry.and_then(|e| {
                e.kept
                    .iter()
                    .find(|k| k.compiled.digest == *digest)
                    .cloned()
            }) {
                drop(entries);
                return Some(self.reinstate(source, kept));
            }
            entry.and_then(|e| {
                e.failed
                    .iter()
                    .find(|(d, _)| d == digest)
                    .map(|(_, err)| err.clone())
            })
        }?;
        self.set_error(source, known_bad.clone());
        Some(Offer::Rejected(known_bad))
    }

    /// Puts a version kept beside the one in service back into service, without a compile
    /// (a tag moved back, or a rollout's stable version recalled before the source answered).
    fn reinstate(&self, source: &SourceRef, kept: Arc<LoadedPlugin>) -> Offer {
        let held = self.held(source);
        let previous = {
            let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
            let entry = entries.entry(source.clone()).or_default();
            entry.last_error = None;
            entry
                .kept
                .retain(|k| k.compiled.digest != kept.compiled.digest);
            let previous = entry.current.replace(Arc::clone(&kept));
            entry.since = Some(Instant::now());
            if let Some(previous) = &previous {
                entry.keep(Arc::clone(previous), &held);
            }
            previous
        };
        let _ = self.changes.send(source.clone());
        self.metrics.load("ok", "Loaded");
        match previous {
            Some(previous) => {
                self.metrics.swap();
                tracing::info!(source = %source, from = %previous.compiled.digest, to = %kept.compiled.digest, "plugin swapped to a version kept loaded");
                Offer::Swapped {
                    from: previous.compiled.digest.clone(),
                    to: kept,
                }
            }
            None => {
                tracing::info!(source = %source, digest = %kept.compiled.digest, "plugin loaded from a version kept loaded");
                Offer::Loaded(kept)
            }
        }
    }

    async fn offer_in_turn(
        self: &Arc<Self>,
        source: &SourceRef,
        ticket: Ticket,
        fetched: Fetched,
    ) -> Offer {
        // Dropping the ticket withdraws the version (and so skips any older one waiting).
        if let Some(settled) = self.settled(source, &fetched.digest) {
            return settled;
        }
        let admitted = match ticket.admitted().await {
            Ok(admitted) => admitted,
            Err(Superseded) => {
                self.metrics.load("skipped", "Superseded");
                tracing::debug!(source = %source, digest = %fetched.digest, "plugin version skipped: a newer one arrived before its turn");
                return Offer::Superseded;
            }
        };
        if !admitted.waited().is_zero() {
            tracing::info!(source = %source, digest = %fetched.digest, waited_ms = admitted.waited().as_millis() as u64, charge = %admitted.charge(), "plugin source keeps changing: its newest version waited for its turn");
        }
        // While it waited, the version may have gone into service or been refused.
        if let Some(settled) = self.settled(source, &fetched.digest) {
            return settled;
        }

        // The turn is held until the version is in service or refused.
        let admitted = Arc::new(admitted);
        let turn = Arc::clone(&admitted);
        let runtime = tokio::runtime::Handle::current();
        let this = Arc::clone(self);
        let source_name = source.to_string();
        let digest = fetched.digest.clone();
        let compiled = tokio::task::spawn_blocking(move || {
            // A blocking thread, not a task: it may wait on the runtime for its slot.
            let slot = || runtime.block_on(turn.compile_slot());
            let mut result = CompiledPlugin::prepare_gated(
                &this.engine,
                this.cache.as_ref(),
                &source_name,
                &fetched.bytes,
                fetched.digest.clone(),
                slot,
            );
            if let Ok(plugin) = &mut result {
                let stored = match &this.cache {
                    Some(cache) => cache
                        .store_blob(&fetched.digest, &fetched.bytes)
                        .map_err(|err| err.to_string()),
                    None => this
                        .cache_unavailable
                        .as_ref()
                        .map_or(Ok(()), |why| Err(why.clone())),
                };
                if let Err(why) = stored
                    && plugin.uncached.is_none()
                {
                    plugin.uncached = Some(why);
                }
            }
            result
        })
        .await
        .unwrap_or_else(|join| {
            Err(LoadError::Compile {
                source_ref: source.to_string(),
                message: format!("compile task failed: {join}"),
            })
        });
        let offer = self.swap_in(source, digest, compiled);
        drop(admitted);
        offer
    }

    /// Puts a prepared version into service, or records why it failed.
    fn swap_in(
        &self,
        source: &SourceRef,
        digest: Digest,
        compiled: Result<CompiledPlugin, LoadError>,
    ) -> Offer {
        let compiled = match compiled {
            Ok(compiled) => compiled,
            Err(error) => {
                self.metrics.load("error", error.reason());
                tracing::warn!(source = %source, %digest, reason = error.reason(), error = %error, "plugin version rejected; keeping the version in service");
                self.remember_failure(source, digest, error.clone());
                let _ = self.changes.send(source.clone());
                return Offer::Rejected(error);
            }
        };
        self.metrics
            .compiled(compiled.compile_time.as_secs_f64(), compiled.from_cache);
        self.metrics.load("ok", "Loaded");
        let loaded = self.loaded(source, compiled);
        let held = self.held(source);
        let previous = {
            let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
            let entry = entries.entry(source.clone()).or_default();
            entry.last_error = None;
            let previous = entry.current.replace(Arc::clone(&loaded));
            entry.since = Some(Instant::now());
            entry
                .kept
                .retain(|k| k.compiled.digest != loaded.compiled.digest);
            if let Some(previous) = &previous {
                entry.keep(Arc::clone(previous), &held);
            }
            previous
        };
        let _ = self.changes.send(source.clone());
        let c = &loaded.compiled;
        match previous {
            Some(previous) => {
                self.metrics.swap();
                tracing::info!(source = %source, from = %previous.compiled.digest, to = %c.digest, compile_ms = c.compile_time.as_millis() as u64, cached = c.from_cache, "plugin swapped");
                Offer::Swapped {
                    from: previous.compiled.digest.clone(),
                    to: loaded,
                }
            }
            None => {
                tracing::info!(source = %source, digest = %c.digest, plugin = %c.metadata.name, capabilities = ?c.capabilities, compile_ms = c.compile_time.as_millis() as u64, cached = c.from_cache, "plugin loaded");
                Offer::Loaded(loaded)
            }
        }
    }

    /// Clears a fetch failure once the source answers again (a compile rejection stays until a
    /// good version loads).
    pub fn clear_fetch_error(&self, source: &SourceRef) {
        if let Some(entry) = self
            .entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(source)
        {
            entry.polls_failing = None;
        }
        let is_fetch = matches!(self.get(source).last_error, Some(LoadError::Fetch { .. }));
        if is_fetch {
            self.clear_error(source);
        }
    }

    fn clear_error(&self, source: &SourceRef) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get_mut(source)
            && entry.last_error.take().is_some()
        {
            drop(entries);
            let _ = self.changes.send(source.clone());
        }
    }

    fn set_error(&self, source: &SourceRef, error: LoadError) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.entry(source.clone()).or_default().last_error = Some(error);
    }

    fn remember_failure(&self, source: &SourceRef, digest: Digest, error: LoadError) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let entry = entries.entry(source.clone()).or_default();
        entry.last_error = Some(error.clone());
        entry.failed.retain(|(d, _)| *d != digest);
        entry.failed.push((digest, error));
        if entry.failed.len() > REMEMBERED_FAILURES {
            entry.failed.remove(0);
        }
    }
}
