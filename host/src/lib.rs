//! The wasmop operator host.
//!
//! The host carries the Kubernetes plumbing (watches, caches, reconcile, server-side apply,
//! status, finalizers, leader election, metrics, probes) around sandboxed Wasm plugins that hold
//! the domain logic. The binary `wasmop` is a thin command line over this library.

pub mod app;
pub mod cli;
pub mod controller;
pub mod crd_install;
pub mod leader;
pub mod plugin;
pub mod plugin_cli;
pub mod probes;
pub mod reconcile;
pub mod run;
pub mod telemetry;
