//! `validate.validate`: the verdict on one instance of a bound kind the API server is asked to
//! write, for the host's validating admission webhook ([`admission::check_verdict`]: bounded
//! counts and texts, no control characters).

use super::*;
use wasmop_core::admission::{self, Operation, ValidateRequest, Verdict, Violation};

/// `validate.validate`'s parameters and results as the host calls it (and typechecks it at
/// load, see `typecheck`).
pub(super) type Params<'a> = (guest::validate::ValidateInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<guest::validate::Verdict, guest::validate::PluginError>,);

impl CompiledPlugin {
    /// Calls `validate.validate` on `request`, in a fresh sandbox with `limits` (whose deadline
    /// the webhook keeps within the API server's timeout).
    pub fn call_validate(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        request: &ValidateRequest,
    ) -> Result<Verdict, CallError> {
        use guest::validate::Operation as Wit;
        let capability = Capability::Validate;
        let groups: Option<Vec<&str>> = request
            .user_groups
            .as_ref()
            .map(|groups| groups.iter().map(String::as_str).collect());
        let input = guest::validate::ValidateInput {
            operation: match request.operation {
                Operation::Create => Wit::Create,
                Operation::Update => Wit::Update,
                Operation::Delete => Wit::Delete,
                Operation::Connect => Wit::Connect,
            },
            object: &request.object,
            old_object: request.old_object.as_deref(),
            user_groups: groups.as_deref(),
            now: request.now_ms,
        };
        let (result,): Results =
            self.invoke(engine, limits, tags, request.now_ms, capability, (input,))?;
        let verdict = result.map_err(|err| refused!(validate, self.label(), capability, err))?;
        let verdict = Verdict {
            violations: verdict
                .violations
                .into_iter()
                .map(|v| Violation {
                    field: v.field,
                    message: v.message,
                })
                .collect(),
            warnings: verdict.warnings,
        };
        admission::check_verdict(&verdict, limits.max_output_bytes)
            .map_err(|err| self.bad(capability.interface(), err))?;
        Ok(verdict)
    }
}
