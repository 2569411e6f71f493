//! The condition types the host writes on an App and the failure reasons the decision branches
//! on, each spelled once. A plugin's own conditions are its strings; these are the host's, and
//! a plugin may not write them ([`HOST_TYPES`], checked in [`crate::answers`]).

/// `PluginReady`: whether the App's plugin is loaded and serving.
pub const PLUGIN_READY: &str = "PluginReady";
/// `Available`: whether the service is serving (kstatus' `Ready` by another name).
pub const AVAILABLE: &str = "Available";
/// `Progressing`: a rollout is under way.
pub const PROGRESSING: &str = "Progressing";
/// `Degraded`: serving less than it should, or the plugin or the plan failed.
pub const DEGRADED: &str = "Degraded";
/// `UpgradeGated`: the plugin's upgrade gate holds a version step.
pub const UPGRADE_GATED: &str = "UpgradeGated";

/// `Ready`: the spec is realised: serving, available, settled ([`crate::kstatus`]).
pub const READY: &str = "Ready";
/// `Reconciling`: not Ready yet, and getting there (kstatus' `InProgress`).
pub const RECONCILING: &str = "Reconciling";
/// `Stalled`: not Ready, and not getting there without a change (kstatus' `Failed`).
pub const STALLED: &str = "Stalled";

/// The summary conditions, derived from the others ([`crate::kstatus::summary`]).
pub const SUMMARY_TYPES: [&str; 3] = [READY, RECONCILING, STALLED];

/// Every condition type the host writes.
pub const HOST_TYPES: [&str; 8] = [
    PLUGIN_READY,
    AVAILABLE,
    PROGRESSING,
    DEGRADED,
    UPGRADE_GATED,
    READY,
    RECONCILING,
    STALLED,
];

/// Failure reasons the decision treats apart from the rest.
pub mod reason {
    /// The guard refused the plan (or a backup Job).
    pub const PLAN_REJECTED: &str = "PlanRejected";
    /// The API server refused what the plan asked for.
    pub const APPLY_REJECTED: &str = "ApplyRejected";
    /// Objects the App runs break the rules in force now.
    pub const POLICY_VIOLATION: &str = "PolicyViolation";
    /// The plugin is being fetched and compiled.
    pub const LOADING: &str = "Loading";
}
