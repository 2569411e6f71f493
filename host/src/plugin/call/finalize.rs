//! `finalize.cleanup`: which retained objects to delete and which to keep
//! ([`answers::check_cleanup`]).

use super::*;
use wasmop_core::deletion::CleanupCall;

/// `finalize.cleanup`'s parameters and results as the host calls it (and typechecks it at load,
/// see `typecheck`).
pub(super) type Params<'a> = (guest::finalize::CleanupInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<guest::finalize::CleanupDecision, guest::finalize::PluginError>,);

impl CompiledPlugin {
    /// Calls `finalize.cleanup`.
    pub fn call_finalize(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<CleanupDecision, CallError> {
        let capability = Capability::Finalize;
        let input = guest::finalize::CleanupInput {
            app: &cx.app,
            retained: &cx.observed_texts(),
            now: cx.now_ms,
        };
        let (result,): Results =
            self.invoke(engine, limits, tags, cx.now_ms, capability, (input,))?;
        let decision = result.map_err(|err| refused!(finalize, self.label(), capability, err))?;
        let convert = |r: guest::finalize::ObjectRef| ObjectRef {
            api_version: r.api_version,
            kind: r.kind,
            name: r.name,
        };
        let decision = CleanupDecision {
            delete: decision.delete.into_iter().map(convert).collect(),
            keep: decision.keep.into_iter().map(convert).collect(),
        };
        answers::check_cleanup(&decision, limits.max_output_bytes)
            .map_err(|err| self.bad(capability.interface(), err))?;
        Ok(decision)
    }
}

impl ComponentCall for CleanupCall {
    fn call(
        self,
        plugin: &CompiledPlugin,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<CleanupDecision, CallError> {
        plugin.call_finalize(engine, limits, tags, cx)
    }
}
