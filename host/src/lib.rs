//! The wasmop operator host.
//!
//! The host carries the Kubernetes plumbing (watches, caches, reconcile, server-side apply,
//! status, finalizers, leader election, metrics, probes) around sandboxed Wasm plugins that hold
//! the domain logic. The binary `wasmop` is a thin command line over this library.

pub mod app;
pub mod cli;
pub mod crd_install;
pub mod probes;
pub mod run;
pub mod telemetry;
