//! The local cluster and registry `deploy/local/cluster.sh` started, as its state directory
//! (`$WASMOP_LOCAL_STATE`, default `target/local/`) describes them, and nothing else: the
//! shell's `KUBECONFIG` is never read, and a kubeconfig naming any API server but the local one
//! on loopback is refused before a request is sent.

use std::{
    collections::HashMap,
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context, bail, ensure};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// The local cluster.
pub struct Local {
    /// Its admin kubeconfig (`$WASMOP_LOCAL_STATE/kubeconfig`).
    pub kubeconfig: PathBuf,
    /// `host:port` of the local OCI registry.
    pub registry: String,
    /// The API server's URL as `cluster.sh` wrote it (`https://127.0.0.1:PORT`).
    api_server: String,
    /// The local cluster's `kubectl`.
    kubectl: PathBuf,
}

/// The repository's root, from this crate's place in it.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether `host` (of a URL or a `host:port`) is a loopback address.
fn is_loopback(host: &str) -> bool {
    host.trim_matches(['[', ']'])
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

impl Local {
    /// Reads the env file `deploy/local/cluster.sh` wrote in the state directory.
    pub fn discover() -> anyhow::Result<Self> {
        let state = std::env::var_os("WASMOP_LOCAL_STATE")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/local"));
        let env_file = state.join("env");
        let text = std::fs::read_to_string(&env_file).with_context(|| {
            format!(
                "reading {}: start the local cluster with deploy/local/cluster.sh up",
                env_file.display()
            )
        })?;
        let vars: HashMap<&str, &str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .filter_map(|line| line.split_once('='))
            .collect();
        let var = |name: &str| -> anyhow::Result<String> {
            vars.get(name)
                .map(|v| v.to_string())
                .with_context(|| format!("{name} is not in {}", env_file.display()))
        };
        let registry = var("WASMOP_REGISTRY")?;
        let registry_host = registry
            .rsplit_once(':')
            .map_or(registry.as_str(), |(h, _)| h);
        ensure!(
            is_loopback(registry_host),
            "refusing registry {registry} from {}: the benchmark uses only the local registry",
            env_file.display()
        );
        Ok(Self {
            kubeconfig: state.join("kubeconfig"),
            registry,
            api_server: var("WASMOP_APISERVER")?,
            kubectl: PathBuf::from(var("WASMOP_KUBECTL")?),
        })
    }

    /// An admin client of the local cluster; an error naming the server, before any request,
    /// if the kubeconfig points anywhere but the local API server on loopback.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("building a client config from the local kubeconfig")?;
        let server = config.cluster_url.to_string();
        if server.trim_end_matches('/') != self.api_server.trim_end_matches('/')
            || !is_loopback(config.cluster_url.host().unwrap_or_default())
        {
            bail!(
                "refusing API server {server} (from {}): the benchmark uses only the local \
                 cluster at {}",
                self.kubeconfig.display(),
                self.api_server
            );
        }
        Client::try_from(config).context("building a client for the local cluster")
    }

    /// `kubectl ARGS` against the local cluster, which must succeed; its standard output.
    pub async fn kubectl<I, S>(&self, args: I) -> anyhow::Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = tokio::process::Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {}", self.kubectl.display()))?;
        ensure!(
            out.status.success(),
            "kubectl {}: {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn only_loopback_addresses_are_local() {
        assert!(is_loopback("127.0.0.1"));
        assert!(is_loopback("[::1]"));
        assert!(!is_loopback("10.0.0.1"));
        assert!(!is_loopback("localhost.example.com"));
    }
}
