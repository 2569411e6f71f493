//! The `upgrade` capability: whether a version step is safe now.

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::error::Result;
use crate::metadata::Plugin;
use crate::observed::Observed;

/// Gates version steps. Called while `spec.version` differs from
/// `status.version`; the host holds the old version until it allows.
pub trait Upgrade: Plugin {
    /// Decides about the step `input.from` -> `input.to`.
    fn gate(input: &UpgradeInput<Self::Config>) -> Result<UpgradeDecision>;
}

/// The step being asked about.
#[derive(Debug, Clone)]
pub struct UpgradeInput<C> {
    /// The App, config typed.
    pub app: App<C>,
    /// Objects that exist now, including backup Jobs.
    pub observed: Observed,
    /// The rolled-out version.
    pub from: String,
    /// The desired version.
    pub to: String,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeDecision {
    /// Roll out now.
    Allow,
    /// Not yet; the reason says what is awaited. The host asks again.
    Wait(String),
    /// Never, for this step; the reason says why.
    Deny(String),
}

impl UpgradeDecision {
    /// Waits, with a reason.
    pub fn wait(reason: impl Into<String>) -> Self {
        UpgradeDecision::Wait(reason.into())
    }

    /// Denies, with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        UpgradeDecision::Deny(reason.into())
    }

    /// Whether this is [`UpgradeDecision::Allow`].
    pub fn is_allow(&self) -> bool {
        matches!(self, UpgradeDecision::Allow)
    }
}
