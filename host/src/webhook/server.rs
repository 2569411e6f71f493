//! The HTTPS server the API server calls: `POST /validate/<binding>` ([`super::admit`]) and
//! `POST /convert/<binding>` ([`super::conversion`]), on every replica, with the certificate
//! [`ServingCert`] holds at each handshake.

use std::{net::SocketAddr, sync::Arc, time::Instant};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, Path, State},
    response::{IntoResponse, Response},
    routing::post,
};
use hyper_util::rt::TokioIo;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{admit, conversion, target::Targets, tls::ServingCert};

/// The largest review read: an object may be 3 MiB in etcd (1.5 MiB by default), an update's
/// review carries two, a conversion a page of them.
const MAX_BODY: usize = 32 << 20;

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    webhook: &'static str,
    binding: String,
    result: &'static str,
}

/// `wasmop_webhook_requests_total` and `wasmop_webhook_duration_seconds`.
#[derive(Clone)]
pub struct WebhookMetrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram>,
}

impl WebhookMetrics {
    /// Creates the families and registers them in `registry` (prefixed `wasmop`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                ])
            }),
        };
        registry.register(
            "webhook_requests",
            "Webhook reviews answered, by webhook (validate, convert), binding and result \
             (allowed, denied, converted, failed, error)",
            metrics.requests.clone(),
        );
        registry.register(
            "webhook_duration_seconds",
            "Time to answer a webhook review",
            metrics.duration.clone(),
        );
        metrics
    }

    fn record(&self, webhook: &'static str, binding: &str, result: &'static str, started: Instant) {
        let labels = Labels {
            webhook,
            binding: binding.to_string(),
            result,
        };
        self.requests.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

#[derive(Clone)]
struct Shared {
    targets: Targets,
    metrics: WebhookMetrics,
}

/// The routes, for `targets`.
fn router(targets: Targets, metrics: WebhookMetrics) -> Router {
    Router::new()
        .route("/validate/{binding}", post(validate))
        .route("/convert/{binding}", post(convert))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(Shared { targets, metrics })
}

async fn validate(
    State(shared): State<Shared>,
    Path(binding): Path<String>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    match admit::review(&shared.targets, &binding, &body).await {
        Ok(review) => {
            let allowed = review["response"]["allowed"].as_bool().unwrap_or(false);
            let result = if allowed { "allowed" } else { "denied" };
            shared.metrics.record("validate", &binding, result, started);
            axum::Json(review).into_response()
        }
        Err(unanswered) => {
            tracing::warn!(%binding, error = %unanswered.message, "validating webhook not answered");
            shared
                .metrics
                .record("validate", &binding, "error", started);
            (unanswered.status, unanswered.message).into_response()
        }
    }
}

async fn convert(
    State(shared): State<Shared>,
    Path(binding): Path<String>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    match conversion::review(&shared.targets, &binding, &body).await {
        Ok(review) => {
            let ok = review["response"]["result"]["status"] == "Success";
            if !ok {
                tracing::warn!(%binding, error = %review["response"]["result"]["message"], "conversion failed");
            }
            let result = if ok { "converted" } else { "failed" };
            shared.metrics.record("convert", &binding, result, started);
            axum::Json(review).into_response()
        }
        Err(unanswered) => {
            shared.metrics.record("convert", &binding, "error", started);
            (unanswered.status, unanswered.message).into_response()
        }
    }
}

/// Binds `addr`; the returned future serves until dropped.
pub async fn bind(
    addr: SocketAddr,
    serving: Arc<ServingCert>,
    targets: Targets,
    metrics: WebhookMetrics,
) -> anyhow::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let acceptor = TlsAcceptor::from(Arc::new(serving.server_config()?));
    let router = router(targets, metrics);
    Ok((local, serve(listener, acceptor, router)))
}

async fn serve(listener: TcpListener, acceptor: TlsAcceptor, router: Router) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!(error = %err, "accepting a webhook connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "webhook TLS handshake");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %err, "webhook connection");
            }
        });
    }
}
