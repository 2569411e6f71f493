//! Keeps every source in use fresh: polls OCI tags, watches ConfigMaps and files, and offers
//! each new version to the [`PluginRegistry`]. At start-up an OCI source whose registry is
//! unreachable is served from the on-disk cache.
//!
//! Each source's compiles and pulls are charged to the namespaces whose Apps ask for it
//! ([`Askers`]): its one namespace, or the shared sources' bucket (see [`super::charge`]).

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use notify::Watcher as _;
use tokio::{sync::mpsc, task::JoinHandle};

use super::{
    LoadError,
    charge::Askers,
    registry::{Offer, PluginRegistry},
    source::{
        Fetched, OciRef, SourceRef, config_map, fetch_error, file,
        oci::{OciSource, slots::charged},
    },
};

/// The cache's record that the OCI source of cache key `cache_key` served `digest`.
pub fn served_key(cache_key: &str, digest: &super::Digest) -> String {
    format!("{cache_key}@{digest}")
}

/// Starts and stops one driver task per source in use.
pub struct SourceWatcher {
    registry: Arc<PluginRegistry>,
    oci: Arc<OciSource>,
    client: Option<Client>,
    poll_interval: Duration,
    file_root: Option<PathBuf>,
    tasks: Mutex<HashMap<SourceRef, Driver>>,
    /// Who says whether an App still references a source (one per controller).
    users: Mutex<Vec<Users>>,
}

/// Whether some App still references a source.
pub type Users = Arc<dyn Fn(&SourceRef) -> bool + Send + Sync>;

/// One source's driver task, when an App last asked for the source and the namespaces that
/// asked.
struct Driver {
    task: JoinHandle<()>,
    last_used: Instant,
    askers: Arc<Askers>,
}

/// Every App is reconciled (and so asks for its source) at least every five minutes; a
/// source nobody asked for in three times that is no longer in use.
const IDLE_AFTER: Duration = Duration::from_secs(15 * 60);
/// How often idle sources are looked for.
const IDLE_SWEEP: Duration = Duration::from_secs(60);

impl SourceWatcher {
    /// A watcher offering versions to `registry`; `client` is needed for ConfigMap sources, and
    /// file sources are read only below `file_root`.
    pub fn new(
        registry: Arc<PluginRegistry>,
        oci: Arc<OciSource>,
        client: Option<Client>,
        poll_interval: Duration,
        file_root: Option<PathBuf>,
    ) -> Arc<Self> {
        let this = Arc::new(Self {
            registry,
            oci,
            client,
            poll_interval,
            file_root,
            tasks: Mutex::new(HashMap::new()),
            users: Mutex::new(Vec::new()),
        });
        // Without this, every reference ever written in an App (typos, rotated tags) would
        // keep a poller and a compiled plugin alive forever.
        let weak = Arc::downgrade(&this);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE_SWEEP).await;
                let Some(watcher) = weak.upgrade() else {
                    return;
                };
                watcher.forget_idle(IDLE_AFTER);
            }
        });
        this
    }

    /// The OCI client the sources are fetched with.
    pub fn oci(&self) -> &Arc<OciSource> {
        &self.oci
    }

    /// Adds a check of whether an App still references a source: a source any check claims is
    /// never unloaded, however long since an App last asked for it.
    pub fn add_users(&self, users: Users) {
        self.users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(users);
    }

    /// Stops following, and unloads, sources no App asked for within `idle` and none still
    /// references: keep-last-good holds for as long as an App may need the version it keeps.
    pub fn forget_idle(&self, idle: Duration) {
        let users: Vec<Users> = self.users.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let stale: Vec<SourceRef> = tasks
            .iter()
            .filter(|(_, d)| d.last_used.elapsed() > idle)
            .map(|(s, _)| s.clone())
            .filter(|s| !users.iter().any(|in_use| in_use(s)))
            .collect();
        for source in stale {
            if let Some(driver) = tasks.remove(&source) {
                driver.task.abort();
            }
            self.registry.forget(&source);
            tracing::info!(source = %source, "no App uses this plugin source any more; unloaded it");
        }
    }

    /// Makes sure `source` is being fetched and followed for an App of `namespace`; cheap when
    /// it already is.
    pub fn ensure(&self, source: &SourceRef, namespace: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(driver) = tasks.get_mut(source)
            && !driver.task.is_finished()
        {
            driver.last_used = Instant::now();
            driver.askers.asked(namespace);
            return;
        }
        let askers = Arc::new(Askers::new(IDLE_AFTER));
        askers.asked(namespace);
        let registry = Arc::clone(&self.registry);
        let task = match source.clone() {
            SourceRef::Oci(oci) => tokio::spawn(drive_oci(
                registry,
                Arc::clone(&self.oci),
                source.clone(),
                oci,
                self.poll_interval,
                Arc::clone(&askers),
            )),
            SourceRef::ConfigMap {
                namespace,
                name,
                key,
            } => match &self.client {
                Some(client) => tokio::spawn(drive_config_map(
                    registry,
                    client.clone(),
                    source.clone(),
                    namespace,
                    name,
                    key,
                    Arc::clone(&askers),
                )),
                None => {
                    registry.record_failure(
                        source,
                        fetch_error(source, "ConfigMap sources need a Kubernetes client"),
                    );
                    return;
                }
            },
            SourceRef::File(path) => match self.file_root.clone() {
                Some(root) => tokio::spawn(drive_file(
                    registry,
                    source.clone(),
                    root,
                    path,
                    Arc::clone(&askers),
                )),
                None => {
                    registry.record_failure(
                        source,
                        fetch_error(
                            source,
                            "file sources are disabled; start the host with --file-root DIR",
                        ),
                    );
                    return;
                }
            },
        };
        tasks.insert(
            source.clone(),
            Driver {
                task,
                last_used: Instant::now(),
                askers,
            },
        );
    }
}

/// Offers `fetched` charged to the source's askers; whether it is (or already was) in service.
async fn offer(
    registry: &Arc<PluginRegistry>,
    source: &SourceRef,
    askers: &Askers,
    fetched: Fetched,
) -> bool {
    let offer = registry.offer_charged(source, askers.charge(), fetched);
    matches!(
        offer.await,
        Offer::Unchanged(_) | Offer::Loaded(_) | Offer::Swapped { .. }
    )
}

/// Loads the version this very source (reference, access, keys and the credentials it holds
/// now) last resolved to, for when the registry cannot be reached or need not be asked; returns
/// whether it did. A digest some other source fetched is never served: it may have needed
/// credentials or a signature this one lacks.
async fn offer_from_cache(
    registry: &Arc<PluginRegistry>,
    client: &OciSource,
    source: &SourceRef,
    oci: &OciRef,
    askers: &Askers,
) -> bool {
    let Some(cache) = registry.cache() else {
        return false;
    };
    // The credentials the source has now are part of the key: without them (a pull secret
    // deleted, unreadable or changed) nothing cached is served.
    let Ok(key) = client.cache_key(source, oci).await else {
        return false;
    };
    let Some(digest) = cache.recall_ref(&key) else {
        return false;
    };
    let Some(bytes) = cache.load_blob(&digest) else {
        return false;
    };
    tracing::info!(source = %source, %digest, "serving the plugin from the on-disk cache");
    // The version this source last resolved to is one it served (a cache written before the
    // served records were kept has the one and not the other).
    cache.remember_ref(&served_key(&key, &digest), &digest);
    offer(registry, source, askers, Fetched { bytes, digest }).await
}

/// How long polls of a source serving a version may fail before its Apps are told (at least
/// three polls): see [`PluginRegistry::record_poll_failure`].
const POLL_FAILURE_GRACE: Duration = Duration::from_secs(300);

/// The longest a source whose versions keep being refused waits between looks.
const REFUSED_BACKOFF: Duration = Duration::from_secs(600);

async fn drive_oci(
    registry: Arc<PluginRegistry>,
    client: Arc<OciSource>,
    source: SourceRef,
    oci: OciRef,
    poll: Duration,
    askers: Arc<Askers>,
) {
    let pinned = OciSource::is_pinned(&oci.reference);
    // A digest reference is immutable: if this source resolved it before, the registry need
    // not be asked again. A finished driver is restarted by the next `ensure`, so a pinned
    // source parks instead.
    if pinned && offer_from_cache(&registry, &client, &source, &oci, &askers).await {
        return std::future::pending().await;
    }
    let mut last_manifest: Option<String> = None;
    // A registry that serves a new bad version on every poll would keep the one compile slot
    // busy; each version refused doubles the wait before the next look, up to REFUSED_BACKOFF.
    let mut wait = poll;
    loop {
        // The registry's slots this source may take are its askers' (see `oci::slots`).
        let changed = match charged(askers.charge(), client.resolve(&source, &oci)).await {
            Ok(resolved) => {
                let changed = last_manifest.as_ref() != Some(&resolved.manifest);
                // A new manifest is not an answer yet: its pull may fail as the last one did,
                // and clearing here would restart the failure's grace at every poll.
                if !changed {
                    registry.clear_fetch_error(&source);
                }
                changed.then_some(resolved)
            }
            Err(error) => {
                if registry.get(&source).current.is_none() {
                    offer_from_cache(&registry, &client, &source, &oci, &askers).await;
                }
                registry.record_poll_failure(&source, error, POLL_FAILURE_GRACE.max(poll * 3));
                None
            }
        };
        if changed.is_some() {
            match charged(askers.charge(), client.fetch(&source, &oci)).await {
                Ok((resolved, fetched)) => {
                    registry.clear_fetch_error(&source);
                    let digest = fetched.digest.clone();
                    if offer(&registry, &source, &askers, fetched).await {
                        wait = poll;
                        if let Some(cache) = registry.cache() {
                            cache.remember_ref(&resolved.cache_key, &digest);
                            // What a rollout may load again from the cache after a restart:
                            // only a digest this very source (its credentials and keys)
                            // served, verified as it was then.
                            cache.remember_ref(&served_key(&resolved.cache_key, &digest), &digest);
                        }
                    } else {
                        wait = (wait * 2).min(REFUSED_BACKOFF.max(poll));
                    }
                    last_manifest = Some(resolved.manifest);
                }
                // Not remembered as seen: the signature may be added later, and the next poll
                // reads it again. That costs two small manifest reads, as a poll does (the
                // component is read only once a signature holds), so the wait is not raised.
                // A registry failing mid-pull is a failing poll like any other; a refusal (a
                // signature, a digest) is news at once.
                Err(error @ LoadError::Fetch { .. }) => {
                    registry.record_poll_failure(&source, error, POLL_FAILURE_GRACE.max(poll * 3));
                }
                Err(error) => registry.record_failure(&source, error),
            }
        }
        if pinned && registry.get(&source).current.is_some() {
            return std::future::pending().await;
        }
        tokio::time::sleep(wait).await;
    }
}

async fn drive_config_map(
    registry: Arc<PluginRegistry>,
    client: Client,
    source: SourceRef,
    namespace: String,
    name: String,
    key: String,
    askers: Arc<Askers>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config)
        .backoff(crate::controller::watch_backoff::WatchBackoff::default())
        .boxed();
    let mut seen_any = false;
    // Offers in their turn or waiting for it: at most the one being prepared and the newest,
    // as each new one skips the one waiting before it. Dropped (and so cancelled) with the
    // driver.
    let mut offers = tokio::task::JoinSet::new();
    while let Some(event) = stream.next().await {
        while offers.try_join_next().is_some() {}
        match event {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                seen_any = true;
                match config_map::extract(&source, &cm, &key) {
                    // Not awaited: the watch reads on, so that a ConfigMap rewritten while a
                    // version waits for its turn replaces that version instead of queueing
                    // behind it.
                    Ok(fetched) => {
                        offers.spawn(registry.offer_charged(&source, askers.charge(), fetched));
                    }
                    Err(error) => registry.record_failure(&source, error),
                }
            }
            Ok(watcher::Event::Delete(_)) => {
                registry.record_failure(
                    &source,
                    fetch_error(&source, format!("ConfigMap {namespace}/{name} was deleted")),
                );
            }
            Ok(watcher::Event::InitDone) if !seen_any => {
                registry.record_failure(
                    &source,
                    fetch_error(
                        &source,
                        format!("ConfigMap {namespace}/{name} does not exist"),
                    ),
                );
            }
            Ok(_) => {}
            Err(err) => registry.record_failure(
                &source,
                fetch_error(
                    &source,
                    format!("watching ConfigMap {namespace}/{name}: {err}"),
                ),
            ),
        }
    }
}

/// Editors and `cargo build` replace files in several steps; wait this long after the last event.
const FILE_SETTLE: Duration = Duration::from_millis(100);

async fn drive_file(
    registry: Arc<PluginRegistry>,
    source: SourceRef,
    root: PathBuf,
    path: PathBuf,
    askers: Arc<Askers>,
) {
    let path = root.join(&path);
    let (tx, mut rx) = mpsc::channel::<()>(16);
    let target = path.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| e.paths.iter().any(|p| p.file_name() == target.file_name())) {
            let _ = tx.try_send(());
        }
    });
    // Watch the directory: the file itself is often replaced by a rename.
    let dir = path
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let _watcher = match watcher {
        Ok(mut w) => match w.watch(&dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(err) => {
                registry.record_failure(
                    &source,
                    fetch_error(&source, format!("watching {}: {err}", dir.display())),
                );
                None
            }
        },
        Err(err) => {
            registry.record_failure(
                &source,
                fetch_error(&source, format!("starting a file watcher: {err}")),
            );
            None
        }
    };
    loop {
        match file::read(&source, &root, &path).await {
            Ok(fetched) => {
                offer(&registry, &source, &askers, fetched).await;
            }
            Err(error) => registry.record_failure(&source, error),
        }
        if rx.recv().await.is_none() {
            return;
        }
        tokio::time::sleep(FILE_SETTLE).await;
        while rx.try_recv().is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{engine::PluginEngine, metrics::PluginMetrics};

    fn watcher() -> Arc<SourceWatcher> {
        let engine = PluginEngine::new().expect("an engine");
        let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
        let oci = OciSource::new(None, Vec::new()).expect("no file to read");
        SourceWatcher::new(registry, Arc::new(oci), None, Duration::from_secs(60), None)
    }

    fn followed(watcher: &SourceWatcher, source: &SourceRef) -> bool {
        let tasks = watcher.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.contains_key(source)
    }

    #[tokio::test]
    async fn a_source_an_app_still_references_is_never_unloaded() {
        let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/x:1"));
        let other = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/y:1"));

        let referenced = watcher();
        let wanted = source.clone();
        referenced.add_users(Arc::new(move |s: &SourceRef| *s == wanted));
        referenced.ensure(&source, "team-a");
        referenced.ensure(&other, "team-a");
        referenced.forget_idle(Duration::ZERO);
        assert!(
            followed(&referenced, &source),
            "a referenced source was unloaded"
        );
        assert!(
            !followed(&referenced, &other),
            "an unreferenced idle source stayed"
        );
    }
}
