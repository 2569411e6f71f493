//! What a guest returns is copied into the host only up to the call's output cap, however its
//! lists alias: the fault plugin returns 64 objects that are one 1 MiB buffer, half a million
//! that are, and a log record of 1000 fields that are. Copied naively that is 64 MiB, 512 GiB
//! and 1000 MiB; each call must instead fail with `BadOutput` at once, and the process's peak
//! RSS grow by a few MiB. Its own test binary, so that the peak is this test's alone.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{component, peak_rss};
use wasmop_host::plugin::{
    CallError, Digest, compiled::CompiledPlugin, engine::PluginEngine, input::AppContext,
    limits::CallLimits, sandbox::CallTags,
};

#[test]
fn aliased_lists_cost_the_host_no_more_than_the_output_cap() {
    let engine = PluginEngine::new().expect("engine");
    let bytes = component("fault_plugin.wasm");
    let fault = CompiledPlugin::prepare(&engine, None, "fault", &bytes, Digest::of(&bytes))
        .expect("the fault plugin loads");
    let limits = CallLimits::default();
    let call = |mode: &str| {
        let app = json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "t", "namespace": "default", "uid": "u", "generation": 1},
            "spec": {"plugin": {"image": "x"}, "version": "1", "config": {"fault": mode}},
        });
        let cx = AppContext::new(&app, [], 0);
        fault.call_plan(&engine, &limits, CallTags::default(), &cx, None, "1")
    };
    // One good call first, so that the pool's first instance is not counted as the attack's.
    call("none").expect("a good plan");
    let before = peak_rss();
    for mode in ["alias-output", "alias-list", "alias-log"] {
        let start = Instant::now();
        let err = call(mode).expect_err(mode);
        let elapsed = start.elapsed();
        assert!(
            matches!(err, CallError::BadOutput { .. }),
            "{mode}: unexpected {err:?}"
        );
        println!("{mode}: {err} ({elapsed:?})");
        assert!(elapsed < Duration::from_secs(2), "{mode} took {elapsed:?}");
    }
    let grown = peak_rss().saturating_sub(before);
    println!("peak RSS grew {} MiB", grown >> 20);
    // The guest's own pages (alias-list builds about 17 MiB of Strings and list) plus two
    // transfers (5 MiB each); naive copies would be 64 MiB for the smallest attack alone.
    let bound = (24 << 20) + 2 * limits.transfer_bytes() as u64;
    assert!(
        grown < bound,
        "peak RSS grew {} MiB, past {} MiB",
        grown >> 20,
        bound >> 20
    );
}
