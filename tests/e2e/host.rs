//! The `wasmop` binary connects to the local cluster, installs its CRD, serves its probes and
//! shuts down cleanly on SIGTERM.

use std::{process::Stdio, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::harness::{Local, TestNamespace, free_port, wait_http_ok, wasmop_binary};

#[tokio::test]
async fn host_installs_crd_serves_probes_and_stops_on_sigterm() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let port = free_port()?;
    // A namespace of its own: a host watching the whole cluster would reconcile (and finalize)
    // the Apps of the tests running beside it, with no lease to keep it from their hosts.
    let ns = TestNamespace::create(&client, "e2e-host").await?;
    let mut host = tokio::process::Command::new(wasmop_binary()?)
        .args(["run", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--namespace", &ns.name])
        .env("KUBECONFIG", &local.kubeconfig)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    for path in ["/healthz", "/readyz", "/metrics", "/debug/plugins"] {
        let url = format!("{base}{path}");
        wait_http_ok(
            &format!("{url} to answer 200"),
            &url,
            Duration::from_secs(30),
        )
        .await?;
    }

    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains("wasmop_plugin_swaps_total"),
        "plugin metrics are exported: {metrics}"
    );
    let plugins: serde_json::Value = serde_json::from_str(
        &http
            .get(format!("{base}/debug/plugins"))
            .send()
            .await?
            .text()
            .await?,
    )?;
    assert!(
        plugins.is_array(),
        "/debug/plugins lists sources: {plugins}"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = crds.get("apps.wasmop.dev").await?;
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "CRD apps.wasmop.dev is not Established");

    let pid = host
        .id()
        .ok_or_else(|| anyhow::anyhow!("the host exited early"))?;
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), host.wait()).await??;
    assert!(
        status.success(),
        "wasmop exited with {status} after SIGTERM"
    );
    ns.delete().await
}
