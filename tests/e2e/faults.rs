//! Control-plane faults against a running host: `kill -9` of kube-apiserver or etcd, started
//! again 20 s later with `deploy/local/cluster.sh start`. After each, an App created and an App
//! changed once the API server is ready again must be reconciled within 10 s, `/readyz` must
//! have reported not-ready during the outage and ready after, and the host process must not
//! have exited (issue 20: the host went deaf after an API server restart while `/readyz` said
//! ok).
//!
//! These tests stop the shared control plane, so they must not run beside other tests:
//! `tests/run.sh` runs them on their own with `--test-threads 1` after the rest
//! (`cargo test -p wasmop-e2e faults:: -- --test-threads 1`).

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use wasmop_host::app::App;

use crate::{
    apps::{Host, app, wait_app},
    harness::{Local, TestNamespace, plugin_configmap, wait_for},
};

/// How long the component stays down.
const OUTAGE: Duration = Duration::from_secs(20);
/// The bound: API server ready again -> the new and the changed App reconciled.
const RECOVERY: Duration = Duration::from_secs(10);

fn cluster_sh(args: &[&str]) -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/cluster.sh");
    let status = std::process::Command::new(&script)
        .args(args)
        .status()
        .with_context(|| format!("running {} {}", script.display(), args.join(" ")))?;
    if !status.success() {
        bail!("{} {} failed: {status}", script.display(), args.join(" "));
    }
    Ok(())
}

/// `/readyz` of the host every 200 ms: when, and whether it answered 200.
#[derive(Clone, Default)]
struct ReadyzLog(Arc<Mutex<Vec<(Instant, bool)>>>);

impl ReadyzLog {
    fn start(url: String) -> (Self, tokio::task::JoinHandle<()>) {
        let log = Self::default();
        let samples = log.0.clone();
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            loop {
                let ok = http
                    .get(&url)
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if let Ok(mut samples) = samples.lock() {
                    samples.push((Instant::now(), ok));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        (log, task)
    }

    fn samples(&self) -> Vec<(Instant, bool)> {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The first sample at or after `since` whose answer was `ok`.
    fn first(&self, since: Instant, ok: bool) -> Option<Instant> {
        self.samples()
            .into_iter()
            .find(|(at, answer)| *at >= since && *answer == ok)
            .map(|(at, _)| at)
    }
}

async fn api_ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    tokio::time::timeout(Duration::from_secs(2), client.request_text(request))
        .await
        .is_ok_and(|answer| answer.is_ok())
}

fn hello_args(deployment: &Deployment) -> Vec<String> {
    deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

/// Kills `component`, starts it again after [`OUTAGE`], and checks the host through it.
async fn survives_outage_of(component_name: &str) -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "fault").await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.create(
        &PostParams::default(),
        &plugin_configmap("hello-plugin", "hello.wasm")?,
    )
    .await?;
    let plugin = json!({"configMap": {"name": "hello-plugin", "key": "plugin.wasm"}});
    for name in ["a1", "a2"] {
        let spec = app(name, plugin.clone(), "1.0.0", json!({"message": "first"}))?;
        apps.create(&PostParams::default(), &spec).await?;
    }
    let mut host = Host::start(&local, &ns.name).await?;
    let pid = host.pid();
    for name in ["a1", "a2"] {
        wait_app(&apps, name, "reconciled", Duration::from_secs(120), |a| {
            a.status.as_ref().and_then(|s| s.observed_generation) == Some(1)
        })
        .await?;
    }
    let (readyz, sampler) = ReadyzLog::start(host.url("/readyz"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        readyz
            .first(Instant::now() - Duration::from_secs(1), true)
            .is_some(),
        "the host is ready before the fault"
    );

    let killed = Instant::now();
    cluster_sh(&["kill", component_name])?;
    tokio::time::sleep(OUTAGE).await;
    cluster_sh(&["start", component_name])?;
    let ready = wait_for(
        "the API server to be ready again",
        Duration::from_secs(60),
        || async { Ok(api_ready(&client).await.then(Instant::now)) },
    )
    .await?;

    let new = app("new", plugin.clone(), "1.0.0", json!({"message": "second"}))?;
    apps.create(&PostParams::default(), &new).await?;
    apps.patch(
        "a1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"config": {"message": "changed"}}})),
    )
    .await?;
    let left = RECOVERY.saturating_sub(ready.elapsed());
    wait_for(
        "the new App and the changed App to be reconciled",
        left,
        || async {
            let new_done = apps
                .get("new")
                .await?
                .status
                .and_then(|s| s.observed_generation)
                == Some(1);
            let changed = hello_args(&deployments.get("a1").await?)
                .iter()
                .any(|a| a == "-text=changed");
            Ok((new_done && changed).then_some(()))
        },
    )
    .await
    .with_context(|| format!("after the {component_name} outage"))?;
    let reconciled = ready.elapsed();

    wait_for(
        "the host to be ready again",
        Duration::from_secs(30),
        || async { Ok(readyz.first(ready, true)) },
    )
    .await?;
    sampler.abort();
    let unready = readyz
        .first(killed, false)
        .filter(|at| *at < ready)
        .context("/readyz never reported not-ready during the outage")?;
    let ready_again = readyz
        .first(unready, true)
        .context("/readyz never reported ready after the outage")?;
    assert!(host.running(), "the host process exited");
    assert_eq!(host.pid(), pid, "the host process was replaced");
    eprintln!(
        "{component_name} kill -9, {OUTAGE:?} down: /readyz not-ready {:.1}s after the kill, \
         ready {:.1}s after the API server was ready; new and changed App reconciled {:.1}s \
         after it (bound {RECOVERY:?})",
        unready.duration_since(killed).as_secs_f64(),
        ready_again.saturating_duration_since(ready).as_secs_f64(),
        reconciled.as_secs_f64(),
    );
    drop(host);
    ns.delete().await
}

#[tokio::test]
async fn host_recovers_from_an_api_server_kill() -> anyhow::Result<()> {
    survives_outage_of("kube-apiserver").await
}

#[tokio::test]
async fn host_recovers_from_an_etcd_kill() -> anyhow::Result<()> {
    survives_outage_of("etcd").await
}
