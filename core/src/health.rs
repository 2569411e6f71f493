//! Health: turns the plugin's health report (or its absence) into the standard conditions, the
//! phase, and whether the rollout at the rendered version is complete.

use crate::conditions::{AVAILABLE, DEGRADED, PROGRESSING};
use crate::{
    answers::{HealthReport, HealthState},
    decision::Phase,
    status::Cond,
};

/// `health.check(version)`: how the service is doing, and whether `version` is rolled out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckCall {
    /// The version being rolled out: the rendered one.
    pub version: String,
}

/// What the health stage concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Available, Progressing, Degraded, then the plugin's own conditions.
    pub conditions: Vec<Cond>,
    /// Ready, Progressing or Degraded.
    pub phase: Phase,
    /// Whether the rendered version is fully rolled out.
    pub rollout_complete: bool,
}

/// The verdict from a report; `upgrading` marks an allowed upgrade in flight as Progressing.
pub fn verdict(report: Option<HealthReport>, upgrading: bool) -> Verdict {
    let Some(report) = report else {
        // Without a health check, an applied plan is all the host can know.
        return Verdict {
            conditions: vec![
                Cond::new(
                    AVAILABLE,
                    true,
                    "Applied",
                    "the plan is applied (the plugin has no health check)",
                ),
                Cond::new(PROGRESSING, upgrading, "Applied", ""),
                Cond::new(DEGRADED, false, "Applied", ""),
            ],
            phase: Phase::Ready,
            rollout_complete: true,
        };
    };
    let (available, progressing, degraded, reason) = match report.state {
        HealthState::Healthy => (true, false, false, "Healthy"),
        HealthState::Progressing => (false, true, false, "Progressing"),
        HealthState::Degraded => (false, false, true, "Degraded"),
    };
    let mut conditions = vec![
        Cond::new(AVAILABLE, available, reason, report.message.clone()),
        Cond::new(
            PROGRESSING,
            progressing || upgrading,
            reason,
            report.message.clone(),
        ),
        Cond::new(DEGRADED, degraded, reason, report.message.clone()),
    ];
    conditions.extend(report.conditions.into_iter().map(|c| Cond {
        type_: c.type_,
        status: c.status,
        reason: c.reason,
        message: c.message,
    }));
    let phase = match report.state {
        HealthState::Healthy if report.rollout_complete => Phase::Ready,
        HealthState::Degraded => Phase::Degraded,
        _ => Phase::Progressing,
    };
    Verdict {
        conditions,
        phase,
        rollout_complete: report.rollout_complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::PluginCondition;

    fn report(state: HealthState, complete: bool) -> HealthReport {
        HealthReport {
            state,
            conditions: vec![PluginCondition {
                type_: "ReplicasReady".into(),
                status: "True",
                reason: "AllReady".into(),
                message: "3/3".into(),
            }],
            message: "3/3 ready".into(),
            rollout_complete: complete,
        }
    }

    fn status_of<'a>(verdict: &'a Verdict, type_: &str) -> &'a str {
        verdict
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status)
            .unwrap_or("missing")
    }

    #[test]
    fn healthy_and_complete_is_ready_with_the_plugin_conditions() {
        let v = verdict(Some(report(HealthState::Healthy, true)), false);
        assert_eq!((v.phase, v.rollout_complete), (Phase::Ready, true));
        assert_eq!(status_of(&v, "Available"), "True");
        assert_eq!(status_of(&v, "Degraded"), "False");
        assert_eq!(status_of(&v, "ReplicasReady"), "True");
    }

    #[test]
    fn healthy_but_rolling_is_progressing() {
        let v = verdict(Some(report(HealthState::Healthy, false)), true);
        assert_eq!(v.phase, Phase::Progressing);
        assert_eq!(status_of(&v, "Progressing"), "True");
    }

    #[test]
    fn degraded_is_degraded() {
        let v = verdict(Some(report(HealthState::Degraded, false)), false);
        assert_eq!(
            (
                v.phase,
                status_of(&v, "Available"),
                status_of(&v, "Degraded")
            ),
            (Phase::Degraded, "False", "True")
        );
    }

    #[test]
    fn no_health_check_trusts_the_apply() {
        let v = verdict(None, false);
        assert_eq!(
            (v.phase, v.rollout_complete, status_of(&v, "Available")),
            (Phase::Ready, true, "True")
        );
    }
}
