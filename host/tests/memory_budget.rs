//! The memory budget with real wasmtime and the fault plugin: 8 calls each capped at 256 MiB,
//! each allocating until it hits its cap, run at once under a 512 MiB budget. Without the
//! budget they would touch 2 GiB together; with it at most one holds its cap at a time, every
//! call ends with MemoryExceeded (or waited for budget and says so), and the process's peak RSS
//! grows by less than the budget. Its own test binary, so that the peak is this test's alone.

mod support;

use std::{sync::Arc, time::Duration};

use serde_json::json;
use support::{component, peak_rss};
use wasmop_host::plugin::{
    CallError,
    budget::MemoryBudget,
    engine::PluginEngine,
    input::AppContext,
    limits::CallLimits,
    metrics::PluginMetrics,
    registry::{Offer, PluginRegistry},
    sandbox::CallTags,
    source::{Fetched, OciRef, SourceRef},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_budget_wait_instead_of_exhausting_the_host() {
    const BUDGET: u64 = 512 << 20;
    let engine = PluginEngine::with_budget(MemoryBudget::new(BUDGET)).expect("engine");
    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/fault:1"));
    let Offer::Loaded(fault) = registry
        .offer(&source, Fetched::new(component("fault_plugin.wasm")))
        .await
    else {
        panic!("the fault plugin loads");
    };
    let limits = CallLimits {
        deadline: Duration::from_secs(2),
        ..CallLimits::with_overrides(None, Some(256))
    };
    assert_eq!(limits.memory_bytes, 256 << 20);
    let app = Arc::new(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "t", "namespace": "default", "uid": "u", "generation": 1},
        "spec": {"plugin": {"image": "x"}, "version": "1", "config": {"fault": "memory"}},
    }));
    let before = peak_rss();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (fault, app) = (Arc::clone(&fault), Arc::clone(&app));
            tokio::spawn(async move {
                fault
                    .run(
                        "spec-diff",
                        "default",
                        limits.memory_bytes,
                        move |plugin, engine| {
                            let cx = AppContext::new(app.as_ref(), [], 0);
                            plugin.call_plan(engine, &limits, CallTags::default(), &cx, None, "1")
                        },
                    )
                    .await
            })
        })
        .collect();
    let mut exceeded = 0;
    for call in calls {
        match call.await.expect("joined") {
            Err(CallError::MemoryExceeded { limit_mib, .. }) => {
                assert_eq!(limit_mib, 256);
                exceeded += 1;
            }
            Err(err @ CallError::OverBudget { .. }) => {
                assert!(
                    err.to_string().contains("512 MiB plugin memory budget"),
                    "{err}"
                );
            }
            other => panic!("a call allocating past its cap ended with {other:?}"),
        }
    }
    let grown = peak_rss().saturating_sub(before);
    println!(
        "8 calls at 256 MiB under a 512 MiB budget: {exceeded} hit their cap, peak RSS grew {} MiB",
        grown >> 20
    );
    assert!(exceeded >= 1, "at least one call ran to its cap");
    assert!(
        grown < BUDGET,
        "peak RSS grew {} MiB, past the {} MiB budget",
        grown >> 20,
        BUDGET >> 20
    );
    assert!(registry.get(&source).current.is_some());
}
