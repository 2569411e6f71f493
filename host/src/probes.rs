//! The host's HTTP endpoints: `/healthz` (the host can still recover by itself: see
//! [`ApiHealth::liveness`]), `/readyz` (start-up finished, caches are synced and the watches
//! and the API server answer: see [`ApiHealth::readiness`]), `/metrics` (Prometheus text
//! format) and `/debug/plugins` (what is loaded behind each plugin source, and why the last
//! attempt to change it failed; answered only to loopback clients unless the host is started
//! with `--debug-from-anywhere`, since it names every tenant's plugins). A failing probe's body
//! says what fails.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use axum::{
    Router,
    extract::{ConnectInfo, State},
    http::{StatusCode, header},
    response::{IntoResponse, Json},
    routing::get,
};
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio::net::TcpListener;

use crate::{
    api_health::ApiHealth,
    plugin::{LoadError, registry::PluginRegistry},
};

/// Shared state behind the probe endpoints.
#[derive(Clone)]
pub struct Probes {
    ready: Arc<AtomicBool>,
    registry: Arc<Registry>,
    plugins: Arc<PluginRegistry>,
    health: ApiHealth,
    debug_from_anywhere: bool,
}

impl Probes {
    /// Probes that report not-ready until [`Probes::set_ready`] is called.
    pub fn new(registry: Registry, plugins: Arc<PluginRegistry>, health: ApiHealth) -> Self {
        Self {
            ready: Arc::new(AtomicBool::new(false)),
            registry: Arc::new(registry),
            plugins,
            health,
            debug_from_anywhere: false,
        }
    }

    /// Answers `/debug/*` to every client, not only to loopback ones.
    pub fn debug_from_anywhere(mut self, open: bool) -> Self {
        self.debug_from_anywhere = open;
        self
    }

    /// Flips `/readyz`; the host calls it once start-up has finished, and with `false` when it
    /// starts shutting down so that load balancers stop sending it work.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Binds `addr` and returns the bound address and the server future.
    pub async fn bind(
        self,
        addr: SocketAddr,
    ) -> std::io::Result<(SocketAddr, impl Future<Output = std::io::Result<()>>)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let router = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/debug/plugins", get(debug_plugins))
            .with_state(self);
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        Ok((local, async move { axum::serve(listener, service).await }))
    }
}

async fn healthz(State(probes): State<Probes>) -> impl IntoResponse {
    match probes.health.liveness(Instant::now()) {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(problems) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy:\n{problems}\n"),
        ),
    }
}

async fn readyz(State(probes): State<Probes>) -> impl IntoResponse {
    if !probes.ready.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: starting, stopping or waiting for the caches to sync\n".to_string(),
        );
    }
    match probes.health.readiness(Instant::now()) {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(problems) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{problems}\n"),
        ),
    }
}

async fn metrics(State(probes): State<Probes>) -> impl IntoResponse {
    let mut body = String::new();
    match encode(&mut body, &probes.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics: {err}\n"),
        ),
    }
}

async fn debug_plugins(
    State(probes): State<Probes>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Result<Json<serde_json::Value>, (StatusCode, &'static str)> {
    if !probes.debug_from_anywhere && !peer.ip().is_loopback() {
        return Err((
            StatusCode::FORBIDDEN,
            "/debug is answered only on loopback (start the host with --debug-from-anywhere)\n",
        ));
    }
    let entries: Vec<serde_json::Value> = probes
        .plugins
        .snapshot()
        .into_iter()
        .map(|(source, state)| {
            let current = state.current.map(|loaded| {
                let c = &loaded.compiled;
                serde_json::json!({
                    "digest": c.digest.as_str(),
                    "name": c.metadata.name,
                    "version": c.metadata.version,
                    "capabilities": c.capabilities.iter().map(|c| c.interface()).collect::<Vec<_>>(),
                    "size": c.size,
                    "loadedAt": loaded.loaded_at.to_rfc3339(),
                    "compileMs": c.compile_time.as_secs_f64() * 1000.0,
                    "fromCache": c.from_cache,
                })
            });
            let error = |e: LoadError| serde_json::json!({"reason": e.reason(), "message": e.to_string()});
            serde_json::json!({
                "source": source.to_string(),
                "current": current,
                "lastError": state.last_error.map(error),
                "pollFailing": state.poll_failing.map(error),
            })
        })
        .collect();
    Ok(Json(serde_json::Value::Array(entries)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plugin::{engine::PluginEngine, metrics::PluginMetrics};

    #[tokio::test]
    async fn debug_answers_only_loopback_clients_unless_opened() {
        let engine = PluginEngine::new().expect("engine");
        let plugins = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
        let health = ApiHealth::new(Duration::from_secs(10), Duration::from_secs(300));
        let probes = Probes::new(Registry::default(), plugins, health);
        let from = |addr: &str| ConnectInfo(addr.parse::<SocketAddr>().expect("an address"));
        let remote = debug_plugins(State(probes.clone()), from("10.1.2.3:40000")).await;
        assert_eq!(
            remote.err().map(|(status, _)| status),
            Some(StatusCode::FORBIDDEN)
        );
        let local = debug_plugins(State(probes.clone()), from("127.0.0.1:40000")).await;
        assert!(local.is_ok());
        let opened = probes.debug_from_anywhere(true);
        let remote = debug_plugins(State(opened), from("10.1.2.3:40000")).await;
        assert!(remote.is_ok());
    }
}
