//! End-to-end tests against the real local control plane and OCI registry that
//! `deploy/local/cluster.sh up` starts. `tests/run.sh` starts them; run by hand with
//! `deploy/local/cluster.sh up && cargo test -p wasmop-e2e`.
//!
//! All end-to-end tests link into this one binary (as wasmtime's `tests/all` does) so they share
//! the harness and one build.

mod harness;

mod admission_policy;
mod apps;
mod bound;
mod bounds;
mod chaos;
mod cli;
mod cluster;
mod deploy;
mod faults;
mod grants;
mod helm;
mod host;
mod interop;
mod isolation;
mod journey;
mod kstatus;
mod plugin_crd;
mod plugin_sources;
mod policy;
mod pull_secrets;
mod registry;
mod rollout;
mod signatures;
mod webhooks;
