//! The wasmop operator host.
//!
//! The host carries the Kubernetes plumbing (watches, caches, reconcile, server-side apply,
//! status, finalizers, leader election, metrics, probes) around sandboxed Wasm plugins that hold
//! the domain logic. The binary `wasmop` is a thin command line over this library.

pub mod api_health;
pub mod app;
pub mod cli;
pub mod coalesce;
pub mod controller;
pub mod crd_install;
pub mod kinds;
pub mod leader;
pub mod plugin;
pub mod plugin_cli;
pub mod policy;
pub mod probes;
pub mod reflect;
pub mod reconcile;
pub mod run;
pub mod telemetry;
pub mod trim;
pub mod watch_backoff;
pub mod write;

// A plugin call allocates on the host for its Store, its WASI context and what it lifts out of
// the guest; with glibc's malloc that was about 7% of a plan call. mimalloc makes plan and
// metadata calls about 5% faster (measured with plugin_bench). Set in the library, not only in
// `main.rs`, so that the benchmark and the tests run with the allocator the binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
