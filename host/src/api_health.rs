//! How the host's link to the API server is doing, for `/readyz` and `/healthz`.
//!
//! Three signals, each a [`Link`] that is either fine or failing since some instant:
//! - every watch, seen where it really happens: in the kube client's HTTP stack
//!   ([`ApiHealthLayer`]). A watch request that gets a 2xx answer is connected; one that fails,
//!   or the list that re-syncs it failing, marks that resource failing until a later watch
//!   request for it is answered. kube-runtime's watcher reports a re-established watch with no
//!   event at all, so the event stream cannot tell "recovered and idle" from "still broken";
//!   the HTTP answer can.
//! - a probe of the API server's own `/readyz` every [`PROBE_PERIOD`], which turns not-ready when
//!   the API server cannot serve (etcd down) even while idle watches stay open;
//! - the reconciles in flight, so that one stuck for longer than the liveness threshold is seen.
//!
//! `/readyz` fails once any link has been failing for longer than `unready_after`; `/healthz`
//! fails once any link has been failing for longer than `unhealthy_after` or a reconcile has
//! run that long: a host that cannot recover by itself is restarted by the kubelet. (A
//! controller loop that ends on its own makes `wasmop run` exit with an error.)
//!
//! The same layer counts re-lists (`wasmop_watch_relists_total`): a list of a watch that was
//! connected before is the watcher re-syncing it, so a burst after an API server restart shows
//! a relist storm.

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use kube::Client;
use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// How often the API server's `/readyz` is probed.
pub const PROBE_PERIOD: Duration = Duration::from_secs(2);
/// Most distinct watches whose re-syncs are counted.
const MAX_WATCH_KEYS: usize = 4096;
/// How long one probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The state of one link to the API server.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// When the current run of failures began; `None` while the link is fine.
    pub failing_since: Option<Instant>,
    /// The last failure, for the probe's answer and the log.
    pub last_error: Option<String>,
}

impl Link {
    fn fail(&mut self, now: Instant, error: String) {
        self.failing_since.get_or_insert(now);
        self.last_error = Some(error);
    }

    fn recover(&mut self) {
        self.failing_since = None;
    }

    fn failing_for(&self, now: Instant) -> Option<Duration> {
        self.failing_since
            .map(|since| now.saturating_duration_since(since))
    }
}

/// Shared health state; cheap to clone.
#[derive(Clone)]
pub struct ApiHealth {
    inner: Arc<Inner>,
}

struct Inner {
    unready_after: Duration,
    unhealthy_after: Duration,
    /// Watched resources by request path (`/apis/apps/v1/namespaces/ns/deployments`).
    watches: Mutex<BTreeMap<String, Link>>,
    probe: Mutex<Link>,
    reconciles: Mutex<HashMap<u64, (String, Instant)>>,
    next_reconcile: AtomicU64,
    /// When each App is next due for a reconcile (its requeue), until one starts.
    due: Mutex<HashMap<String, Instant>>,
    /// When the last reconcile started.
    last_started: Mutex<Option<Instant>>,
    /// Successful lists of an already watched resource, by resource: re-syncs.
    relists: Family<Vec<(&'static str, String)>, Counter>,
    /// Every watch that has been connected: its path and selectors ([`watch_key`]).
    connected: Mutex<std::collections::BTreeSet<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The state is plain data that every writer leaves consistent; a panic elsewhere must not
    // take the probes down with it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ApiHealth {
    /// Health state that reports not-ready after a link has failed for `unready_after`, and
    /// unhealthy after `unhealthy_after`.
    pub fn new(unready_after: Duration, unhealthy_after: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                unready_after,
                unhealthy_after,
                watches: Mutex::default(),
                probe: Mutex::default(),
                reconciles: Mutex::default(),
                next_reconcile: AtomicU64::new(0),
                due: Mutex::default(),
                last_started: Mutex::default(),
                relists: Family::default(),
                connected: Mutex::default(),
            }),
        }
    }

    /// Counts one re-list of `resource`, so that a test sees the family exported.
    #[cfg(test)]
    pub(crate) fn count_relist_for_tests(&self, resource: &str) {
        let key = watch_key(&format!("/api/v1/{resource}"), None);
        self.connected(key.clone(), &format!("/api/v1/{resource}"));
        self.listed(key, &format!("/api/v1/{resource}"));
    }

    /// A watch with `key` ([`watch_key`]) is connected.
    fn connected(&self, key: String, path: &str) {
        // Exported at 0 from the first watch on: "no re-list" is then an answer, not a gap.
        self.relists_of(path);
        let mut connected = lock(&self.inner.connected);
        // Plugin ConfigMap sources add one key each, and App authors choose them: past the
        // bound, new watches' re-syncs go uncounted rather than memory growing with churn.
        if connected.len() < MAX_WATCH_KEYS {
            connected.insert(key);
        }
    }

    /// Registers the watch metrics in `registry` (prefix it with `wasmop`).
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "watch_relists",
            "Successful lists of a resource the host already watches, by resource: the watcher \
             re-syncing after its watch expired (410 Gone) or its cache was lost. One per watch \
             after an API server restart is expected; more would be a relist storm",
            self.inner.relists.clone(),
        );
    }

    /// A list with `key` ([`watch_key`]) at `path` succeeded: when a watch with the same key
    /// has been connected before, the watcher re-synced it. (A first list, such as that of a
    /// new plugin ConfigMap's watch on a path other watches share, is not a re-sync.)
    fn listed(&self, key: String, path: &str) {
        if !lock(&self.inner.connected).contains(&key) {
            return;
        }
        tracing::debug!(watch = path, "watched resource re-listed");
        self.relists_of(path).inc();
    }

    /// The re-list counter of the resource at `path`: its plural, the path's last segment, so
    /// the label stays bounded by the kinds watched.
    fn relists_of(&self, path: &str) -> Counter {
        let resource = path.rsplit('/').next().unwrap_or_default().to_string();
        self.inner
            .relists
            .get_or_create(&vec![("resource", resource)])
            .clone()
    }

    /// A watch request for `path` was answered with a success status: it is connected.
    pub fn watch_connected(&self, path: &str) {
        let mut watches = lock(&self.inner.watches);
        let link = watches.entry(path.to_string()).or_default();
        if let Some(since) = link.failing_since {
            tracing::info!(watch = path, after = ?since.elapsed(), "watch re-established");
        }
        link.recover();
    }

    /// A watch (or the list that re-syncs it) for `path` failed with `error`.
    pub fn watch_failed(&self, path: &str, error: String) {
        let mut watches = lock(&self.inner.watches);
        let link = watches.entry(path.to_string()).or_default();
        if link.failing_since.is_none() {
            tracing::warn!(watch = path, %error, "watch failed");
        }
        link.fail(Instant::now(), error);
    }

    fn is_watched(&self, path: &str) -> bool {
        lock(&self.inner.watches).contains_key(path)
    }

    /// Records the outcome of one probe of the API server.
    pub fn probed(&self, result: Result<(), String>) {
        let mut probe = lock(&self.inner.probe);
        match result {
            Ok(()) => {
                if let Some(since) = probe.failing_since {
                    tracing::info!(after = ?since.elapsed(), "API server ready again");
                }
                probe.recover();
            }
            Err(error) => {
                if probe.failing_since.is_none() {
                    tracing::warn!(%error, "API server not ready");
                }
                probe.fail(Instant::now(), error);
            }
        }
    }

    /// `app` asked to be reconciled again at `at` (its requeue).
    pub fn reconcile_due(&self, app: String, at: Instant) {
        lock(&self.inner.due).insert(app, at);
    }

    /// Keeps the due times of the Apps `exists` still knows (the controller's App cache).
    pub fn retain_due(&self, exists: impl Fn(&str) -> bool) {
        lock(&self.inner.due).retain(|app, _| exists(app));
    }

    /// Marks a reconcile of `app` as running until the returned guard drops.
    pub fn reconcile_started(&self, app: String) -> ReconcileGuard {
        lock(&self.inner.due).remove(&app);
        *lock(&self.inner.last_started) = Some(Instant::now());
        let id = self.inner.next_reconcile.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.reconciles).insert(id, (app, Instant::now()));
        ReconcileGuard {
            health: self.clone(),
            id,
        }
    }

    /// Every link failing for longer than `threshold`, described.
    fn failing_longer_than(&self, threshold: Duration, now: Instant) -> Vec<String> {
        let mut failing = Vec::new();
        let describe = |what: String, link: &Link, failing: &mut Vec<String>| {
            if let Some(for_) = link.failing_for(now).filter(|d| *d > threshold) {
                failing.push(format!(
                    "{what} failing for {}s: {}",
                    for_.as_secs(),
                    link.last_error.as_deref().unwrap_or("unknown error")
                ));
            }
        };
        describe(
            "API server /readyz".into(),
            &lock(&self.inner.probe),
            &mut failing,
        );
        for (path, link) in lock(&self.inner.watches).iter() {
            describe(format!("watch {path}"), link, &mut failing);
        }
        failing
    }

    /// `Ok` while every link is fine or has failed for at most `unready_after`; otherwise what
    /// fails.
    pub fn readiness(&self, now: Instant) -> Result<(), String> {
        let failing = self.failing_longer_than(self.inner.unready_after, now);
        if failing.is_empty() {
            Ok(())
        } else {
            Err(failing.join("\n"))
        }
    }

    /// `Ok` unless a link has failed for longer than `unhealthy_after`, a reconcile has run
    /// that long, or an App has been due that long without a reconcile starting (the
    /// controller's loop stalled: its queue is not being worked).
    pub fn liveness(&self, now: Instant) -> Result<(), String> {
        let mut problems = self.failing_longer_than(self.inner.unhealthy_after, now);
        for (app, started) in lock(&self.inner.reconciles).values() {
            let running = now.saturating_duration_since(*started);
            if running > self.inner.unhealthy_after {
                problems.push(format!(
                    "reconcile of App {app} running for {}s",
                    running.as_secs()
                ));
            }
        }
        // Stalled, not merely busy: Apps are overdue *and* no reconcile at all has started for
        // as long (a loaded host starts reconciles, late ones included).
        let idle = lock(&self.inner.last_started)
            .is_none_or(|t| now.saturating_duration_since(t) > self.inner.unhealthy_after);
        let mut overdue: Vec<(Duration, String)> = lock(&self.inner.due)
            .iter()
            .map(|(app, due)| (now.saturating_duration_since(*due), app.clone()))
            .filter(|(late, _)| idle && *late > self.inner.unhealthy_after)
            .collect();
        overdue.sort_by(|a, b| b.cmp(a));
        if let Some((late, app)) = overdue.first() {
            problems.push(format!(
                "the controller has stalled: App {app} was due {}s ago and no reconcile has \
                 started ({} Apps overdue)",
                late.as_secs(),
                overdue.len()
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Probes the API server's `/readyz` every [`PROBE_PERIOD`] until the task is dropped.
    pub async fn probe_forever(self, client: Client) {
        let mut tick = tokio::time::interval(PROBE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let request = match http::Request::get("/readyz").body(Vec::new()) {
                Ok(request) => request,
                Err(err) => {
                    self.probed(Err(format!("building the probe request: {err}")));
                    continue;
                }
            };
            let result =
                match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(err)) => Err(short(&err.to_string())),
                    Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
                };
            self.probed(result);
        }
    }
}

/// Ends a reconcile's entry in [`ApiHealth`] when dropped (also when the reconcile panics or
/// is cancelled).
pub struct ReconcileGuard {
    health: ApiHealth,
    id: u64,
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        lock(&self.health.inner.reconciles).remove(&self.id);
    }
}

/// At most one line of 200 characters: what reaches the probe answer is for people.
fn short(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

/// A tower layer for the kube client that reports watch requests to [`ApiHealth`].
#[derive(Clone)]
pub struct ApiHealthLayer(pub ApiHealth);

impl<S> tower::Layer<S> for ApiHealthLayer {
    type Service = ApiHealthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiHealthService {
            inner,
            health: self.0.clone(),
        }
    }
}

/// The service [`ApiHealthLayer`] makes.
#[derive(Clone)]
pub struct ApiHealthService<S> {
    inner: S,
    health: ApiHealth,
}

/// What tells one watch from another on the same path: the path and its selectors. A watch's
/// own request and the list that re-syncs it share it; resourceVersion, paging and timeouts
/// do not count.
fn watch_key(path: &str, query: Option<&str>) -> String {
    let mut selectors: Vec<&str> = query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| pair.starts_with("labelSelector=") || pair.starts_with("fieldSelector="))
        .collect();
    selectors.sort_unstable();
    format!("{path}?{}", selectors.join("&"))
}

/// Whether a list request asks for a later page (`continue=`): part of a list already counted.
fn is_next_page(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|pair| pair.starts_with("continue=")))
}

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for ApiHealthService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Error: std::fmt::Display,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let query = request.uri().query();
        let watch = request.method() == http::Method::GET && is_watch(query);
        let first_page = !is_next_page(query);
        let key = watch_key(request.uri().path(), query);
        let path = request.uri().path().to_string();
        // A list of a watched resource is the watcher re-syncing it: its failure counts too.
        let tracked =
            watch || (request.method() == http::Method::GET && self.health.is_watched(&path));
        let health = self.health.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            if tracked {
                match &result {
                    Ok(answer) if answer.status().is_success() => {
                        if watch {
                            health.watch_connected(&path);
                            health.connected(key, &path);
                        } else if first_page {
                            health.listed(key, &path);
                        }
                    }
                    Ok(answer) => health.watch_failed(&path, format!("HTTP {}", answer.status())),
                    Err(err) => health.watch_failed(&path, short(&err.to_string())),
                }
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/api/v1/namespaces/ns/configmaps";

    #[test]
    fn an_app_overdue_past_the_threshold_means_a_stalled_controller() {
        let health = ApiHealth::new(Duration::from_secs(10), Duration::from_secs(300));
        // Another App's reconcile started just now: busy, not stalled.
        drop(health.reconcile_started("ns/other".into()));
        let t0 = Instant::now();
        health.reconcile_due("ns/a".into(), t0 + Duration::from_secs(5));
        assert!(
            health.liveness(t0 + Duration::from_secs(299)).is_ok(),
            "a reconcile started within the threshold"
        );
        assert!(
            health.liveness(t0 + Duration::from_secs(300)).is_ok(),
            "due, not overdue"
        );
        let err = health
            .liveness(t0 + Duration::from_secs(306))
            .expect_err("overdue past the threshold");
        assert!(err.contains("stalled") && err.contains("ns/a"), "{err}");
        // A reconcile starting clears it; so does the App leaving the cache.
        drop(health.reconcile_started("ns/a".into()));
        assert!(health.liveness(t0 + Duration::from_secs(306)).is_ok());
        health.reconcile_due("ns/b".into(), t0);
        health.retain_due(|app| app != "ns/b");
        assert!(health.liveness(t0 + Duration::from_secs(400)).is_ok());
    }

    #[test]
    fn a_watch_failing_past_the_threshold_makes_the_host_unready_until_it_reconnects() {
        let health = ApiHealth::new(Duration::from_secs(10), Duration::from_secs(300));
        health.watch_connected(PATH);
        let t0 = Instant::now();
        assert!(health.readiness(t0).is_ok());

        health.watch_failed(PATH, "client error (Connect)".into());
        // Within the threshold: still ready; a second failure does not move the start.
        assert!(
            health
                .readiness(Instant::now() + Duration::from_secs(5))
                .is_ok()
        );
        health.watch_failed(PATH, "client error (Connect)".into());
        let later = Instant::now() + Duration::from_secs(11);
        let err = health.readiness(later).expect_err("unready after 11 s");
        assert!(err.contains(PATH) && err.contains("Connect"), "{err}");
        assert!(
            health.liveness(later).is_ok(),
            "alive until the longer threshold"
        );
        let much_later = Instant::now() + Duration::from_secs(301);
        assert!(health.liveness(much_later).is_err());

        health.watch_connected(PATH);
        assert!(health.readiness(later).is_ok());
        assert!(health.liveness(much_later).is_ok());
    }

    #[test]
    fn the_api_probe_counts_like_a_watch() {
        let health = ApiHealth::new(Duration::from_secs(10), Duration::from_secs(300));
        health.probed(Err("HTTP 500: etcd failed".into()));
        let err = health
            .readiness(Instant::now() + Duration::from_secs(11))
            .expect_err("unready");
        assert!(err.contains("/readyz") && err.contains("etcd"), "{err}");
        health.probed(Ok(()));
        assert!(
            health
                .readiness(Instant::now() + Duration::from_secs(11))
                .is_ok()
        );
    }

    #[test]
    fn a_reconcile_running_too_long_fails_liveness() {
        let health = ApiHealth::new(Duration::from_secs(10), Duration::from_secs(300));
        let guard = health.reconcile_started("ns/a".into());
        assert!(health.liveness(Instant::now()).is_ok());
        let err = health
            .liveness(Instant::now() + Duration::from_secs(301))
            .expect_err("stuck");
        assert!(err.contains("ns/a"), "{err}");
        drop(guard);
        assert!(
            health
                .liveness(Instant::now() + Duration::from_secs(301))
                .is_ok()
        );
    }

    #[test]
    fn only_a_list_of_a_watch_connected_before_is_a_relist() {
        let health = ApiHealth::new(Duration::from_secs(10), Duration::from_secs(300));
        let relists = |health: &ApiHealth| {
            health
                .inner
                .relists
                .get_or_create(&vec![("resource", "configmaps".to_string())])
                .get()
        };
        let owned = watch_key(PATH, Some("labelSelector=wasmop.dev%2Fapp&limit=500"));
        health.listed(owned.clone(), PATH);
        assert_eq!(relists(&health), 0, "the first list is not a re-sync");
        health.connected(
            watch_key(
                PATH,
                Some("watch=true&resourceVersion=7&labelSelector=wasmop.dev%2Fapp&timeoutSeconds=290"),
            ),
            PATH,
        );
        // Another watch on the same path (a plugin ConfigMap's) lists for the first time.
        health.listed(
            watch_key(PATH, Some("fieldSelector=metadata.name%3Dplugin")),
            PATH,
        );
        assert_eq!(relists(&health), 0, "another watch's first list");
        health.listed(owned, PATH);
        assert_eq!(relists(&health), 1, "the watch re-synced");
        assert!(is_next_page(Some("limit=500&continue=abc")));
        assert!(!is_next_page(Some("limit=500")));
    }

    #[test]
    fn only_watch_requests_are_watches() {
        assert!(is_watch(Some(
            "labelSelector=a&watch=true&resourceVersion=1"
        )));
        assert!(is_watch(Some("watch=1")));
        assert!(!is_watch(Some("labelSelector=watch%3Dtrue")));
        assert!(!is_watch(None));
    }
}
