//! `convert.convert`: one instance of a bound kind at another of its API versions, for the
//! host's conversion webhook ([`admission::check_converted`]: the desired `apiVersion`, the same
//! kind, metadata unchanged but for labels and annotations).

use super::*;
use wasmop_core::admission::{self, ConvertRequest};

/// `convert.convert`'s parameters and results as the host calls it (and typechecks it at load,
/// see `typecheck`).
pub(super) type Params<'a> = (guest::convert::ConvertInput<'a>,);
/// See [`Params`].
pub(super) type Results = (Result<String, guest::convert::PluginError>,);

impl CompiledPlugin {
    /// Calls `convert.convert` on `request`, in a fresh sandbox with `limits`: the converted
    /// object, parsed.
    pub fn call_convert(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        request: &ConvertRequest,
    ) -> Result<serde_json::Value, CallError> {
        let capability = Capability::Convert;
        let input = guest::convert::ConvertInput {
            object: &request.object,
            desired_api_version: &request.desired_api_version,
        };
        // A conversion gets no clock, so its wall clock reads the epoch, as metadata's does.
        let (result,): Results = self.invoke(engine, limits, tags, 0, capability, (input,))?;
        let converted = result.map_err(|err| refused!(convert, self.label(), capability, err))?;
        admission::check_converted(request, &converted, limits.max_output_bytes)
            .map_err(|err| self.bad(capability.interface(), err))
    }
}
