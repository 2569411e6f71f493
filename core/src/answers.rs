//! What a plugin answers, once the host has checked it: a plan, a health report, a backup
//! decision, an upgrade gate's verdict, a finalize decision. Plain data, the same whether the
//! answer came from a Wasm component or from a plugin's Rust traits called natively.

use std::time::Duration;

use crate::object::PluginObject;

/// The objects a plugin wants to exist.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Each a JSON object with `apiVersion`, `kind` and `metadata.name`.
    pub objects: Vec<PluginObject>,
    /// When the plugin wants to be asked again regardless of events.
    pub requeue_after: Option<Duration>,
}

/// The overall state a health check reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// Everything is as planned and serving.
    Healthy,
    /// Converging.
    Progressing,
    /// Serving less than it should, or not at all.
    Degraded,
}

/// One plugin-specific condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCondition {
    /// Condition type, CamelCase.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

/// What a health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// The overall state.
    pub state: HealthState,
    /// Plugin-specific conditions.
    pub conditions: Vec<PluginCondition>,
    /// For people.
    pub message: String,
    /// Whether the rollout at the checked version is complete.
    pub rollout_complete: bool,
}

/// What the backup schedule decided.
#[derive(Debug, Clone)]
pub struct BackupDecision {
    /// A backup to start now: its slot id and Job.
    pub run: Option<(String, PluginObject)>,
    /// Slots whose Jobs should be deleted.
    pub expire: Vec<String>,
    /// When to ask again.
    pub requeue_after: Option<Duration>,
}

/// What the upgrade gate decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Roll out the new version now.
    Allow,
    /// Not yet; ask again later.
    Wait(String),
    /// Never, as requested.
    Deny(String),
}

/// An object named by a finalize decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `PersistentVolumeClaim`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
}

/// What to do with objects that outlive the App.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleanupDecision {
    /// Delete these.
    pub delete: Vec<ObjectRef>,
    /// Keep these.
    pub keep: Vec<ObjectRef>,
}
