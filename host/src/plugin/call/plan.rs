//! `spec-diff.plan`: the objects the plugin wants, checked as JSON objects within the caps
//! ([`answers::check_plan`]).

use super::*;
use wasmop_core::decide::PlanCall;

/// `spec-diff.plan`'s parameters and results as the host calls it (and typechecks it at load,
/// see `typecheck`).
pub(super) type Params<'a> = (guest::spec_diff::PlanInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<guest::spec_diff::Desired, guest::spec_diff::PluginError>,);

impl CompiledPlugin {
    /// Calls `spec-diff.plan` and checks every object it returns.
    pub fn call_plan(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        current_version: Option<&str>,
        target_version: &str,
    ) -> Result<Plan, CallError> {
        let capability = Capability::SpecDiff;
        let input = guest::spec_diff::PlanInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            current_version,
            target_version,
            now: cx.now_ms,
        };
        let (result,): Results =
            self.invoke(engine, limits, tags, cx.now_ms, capability, (input,))?;
        let desired = result.map_err(|err| refused!(spec_diff, self.label(), capability, err))?;
        answers::check_plan(
            &desired.objects,
            desired.requeue_after.map(Duration::from_millis),
            limits.max_output_bytes,
        )
        .map_err(|err| self.bad(capability.interface(), err))
    }
}

impl ComponentCall for PlanCall {
    fn call(
        self,
        plugin: &CompiledPlugin,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<Plan, CallError> {
        plugin.call_plan(
            engine,
            limits,
            tags,
            cx,
            self.current.as_deref(),
            &self.target,
        )
    }
}
