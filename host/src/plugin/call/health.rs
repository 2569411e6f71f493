//! `health.check`: the report, its conditions checked ([`answers::check_health`]: CamelCase,
//! no host-reserved types, at most [`answers::MAX_CONDITIONS`]).

use super::*;
use wasmop_core::health::CheckCall;

/// `health.check`'s parameters and results as the host calls it (and typechecks it at load,
/// see `typecheck`).
pub(super) type Params<'a> = (guest::health::CheckInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<guest::health::Report, guest::health::PluginError>,);

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
        let (result,): Results =
            self.invoke(engine, limits, tags, cx.now_ms, capability, (input,))?;
        let report = result.map_err(|err| refused!(health, self.label(), capability, err))?;
        let report = HealthReport {
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
        };
        answers::check_health(&report, limits.max_output_bytes)
            .map_err(|err| self.bad(capability.interface(), err))?;
        Ok(report)
    }
}

impl ComponentCall for CheckCall {
    fn call(
        self,
        plugin: &CompiledPlugin,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<HealthReport, CallError> {
        plugin.call_health(engine, limits, tags, cx, &self.version)
    }
}
