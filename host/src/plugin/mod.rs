//! The lifecycle of a plugin, one stage per module, Kubewarden-style:
//!
//! 1. [`source`]: fetch the bytes from an OCI registry, a ConfigMap or a file;
//! 2. [`digest`] and [`compiled`]: verify what arrived is a component of our world, compile it
//!    (or load it from the on-disk [`cache`]) and validate it with a smoke call;
//! 3. [`registry`]: swap it in atomically beside the version in service, keeping the last good
//!    one when the new one fails;
//! 4. [`call`]: run one capability in a fresh, limited [`sandbox`] per call, on the App and
//!    objects written once per reconcile by [`input`]; [`component_calls`] answers the decision
//!    core's calls with them, for the host and for `wasmop plugin run`;
//! 5. [`watch`]: follow each source in use and offer every new version to the registry.

pub mod bindings;
pub mod budget;
pub mod cache;
pub mod call;
pub mod charge;
pub mod clock;
pub mod compile_queue;
pub mod compiled;
pub mod compiler;
pub mod component_calls;
pub mod digest;
pub mod engine;
pub mod error;
pub mod input;
pub mod limits;
pub mod log_limit;
pub mod metrics;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod source;
pub mod watch;

pub use digest::Digest;
pub use error::{CallError, LoadError};
pub use wasmop_core::{capability::Capability, object};
