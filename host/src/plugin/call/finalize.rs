//! `finalize.cleanup`: which retained objects to delete and which to keep.

use super::*;

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
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.finalize,
            |g, store, instance| {
                g.load(&mut *store, instance)?
                    .call_cleanup(&mut *store, input)
            },
        )?;
        let decision = result.map_err(|err| refused!(finalize, self.label(), capability, err))?;
        let listed = decision.delete.len() + decision.keep.len();
        if listed > MAX_LISTED {
            return Err(self.bad(
                capability,
                format!("{listed} objects to delete or keep; at most {MAX_LISTED}"),
            ));
        }
        let size: usize = decision
            .delete
            .iter()
            .chain(&decision.keep)
            .map(|r| r.api_version.len() + r.kind.len() + r.name.len())
            .sum();
        self.check_size(capability, limits, size)?;
        let convert = |r: guest::finalize::ObjectRef| ObjectRef {
            api_version: r.api_version,
            kind: r.kind,
            name: r.name,
        };
        Ok(CleanupDecision {
            delete: decision.delete.into_iter().map(convert).collect(),
            keep: decision.keep.into_iter().map(convert).collect(),
        })
    }
}
