//! `health.check`: the report, its conditions checked (CamelCase, no host-reserved types, at
//! most [`MAX_CONDITIONS`]).

use super::*;

/// Most conditions a health report may carry beside the host's own.
pub const MAX_CONDITIONS: usize = 16;

impl CompiledPlugin {
    /// Calls `health.check`.
    pub fn call_health(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        version: &str,
    ) -> Result<HealthReport, CallError> {
        use guest::health::{ConditionStatus, State};
        let capability = Capability::Health;
        let input = guest::health::CheckInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            version,
            now: cx.now_ms,
        };
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.health,
            |g, store, instance| {
                g.load(&mut *store, instance)?
                    .call_check(&mut *store, input)
            },
        )?;
        let report = result.map_err(|err| refused!(health, self.label(), capability, err))?;
        let size = report.message.len()
            + report
                .conditions
                .iter()
                .map(|c| c.condition_type.len() + c.reason.len() + c.message.len())
                .sum::<usize>();
        self.check_size(capability, limits, size)?;
        // Each condition is written into the App's status on every change; with the messages
        // cut to 1 KiB, this bounds a status to a few tens of KiB whatever the plugin says.
        if report.conditions.len() > MAX_CONDITIONS {
            return Err(self.bad(
                capability,
                format!(
                    "{} conditions; at most {MAX_CONDITIONS}",
                    report.conditions.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &report.conditions {
            if RESERVED_CONDITIONS.contains(&c.condition_type.as_str())
                || !seen.insert(&c.condition_type)
            {
                return Err(self.bad(
                    capability,
                    format!(
                        "condition type {:?} is the host's or repeated",
                        c.condition_type
                    ),
                ));
            }
            if !is_camel_case(&c.condition_type) || !is_camel_case(&c.reason) {
                return Err(self.bad(
                    capability,
                    format!(
                        "condition type {:?} and reason {:?} must be CamelCase words",
                        c.condition_type, c.reason
                    ),
                ));
            }
        }
        Ok(HealthReport {
            state: match report.state {
                State::Healthy => HealthState::Healthy,
                State::Progressing => HealthState::Progressing,
                State::Degraded => HealthState::Degraded,
            },
            conditions: report
                .conditions
                .into_iter()
                .map(|c| PluginCondition {
                    type_: c.condition_type,
                    status: match c.status {
                        ConditionStatus::True => "True",
                        ConditionStatus::False => "False",
                        ConditionStatus::Unknown => "Unknown",
                    },
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            message: report.message,
            rollout_complete: report.rollout_complete,
        })
    }
}
