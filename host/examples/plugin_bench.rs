//! Benchmark of the plugin runtime: call latency (p50/p99) per capability with kvstore on a
//! ~10 KB App and 10 owned objects, including the JSON both ways, and cold compile against a
//! load from the on-disk cache.
//!
//! ```sh
//! plugins/build.sh   # builds kvstore.wasm
//! cargo run --release -p wasmop-host --example plugin_bench [-- PATH/TO/kvstore.wasm [CALLS [CAPABILITY...]]]
//! cargo run --release -p wasmop-host --example plugin_bench -- --compare A.wasm B.wasm... [CAPABILITY]
//! ```
//!
//! `--compare` measures builds of kvstore against each other in one process: batches of calls
//! to each in turn, so that whatever else the machine does slows them alike. It prints, per
//! component, the minimum, first quartile and median of the batches' p50s; on a noisy VM two
//! runs of the same component agree within 1-2% this way, where separate runs differ by 2x.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::{Value, json};
use wasmop_core::guard;
use wasmop_host::plugin::{
    CallError, Digest, cache::Cache, compiled::CompiledPlugin, engine::PluginEngine,
    input::AppContext, limits::CallLimits, sandbox::CallTags,
};

const NOW_MS: i64 = 1_764_633_600_000;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.next_if(|a| a == "--compare").is_some() {
        return compare(args.collect());
    }
    let path = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(default_component);
    let calls: usize = args
        .next()
        .map(|n| n.parse())
        .transpose()
        .context("CALLS must be a number")?
        .unwrap_or(2000);
    // Naming capabilities measures only those: on a noisy machine, many calls of one say more
    // than a few of each.
    let only: Vec<String> = args.collect();
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let digest = Digest::of(&bytes);
    let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;

    // Cold compile (no cache), then a cache fill and cached loads.
    let cold = time_n(3, || {
        CompiledPlugin::prepare(&engine, None, "kvstore", &bytes, digest.clone())?;
        Ok(())
    })?;
    let dir = std::env::temp_dir().join(format!("wasmop-bench-{}", std::process::id()));
    let cache = Cache::open(&dir)?;
    CompiledPlugin::prepare(&engine, Some(&cache), "kvstore", &bytes, digest.clone())?;
    let cached = time_n(10, || {
        let plugin =
            CompiledPlugin::prepare(&engine, Some(&cache), "kvstore", &bytes, digest.clone())?;
        anyhow::ensure!(plugin.from_cache, "expected a cache hit");
        Ok(())
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    let plugin = CompiledPlugin::prepare(&engine, None, "kvstore", &bytes, digest)?;

    let app = app();
    let observed = observed(&engine, &plugin, &app)?;
    let app_size = app.to_string().len();
    let observed_size: usize = observed.iter().map(|o| o.to_string().len()).sum();
    // Serialized once per reconcile and shared by its calls, as the reconciler does.
    let mut serialize = time_n(200, || {
        AppContext::new(&app, &observed, NOW_MS);
        Ok(())
    })?;
    serialize.sort();
    let cx = AppContext::new(&app, &observed, NOW_MS);
    let limits = CallLimits::default();

    println!("component: {} ({} KiB)", path.display(), bytes.len() / 1024);
    println!(
        "input: App {app_size} bytes ({} as plugins get it), {} observed objects ({observed_size} \
         bytes)",
        cx.app_len(),
        observed.len()
    );
    println!(
        "load:  cold compile {:>9.2?} (min of 3)   cached load {:>9.2?} (min of 10)",
        min(&cold),
        min(&cached)
    );
    println!(
        "input: serialized once per reconcile in {:>9.2?} (p50 of 200)",
        serialize[serialize.len() / 2]
    );
    println!(
        "calls: {calls} per capability, fresh instance each; copying the input in, the plugin's \
         parsing and output, and the host's checks of it included"
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "capability", "p50", "p99", "max"
    );
    let report = |name: &str, f: &dyn Fn() -> Result<(), CallError>| -> anyhow::Result<()> {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            return Ok(());
        }
        for _ in 0..calls / 10 {
            f()?;
        }
        let mut samples = time_n(calls, || f().map_err(anyhow::Error::from))?;
        samples.sort();
        let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
        println!(
            "{name:<10} {:>10.2?} {:>10.2?} {:>10.2?}",
            pct(0.50),
            pct(0.99),
            samples[samples.len() - 1]
        );
        Ok(())
    };
    for capability in CAPABILITIES {
        report(capability, &|| {
            call(capability, &plugin, &engine, &limits, &cx)
        })?;
    }
    if only.is_empty() || only.iter().any(|o| o == "guard") {
        // The guard alone, on the plan's objects as the plugin returned them: kind, name and
        // size rules, host metadata, and the restricted Pod Security level on the StatefulSet.
        let tags = CallTags {
            plugin: "kvstore".into(),
            app: "bench/kv".into(),
        };
        let plan = plugin.call_plan(&engine, &limits, tags, &cx, Some("7.2.4"), "7.2.4")?;
        let policy = guard::PlanPolicy::default();
        let check = || {
            guard::check(
                &policy,
                guard::ParentLabels {
                    name: "kv",
                    kind_mark: wasmop_core::observed::APP_KIND_MARK,
                },
                "bench",
                &plugin.metadata.owns,
                plan.objects.clone(),
            )
            .map(drop)
            .map_err(anyhow::Error::from)
        };
        check()?;
        // Cloning the objects is part of what is timed; it is timed alone too.
        let mut clone = time_n(calls, || {
            std::hint::black_box(plan.objects.clone());
            Ok(())
        })?;
        let mut samples = time_n(calls, check)?;
        samples.sort();
        clone.sort();
        println!(
            "guard      {:>10.2?} {:>10.2?} {:>10.2?}   ({} objects; cloning them alone: p50 {:.2?})",
            samples[samples.len() / 2],
            samples[((samples.len() as f64 * 0.99) as usize).min(samples.len() - 1)],
            samples[samples.len() - 1],
            plan.objects.len(),
            clone[clone.len() / 2],
        );
    }
    Ok(())
}

/// What the benchmark calls, in the order it reports them.
const CAPABILITIES: [&str; 6] = [
    "metadata", "plan", "health", "backup", "upgrade", "finalize",
];

/// One call of `capability`, on the bench App at version 7.2.4 (an upgrade asks for 7.3.0).
fn call(
    capability: &str,
    plugin: &CompiledPlugin,
    engine: &PluginEngine,
    limits: &CallLimits,
    cx: &AppContext,
) -> Result<(), CallError> {
    let tags = CallTags {
        plugin: "kvstore".into(),
        app: "bench/kv".into(),
    };
    match capability {
        "metadata" => plugin.call_metadata(engine, limits, tags).map(drop),
        "plan" => plugin
            .call_plan(engine, limits, tags, cx, Some("7.2.4"), "7.2.4")
            .map(drop),
        "health" => plugin
            .call_health(engine, limits, tags, cx, "7.2.4")
            .map(drop),
        "backup" => plugin.call_backup(engine, limits, tags, cx, None).map(drop),
        "upgrade" => plugin
            .call_upgrade(engine, limits, tags, cx, "7.2.4", "7.3.0")
            .map(drop),
        // The last of CAPABILITIES, which is all callers pass.
        _ => plugin.call_finalize(engine, limits, tags, cx).map(drop),
    }
}

/// Batches per component in `--compare`, and calls per batch.
const ROUNDS: usize = 30;
const BATCH: usize = 200;

fn compare(args: Vec<String>) -> anyhow::Result<()> {
    let (paths, rest): (Vec<String>, Vec<String>) =
        args.into_iter().partition(|a| a.ends_with(".wasm"));
    anyhow::ensure!(
        !paths.is_empty(),
        "--compare needs component paths (*.wasm)"
    );
    let capability = rest.first().map_or("plan", String::as_str);
    anyhow::ensure!(
        CAPABILITIES.contains(&capability),
        "--compare measures one of {CAPABILITIES:?}, not {capability}"
    );
    let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let plugins = paths
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
            let digest = Digest::of(&bytes);
            Ok(CompiledPlugin::prepare(
                &engine, None, "kvstore", &bytes, digest,
            )?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let app = app();
    // Every build sees the objects the first one plans.
    let observed = observed(&engine, &plugins[0], &app)?;
    let cx = AppContext::new(&app, &observed, NOW_MS);
    let limits = CallLimits::default();
    let call = |plugin| call(capability, plugin, &engine, &limits, &cx);
    for plugin in &plugins {
        for _ in 0..BATCH {
            call(plugin)?;
        }
    }
    let mut p50s = vec![Vec::with_capacity(ROUNDS); plugins.len()];
    for _ in 0..ROUNDS {
        for (plugin, p50s) in plugins.iter().zip(&mut p50s) {
            let mut batch = time_n(BATCH, || Ok(call(plugin)?))?;
            batch.sort();
            p50s.push(batch[BATCH / 2]);
        }
    }
    println!("{capability}: p50 of {BATCH} calls, {ROUNDS} batches per component, taken in turn");
    for (path, p50s) in paths.iter().zip(&mut p50s) {
        p50s.sort();
        println!(
            "{path:<50} min {:>9.2?}   q1 {:>9.2?}   median {:>9.2?}",
            p50s[0],
            p50s[ROUNDS / 4],
            p50s[ROUNDS / 2]
        );
    }
    Ok(())
}

fn default_component() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("wasm32-wasip2/release/kvstore.wasm")
}

fn time_n(n: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Vec<Duration>> {
    (0..n)
        .map(|_| {
            let start = Instant::now();
            f().map(|()| start.elapsed())
        })
        .collect()
}

fn min(samples: &[Duration]) -> Duration {
    samples.iter().copied().min().unwrap_or_default()
}

/// A kvstore App of about 10 KB: a realistic config, the last-applied annotation `kubectl apply`
/// leaves (a copy of what was applied), and a large annotation of the user's. The host drops the
/// last-applied copy before a plugin sees the App; the user's annotation reaches the plugin, so
/// the App the plugin parses is still about 10 KB.
fn app() -> Value {
    let config = json!({
        "replicas": 3,
        "storage": "10Gi",
        "backup": {"schedule": "0 */6 * * *", "retain": 5},
        "retention": "Retain",
    });
    let mut app = json!({
        "apiVersion": "wasmop.dev/v1alpha1",
        "kind": "App",
        "metadata": {
            "name": "kv", "namespace": "bench", "uid": "3f1c2b9a-0000-4000-8000-000000000001",
            "generation": 4, "resourceVersion": "123456",
            "labels": {"team": "storage", "tier": "cache"},
            "annotations": {},
        },
        "spec": {"plugin": {"image": "127.0.0.1:15000/plugins/kvstore:1.0"}, "version": "7.2.4", "config": config},
        "status": {"version": "7.2.4", "observedGeneration": 4},
    });
    let applied = json!({
        "apiVersion": app["apiVersion"], "kind": app["kind"],
        "metadata": {"name": "kv", "namespace": "bench", "labels": app["metadata"]["labels"]},
        "spec": app["spec"],
    });
    app["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        Value::String(applied.to_string());
    let padding = "x".repeat(10_000usize.saturating_sub(app.to_string().len()));
    app["metadata"]["annotations"]["example.com/notes"] = Value::String(padding);
    app
}

/// Ten owned objects as the host would observe them: kvstore's own plan with statuses filled
/// in, plus the StatefulSet's Pods.
fn observed(
    engine: &PluginEngine,
    plugin: &CompiledPlugin,
    app: &Value,
) -> anyhow::Result<Vec<Value>> {
    let cx = AppContext::new(app, [], NOW_MS);
    let plan = plugin.call_plan(
        engine,
        &CallLimits::default(),
        CallTags::default(),
        &cx,
        None,
        "7.2.4",
    )?;
    let mut objects: Vec<Value> = plan.objects.iter().map(|o| o.to_value()).collect();
    for object in &mut objects {
        if object["kind"] == "StatefulSet" {
            object["metadata"]["generation"] = json!(1);
            object["status"] = json!({
                "observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                "currentReplicas": 3, "updatedReplicas": 3,
                "currentRevision": "kv-7c9d", "updateRevision": "kv-7c9d",
            });
        }
    }
    for i in 0..(10usize.saturating_sub(objects.len())) {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("kv-{i}"), "namespace": "bench", "labels": {"wasmop.dev/app": "kv", "controller-revision-hash": "kv-7c9d"}},
            "spec": {"containers": [{"name": "valkey", "image": "valkey/valkey:7.2.4"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }));
    }
    Ok(objects)
}
