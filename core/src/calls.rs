//! The two things a decision asks of the outside world while it is computed: the plugin's
//! answers ([`PluginCalls`]) and the policy's verdict on what the plugin planned
//! ([`PlanCheck`]). The host answers them with the Wasm component and the namespace's
//! PluginPolicy; `wasmop plugin run` with a component file and an optional policy file; the
//! SDK's `Fixture` with the plugin's Rust traits called natively.

use std::collections::BTreeSet;

use crate::{
    answers::{BackupDecision, CleanupDecision, GateDecision, HealthReport, Plan},
    capability::Capability,
    object::PluginObject,
    observed::ObservedObject,
};

/// Why a call or a check failed: a CamelCase reason for the condition and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// CamelCase, e.g. `PluginTrapped`, `PlanRejected`.
    pub reason: &'static str,
    /// Names the plugin, the object and the rule where there is one.
    pub message: String,
}

impl Failure {
    /// A failure of `reason` saying `message`.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// One plugin's capabilities, each called on the App and objects the caller prepared.
pub trait PluginCalls {
    /// The capabilities the plugin exports.
    fn capabilities(&self) -> &BTreeSet<Capability>;
    /// `upgrade.gate(from, to)`.
    fn gate(&mut self, from: &str, to: &str) -> Result<GateDecision, Failure>;
    /// `spec-diff.plan(current, target)`.
    fn plan(&mut self, current: Option<&str>, target: &str) -> Result<Plan, Failure>;
    /// `health.check(version)`.
    fn health(&mut self, version: &str) -> Result<HealthReport, Failure>;
    /// `backup.schedule(last_completed)`.
    fn backup(&mut self, last_completed: Option<&str>) -> Result<BackupDecision, Failure>;
    /// `finalize.cleanup(retained)`: the caller prepared the App's retained objects as the
    /// call's input ([`crate::deletion`]).
    fn finalize(&mut self) -> Result<CleanupDecision, Failure>;
}

/// The policy's view of one App's plan.
pub trait PlanCheck {
    /// Checks the whole plan; returns its objects with `metadata.namespace` set to the App's,
    /// or why the plan may not be applied (the reason is `PlanRejected`).
    fn check_plan(&self, objects: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure>;
    /// Checks a backup Job before it is created; `accounts` are the ServiceAccounts the App's
    /// plan created, which its pods may run as, and `claims` the PersistentVolumeClaims labelled
    /// with the App, which its pods may mount.
    fn check_backup_job(
        &self,
        slot: &str,
        job: &PluginObject,
        accounts: &BTreeSet<String>,
        claims: &BTreeSet<String>,
    ) -> Result<(), Failure>;
    /// Whether an owned object of this kind that the plan no longer holds may be deleted.
    fn prunable(&self, api_version: &str, kind: &str) -> bool;
    /// The most PersistentVolumeClaims the App may hold ([`crate::claims`]).
    fn max_claims(&self) -> usize {
        crate::claims::DEFAULT_MAX_CLAIMS
    }
    /// Why `object`, which the App owns and which was applied under the rules in force then,
    /// breaks the rules in force now (a policy tightened since), naming the object, the field
    /// and the rule; `None` when it does not. `observed` is everything the host holds of the
    /// App (what its pods may use: its ServiceAccounts and claims). Only the rules on what an
    /// object does are asked, not those on how a plan writes it (metadata the host stamped,
    /// `status` the cluster wrote).
    fn check_live(&self, object: &ObservedObject, observed: &[ObservedObject]) -> Option<String> {
        let _ = (object, observed);
        None
    }
    /// Whether live objects that break the rules in force are deleted (a policy's
    /// `enforcement: Remove`) rather than only reported.
    fn removes_violations(&self) -> bool {
        false
    }
}
