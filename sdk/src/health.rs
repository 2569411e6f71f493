//! The `health` capability: how the service is doing and whether a rollout is done.

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::error::Result;
use crate::metadata::Plugin;
use crate::observed::Observed;
use crate::runtime;

/// Reports health from the observed objects.
pub trait Health: Plugin {
    /// Checks the service.
    fn check(input: &HealthInput<Self::Config>) -> Result<HealthReport>;
}

/// What a check looks at.
#[derive(Debug, Clone)]
pub struct HealthInput<C> {
    /// The App, config typed.
    pub app: App<C>,
    /// Objects that exist now (workloads, Pods).
    pub observed: Observed,
    /// The version being rolled out; [`HealthReport::rollout_complete`]
    /// answers for it.
    pub version: String,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

/// Overall state, mapped by the host onto `Available`/`Progressing`/`Degraded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Serving as configured.
    Healthy,
    /// Converging.
    Progressing,
    /// Not serving as configured and not converging by itself.
    Degraded,
}

/// Status of a [`Condition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// Holds.
    True,
    /// Does not hold.
    False,
    /// Cannot tell.
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// A plugin-specific condition for `status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// CamelCase type, e.g. `ReplicasReady`.
    pub condition_type: String,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// A sentence for humans.
    pub message: String,
}

impl Condition {
    /// A condition; `status` accepts a `bool`.
    pub fn new(
        condition_type: impl Into<String>,
        status: impl Into<ConditionStatus>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            condition_type: condition_type.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The result of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// Overall state.
    pub state: HealthState,
    /// Extra conditions.
    pub conditions: Vec<Condition>,
    /// One-line summary.
    pub message: String,
    /// Whether every replica runs the input version and is ready.
    pub rollout_complete: bool,
}

impl HealthReport {
    fn with_state(state: HealthState, message: impl Into<String>) -> Self {
        HealthReport {
            state,
            conditions: Vec::new(),
            message: message.into(),
            rollout_complete: false,
        }
    }

    /// A healthy report (rollout not yet marked complete).
    pub fn healthy(message: impl Into<String>) -> Self {
        Self::with_state(HealthState::Healthy, message)
    }

    /// A progressing report.
    pub fn progressing(message: impl Into<String>) -> Self {
        Self::with_state(HealthState::Progressing, message)
    }

    /// A degraded report.
    pub fn degraded(message: impl Into<String>) -> Self {
        Self::with_state(HealthState::Degraded, message)
    }

    /// Adds a condition.
    pub fn condition(mut self, condition: Condition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// Marks whether the rollout of the input version is complete.
    pub fn rollout_complete(mut self, complete: bool) -> Self {
        self.rollout_complete = complete;
        self
    }

    /// The condition of type `condition_type`, if reported; for tests.
    pub fn find(&self, condition_type: &str) -> Option<&Condition> {
        self.conditions
            .iter()
            .find(|c| c.condition_type == condition_type)
    }
}

/// `health.check` as a function: app, observed, version, now.
pub type CheckFn = fn(&str, Vec<String>, String, i64) -> Result<HealthReport>;

/// `health.check`, on the WIT's raw values.
pub fn check<P: Health>(
    app: &str,
    observed: Vec<String>,
    version: String,
    now_ms: i64,
) -> Result<HealthReport> {
    let input = HealthInput {
        app: runtime::read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        version,
        now: runtime::read_now(now_ms)?,
    };
    P::check(&input).map_err(|e| input.app.locate(e))
}

/// `health.check` run natively: its answer held to the host's rules, and the decision core's
/// call answered by the plugin's Rust code.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native {
    use wasmop_core::{
        answers::{self, AnswerError, DEFAULT_MAX_OUTPUT_BYTES},
        health::CheckCall,
    };

    use super::{CheckFn, ConditionStatus, HealthReport, HealthState};
    use crate::{error::Error, testing::NativeCall};

    /// The answer, checked.
    pub(crate) fn checked(report: &HealthReport) -> Result<answers::HealthReport, AnswerError> {
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

    impl NativeCall for CheckCall {
        type Function = CheckFn;

        fn call(
            self,
            check: CheckFn,
            app: &str,
            observed: Vec<String>,
            now_ms: i64,
        ) -> Result<Result<answers::HealthReport, AnswerError>, Error> {
            let report = check(app, observed, self.version, now_ms)?;
            Ok(checked(&report))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_compose() {
        let report = HealthReport::healthy("3/3 ready")
            .condition(Condition::new("ReplicasReady", true, "AllReady", "3/3"))
            .rollout_complete(true);
        assert_eq!(report.state, HealthState::Healthy);
        assert!(report.rollout_complete);
        assert_eq!(
            report.find("ReplicasReady").map(|c| c.status),
            Some(ConditionStatus::True)
        );
        assert!(report.find("Other").is_none());
        assert!(!HealthReport::degraded("x").rollout_complete);
    }
}
