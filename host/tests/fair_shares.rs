//! Fair shares between namespaces, with real wasmtime, the compile worker and the fault plugin:
//! a namespace that rewrites its plugins in a loop, or keeps the memory budget full, slows
//! itself, not another namespace. Each test prints the other namespace's time alone and under
//! the abuse (run with `--nocapture`); the bounds asserted are generous, as the machine may be
//! building something else meanwhile.

mod support;

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::json;
use support::component;
use wasmop_host::plugin::{
    CallError,
    budget::MemoryBudget,
    charge::Charge,
    compiler::{CompileLimits, Compiler},
    engine::PluginEngine,
    input::AppContext,
    limits::CallLimits,
    metrics::PluginMetrics,
    registry::{LoadedPlugin, Offer, PluginRegistry},
    sandbox::CallTags,
    source::{Fetched, OciRef, SourceRef},
};

fn wasmop_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wasmop"))
}

/// `bytes` with a custom section holding `n` appended: the same component under another digest,
/// so that each variant is compiled anew.
fn variant(bytes: &[u8], n: u64) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasmop-fair-shares";
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(&n.to_le_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    leb128(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

fn config_map(namespace: &str, name: &str) -> SourceRef {
    SourceRef::ConfigMap {
        namespace: namespace.into(),
        name: name.into(),
        key: "plugin.wasm".into(),
    }
}

/// How long `bytes` take from being offered for a new source of `namespace` to being loaded.
async fn time_to_load(
    registry: &Arc<PluginRegistry>,
    namespace: &str,
    name: &str,
    bytes: Vec<u8>,
) -> Duration {
    let start = Instant::now();
    let source = config_map(namespace, name);
    let offer = registry
        .offer_charged(&source, Charge::namespace(namespace), Fetched::new(bytes))
        .await;
    assert!(matches!(offer, Offer::Loaded(_)), "{name} did not load");
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_rewriting_its_plugins_does_not_hold_back_anothers_load() {
    let compiler = Compiler::worker_at(wasmop_binary(), CompileLimits::default());
    let engine =
        PluginEngine::with_compiler(MemoryBudget::unlimited(), compiler, 4).expect("engine");
    // No on-disk cache: every version is compiled.
    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let fault = Arc::new(component("fault_plugin.wasm"));

    let alone = time_to_load(&registry, "other", "alone", variant(&fault, 0)).await;

    // The abuser rewrites four ConfigMaps every 300 ms, each version offered as the watcher
    // offers them (without waiting for the one before).
    const SOURCES: u64 = 4;
    let stop = Arc::new(AtomicBool::new(false));
    let (offered, compiled, skipped) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let started = Instant::now();
    let abusers: Vec<_> = (0..SOURCES)
        .map(|i| {
            let (registry, fault, stop) =
                (Arc::clone(&registry), Arc::clone(&fault), Arc::clone(&stop));
            let (offered, compiled, skipped) = (
                Arc::clone(&offered),
                Arc::clone(&compiled),
                Arc::clone(&skipped),
            );
            tokio::spawn(async move {
                let source = config_map("abuser", &format!("rewritten-{i}"));
                let mut offers = tokio::task::JoinSet::new();
                let mut n = 0;
                let tally = |offer: Offer| match offer {
                    Offer::Loaded(_) | Offer::Swapped { .. } => {
                        compiled.fetch_add(1, Ordering::SeqCst)
                    }
                    Offer::Superseded => skipped.fetch_add(1, Ordering::SeqCst),
                    _ => 0,
                };
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let bytes = variant(&fault, (i + 1) * 1_000_000 + n);
                    let charge = Charge::namespace("abuser");
                    offers.spawn(registry.offer_charged(&source, charge, Fetched::new(bytes)));
                    offered.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    while let Some(done) = offers.try_join_next() {
                        tally(done.expect("joined"));
                    }
                }
                while let Some(done) = offers.join_next().await {
                    tally(done.expect("joined"));
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let abused = time_to_load(&registry, "other", "abused", variant(&fault, 1)).await;
    stop.store(true, Ordering::SeqCst);
    for abuser in abusers {
        abuser.await.expect("joined");
    }
    let abuse = started.elapsed();
    let (offered, compiled, skipped) = (
        offered.load(Ordering::SeqCst),
        compiled.load(Ordering::SeqCst),
        skipped.load(Ordering::SeqCst),
    );
    println!(
        "the other namespace's plugin loaded in {alone:?} alone, in {abused:?} while another \
         rewrote {SOURCES} plugins every 300 ms; over {abuse:?} the abuser offered {offered} \
         versions: {compiled} compiled, {skipped} skipped"
    );
    assert!(
        abused <= alone * 4 + Duration::from_secs(5),
        "{abused:?} under abuse against {alone:?} alone"
    );
    // Each source compiles at most 5 times in its first minute (see `compile_queue`).
    assert!(abuse < Duration::from_secs(60), "the test ran {abuse:?}");
    assert!(compiled <= 5 * SOURCES as usize, "{compiled} compiles");
    assert!(skipped > 0, "no version was skipped");
}

/// One plan call of the fault plugin for an App of `namespace`, with `fault` as its mode.
async fn call(
    fault: &Arc<LoadedPlugin>,
    namespace: &str,
    mode: &str,
    limits: CallLimits,
) -> Result<(), CallError> {
    let app = json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "t", "namespace": namespace, "uid": "u", "generation": 1},
        "spec": {"plugin": {"image": "x"}, "version": "1", "config": {"fault": mode}},
    });
    fault
        .run(
            "spec-diff",
            namespace,
            limits.memory_bytes,
            move |plugin, engine| {
                let cx = AppContext::new(&app, [], 0);
                plugin
                    .call_plan(engine, &limits, CallTags::default(), &cx, None, "1")
                    .map(|_| ())
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_holding_the_memory_budget_does_not_fail_anothers_calls() {
    // The budget of a host with a 1 GiB memory limit.
    const BUDGET: u64 = 768 << 20;
    let engine = PluginEngine::with_budget(MemoryBudget::new(BUDGET)).expect("engine");
    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/fault:1"));
    let Offer::Loaded(fault) = registry
        .offer(&source, Fetched::new(component("fault_plugin.wasm")))
        .await
    else {
        panic!("the fault plugin loads");
    };
    let small = CallLimits::default();
    let large = CallLimits {
        deadline: Duration::from_secs(2),
        ..CallLimits::with_overrides(None, Some(256))
    };
    let timed = async |limits: CallLimits| {
        let start = Instant::now();
        let result = call(&fault, "other", "none", limits).await;
        (result, start.elapsed())
    };
    let (result, small_alone) = timed(small).await;
    result.expect("alone");
    let (result, large_alone) = timed(large).await;
    result.expect("alone");

    // The abuser: two dozen Apps whose every call holds 256 MiB for its whole 2 s deadline,
    // again and again. Two such calls fit the budget at once; the rest wait.
    let stop = Arc::new(AtomicBool::new(false));
    let (ran, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let abusers: Vec<_> = (0..24)
        .map(|_| {
            let (fault, stop, ran, refused) = (
                Arc::clone(&fault),
                Arc::clone(&stop),
                Arc::clone(&ran),
                Arc::clone(&refused),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match call(&fault, "abuser", "loop", large).await {
                        Err(CallError::OverBudget { .. }) => refused.fetch_add(1, Ordering::SeqCst),
                        _ => ran.fetch_add(1, Ordering::SeqCst),
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (result, small_abused) = timed(small).await;
    result.expect("a 64 MiB call beside the abuse");
    let (result, large_abused) = timed(large).await;
    result.expect("a 256 MiB call beside the abuse");
    stop.store(true, Ordering::SeqCst);
    for abuser in abusers {
        abuser.await.expect("joined");
    }
    println!(
        "the other namespace's calls, alone and while another holds the {} MiB budget with \
         24 Apps at 256 MiB for 2 s: 64 MiB {small_alone:?} / {small_abused:?}, 256 MiB \
         {large_alone:?} / {large_abused:?}; the abuser's calls meanwhile: {} ran, {} over \
         budget",
        BUDGET >> 20,
        ran.load(Ordering::SeqCst),
        refused.load(Ordering::SeqCst),
    );
    // The small call fits beside the abuser's two; the large waits for one of them to end.
    assert!(small_abused < Duration::from_secs(2), "{small_abused:?}");
    assert!(large_abused < Duration::from_secs(6), "{large_abused:?}");
}
