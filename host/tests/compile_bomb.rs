//! Compile bombs: generated components built to take Cranelift's time or memory, compiled the
//! way the host compiles (in `wasmop compile-worker` children under a memory limit and a
//! timeout). Each must be refused as `CompileFailed` within the timeout, remembered so that it
//! is not compiled again, and cost the host process nothing while a good plugin keeps serving.
//! Its own test binary, so that the peak RSS is this test's alone.

mod support;

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::json;
use support::{bombs::bomb, component, peak_rss};
use wasmop_host::plugin::{
    Digest, LoadError,
    budget::MemoryBudget,
    cache::Cache,
    compiled::CompiledPlugin,
    compiler::{CompileLimits, Compiler},
    engine::PluginEngine,
    input::AppContext,
    limits::CallLimits,
    sandbox::CallTags,
};

fn wasmop_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wasmop"))
}

#[test]
fn compile_bombs_fail_in_time_are_remembered_and_cost_the_host_nothing() {
    let limits = CompileLimits {
        memory_bytes: 512 << 20,
        timeout: Duration::from_secs(10),
    };
    let engine = PluginEngine::with_compiler(
        MemoryBudget::unlimited(),
        Compiler::worker_at(wasmop_binary(), limits),
        4,
    )
    .expect("engine");
    let cache_dir = std::env::temp_dir().join(format!("wasmop-bomb-{}", std::process::id()));
    let cache = Cache::open(&cache_dir).expect("a cache");

    // A real plugin compiles in the worker and loads: the artifact is the host's to use.
    let hello = component("hello.wasm");
    let start = Instant::now();
    let good = Arc::new(
        CompiledPlugin::prepare(&engine, None, "hello", &hello, Digest::of(&hello))
            .expect("hello compiles in the worker"),
    );
    println!("hello through the worker: {:?}", start.elapsed());

    // hello keeps planning on another thread while the bombs go off.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let engine = Arc::new(engine);
    let background = {
        let (engine, good, stop, served) = (
            Arc::clone(&engine),
            Arc::clone(&good),
            Arc::clone(&stop),
            Arc::clone(&served),
        );
        thread::spawn(move || {
            let app = json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
                "metadata": {"name": "t", "namespace": "default", "uid": "u", "generation": 1},
                "spec": {"plugin": {"image": "x"}, "version": "1", "config": {}},
            });
            while !stop.load(Ordering::SeqCst) {
                let cx = AppContext::new(&app, [], 0);
                good.call_plan(
                    &engine,
                    &CallLimits::default(),
                    CallTags::default(),
                    &cx,
                    None,
                    "1",
                )
                .expect("hello keeps planning");
                served.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    let bombs = [
        ("one enormous function", bomb(1, 20_000, 100_000)),
        ("100k small functions", bomb(100_000, 4, 4)),
    ];
    let before = peak_rss();
    for (name, bytes) in &bombs {
        println!("{name}: {} bytes", bytes.len());
        let digest = Digest::of(bytes);
        let start = Instant::now();
        let err = CompiledPlugin::prepare(&engine, Some(&cache), name, bytes, digest.clone())
            .err()
            .unwrap_or_else(|| panic!("{name} loaded"));
        let elapsed = start.elapsed();
        println!("{name}: {err} ({elapsed:?})");
        assert!(
            matches!(err, LoadError::Compile { .. }),
            "{name}: unexpected {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("longer than 10s") || text.contains("ran out of its 512 MiB"),
            "{name}: {text}"
        );
        assert!(
            elapsed < limits.timeout + Duration::from_secs(3),
            "{name} took {elapsed:?}"
        );

        // The same digest again: refused from memory, without a compile.
        let start = Instant::now();
        let again = CompiledPlugin::prepare(&engine, Some(&cache), name, bytes, digest)
            .err()
            .unwrap_or_else(|| panic!("{name} loaded the second time"));
        assert!(again.to_string().contains("remembered"), "{again}");
        assert!(start.elapsed() < Duration::from_secs(1));
    }
    let grown = peak_rss().saturating_sub(before);
    stop.store(true, Ordering::SeqCst);
    background.join().expect("the good plugin's thread");
    println!(
        "host peak RSS grew {} MiB; hello planned {} times meanwhile",
        grown >> 20,
        served.load(Ordering::SeqCst)
    );
    assert!(grown < 64 << 20, "the host grew {} MiB", grown >> 20);
    assert!(served.load(Ordering::SeqCst) > 0);
    let _ = std::fs::remove_dir_all(&cache_dir);
}
