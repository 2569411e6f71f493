//! `wasmop-rollout-bench`: what a progressive rollout (issue 43) takes, phase by phase, against
//! the local control plane.
//!
//! N instances of a kind of the run's own, `wasmop plugin crd`'s CRD for the rollout test plugin
//! (`host/tests/plugins/rollout`), bound to its `v1` build by a progressive `PluginBinding`
//! (canaries, batches, soak as given), served by one `wasmop run` of the binary given
//! (`--wasmop`). Once every instance is Ready on v1, `v2` is pushed to the tag, and the binding's
//! `status.rollout` is sampled every 100 ms until v2 is the stable digest and every instance is
//! Ready on it: when each phase and step was first seen, how long the shadow plans took (the
//! host's `wasmop_rollout_shadow_seconds`: per instance, two dry-run decisions), and every write
//! the host made meanwhile (its write fence's log), per instance moved.
//!
//! It prints a markdown table and writes it to `bench/results/<date>-<HHMM>-rollout.md`, then
//! deletes what it made, after a failure too. It needs the local cluster up
//! (`deploy/local/cluster.sh up`) and the rollout plugin's variants built (`tests/run.sh` builds
//! them, or `ROLLOUT_VARIANT=v2 cargo build --release --target wasm32-wasip2 -p rollout-plugin`
//! copied to `rollout-v2.wasm`).

#[path = "../webhook/local.rs"]
mod local;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
};
use serde_json::json;
use wasmop_host::{binding::PluginBinding, plugin::source::oci::OciSource};

use crate::local::{Local, repo_root};

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "wasmop-rollout-bench",
    about = "How long each phase of a progressive plugin rollout takes, and what it writes, \
             against the local cluster"
)]
struct Args {
    /// The `wasmop` binary to measure (a release build for figures worth keeping).
    #[arg(long)]
    wasmop: PathBuf,
    /// Instances of the bound kind.
    #[arg(short = 'n', long, default_value_t = 1000)]
    instances: u32,
    /// Canaries (`spec.rollout.canary.count`).
    #[arg(long, default_value_t = 10)]
    canaries: u32,
    /// `spec.rollout.batchPercent`.
    #[arg(long, default_value_t = 25)]
    batch_percent: u32,
    /// `spec.rollout.soakSeconds`.
    #[arg(long, default_value_t = 5)]
    soak: u32,
    /// The commit `--wasmop` was built from, for the report [default: HEAD].
    #[arg(long)]
    commit: Option<String>,
}

const KIND: &str = "Widget";
const LABEL: &str = "bench.wasmop.dev/namespace";
/// The longest any one wait of the run may take.
const WAIT: Duration = Duration::from_secs(1800);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let local = Local::discover()?;
    let client = local.client().await?;
    let stamp = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
    );
    let ns = format!("bench-rollout-{stamp}");
    let group = format!("r{stamp}.bench.example.com");
    let result = run(&args, &local, &client, &ns, &group).await;
    cleanup(&local, &client, &ns, &group).await;
    let report = result?;
    println!("{report}");
    let dir = repo_root().join("bench/results");
    let now = chrono_like_now();
    let path = dir.join(format!("{now}-rollout.md"));
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("[rollout-bench] wrote {}", path.display());
    Ok(())
}

/// `YYYY-MM-DD-HHMM` in UTC, from `date`.
fn chrono_like_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d-%H%M"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "undated".into())
}

fn component(variant: &str) -> anyhow::Result<Vec<u8>> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let path = dir.join(format!("wasm32-wasip2/release/rollout-{variant}.wasm"));
    std::fs::read(&path).with_context(|| {
        format!(
            "reading {}: build the rollout plugin's variants (tests/run.sh does)",
            path.display()
        )
    })
}

fn digest(bytes: &[u8]) -> String {
    wasmop_host::plugin::Digest::of(bytes).to_string()
}

async fn wait_for<T, F, Fut>(what: &str, every: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if start.elapsed() > WAIT {
            bail!("timed out after {WAIT:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// How many instances are Ready on `digest`.
async fn ready_on(api: &Api<DynamicObject>, digest: &str) -> anyhow::Result<usize> {
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|o| {
            let status = &o.data["status"];
            status["plugin"]["digest"] == digest
                && status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count())
}

async fn metric(port: u16, name: &str) -> anyhow::Result<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| series.split('{').next() == Some(name))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum())
}

async fn run(
    args: &Args,
    local: &Local,
    client: &Client,
    ns: &str,
    group: &str,
) -> anyhow::Result<String> {
    let n = args.instances as usize;
    let (v1, v2) = (component("v1")?, component("v2")?);
    let (d1, d2) = (digest(&v1), digest(&v2));
    local
        .kubectl(["create", "namespace", ns])
        .await
        .context("creating the namespace")?;
    // The kind: its CRD and the host's role for it, as `wasmop plugin crd` prints them.
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let out = tokio::process::Command::new(&args.wasmop)
        .args(["plugin", "crd"])
        .arg(dir.join("wasm32-wasip2/release/rollout-v1.wasm"))
        .args(["--group", group, "--kind", KIND])
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "wasmop plugin crd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::env::temp_dir().join(format!("{ns}.yaml"));
    std::fs::write(&file, &out.stdout)?;
    local
        .kubectl([
            "apply".as_ref(),
            "--server-side".as_ref(),
            "-f".as_ref(),
            file.as_os_str(),
        ])
        .await?;
    local
        .kubectl([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("customresourcedefinition/widgets.{group}"),
        ])
        .await?;
    let reference = format!("{}/bench/{ns}:1", local.registry);
    let oci = OciSource::new(None, vec![])?;
    oci.push_unchecked(&reference, &v1).await?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = std::env::temp_dir().join(format!("{ns}.log"));
    let cache = std::env::temp_dir().join(format!("{ns}-cache"));
    let mut host = tokio::process::Command::new(&args.wasmop)
        .args(["run", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--namespace", ns, "--poll-interval", "1s"])
        .args(["--binding-selector", &format!("{LABEL}={ns}")])
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--allow-private-registries", "127.0.0.0/8"])
        .args(["--log-format", "json"])
        .env("KUBECONFIG", &local.kubeconfig)
        .env("POD_NAME", ns)
        .env("RUST_LOG", "info,wasmop_host::write=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()?;
    let http = reqwest::Client::new();
    wait_for(
        "the host to be ready",
        Duration::from_millis(200),
        || async {
            Ok(http
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
                .then_some(()))
        },
    )
    .await?;

    let bindings: Api<PluginBinding> = Api::all(client.clone());
    let binding: PluginBinding = serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
        "metadata": {"name": ns, "labels": {LABEL: ns}},
        "spec": {
            "kind": {"group": group, "version": "v1", "kind": KIND},
            "plugin": {"image": reference},
            "rollout": {
                "strategy": "Progressive",
                "canary": {"count": args.canaries},
                "batchPercent": args.batch_percent,
                "soakSeconds": args.soak,
                "progressDeadlineSeconds": 1800,
            },
        },
    }))?;
    bindings.create(&PostParams::default(), &binding).await?;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", KIND), "widgets");
    let instances: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let created = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let instances = instances.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{group}/v1"), "kind": KIND,
                    "metadata": {"name": format!("w-{i:05}")},
                    "spec": {"version": "1.0.0", "message": "hi"},
                }))?;
                instances.create(&PostParams::default(), &object).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    wait_for(
        "every instance Ready on v1",
        Duration::from_secs(1),
        || async { Ok((ready_on(&instances, &d1).await? == n).then_some(())) },
    )
    .await?;
    let converged = created.elapsed();
    wait_for(
        "the rollout's Stable on v1",
        Duration::from_millis(200),
        || async {
            let b = bindings.get(ns).await?;
            let state = b.status.and_then(|s| s.rollout);
            Ok(state
                .filter(|s| s.stable.as_deref() == Some(d1.as_str()))
                .map(|_| ()))
        },
    )
    .await?;
    eprintln!("[rollout-bench] {n} instances Ready on v1 in {converged:.1?}; pushing v2");
    // Quiet first: the writes counted are the rollout's.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log_before = std::fs::read_to_string(&log)?.lines().count();

    oci.push_unchecked(&reference, &v2).await?;
    let pushed = Instant::now();
    let mut seen: Vec<(String, Duration, u32)> = Vec::new();
    loop {
        let b = bindings.get(ns).await?;
        let status = b.status.unwrap_or_default();
        let state = status.rollout.unwrap_or_default();
        let label = match state.phase.as_str() {
            "Batches" => format!("Batches step {}", state.step),
            phase => phase.to_string(),
        };
        if seen.last().map(|(l, _, _)| l) != Some(&label) {
            seen.push((label, pushed.elapsed(), state.target));
        }
        if state.stable.as_deref() == Some(d2.as_str()) {
            break;
        }
        if matches!(state.phase.as_str(), "Stopped" | "RolledBack") {
            bail!(
                "the rollout of v2 ended {}: {:?}",
                state.phase.as_str(),
                state.message
            );
        }
        if pushed.elapsed() > WAIT {
            bail!("the rollout of v2 did not finish: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stable_at = pushed.elapsed();
    wait_for(
        "every instance Ready on v2",
        Duration::from_millis(200),
        || async { Ok((ready_on(&instances, &d2).await? == n).then_some(())) },
    )
    .await?;
    let all_at = pushed.elapsed();
    let shadow = metric(port, "wasmop_rollout_shadow_seconds").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = std::fs::read_to_string(&log)?;
    let mut writes: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines().skip(log_before) {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if entry["message"] != "writing to the API server" {
            continue;
        }
        let key = format!(
            "{} {}",
            entry["verb"].as_str().unwrap_or("?"),
            entry["resource"].as_str().unwrap_or("?")
        );
        *writes.entry(key).or_default() += 1;
    }
    let _ = host.kill().await;

    let commit = args.commit.clone().unwrap_or_else(|| {
        std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    });
    let mut report = String::new();
    writeln!(
        report,
        "# Progressive rollout: {n} instances ({} canaries, batches of {}%, soak {} s)\n",
        args.canaries, args.batch_percent, args.soak
    )?;
    writeln!(
        report,
        "`{}` at {commit}, {}; v1 converged in {:.1} s before the push.\n",
        args.wasmop.display(),
        chrono_like_now(),
        converged.as_secs_f64()
    )?;
    writeln!(
        report,
        "| phase (first seen) | s after the push | instances moved by then (target) |"
    )?;
    writeln!(report, "| --- | ---: | ---: |")?;
    for (label, at, target) in &seen {
        writeln!(report, "| {label} | {:.1} | {target} |", at.as_secs_f64())?;
    }
    writeln!(
        report,
        "| v2 stable | {:.1} | {n} |",
        stable_at.as_secs_f64()
    )?;
    writeln!(
        report,
        "| every instance Ready on v2 | {:.1} | |",
        all_at.as_secs_f64()
    )?;
    let total: u64 = writes.values().sum();
    writeln!(
        report,
        "\nShadow plans: {shadow:.2} s for {n} instances, {:.2} ms per instance (two dry-run \
         decisions each).\n",
        shadow * 1000.0 / n as f64
    )?;
    writeln!(
        report,
        "Writes from the push to every instance Ready on v2: {total}, {:.2} per instance moved:\n",
        total as f64 / n as f64
    )?;
    writeln!(report, "| write | count | per instance |")?;
    writeln!(report, "| --- | ---: | ---: |")?;
    for (key, count) in &writes {
        writeln!(
            report,
            "| {key} | {count} | {:.2} |",
            *count as f64 / n as f64
        )?;
    }
    Ok(report)
}

/// Deletes what the run made; what fails is reported and skipped.
async fn cleanup(local: &Local, client: &Client, ns: &str, group: &str) {
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    let release = json!({"metadata": {"finalizers": null}});
    let _ = bindings
        .patch(ns, &PatchParams::default(), &Patch::Merge(&release))
        .await;
    let _ = bindings.delete(ns, &DeleteParams::default()).await;
    // The rollout plugin plans ConfigMaps only, so its instances carry no finalizer: the
    // namespace goes with them, the host stopped.
    if let Err(err) = local
        .kubectl([
            "delete",
            "namespace",
            ns,
            "--wait=false",
            "--ignore-not-found",
        ])
        .await
    {
        eprintln!("[rollout-bench] cleanup: the namespace: {err:#}");
    }
    let crd = format!("customresourcedefinition/widgets.{group}");
    let role = format!("clusterrole/wasmop-widgets.{group}");
    if let Err(err) = local
        .kubectl(["delete", "--ignore-not-found", "--wait=false", &crd, &role])
        .await
    {
        eprintln!("[rollout-bench] cleanup: the CRD and role: {err:#}");
    }
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("{ns}-cache")));
}
