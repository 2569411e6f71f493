//! The capabilities a plugin may export, one per WIT interface.

use std::fmt;

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
