//! `backup.schedule`: a slot and its Job, slots to expire ([`answers::check_backup`]).

use super::*;
use wasmop_core::backup::ScheduleCall;

/// `backup.schedule`'s parameters and results as the host calls it (and typechecks it at load,
/// see `typecheck`).
pub(super) type Params<'a> = (guest::backup::ScheduleInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<guest::backup::ScheduleDecision, guest::backup::PluginError>,);

impl CompiledPlugin {
    /// Calls `backup.schedule`.
    pub fn call_backup(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        last_completed_slot: Option<&str>,
    ) -> Result<BackupDecision, CallError> {
        let capability = Capability::Backup;
        let input = guest::backup::ScheduleInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            last_completed_slot,
            now: cx.now_ms,
        };
        let (result,): Results =
            self.invoke(engine, limits, tags, cx.now_ms, capability, (input,))?;
        let decision = result.map_err(|err| refused!(backup, self.label(), capability, err))?;
        answers::check_backup(
            decision.run.map(|run| (run.slot, run.job)),
            decision.expire,
            decision.requeue_after.map(Duration::from_millis),
            limits.max_output_bytes,
        )
        .map_err(|err| self.bad(capability.interface(), err))
    }
}

impl ComponentCall for ScheduleCall {
    fn call(
        self,
        plugin: &CompiledPlugin,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<BackupDecision, CallError> {
        plugin.call_backup(engine, limits, tags, cx, self.last_completed.as_deref())
    }
}
