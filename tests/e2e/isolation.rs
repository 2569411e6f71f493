//! The tests touch only the local cluster and registry `deploy/local/cluster.sh` started,
//! whatever the shell's `KUBECONFIG`, `WASMOP_REGISTRY` or `~/.kube/config` say.
//!
//! A second, working API server (a counting TCP relay to the local one, so anything a test sent
//! there would succeed and be seen) and an address nothing listens on are each put in every
//! place a test could pick a cluster from; a few tests that between them use the harness's
//! client, a host process, kubectl, helm and the registry then run in a child process of this
//! same test binary, and must pass while neither decoy sees a connection.

use std::{
    path::Path,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::ListParams,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{Local, free_port, unique};

/// Tests the child runs: the harness's client and a host (`host::`), kubectl and helm
/// (`helm::`), the registry (`registry::`).
const CHILD_TESTS: &[&str] = &[
    "host::host_installs_crd_serves_probes_and_stops_on_sigterm",
    "helm::the_api_server_takes_what_the_chart_renders",
    "registry::pushed_blob_is_pulled_back_byte_identical",
];

/// A listener on loopback that counts the connections it accepts and relays each to `target`
/// (or, with none, drops it).
struct Decoy {
    port: u16,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Decoy {
    async fn start(target: Option<String>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let Some(target) = target.clone() else {
                    continue;
                };
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Self {
            port,
            connections,
            task,
        })
    }

    fn seen(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A directory of this test's, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(prefix: &str) -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The local kubeconfig with its server moved to `127.0.0.1:port`, written to `path`.
fn kubeconfig_at(local: &Local, port: u16, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&local.kubeconfig)?;
    let server = local.api_server();
    anyhow::ensure!(
        text.contains(server),
        "{server} not in the local kubeconfig"
    );
    std::fs::write(
        path,
        text.replace(server, &format!("https://127.0.0.1:{port}")),
    )?;
    Ok(())
}

async fn client_from(path: &Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Runs [`CHILD_TESTS`] in a child of this test binary with the shell pointing at `kubeconfig`
/// (as `KUBECONFIG` and as `~/.kube/config`) and at `registry`.
async fn run_child(kubeconfig: &Path, registry: &str, home: &Path) -> anyhow::Result<()> {
    let kube_dir = home.join(".kube");
    std::fs::create_dir_all(&kube_dir)?;
    std::fs::copy(kubeconfig, kube_dir.join("config"))?;
    let exe = std::env::current_exe().context("locating the test binary")?;
    let child = tokio::process::Command::new(&exe)
        .args(CHILD_TESTS)
        .args(["--exact", "--test-threads", "2"])
        .env("KUBECONFIG", kubeconfig)
        .env("WASMOP_REGISTRY", registry)
        .env("HOME", home)
        // The child finds helm and the binaries through tools.env, not the parent's PATH.
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), child)
        .await
        .context("the child test run took over 5 minutes")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "the child run with KUBECONFIG={} failed ({}):\n{stdout}\n{}",
        kubeconfig.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = format!("{} passed", CHILD_TESTS.len());
    anyhow::ensure!(
        stdout.contains(&ran),
        "the child did not run all of {CHILD_TESTS:?}:\n{stdout}"
    );
    Ok(())
}

#[tokio::test]
async fn tests_never_touch_the_cluster_or_registry_the_shell_names() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let dir = Scratch::new("isolation")?;
    let upstream = local
        .api_server()
        .strip_prefix("https://")
        .context("the local API server speaks https")?
        .trim_end_matches('/')
        .to_string();

    // A second API server that works: a client pointed at it lists namespaces through it.
    let second = Decoy::start(Some(upstream)).await?;
    let second_config = dir.path().join("second.kubeconfig");
    kubeconfig_at(&local, second.port, &second_config)?;
    let namespaces: Api<Namespace> = Api::all(client_from(&second_config).await?);
    namespaces
        .list(&ListParams::default().limit(1))
        .await
        .context("the second API server answers")?;
    let baseline = second.seen();
    anyhow::ensure!(baseline > 0, "the relay counted no connection");

    // An address nothing listens on.
    let dead_config = dir.path().join("dead.kubeconfig");
    kubeconfig_at(&local, free_port()?, &dead_config)?;

    // A registry that counts (and drops) what reaches it.
    let registry = Decoy::start(None).await?;
    let registry_address = format!("127.0.0.1:{}", registry.port);

    for (name, config) in [("second", &second_config), ("dead", &dead_config)] {
        let home = dir.path().join(format!("home-{name}"));
        run_child(config, &registry_address, &home)
            .await
            .with_context(|| format!("with the shell pointing at the {name} API server"))?;
    }
    assert_eq!(
        second.seen(),
        baseline,
        "a test connected to the API server KUBECONFIG named instead of the local one"
    );
    assert_eq!(
        registry.seen(),
        0,
        "a test connected to the registry WASMOP_REGISTRY named"
    );
    Ok(())
}

#[tokio::test]
async fn a_state_naming_another_api_server_is_refused_before_any_request() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let dir = Scratch::new("isolation-state")?;
    // A state directory whose env file is the local one's but whose kubeconfig names a server
    // that listens, so that a request, if one were sent, would be counted.
    let decoy = Decoy::start(None).await?;
    let kubeconfig = dir.path().join("kubeconfig");
    kubeconfig_at(&local, decoy.port, &kubeconfig)?;
    let env = std::fs::read_to_string(local.kubeconfig.with_file_name("env"))?;
    let env: String = env
        .lines()
        .map(|line| match line.strip_prefix("export KUBECONFIG=") {
            Some(_) => format!("export KUBECONFIG={}", kubeconfig.display()),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.path().join("env"), env)?;
    let elsewhere = Local::discover_in(dir.path())?;
    let err = match elsewhere.client().await {
        Ok(_) => anyhow::bail!("a client for another API server was built"),
        Err(err) => format!("{err:#}"),
    };
    let named = format!("refusing API server https://127.0.0.1:{}/", decoy.port);
    assert!(err.contains(&named), "{err}");
    assert_eq!(decoy.seen(), 0, "a request reached the refused server");

    // And a registry off loopback in the state is refused by name.
    std::fs::write(
        dir.path().join("env"),
        "export KUBECONFIG=/nonexistent\nexport WASMOP_APISERVER=https://127.0.0.1:1\n\
         export WASMOP_REGISTRY=registry.example.com:5000\n",
    )?;
    let err = match Local::discover_in(dir.path()) {
        Ok(_) => anyhow::bail!("a registry off loopback was taken"),
        Err(err) => format!("{err:#}"),
    };
    assert!(
        err.contains("refusing registry registry.example.com:5000"),
        "{err}"
    );
    Ok(())
}
