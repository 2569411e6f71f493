//! How the host writes to the API server: as one field manager ([`FIELD_MANAGER`]), and only
//! through a write fence ([`WriteFenceLayer`]), a layer of the kube client's HTTP stack that
//! every request that changes something passes: the executor's applies and deletes, the status
//! writers, kube's event `Recorder` and its `finalizer()` helper alike, with no call to place
//! by hand.

use tower::{Layer, Service};

/// The field manager the host uses for everything it applies (the decision core's, which tells
/// the host's own create entries apart by it).
pub use wasmop_core::observed::FIELD_MANAGER;

/// Whether a `managedFields` entry is the host's create's
/// ([`wasmop_core::observed::is_create_entry`]).
pub fn is_create_entry(
    entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> bool {
    wasmop_core::observed::is_create_entry(
        entry.manager.as_deref(),
        entry.operation.as_deref(),
        entry.subresource.as_deref(),
    )
}

/// What one write request does, read from its method, content type and path as the API server
/// reads them (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write<'r> {
    /// `create` (POST), `update` (PUT), `apply` (a PATCH with a server-side apply body),
    /// `patch` (any other PATCH), `delete` (DELETE), or the method itself.
    pub verb: &'r str,
    /// The API group, empty for the core group (`/api/v1`).
    pub group: &'r str,
    /// The resource (plural) written, or the whole path for one outside `/api` and `/apis`.
    pub resource: &'r str,
    /// The subresource (`status`), if any.
    pub subresource: Option<&'r str>,
}

/// The subresources of a namespace itself: `/api/v1/namespaces/{name}/status` is not a
/// resource called `status` in that namespace.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl<'r> Write<'r> {
    /// The write `request` is; `None` for a read (GET, HEAD, OPTIONS: lists and watches too).
    pub fn of<B>(request: &'r http::Request<B>) -> Option<Self> {
        let method = request.method();
        let verb = match *method {
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS => return None,
            http::Method::POST => "create",
            http::Method::PUT => "update",
            http::Method::DELETE => "delete",
            http::Method::PATCH => {
                let content_type = request.headers().get(http::header::CONTENT_TYPE);
                if content_type
                    .is_some_and(|t| t.as_bytes().starts_with(b"application/apply-patch"))
                {
                    "apply"
                } else {
                    "patch"
                }
            }
            _ => method.as_str(),
        };
        let path = request.uri().path();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, mut parts) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => ("", &[][..]),
        };
        if let ["namespaces", _namespace, rest @ ..] = parts
            && rest
                .first()
                .is_some_and(|next| !NAMESPACE_SUBRESOURCES.contains(next))
        {
            parts = rest;
        }
        let (resource, subresource) = match parts {
            [] => (path, None),
            [resource] | [resource, _] => (*resource, None),
            [resource, _, subresource, ..] => (*resource, Some(*subresource)),
        };
        Some(Self {
            verb,
            group,
            resource,
            subresource,
        })
    }

    /// Whether this writes a `coordination.k8s.io` Lease: the leader election itself, which the
    /// fence must not stop (the election renews the lease that keeps the fence open, and releases
    /// it on the way out).
    pub fn is_lease(&self) -> bool {
        self.group == "coordination.k8s.io" && self.resource == "leases"
    }
}

/// The resource as kubectl names it: `deployments.apps`, `apps.wasmop.dev/status`.
impl std::fmt::Display for Write<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(subresource) = self.subresource {
            write!(f, "/{subresource}")?;
        }
        Ok(())
    }
}

/// A tower layer for the kube client: every write request, Lease writes excepted, first calls
/// `fence` (which does not return if the write must not be sent; the leader election's is
/// [`crate::leader::Fence::ensure_leading`]), and is logged (debug, `writing to the API server`,
/// with its verb, resource and path) as it is sent: which replica wrote when, for the fault
/// tests' check that two never act at once. Reads pass untouched.
///
/// The fence is what the layer is given, not a global: a client per election (a future shard)
/// checks its own.
#[derive(Clone)]
pub struct WriteFenceLayer<F> {
    fence: F,
}

impl<F: Fn() + Clone> WriteFenceLayer<F> {
    /// A layer that calls `fence` before every write but a Lease's.
    pub fn new(fence: F) -> Self {
        Self { fence }
    }
}

impl<S, F: Clone> Layer<S> for WriteFenceLayer<F> {
    type Service = WriteFenceService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteFenceService {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// The service [`WriteFenceLayer`] makes.
#[derive(Clone)]
pub struct WriteFenceService<S, F> {
    inner: S,
    fence: F,
}

impl<S, F, B> Service<http::Request<B>> for WriteFenceService<S, F>
where
    S: Service<http::Request<B>>,
    F: Fn(),
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if let Some(write) = Write::of(&request) {
            let path = request.uri().path();
            if write.is_lease() {
                tracing::trace!(verb = write.verb, resource = %write, path, "writing a Lease");
            } else {
                (self.fence)();
                tracing::debug!(
                    verb = write.verb,
                    resource = %write,
                    path,
                    "writing to the API server"
                );
            }
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        sync::{Arc, Mutex},
    };

    use tower::{ServiceExt, service_fn};

    use super::*;

    fn request(method: &str, path: &str, content_type: Option<&str>) -> http::Request<()> {
        let mut builder = http::Request::builder().method(method).uri(path);
        if let Some(content_type) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, content_type);
        }
        builder.body(()).expect("a valid request")
    }

    fn write_of(method: &str, path: &str, content_type: Option<&str>) -> Option<String> {
        let request = request(method, path, content_type);
        Write::of(&request).map(|w| format!("{} {w}", w.verb))
    }

    #[test]
    fn writes_are_read_from_the_method_and_path() {
        let apply = Some("application/apply-patch+yaml");
        let merge = Some("application/merge-patch+json");
        let cases = [
            (
                "PATCH",
                "/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=wasmop&force=true",
                apply,
                Some("apply deployments.apps"),
            ),
            (
                "PATCH",
                "/apis/wasmop.dev/v1alpha1/namespaces/ns/apps/a/status",
                apply,
                Some("apply apps.wasmop.dev/status"),
            ),
            // kube's finalizer helper (a JSON patch), the host's own finalizer patch (a merge).
            (
                "PATCH",
                "/apis/wasmop.dev/v1alpha1/namespaces/ns/apps/a",
                Some("application/json-patch+json"),
                Some("patch apps.wasmop.dev"),
            ),
            (
                "PATCH",
                "/apis/wasmop.dev/v1alpha1/namespaces/ns/apps/a",
                merge,
                Some("patch apps.wasmop.dev"),
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/ns/events",
                None,
                Some("create events.events.k8s.io"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/persistentvolumeclaims/data-0",
                None,
                Some("delete persistentvolumeclaims"),
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/wasmop-leader",
                None,
                Some("update leases.coordination.k8s.io"),
            ),
            (
                "PATCH",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/apps.wasmop.dev",
                apply,
                Some("apply customresourcedefinitions.apiextensions.k8s.io"),
            ),
            // A namespace itself, and its own subresources.
            (
                "DELETE",
                "/api/v1/namespaces/ns",
                None,
                Some("delete namespaces"),
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/finalize",
                None,
                Some("update namespaces/finalize"),
            ),
            ("POST", "/readyz", None, Some("create /readyz")),
            // Reads, watches and lists included, are no writes.
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=true",
                None,
                None,
            ),
            ("GET", "/apis/wasmop.dev/v1alpha1/apps", None, None),
            ("HEAD", "/api/v1/namespaces/ns/pods/p", None, None),
            ("OPTIONS", "/api/v1", None, None),
        ];
        for (method, path, content_type, expected) in cases {
            assert_eq!(
                write_of(method, path, content_type).as_deref(),
                expected,
                "{method} {path}"
            );
        }
    }

    /// Log lines as the JSON formatter writes them (`--log-format json`), in memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn entries(&self) -> Vec<serde_json::Value> {
            let text = String::from_utf8(self.0.lock().expect("not poisoned").clone())
                .expect("UTF-8 log lines");
            text.lines()
                .map(|line| serde_json::from_str(line).expect("a JSON log line"))
                .collect()
        }
    }

    #[tokio::test]
    async fn a_write_passes_the_fence_and_is_logged_a_read_and_a_lease_renewal_are_not_fenced() {
        // What the fence was asked about, and what reached the API server, in order.
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let fence = {
            let seen = seen.clone();
            move || seen.lock().expect("not poisoned").push("fence".into())
        };
        let inner = {
            let seen = seen.clone();
            service_fn(move |request: http::Request<()>| {
                let seen = seen.clone();
                async move {
                    let sent = format!("{} {}", request.method(), request.uri().path());
                    seen.lock().expect("not poisoned").push(sent);
                    Ok::<_, Infallible>(http::Response::new(()))
                }
            })
        };
        let mut service = WriteFenceLayer::new(fence).layer(inner);
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::TRACE)
            .with_writer({
                let captured = captured.clone();
                move || captured.clone()
            })
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);

        let status = "/apis/wasmop.dev/v1alpha1/namespaces/ns/apps/a/status";
        let watch = "/apis/wasmop.dev/v1alpha1/namespaces/ns/apps";
        let lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/wasmop-leader";
        let requests = [
            request("PATCH", status, Some("application/apply-patch+yaml")),
            request("GET", &format!("{watch}?watch=true"), None),
            request("PUT", lease, None),
        ];
        for request in requests {
            service
                .ready()
                .await
                .expect("ready")
                .call(request)
                .await
                .expect("answered");
        }

        assert_eq!(
            *seen.lock().expect("not poisoned"),
            [
                "fence".to_string(),
                format!("PATCH {status}"),
                format!("GET {watch}"),
                format!("PUT {lease}"),
            ],
            "only the App's write is fenced, before it is sent"
        );
        let entries = captured.entries();
        // The fault tests (tests/e2e/faults.rs, `writes_in_log`) match these fields.
        let writes: Vec<_> = entries
            .iter()
            .filter(|e| e["message"] == "writing to the API server")
            .collect();
        assert_eq!(writes.len(), 1, "{entries:?}");
        assert_eq!(writes[0]["verb"], "apply");
        assert_eq!(writes[0]["resource"], "apps.wasmop.dev/status");
        assert_eq!(writes[0]["path"], status);
        assert!(
            entries
                .iter()
                .any(|e| e["message"] == "writing a Lease" && e["verb"] == "update"),
            "a Lease write is still logged, apart: {entries:?}"
        );
    }
}
