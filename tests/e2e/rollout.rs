//! Progressive delivery of a bound kind's plugin (issue 43), on 20 instances of this run's own
//! `Widget` kind bound to the rollout test plugin (`host/tests/plugins/rollout`), whose tag is
//! pushed again with each variant:
//! 1. a digest whose plans the guard refuses for some instances is stopped by its shadow plans:
//!    no instance moves, the digest is marked bad, the refused instances are named;
//! 2. a digest that makes health Degraded reaches the 2 canaries only, which are rolled back
//!    within the soak time and a reconcile; the digest is marked bad;
//! 3. a good digest goes canaries, then batches of 25%, never more instances moved than the
//!    step's target, to all 19 unpinned instances, through a `kill -9` of the host mid-rollout
//!    (the rollout resumes from its step, no instance moves back), while a pinned instance
//!    stays on its digest;
//! 4. `Immediate`, the default, still moves every instance within a poll.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use wasmop_host::{
    binding::PluginBinding,
    plugin::{Digest, source::oci::OciSource},
};

use crate::{
    apps::{BINDING_LABEL, Host},
    bound::{Cleanup, bound_kind_with, instances_of},
    harness::{Local, TestNamespace, component, metric_sum, unique, wait_for},
};

const KIND: &str = "Widget";
const INSTANCES: usize = 20;
/// The instances the `refuse` variant plans past the guard for.
const FRAGILE: [usize; 3] = [3, 10, 17];

/// One run's kind, binding, tag and instances.
struct Fleet {
    local: Local,
    client: Client,
    ns: TestNamespace,
    name: String,
    reference: String,
    instances: Api<DynamicObject>,
    bindings: Api<PluginBinding>,
    _cleanup: Cleanup,
}

impl Fleet {
    /// Pushes `variant` to the fleet's tag; returns its digest.
    async fn push(&self, variant: &str) -> anyhow::Result<String> {
        let bytes = component(&format!("rollout-{variant}.wasm"))?;
        OciSource::new(None, vec![])?
            .push_unchecked(&self.reference, &bytes)
            .await?;
        Ok(Digest::of(&bytes).to_string())
    }

    /// Each instance's `status.plugin.digest` and whether it is Ready, by name.
    async fn serving(&self) -> anyhow::Result<BTreeMap<String, (Option<String>, bool)>> {
        Ok(self
            .instances
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|o| {
                let status = &o.data["status"];
                let digest = status["plugin"]["digest"].as_str().map(str::to_string);
                let ready = status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                (o.metadata.name.unwrap_or_default(), (digest, ready))
            })
            .collect())
    }

    /// The binding's `status.rollout`, as JSON (`null` before one is written).
    async fn rollout(&self) -> anyhow::Result<serde_json::Value> {
        let binding = self.bindings.get(&self.name).await?;
        Ok(serde_json::to_value(binding.status)?["rollout"].clone())
    }

    /// Waits until every instance but those in `except` is Ready on `digest`.
    async fn all_on(&self, digest: &str, except: &[&str], within: Duration) -> anyhow::Result<()> {
        wait_for(
            &format!("every instance Ready on {digest}"),
            within,
            || async {
                let serving = self.serving().await?;
                let done = serving.len() == INSTANCES
                    && serving
                        .iter()
                        .filter(|(name, _)| !except.contains(&name.as_str()))
                        .all(|(_, (d, ready))| d.as_deref() == Some(digest) && *ready);
                Ok(done.then_some(()))
            },
        )
        .await
    }

    /// Waits until the rollout's phase is `phase`; returns the rollout.
    async fn phase(&self, phase: &str, within: Duration) -> anyhow::Result<serde_json::Value> {
        wait_for(&format!("the rollout's phase {phase}"), within, || async {
            let rollout = self.rollout().await?;
            Ok((rollout["phase"] == phase).then_some(rollout))
        })
        .await
    }
}

/// A fleet of [`INSTANCES`] on the `v1` variant, its binding's `spec.rollout` `rollout` (none:
/// `Immediate`), and the host serving it (started with `args`, as `identity`, before the binding
/// is made: it installs the CRDs of this build, whose PluginBinding has `spec.rollout`).
async fn fleet(
    prefix: &str,
    rollout: Option<serde_json::Value>,
    args: &[&str],
) -> anyhow::Result<(Fleet, String, Host)> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    let id = unique(prefix);
    let (group, cleanup) =
        bound_kind_with(&local, &id, "rollout-v1.wasm", KIND, &[&id], &[]).await?;
    let fleet = Fleet {
        reference: format!("{}/e2e/{id}:1", local.registry),
        instances: instances_of(&client, &ns.name, &group, KIND),
        bindings: Api::all(client.clone()),
        name: id.clone(),
        local,
        client,
        ns,
        _cleanup: cleanup,
    };
    let v1 = fleet.push("v1").await?;
    let host = Host::start_with(&fleet.local, &fleet.ns.name, args, &fleet.ns.name).await?;
    let mut spec = json!({
        "kind": {"group": group, "version": "v1", "kind": KIND},
        "plugin": {"image": fleet.reference},
    });
    if let Some(rollout) = rollout {
        spec["rollout"] = rollout;
    }
    let binding: PluginBinding = serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
        "metadata": {"name": id, "labels": {BINDING_LABEL: fleet.ns.name}},
        "spec": spec,
    }))?;
    fleet
        .bindings
        .create(&PostParams::default(), &binding)
        .await?;
    for i in 0..INSTANCES {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": KIND,
            "metadata": {"name": format!("w-{i:02}")},
            "spec": {"version": "1.0.0", "message": "hi", "fragile": FRAGILE.contains(&i)},
        }))?;
        fleet
            .instances
            .create(&PostParams::default(), &object)
            .await?;
    }
    fleet.all_on(&v1, &[], Duration::from_secs(90)).await?;
    Ok((fleet, v1, host))
}

fn progressive(soak_seconds: u32) -> serde_json::Value {
    json!({
        "strategy": "Progressive",
        "canary": {"count": 2},
        "batchPercent": 25,
        "soakSeconds": soak_seconds,
        "progressDeadlineSeconds": 120,
        "allowPinning": true,
    })
}

/// Every name seen on `digest` while `until` runs, sampling every 200 ms.
async fn watch_moves<F: std::future::Future<Output = anyhow::Result<T>>, T>(
    fleet: &Fleet,
    digest: &str,
    until: F,
) -> anyhow::Result<(T, BTreeSet<String>)> {
    tokio::pin!(until);
    let mut seen = BTreeSet::new();
    loop {
        tokio::select! {
            result = &mut until => return Ok((result?, seen)),
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                for (name, (d, _)) in fleet.serving().await? {
                    if d.as_deref() == Some(digest) {
                        seen.insert(name);
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn shadow_plans_stop_a_digest_the_guard_refuses_before_any_instance_moves()
-> anyhow::Result<()> {
    let (fleet, v1, host) = fleet("e2e-rollout-shadow", Some(progressive(2)), &[]).await?;
    fleet.phase("Stable", Duration::from_secs(30)).await?;
    // A pin of a digest the binding never served (another source's, say) is refused.
    let stranger = format!("sha256:{}", "0".repeat(64));
    fleet
        .instances
        .patch(
            "w-18",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"wasmop.dev/plugin-digest": stranger}}}),
            ),
        )
        .await?;
    // Annotations do not bump the generation: a change of the spec brings the reconcile.
    fleet
        .instances
        .patch(
            "w-18",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"message": "pinned"}})),
        )
        .await?;
    let refused = wait_for("w-18's pin refused", Duration::from_secs(30), || async {
        let object = fleet.instances.get("w-18").await?;
        let found = object.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "PinUnknown")
            .and_then(|c| c["message"].as_str().map(str::to_string));
        Ok(found)
    })
    .await?;
    assert!(refused.contains(&stranger), "{refused}");

    let refuse = fleet.push("refuse").await?;
    let (rollout, moved) = watch_moves(
        &fleet,
        &refuse,
        fleet.phase("Stopped", Duration::from_secs(60)),
    )
    .await?;
    assert!(moved.is_empty(), "instances moved: {moved:?}");
    let shadow = &rollout["shadow"];
    assert_eq!(shadow["digest"], refuse.as_str());
    assert_eq!(shadow["planned"], INSTANCES - 1, "all but the pinned one");
    assert_eq!(shadow["refused"], FRAGILE.len(), "{rollout}");
    let first = shadow["refusals"][0].as_str().unwrap_or_default();
    assert!(
        first.starts_with(&format!("{}/w-03: PlanRejected", fleet.ns.name)),
        "the refusal names the instance and the rule: {first}"
    );
    assert!(first.contains("kube-system"), "{first}");
    assert_eq!(rollout["stable"], v1.as_str());
    assert!(
        rollout["bad"]
            .as_array()
            .is_some_and(|b| b.iter().any(|d| d == refuse.as_str())),
        "{rollout}"
    );
    // A few polls later, still nothing moved: the bad digest starts no new rollout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    fleet.all_on(&v1, &["w-18"], Duration::from_secs(5)).await?;
    assert_eq!(fleet.rollout().await?["phase"], "Stopped");
    let outcomes = metric_sum(&host.url("/metrics"), "wasmop_rollout_outcomes_total").await?;
    assert_eq!(outcomes, 1.0);
    // Back to Immediate: the rollout's state goes with the strategy (kept, it would serve its
    // stale stable digest to every instance once the binding is progressive again).
    fleet
        .bindings
        .patch(
            &fleet.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"rollout": {"strategy": "Immediate"}}})),
        )
        .await?;
    wait_for(
        "the rollout state to go",
        Duration::from_secs(30),
        || async { Ok(fleet.rollout().await?.is_null().then_some(())) },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_canary_that_degrades_is_rolled_back_and_the_rest_never_move() -> anyhow::Result<()> {
    const SOAK: u64 = 20;
    let (fleet, v1, host) =
        fleet("e2e-rollout-canary", Some(progressive(SOAK as u32)), &[]).await?;
    fleet.phase("Stable", Duration::from_secs(30)).await?;

    let degraded = fleet.push("degraded").await?;
    let pushed = Instant::now();
    let (rollout, moved) = watch_moves(
        &fleet,
        &degraded,
        fleet.phase("RolledBack", Duration::from_secs(90)),
    )
    .await?;
    // From the push: a poll, the shadow plans, the canaries' reconciles, a step.
    let took = pushed.elapsed();
    eprintln!("canaries on {degraded}: {moved:?}; rolled back {took:?} after the push");
    assert!(!moved.is_empty() && moved.len() <= 2, "moved: {moved:?}");
    assert!(
        took < Duration::from_secs(SOAK),
        "rolled back before the soak time would have let it pass: {took:?}"
    );
    assert_eq!(rollout["stable"], v1.as_str());
    assert!(rollout["candidate"].is_null(), "{rollout}");
    assert!(
        rollout["bad"]
            .as_array()
            .is_some_and(|b| b.iter().any(|d| d == degraded.as_str())),
        "{rollout}"
    );
    let message = rollout["message"].as_str().unwrap_or_default();
    assert!(message.contains("Degraded"), "{message}");
    fleet.all_on(&v1, &[], Duration::from_secs(30)).await?;
    let metrics = host.url("/metrics");
    assert_eq!(
        metric_sum(&metrics, "wasmop_rollout_outcomes_total").await?,
        1.0
    );
    // The Event on the binding says so.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(fleet.client.clone(), "default");
    let found = wait_for(
        "the RolloutRolledBack event",
        Duration::from_secs(20),
        || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("RolloutRolledBack")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(fleet.name.as_str())
                })
                .map(|_| ()))
        },
    )
    .await;
    found?;
    Ok(())
}

#[tokio::test]
async fn a_good_digest_rolls_out_in_batches_through_a_host_kill_and_a_pin_stays()
-> anyhow::Result<()> {
    let cache = std::env::temp_dir().join(unique("wasmop-rollout-cache"));
    let cache_arg = cache.display().to_string();
    let args = ["--cache-dir", cache_arg.as_str()];
    let (fleet, v1, host) = fleet("e2e-rollout-batches", Some(progressive(3)), &args).await?;
    let identity = fleet.ns.name.clone();
    fleet.phase("Stable", Duration::from_secs(30)).await?;
    // w-19 pins v1.
    fleet
        .instances
        .patch(
            "w-19",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"wasmop.dev/plugin-digest": v1}}})),
        )
        .await?;

    let v2 = fleet.push("v2").await?;
    // Sampled: the instances on v2 never outnumber the step's target, each step adds at most a
    // batch (5 of 19), and no instance goes back to v1.
    let mut targets: Vec<u64> = Vec::new();
    let mut on_v2: BTreeSet<String> = BTreeSet::new();
    let mut killed = None;
    let mut host = Some(host);
    let started = Instant::now();
    let mut phases: Vec<String> = Vec::new();
    loop {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(240),
            "the rollout did not finish: {:?}, {}",
            phases,
            fleet.rollout().await?
        );
        let serving = fleet.serving().await?;
        let rollout = fleet.rollout().await?;
        let phase = rollout["phase"].as_str().unwrap_or_default().to_string();
        if phases.last() != Some(&phase) {
            phases.push(phase.clone());
        }
        let now_on: BTreeSet<String> = serving
            .iter()
            .filter(|(_, (d, _))| d.as_deref() == Some(v2.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        let back: Vec<&String> = on_v2.difference(&now_on).collect();
        anyhow::ensure!(back.is_empty(), "instances moved back: {back:?}");
        anyhow::ensure!(!now_on.contains("w-19"), "the pinned instance moved");
        if phase == "Stable" && rollout["stable"] == v2.as_str() {
            break;
        }
        if let Some(target) = rollout["target"].as_u64()
            && (phase == "Canary" || phase == "Batches")
        {
            anyhow::ensure!(
                now_on.len() as u64 <= target,
                "{} instances on v2, over the step's target {target}",
                now_on.len()
            );
            if targets.last() != Some(&target) {
                targets.push(target);
            }
        }
        on_v2 = now_on;
        // Mid-rollout, after the first batch: the host is killed and started again.
        if killed.is_none() && phase == "Batches" && rollout["step"].as_u64() >= Some(1) {
            if let Some(host) = host.take() {
                host.kill().await?;
            }
            killed = Some((rollout["step"].as_u64().unwrap_or(0), on_v2.len()));
            eprintln!("host killed at step {killed:?}");
            host = Some(Host::start_with(&fleet.local, &fleet.ns.name, &args, &identity).await?);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("phases {phases:?}, targets {targets:?}");
    anyhow::ensure!(killed.is_some(), "the host was never killed mid-rollout");
    assert_eq!(targets.first(), Some(&2), "two canaries first: {targets:?}");
    for pair in targets.windows(2) {
        assert!(
            pair[1] > pair[0] && pair[1] - pair[0] <= 5,
            "a step moves at most a batch: {targets:?}"
        );
    }
    assert_eq!(targets.last(), Some(&19), "{targets:?}");
    fleet
        .all_on(&v2, &["w-19"], Duration::from_secs(30))
        .await?;
    let serving = fleet.serving().await?;
    assert_eq!(
        serving["w-19"].0.as_deref(),
        Some(v1.as_str()),
        "the pin holds"
    );
    let binding = fleet.bindings.get(&fleet.name).await?;
    let counts = serde_json::to_value(binding.status)?["rolloutInstances"].clone();
    assert_eq!(
        counts,
        json!({"stable": 19, "candidate": 0, "pinned": 1, "other": 0})
    );
    drop(host);
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}

#[tokio::test]
async fn immediate_moves_every_instance_within_a_poll() -> anyhow::Result<()> {
    let (fleet, _, _host) = fleet("e2e-rollout-immediate", None, &[]).await?;
    let v2 = fleet.push("v2").await?;
    let pushed = Instant::now();
    fleet.all_on(&v2, &[], Duration::from_secs(30)).await?;
    eprintln!("every instance on v2 {:?} after the push", pushed.elapsed());
    assert!(fleet.rollout().await?.is_null(), "no rollout state");
    let _ = &fleet.client;
    Ok(())
}

/// `wasmop rollout ARGS...` against the local cluster; its output, which must be a success.
fn cli(fleet: &Fleet, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new(crate::harness::wasmop_binary()?)
        .arg("rollout")
        .args(args)
        .env("KUBECONFIG", &fleet.local.kubeconfig)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "wasmop rollout {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn the_cli_shows_pauses_resumes_and_aborts_a_rollout() -> anyhow::Result<()> {
    let (fleet, v1, host) = fleet("e2e-rollout-cli", Some(progressive(300)), &[]).await?;
    fleet.phase("Stable", Duration::from_secs(30)).await?;
    let v2 = fleet.push("v2").await?;
    fleet.phase("Canary", Duration::from_secs(60)).await?;
    let status = cli(&fleet, &["status", &fleet.name])?;
    assert!(status.contains("Canary"), "{status}");
    assert!(status.contains(&v2[..19]), "names the candidate: {status}");
    assert!(
        status.contains("shadow plans of") && status.contains("20 planned"),
        "{status}"
    );

    cli(&fleet, &["pause", &fleet.name])?;
    let paused = fleet.bindings.get(&fleet.name).await?;
    assert_eq!(paused.spec.rollout.and_then(|r| r.paused), Some(true));
    wait_for(
        "the rollout to say it is paused",
        Duration::from_secs(30),
        || async {
            let rollout = fleet.rollout().await?;
            let message = rollout["message"].as_str().unwrap_or_default().to_string();
            Ok(message.starts_with("paused").then_some(()))
        },
    )
    .await?;
    assert!(cli(&fleet, &["status", &fleet.name])?.contains("(paused)"));
    cli(&fleet, &["resume", &fleet.name])?;

    let out = cli(&fleet, &["abort", &fleet.name])?;
    assert!(out.contains("abort"), "{out}");
    let rollout = fleet.phase("RolledBack", Duration::from_secs(30)).await?;
    assert!(
        rollout["bad"]
            .as_array()
            .is_some_and(|b| b.iter().any(|d| d == v2.as_str())),
        "{rollout}"
    );
    fleet.all_on(&v1, &[], Duration::from_secs(30)).await?;
    let text = reqwest::get(host.url("/metrics")).await?.text().await?;
    assert!(
        text.lines()
            .any(|l| l.starts_with("wasmop_rollout_outcomes_total{") && l.contains("aborted")),
        "the abort is counted"
    );
    // Nothing to abort now, said plainly.
    let none = std::process::Command::new(crate::harness::wasmop_binary()?)
        .args(["rollout", "abort", &fleet.name])
        .env("KUBECONFIG", &fleet.local.kubeconfig)
        .output()?;
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no rollout in progress"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
    Ok(())
}
