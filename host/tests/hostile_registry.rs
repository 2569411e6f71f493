//! The host's OCI pulls against a registry written to attack them (an axum server on
//! 127.0.0.1): a layer declared as 1 KiB that streams 256 MiB, a 100 MiB manifest, a manifest
//! that drips a byte every 5 s, a redirect to another host, a redirect and a token realm at the
//! cloud metadata address, and an error page full of secrets. Each must end in a specific
//! `FetchFailed` (or `NotAComponent`) within the pull's timeout, the error must repeat nothing
//! the registry wrote, and the process's peak RSS must stay within a few MiB. The registry runs
//! in a child process (this test binary again, running only `serve_hostile_registry`), so that
//! the peak measured is the puller's alone.
//!
//! Then where the puller may connect at all: a registry on a private address (a loopback one
//! here) is refused, by address and by a name resolving to it, unless the host allows the
//! network or a policy vouches for the registry; and registries that cannot be reached read the
//! same in status however they fail (nothing listening, a full accept queue, a silent listener,
//! a service that is not HTTP, a connection reset), so status is no port scanner.

mod support;

use std::{
    convert::Infallible,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures::stream;
use serde_json::json;
use support::{peak_rss, reset_peak_rss};
use wasmop_host::plugin::{
    Digest, LoadError,
    source::{
        OciRef, SourceRef,
        oci::{OciSource, pull::PullLimits, reach::PrivateNetworks},
    },
};

/// Held by every test here for its whole run. The peak RSS is the process's, and the test
/// harness runs a binary's tests on parallel threads: the other tests' runtimes, servers and
/// clients would otherwise count toward the puller's peak (in CI once, 24 MiB where alone it
/// is 8).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the registry serves for the one layer it describes: 1 KiB declared.
const DECLARED: usize = 1024;
/// A layer over the default component cap (8 MiB).
const NINE_MIB: usize = 9 << 20;

fn manifest(layer_digest: &str, size: usize) -> String {
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                   "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer_digest, "size": size}],
    })
    .to_string()
}

fn ok_manifest(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/vnd.oci.image.manifest.v1+json",
        )],
        body,
    )
        .into_response()
}

/// An endless body of `chunk`-byte chunks, one every `every` (or as fast as read).
fn endless(chunk: usize, every: Option<Duration>, total: usize) -> Body {
    let chunks = stream::unfold(0usize, move |sent| async move {
        if sent >= total {
            return None;
        }
        if let Some(every) = every {
            tokio::time::sleep(every).await;
        }
        Some((
            Ok::<_, Infallible>(Bytes::from(vec![b'x'; chunk])),
            sent + chunk,
        ))
    });
    Body::from_stream(chunks)
}

async fn manifests(
    State(port): State<u16>,
    Path((repo, _reference)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let layer = Digest::of(&[b'x'; DECLARED]).to_string();
    match repo.as_str() {
        "oversized" => ok_manifest(manifest(&layer, DECLARED)),
        // A genuine 9 MiB layer: over the default cap, under one a policy raised.
        "nine-mib" => ok_manifest(manifest(
            &Digest::of(&vec![b'x'; NINE_MIB]).to_string(),
            NINE_MIB,
        )),
        // 100 MiB without a Content-Length, so only reading it finds out.
        "big-manifest" => (StatusCode::OK, endless(64 << 10, None, 100 << 20)).into_response(),
        "drip" => (
            StatusCode::OK,
            endless(1, Some(Duration::from_secs(5)), 1 << 20),
        )
            .into_response(),
        "redirect" => (
            StatusCode::TEMPORARY_REDIRECT,
            [(
                header::LOCATION,
                format!("http://127.0.0.2:{port}/v2/elsewhere/manifests/1"),
            )],
        )
            .into_response(),
        "metadata-redirect" => (
            StatusCode::TEMPORARY_REDIRECT,
            [(
                header::LOCATION,
                "http://169.254.169.254/latest/meta-data/iam/".to_string(),
            )],
        )
            .into_response(),
        "metadata-realm" if headers.get(header::AUTHORIZATION).is_none() => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                r#"Bearer realm="https://169.254.169.254/latest/api/token",service="x""#,
            )],
        )
            .into_response(),
        "elsewhere-realm" => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                r#"Bearer realm="https://internal.corp.example/admin/token",service="x""#,
            )],
        )
            .into_response(),
        "error-page" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal: db password=hunter2 SECRET-TOKEN",
        )
            .into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn blobs(Path((repo, _digest)): Path<(String, String)>) -> Response {
    match repo.as_str() {
        // 256 MiB behind a descriptor that says 1 KiB, without a Content-Length.
        "oversized" => (StatusCode::OK, endless(64 << 10, None, 256 << 20)).into_response(),
        "nine-mib" => (StatusCode::OK, vec![b'x'; NINE_MIB]).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Set in the child that serves the registry.
const SERVE: &str = "WASMOP_TEST_SERVE_HOSTILE_REGISTRY";

/// The hostile registry: prints its port, serves for a minute. Runs only as the child of the
/// test below.
#[tokio::test]
#[ignore = "the hostile registry, started by a_hostile_registry_gets_specific_errors_in_time_and_no_memory"]
async fn serve_hostile_registry() {
    if std::env::var_os(SERVE).is_none() {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let router = Router::new()
        .route("/v2/{repo}/manifests/{reference}", get(manifests))
        .route("/v2/{repo}/blobs/{digest}", get(blobs))
        .with_state(port);
    println!("listening on {port}");
    let _ = tokio::time::timeout(Duration::from_secs(60), axum::serve(listener, router)).await;
}

/// Starts the registry in a child process; its port, and the child (killed on drop).
fn start_registry() -> (u16, KillOnDrop) {
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "serve_hostile_registry",
            "--ignored",
            "--nocapture",
        ])
        .env(SERVE, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the registry process");
    let stdout = child.stdout.take().expect("its stdout");
    let port = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("listening on ")?.trim().parse().ok())
        .expect("the registry's port");
    (port, KillOnDrop(child))
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_registry_gets_specific_errors_in_time_and_no_memory() {
    let _serial = SERIAL.lock().await;
    let (port, _registry) = start_registry();

    let limits = PullLimits {
        read: Duration::from_secs(2),
        total: Duration::from_secs(4),
        ..PullLimits::default()
    };
    let oci = OciSource::with_limits(None, Vec::new(), limits)
        .expect("a source")
        .with_private_networks(loopback());
    // One plain miss first, so that what the first request of a process sets up once (the
    // connection pool, the runtime's worker threads) is not counted as the attacks' cost.
    let missing = OciRef::anonymous(format!("127.0.0.1:{port}/missing:1"));
    let err = oci
        .resolve(&SourceRef::Oci(missing.clone()), &missing)
        .await
        .expect_err("a 404");
    assert!(err.to_string().contains("404 Not Found"), "{err}");
    reset_peak_rss();
    let before = peak_rss();
    println!("peak RSS before the attacks: {} MiB", before >> 20);
    // Every attack is the registry's failure to deliver: FetchFailed, saying which.
    let cases = [
        ("oversized", "the layer is over its 1024 byte limit"),
        (
            "big-manifest",
            "the manifest is over its 4194304 byte limit",
        ),
        ("drip", "timed out"),
        ("redirect", "only to the registry itself"),
        (
            "metadata-redirect",
            "169.254.169.254 is a link-local or metadata address",
        ),
        (
            "metadata-realm",
            "169.254.169.254 is a link-local or metadata address",
        ),
    ];
    for (repo, words) in cases {
        let reference = OciRef::anonymous(format!("127.0.0.1:{port}/{repo}:1"));
        let source = SourceRef::Oci(reference.clone());
        let start = Instant::now();
        let err = oci
            .fetch(&source, &reference)
            .await
            .expect_err("a hostile registry delivers nothing");
        let elapsed = start.elapsed();
        println!(
            "{repo}: {err} ({elapsed:?}; peak RSS +{} MiB so far)",
            peak_rss().saturating_sub(before) >> 20
        );
        assert!(
            matches!(err, LoadError::Fetch { .. }),
            "{repo}: unexpected {err:?}"
        );
        assert!(err.to_string().contains(words), "{repo}: {err}");
        assert!(
            elapsed < limits.total + Duration::from_secs(1),
            "{repo} took {elapsed:?}"
        );
    }

    // Under a registries allowlist, a realm on another host than an allowed one is refused
    // before anything is sent there.
    let elsewhere = OciRef {
        realm_hosts: Some(vec![format!("127.0.0.1:{port}"), "ghcr.io".into()]),
        ..OciRef::anonymous(format!("127.0.0.1:{port}/elsewhere-realm:1"))
    };
    let err = oci
        .resolve(&SourceRef::Oci(elsewhere.clone()), &elsewhere)
        .await
        .expect_err("a realm off the allowlist");
    assert!(
        err.to_string()
            .contains("realm host \"internal.corp.example\" is neither the registry"),
        "{err}"
    );

    let reference = OciRef::anonymous(format!("127.0.0.1:{port}/error-page:1"));
    let err = oci
        .resolve(&SourceRef::Oci(reference.clone()), &reference)
        .await
        .expect_err("a 500");
    let text = err.to_string();
    assert!(text.contains("500 Internal Server Error"), "{text}");
    assert!(
        !text.contains("hunter2") && !text.contains("SECRET"),
        "the registry's words reached the error: {text}"
    );

    let grown = peak_rss().saturating_sub(before);
    println!("peak RSS grew {} MiB", grown >> 20);
    // The manifest cap (4 MiB), the copies a growing buffer makes, a few reads in flight and
    // what the allocator's per-thread arenas keep: 3 to 14 MiB measured alone. Naively, 100 MiB
    // for the manifest and 256 MiB for the layer.
    assert!(
        grown < 32 << 20,
        "peak RSS grew {} MiB over a hostile registry",
        grown >> 20
    );

    // The component cap is the policy's: 9 MiB is refused by default without being read, and
    // read whole (its digest checked) where a policy raised the cap to 16 MiB.
    let nine = OciRef::anonymous(format!("127.0.0.1:{port}/nine-mib:1"));
    let err = oci
        .fetch(&SourceRef::Oci(nine.clone()), &nine)
        .await
        .expect_err("over the default cap");
    assert!(
        matches!(err, LoadError::NotAComponent { .. }) && err.to_string().contains("9437184"),
        "{err}"
    );
    let raised = OciRef {
        max_component_bytes: Some(16 << 20),
        ..nine
    };
    let (_, fetched) = oci
        .fetch(&SourceRef::Oci(raised.clone()), &raised)
        .await
        .expect("under a raised cap");
    assert_eq!(fetched.bytes.len(), NINE_MIB);
}

/// The loopback network, as the local demo and the tests allow it.
fn loopback() -> PrivateNetworks {
    PrivateNetworks::parse("127.0.0.0/8").expect("a CIDR")
}

/// A registry on 127.0.0.1 that has nothing (404 for everything) and counts what it was asked.
async fn empty_registry() -> (u16, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let counter = asked.clone();
    let router = Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { StatusCode::NOT_FOUND }
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    (port, asked)
}

#[tokio::test]
async fn private_registries_are_refused_unless_the_host_or_a_policy_allows_them() {
    let _serial = SERIAL.lock().await;
    let (port, asked) = empty_registry().await;
    let strict = OciSource::new(None, Vec::new()).expect("a source");
    let allowing = OciSource::new(None, Vec::new())
        .expect("a source")
        .with_private_networks(loopback());
    let vouched = |authority: String, reference: String| OciRef {
        realm_hosts: Some(vec![authority]),
        ..OciRef::anonymous(reference)
    };
    let refused_literal = "refused: 127.0.0.1 is a private address; allow it with \
                           --allow-private-registries or a PluginPolicy's registries";
    let refused_name = "refused: localhost resolves to a private address; allow it with \
                        --allow-private-registries or a PluginPolicy's registries";
    let reached = "404 Not Found";
    let cases = [
        // Nothing allows it: refused by address, and by a name that resolves to it.
        (
            &strict,
            OciRef::anonymous(format!("127.0.0.1:{port}/p:1")),
            refused_literal,
        ),
        (
            &strict,
            OciRef::anonymous(format!("localhost:{port}/p:1")),
            refused_name,
        ),
        // A policy whose registries name this host and port vouches for it...
        (
            &strict,
            vouched(format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}/p:1")),
            reached,
        ),
        (
            &strict,
            vouched(format!("localhost:{port}"), format!("localhost:{port}/p:1")),
            reached,
        ),
        // ... and for no other port of it.
        (
            &strict,
            vouched("127.0.0.1:1".into(), format!("127.0.0.1:{port}/p:1")),
            refused_literal,
        ),
        (
            &strict,
            vouched("localhost:1".into(), format!("localhost:{port}/p:1")),
            "a PluginPolicy's registries let localhost be private only on the port they name",
        ),
        // The host's --allow-private-registries allows the network for every App.
        (
            &allowing,
            OciRef::anonymous(format!("127.0.0.1:{port}/p:1")),
            reached,
        ),
        (
            &allowing,
            OciRef::anonymous(format!("localhost:{port}/p:1")),
            reached,
        ),
    ];
    let mut reaching = 0;
    for (oci, reference, words) in cases {
        let err = oci
            .resolve(&SourceRef::Oci(reference.clone()), &reference)
            .await
            .expect_err("the registry has nothing");
        println!("{}: {err}", reference.reference);
        assert!(
            matches!(err, LoadError::Fetch { .. }) && err.to_string().contains(words),
            "{}: {err}",
            reference.reference
        );
        if words == reached {
            reaching += 1;
        }
    }
    // A refused registry was never asked anything.
    assert_eq!(asked.load(Ordering::SeqCst), reaching);
}

/// The text of `err` with `port` written as `PORT`.
fn without_port(err: &LoadError, port: u16) -> String {
    err.to_string().replace(&port.to_string(), "PORT")
}

/// A listener on 127.0.0.1 that accepts connections and hands each to `serve`.
async fn listener<F, Fut>(serve: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_registries_read_the_same_however_they_fail() {
    use tokio::io::AsyncWriteExt as _;
    let _serial = SERIAL.lock().await;

    // Nothing listening: the connection is refused at once.
    let closed = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        socket.local_addr().expect("its address").port()
    };
    // A full accept queue: further SYNs go unanswered, as at a filtering firewall.
    let queue = tokio::net::TcpSocket::new_v4().expect("a socket");
    queue
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("a loopback port");
    let queue = queue.listen(0).expect("listening");
    let filtered = queue.local_addr().expect("its address").port();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(("127.0.0.1", filtered)),
        )
        .await
        {
            fillers.push(stream);
        }
    }
    // Accepts and never answers.
    let silent = listener(|stream| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    })
    .await;
    // Open, but another protocol: it greets first, as SSH does.
    let not_http = listener(|mut stream| async move {
        let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    // Accepts and closes at once.
    let reset = listener(|stream| async move { drop(stream) }).await;

    let limits = PullLimits {
        connect: Duration::from_secs(1),
        read: Duration::from_secs(1),
        total: Duration::from_secs(3),
        ..PullLimits::default()
    };
    // The whole operation's limit running out first, in another host.
    let short_total = PullLimits {
        read: Duration::from_secs(5),
        total: Duration::from_secs(1),
        ..limits
    };
    let source = |limits| {
        OciSource::with_limits(None, Vec::new(), limits)
            .expect("a source")
            .with_private_networks(loopback())
    };
    let (oci, short) = (source(limits), source(short_total));
    let mut texts = Vec::new();
    for (what, oci, port) in [
        ("closed", &oci, closed),
        ("filtered", &oci, filtered),
        ("silent", &oci, silent),
        ("silent, total limit", &short, silent),
        ("not HTTP", &oci, not_http),
        ("reset", &oci, reset),
    ] {
        let reference = OciRef::anonymous(format!("127.0.0.1:{port}/x/y:z"));
        let source = SourceRef::Oci(reference.clone());
        let start = Instant::now();
        let resolved = oci.resolve(&source, &reference).await.expect_err(what);
        let fetched = oci.fetch(&source, &reference).await.expect_err(what);
        println!("{what}: {resolved} / {fetched} ({:?})", start.elapsed());
        texts.push((
            what,
            without_port(&resolved, port),
            without_port(&fetched, port),
        ));
    }
    drop(fillers);
    let (_, resolved, fetched) = texts[0].clone();
    assert_eq!(
        resolved,
        "fetching plugin 127.0.0.1:PORT/x/y:z: resolving 127.0.0.1:PORT/x/y:z: registry \
         127.0.0.1:PORT could not be reached"
    );
    assert_eq!(
        fetched,
        "fetching plugin 127.0.0.1:PORT/x/y:z: pulling 127.0.0.1:PORT/x/y:z: registry \
         127.0.0.1:PORT could not be reached"
    );
    for (what, other_resolved, other_fetched) in &texts {
        assert_eq!(other_resolved, &resolved, "{what}");
        assert_eq!(other_fetched, &fetched, "{what}");
    }
}
