//! `upgrade.gate`: allow, wait or deny a version step ([`answers::check_gate`]).

use super::*;
use wasmop_core::upgrade::GateCall;

/// `upgrade.gate`'s parameters and results as the host calls it (and typechecks it at load,
/// see `typecheck`).
pub(super) type Params<'a> = (guest::upgrade::GateInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<guest::upgrade::GateDecision, guest::upgrade::PluginError>,);

impl CompiledPlugin {
    /// Calls `upgrade.gate`.
    pub fn call_upgrade(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        from_version: &str,
        to_version: &str,
    ) -> Result<GateDecision, CallError> {
        let capability = Capability::Upgrade;
        let input = guest::upgrade::GateInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            from_version,
            to_version,
            now: cx.now_ms,
        };
        let (result,): Results =
            self.invoke(engine, limits, tags, cx.now_ms, capability, (input,))?;
        let decision =
            match result.map_err(|err| refused!(upgrade, self.label(), capability, err))? {
                guest::upgrade::GateDecision::Allow => GateDecision::Allow,
                guest::upgrade::GateDecision::Wait(reason) => GateDecision::Wait(reason),
                guest::upgrade::GateDecision::Deny(reason) => GateDecision::Deny(reason),
            };
        answers::check_gate(&decision, limits.max_output_bytes)
            .map_err(|err| self.bad(capability.interface(), err))?;
        Ok(decision)
    }
}

impl ComponentCall for GateCall {
    fn call(
        self,
        plugin: &CompiledPlugin,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<GateDecision, CallError> {
        plugin.call_upgrade(engine, limits, tags, cx, &self.from, &self.to)
    }
}
