//! `wasmop run`: connect to the cluster, install the CRDs, serve probes, run until signalled.

use anyhow::Context;
use kube::Client;
use prometheus_client::registry::Registry;
use tracing::info;

use crate::{cli::RunArgs, crd_install, probes::Probes};

/// Runs the host until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("building a Kubernetes client from the kubeconfig or in-cluster environment")?;
    let version = client
        .apiserver_version()
        .await
        .context("reaching the Kubernetes API server")?;
    info!(server = %version.git_version, "connected to the API server");

    if !args.skip_crd_install {
        crd_install::ensure_crds(&client)
            .await
            .context("installing the wasmop CRDs")?;
        info!("CRDs established");
    }

    let registry = Registry::with_prefix("wasmop");
    let probes = Probes::new(registry);
    let (addr, server) = probes
        .clone()
        .bind(args.listen)
        .await
        .with_context(|| format!("binding the probe server to {}", args.listen))?;
    info!(%addr, "serving /healthz, /readyz and /metrics");
    let server = tokio::spawn(server);
    probes.set_ready(true);

    shutdown_signal().await?;
    info!("shutting down");
    probes.set_ready(false);
    server.abort();
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT")?,
    }
    Ok(())
}
