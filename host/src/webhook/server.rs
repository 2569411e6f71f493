//! The HTTPS server the API server calls: `POST /validate/<binding>` ([`super::admit`]) and
//! `POST /convert/<binding>` ([`super::conversion`]), on every replica, with the certificate
//! [`ServingCert`] holds at each handshake.

use std::{net::SocketAddr, sync::Arc, time::Instant};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use hyper_util::rt::TokioIo;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_rustls::TlsAcceptor;

use super::{admit, conversion, target::Targets, tls::ServingCert};

/// The largest admission review read: an object is at most 1.5 MiB in etcd by default
/// (`--max-request-bytes`), and an update's review carries two.
const MAX_ADMISSION_BODY: usize = 8 << 20;

/// The largest conversion review read: a page of objects.
const MAX_CONVERSION_BODY: usize = 32 << 20;

/// Most connections served at once; more wait in the listener's backlog. The API server keeps
/// a few per replica; anyone else who reaches the port must not be able to hold the host's
/// memory with idle or slow connections.
const MAX_CONNECTIONS: usize = 128;

/// Most reviews worked on at once, each holding its body and parsed objects.
const MAX_IN_FLIGHT: usize = 16;

/// How long a client may take over its TLS handshake, and over a request's headers.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest a review is worked on: the API server waits 30 s at most (a conversion's fixed
/// timeout; an admission's is the binding's, at most 30 s).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
    in_flight: Arc<Semaphore>,
}

impl Shared {
    /// The metrics label of the path's binding: its name once it names a binding this host
    /// serves, else `unknown` (a label per path anyone may send would grow without bound).
    fn label(&self, binding: &str) -> String {
        match self.targets.binding(binding) {
            Ok(_) => binding.to_string(),
            Err(_) => "unknown".to_string(),
        }
    }
}

/// The routes, for `targets`.
fn router(targets: Targets, metrics: WebhookMetrics) -> Router {
    Router::new()
        .route(
            "/validate/{binding}",
            post(validate).layer(DefaultBodyLimit::max(MAX_ADMISSION_BODY)),
        )
        .route(
            "/convert/{binding}",
            post(convert).layer(DefaultBodyLimit::max(MAX_CONVERSION_BODY)),
        )
        .with_state(Shared {
            targets,
            metrics,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        })
}

/// What a review that was not answered sends back; logged at warn only when it is the host's
/// or a plugin's failure, not a malformed request (anyone may send those).
fn unanswered(webhook: &str, binding: &str, unanswered: admit::Unanswered) -> Response {
    if unanswered.status.is_server_error() {
        tracing::warn!(%webhook, %binding, error = %unanswered.message, "webhook review not answered");
    } else {
        tracing::debug!(%webhook, %binding, error = %unanswered.message, "webhook review refused");
    }
    (unanswered.status, unanswered.message).into_response()
}

/// Answers one review of `webhook` for the path's `binding`: `review` within
/// [`REQUEST_TIMEOUT`], one of [`MAX_IN_FLIGHT`], its result (`outcome` names an answered one)
/// counted under the binding's label.
async fn answer(
    shared: &Shared,
    webhook: &'static str,
    binding: &str,
    review: impl Future<Output = Result<serde_json::Value, admit::Unanswered>>,
    outcome: fn(&serde_json::Value) -> &'static str,
) -> Response {
    let started = Instant::now();
    let label = shared.label(binding);
    let failed = |message: String| admit::Unanswered {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message,
    };
    let answered = match shared.in_flight.acquire().await {
        Ok(_permit) => tokio::time::timeout(REQUEST_TIMEOUT, review)
            .await
            .unwrap_or_else(|_| {
                Err(failed(format!(
                    "PluginBinding {label}: no answer within {}s",
                    REQUEST_TIMEOUT.as_secs()
                )))
            }),
        Err(_) => Err(failed("the webhook server is stopping".into())),
    };
    match answered {
        Ok(review) => {
            shared
                .metrics
                .record(webhook, &label, outcome(&review), started);
            axum::Json(review).into_response()
        }
        Err(failed) => {
            shared.metrics.record(webhook, &label, "error", started);
            unanswered(webhook, &label, failed)
        }
    }
}

async fn validate(
    State(shared): State<Shared>,
    Path(binding): Path<String>,
    body: Bytes,
) -> Response {
    let review = admit::review(&shared.targets, &binding, &body);
    answer(
        &shared,
        "validate",
        &binding,
        review,
        |review| match review["response"]["allowed"].as_bool() {
            Some(true) => "allowed",
            _ => "denied",
        },
    )
    .await
}

async fn convert(
    State(shared): State<Shared>,
    Path(binding): Path<String>,
    body: Bytes,
) -> Response {
    let review = conversion::review(&shared.targets, &binding, &body);
    answer(&shared, "convert", &binding, review, |review| {
        let result = &review["response"]["result"];
        if result["status"] == "Success" {
            return "converted";
        }
        tracing::warn!(error = %result["message"], "conversion failed");
        "failed"
    })
    .await
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
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A permit first: past the limit, new connections wait in the kernel's backlog.
        let Ok(permit) = Arc::clone(&connections).acquire_owned().await else {
            return;
        };
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
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "webhook TLS handshake");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            // hyper's header timeout needs a timer; without one it is off.
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %err, "webhook connection");
            }
        });
    }
}
