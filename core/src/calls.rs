//! The two things a decision asks of the outside world while it is computed: the plugin's
//! answers ([`PluginCalls`]) and the policy's verdict on what the plugin planned
//! ([`PlanCheck`]). The host answers them with the Wasm component and the namespace's
//! PluginPolicy; `wasmop plugin run` with a component file and an optional policy file; the
//! SDK's `Fixture` with the plugin's Rust traits called natively.

use std::collections::BTreeSet;

pub use crate::capability::PluginCalls;
use crate::{capability::Capability, object::PluginObject, observed::ObservedObject};

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

/// One call of one capability: its input (the App and the objects it may see are the
/// caller's, prepared once per decision) and, as [`Call::Answer`], what the plugin answers.
/// Each capability's call type is declared beside its decision stage and bound to its
/// capability by the table ([`crate::capability`]).
pub trait Call: Send + 'static {
    /// The capability the call is made of.
    const CAPABILITY: Capability;
    /// The plugin's answer, checked by the caller against the rules on answers
    /// ([`crate::answers`]).
    type Answer: Send + 'static;
}

/// Answers calls of type `C`: how one plugin runs ([`PluginCalls`] answers every capability's
/// call). A caller that cannot make a call (the plugin does not export its capability) says so
/// as a failure, `CapabilityMissing`.
pub trait Answer<C: Call> {
    /// Makes `call` of the plugin.
    fn answer(&mut self, call: C) -> Result<C::Answer, Failure>;
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
