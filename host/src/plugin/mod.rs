//! The lifecycle of a plugin, one stage per module, Kubewarden-style:
//!
//! 1. [`source`]: fetch the bytes from an OCI registry, a ConfigMap or a file;
//! 2. [`digest`] and [`compile`]: verify what arrived is a component of our world, compile it
//!    (or load it from the on-disk [`cache`]) and validate it with a smoke call;
//! 3. [`registry`]: swap it in atomically beside the version in service, keeping the last good
//!    one when the new one fails;
//! 4. [`call`]: run one capability in a fresh, limited [`sandbox`] per call, on the App and
//!    objects written once per reconcile by [`input`];
//! 5. [`watch`]: follow each source in use and offer every new version to the registry.

use std::fmt;

pub mod bindings;
pub mod budget;
pub mod cache;
pub mod call;
pub mod clock;
pub mod compile;
pub mod compiler;
pub mod digest;
pub mod engine;
pub mod error;
pub mod input;
pub mod limits;
pub mod log_limit;
pub mod metrics;
pub mod object;
pub mod registry;
pub mod sandbox;
pub mod source;
pub mod watch;

pub use digest::Digest;
pub use error::{CallError, LoadError};

/// One thing a plugin can do; each is one exported WIT interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `spec-diff`: the plan of objects that should exist.
    SpecDiff,
    /// `health`: how the service is doing.
    Health,
    /// `backup`: when to run a backup Job.
    Backup,
    /// `upgrade`: whether a version step may roll out.
    Upgrade,
    /// `finalize`: what to do with retained objects on deletion.
    Finalize,
}

impl Capability {
    /// Every capability, in WIT order.
    pub const ALL: [Capability; 5] = [
        Self::SpecDiff,
        Self::Health,
        Self::Backup,
        Self::Upgrade,
        Self::Finalize,
    ];

    /// The WIT interface name.
    pub fn interface(self) -> &'static str {
        match self {
            Self::SpecDiff => "spec-diff",
            Self::Health => "health",
            Self::Backup => "backup",
            Self::Upgrade => "upgrade",
            Self::Finalize => "finalize",
        }
    }

    /// The fully qualified export name, e.g. `wasmop:plugin/spec-diff@0.1.0`.
    pub fn export_name(self) -> String {
        format!(
            "{}/{}@{}",
            bindings::PACKAGE,
            self.interface(),
            bindings::WORLD_VERSION
        )
    }

    /// The capability an interface name stands for.
    pub fn from_interface(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.interface() == name)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}
