//! The host's rules on answers ([`wasmop_core::answers`]) applied to what the plugin under test
//! returns: each answer is converted to the core's and checked by the same functions the host
//! calls, with the host's default output cap, so a [`Fixture`](super::Fixture) fails where the
//! host would refuse the answer as `BadOutput`, in the host's words.

use std::time::Duration;

use wasmop_core::{
    Failure,
    answers::{
        self, AnswerError, BAD_OUTPUT, CleanupDecision, DEFAULT_MAX_OUTPUT_BYTES, GateDecision,
        PluginMetadata,
    },
};

use crate::error::Error;
use crate::finalize::FinalizeDecision;
use crate::health::{ConditionStatus, HealthReport, HealthState};
use crate::metadata::{KindRef, Metadata, Plugin};
use crate::runtime::{RawBackupDecision, RawPlan};
use crate::upgrade::UpgradeDecision;

/// Names the plugin in messages, as `name@version` (the host says `name@digest`).
pub(super) fn label(metadata: &Metadata) -> String {
    format!("{}@{}", metadata.name, metadata.version)
}

/// An answer of plugin `P` to `interface` that the host would refuse, as a
/// [`Fixture`](super::Fixture) method returns it: an `internal` error (a plugin bug) saying so,
/// with the host's message.
pub(super) fn refused<P: Plugin>(interface: &'static str) -> impl FnOnce(AnswerError) -> Error {
    move |err| {
        Error::internal(format!(
            "the host would refuse this answer as {BAD_OUTPUT}: {}",
            answers::refusal(&label(&P::metadata()), interface, &err)
        ))
    }
}

/// An answer the host would refuse, as the host's reconcile reports it.
pub(super) fn failure(label: &str, interface: &str, err: &AnswerError) -> Failure {
    Failure::new(BAD_OUTPUT, answers::refusal(label, interface, err))
}

/// `metadata.get`'s answer, checked.
pub(super) fn metadata(metadata: &Metadata) -> Result<PluginMetadata, AnswerError> {
    let kinds = |refs: &[KindRef]| -> Vec<String> {
        refs.iter()
            .map(|k| format!("{}/{}", k.api_version, k.kind))
            .collect()
    };
    let checked = PluginMetadata {
        name: metadata.name.clone(),
        version: metadata.version.clone(),
        description: metadata.description.clone(),
        owns: kinds(&metadata.owns),
        observes: kinds(&metadata.observes),
    };
    answers::check_metadata(&checked)?;
    Ok(checked)
}

/// `spec-diff.plan`'s answer, checked.
pub(super) fn plan(raw: &RawPlan) -> Result<answers::Plan, AnswerError> {
    answers::check_plan(
        &raw.objects,
        raw.requeue_after_ms.map(Duration::from_millis),
        DEFAULT_MAX_OUTPUT_BYTES,
    )
}

/// `health.check`'s answer, checked.
pub(super) fn health(report: &HealthReport) -> Result<answers::HealthReport, AnswerError> {
    let checked = answers::HealthReport {
        state: match report.state {
            HealthState::Healthy => answers::HealthState::Healthy,
            HealthState::Progressing => answers::HealthState::Progressing,
            HealthState::Degraded => answers::HealthState::Degraded,
        },
        conditions: report
            .conditions
            .iter()
            .map(|c| answers::PluginCondition {
                type_: c.condition_type.clone(),
                status: match c.status {
                    ConditionStatus::True => "True",
                    ConditionStatus::False => "False",
                    ConditionStatus::Unknown => "Unknown",
                },
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        message: report.message.clone(),
        rollout_complete: report.rollout_complete,
    };
    answers::check_health(&checked, DEFAULT_MAX_OUTPUT_BYTES)?;
    Ok(checked)
}

/// `backup.schedule`'s answer, checked.
pub(super) fn backup(raw: RawBackupDecision) -> Result<answers::BackupDecision, AnswerError> {
    answers::check_backup(
        raw.run,
        raw.expire,
        raw.requeue_after_ms.map(Duration::from_millis),
        DEFAULT_MAX_OUTPUT_BYTES,
    )
}

/// `upgrade.gate`'s answer, checked.
pub(super) fn gate(decision: &UpgradeDecision) -> Result<GateDecision, AnswerError> {
    let checked = match decision {
        UpgradeDecision::Allow => GateDecision::Allow,
        UpgradeDecision::Wait(reason) => GateDecision::Wait(reason.clone()),
        UpgradeDecision::Deny(reason) => GateDecision::Deny(reason.clone()),
    };
    answers::check_gate(&checked, DEFAULT_MAX_OUTPUT_BYTES)?;
    Ok(checked)
}

/// `finalize.cleanup`'s answer, checked.
pub(super) fn cleanup(decision: &FinalizeDecision) -> Result<CleanupDecision, AnswerError> {
    let refs = |refs: &[crate::finalize::ObjectRef]| {
        refs.iter()
            .map(|r| answers::ObjectRef {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
            })
            .collect()
    };
    let checked = CleanupDecision {
        delete: refs(&decision.delete),
        keep: refs(&decision.keep),
    };
    answers::check_cleanup(&checked, DEFAULT_MAX_OUTPUT_BYTES)?;
    Ok(checked)
}
