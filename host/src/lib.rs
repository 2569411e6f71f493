//! The wasmop operator host.
//!
//! The host carries the Kubernetes plumbing (watches, caches, reconcile, server-side apply,
//! status, finalizers, leader election, metrics, probes) around sandboxed Wasm plugins that hold
//! the domain logic. The binary `wasmop` is a thin command line over this library. What to
//! decide lives in `wasmop_core` (`decide`, `decide_deletion`, the rules on answers); the host
//! reads, calls and performs.
//!
//! The modules, by side (no import cycle between them: `tests/module_cycles.rs`):
//! - **Triggers and caches**: [`controller`]: the kube-runtime Controller and what requeues an
//!   App, with the kind table (`controller::kinds`: caches, observation, triggers, over the
//!   decision core's kinds), reflectors (`reflect`, `trim`), coalescing and the watches' backoff.
//! - **Your own kinds**: [`binding`] (PluginBindings: which kind a plugin serves, checked and
//!   served) and [`parent`] (an App or a bound kind's instance, as a reconcile reads it).
//! - **One reconcile**: [`reconcile`] (prepare, calls, execute, status, cleanup); the guard and
//!   Pod Security Standards, the plan rules, are the decision core's (`wasmop_core::guard`,
//!   `wasmop_core::pod_security`).
//! - **Plugins**: [`plugin`] (source and the source rules, fetch, verify, compile, registry,
//!   sandboxed calls).
//! - **Bounds from outside the App**: [`policy`] (PluginPolicies, their rules as plan and source
//!   rules, and the RBAC bindings view).
//! - **Writing and leading**: [`write`](mod@write) (field manager, the write fence), [`leader`].
//! - **Running**: [`run`], [`cli`], [`crd_install`], [`probes`], [`api_health`],
//!   [`telemetry`], [`app`] (the App resource).
//! - **The plugin author's CLI**: [`plugin_cli`].
//! - **Webhooks**: [`webhook`] (admission and conversion by plugins; so far the certificates).

pub(crate) mod api_health;
pub mod app;
pub mod binding;
pub mod cli;
pub(crate) mod controller;
pub mod crd_install;
pub mod leader;
pub mod parent;
pub mod plugin;
pub mod plugin_cli;
pub mod policy;
pub(crate) mod probes;
pub mod reconcile;
pub mod rollout;
pub mod run;
pub mod telemetry;
pub mod webhook;
pub(crate) mod write;

// A plugin call allocates on the host for its Store, its WASI context and what it lifts out of
// the guest; with glibc's malloc that was about 7% of a plan call. mimalloc makes plan and
// metadata calls about 5% faster (measured with plugin_bench). Set in the library, not only in
// `main.rs`, so that the benchmark and the tests run with the allocator the binary runs with.
// `system-allocator` leaves glibc's malloc in place: heap profilers that interpose malloc
// (heaptrack, tests/bench/heap.sh) see only that, and it measures mimalloc's retention.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's number for its `purge_delay` option (`mi_option_purge_delay` in mimalloc.h,
/// which libmimalloc-sys does not name): 15 in v2 and v3 alike, whose enum keeps deprecated
/// options in place so that the numbers stay an ABI.
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Makes mimalloc give freed memory back to the OS at once instead of after its purge delay
/// (1 s in mimalloc 3, and counted only while the process allocates). With the delay, the host
/// at 1,000 Apps held 120 MiB once they were Ready, 55 MiB of it freed memory not yet given
/// back; purged at once, 65 MiB, as with glibc's malloc (tests/bench with `WASMOP_BENCH_SMAPS`,
/// 2026-12-07; README "Scale"). `MIMALLOC_PURGE_DELAY` in the environment still decides, if set.
///
/// # Safety
///
/// Call before the process starts a second thread: mimalloc's option table is plain memory,
/// which other threads' allocations read without synchronisation.
#[allow(unsafe_code)]
pub unsafe fn purge_freed_memory_at_once() {
    #[cfg(not(feature = "system-allocator"))]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` stores the value in the option table (0 is a valid delay: purge
        // at once); the caller guarantees no other thread reads it meanwhile.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}
