//! [`NativeCalls`]: the decision core's calls answered by the plugin's Rust code. Each
//! capability's call is answered as its module says ([`NativeCall`], implemented beside each
//! capability trait); what they share is here: finding the plugin's function, and saying a
//! plugin error, a refused answer or a missing capability in the host's words.

use std::collections::BTreeSet;

use wasmop_core::{
    Answer, Call, Failure, PluginCalls, answers::AnswerError, capability::Capability,
};

use super::{answers as rules, reconcile::capabilities};
use crate::error::{Error, ErrorKind};
use crate::runtime::{Exported, Native};

/// One capability's call of the decision core, answered by the plugin's Rust code: implemented
/// beside each capability trait (e.g. in `health.rs` for `health.check`).
pub trait NativeCall: Call {
    /// The capability's WIT function, as its module declares it (e.g.
    /// [`CheckFn`](crate::health::CheckFn)) and [`export!`](crate::export) registers it.
    type Function: Copy + 'static;

    /// Calls `function` on the App JSON `app`, the objects it may see and the clock: the
    /// plugin's error, or its answer as the host's rules on answers take it.
    fn call(
        self,
        function: Self::Function,
        app: &str,
        observed: Vec<String>,
        now_ms: i64,
    ) -> Result<Result<Self::Answer, AnswerError>, Error>;
}

/// The plugin's traits as the decision core's calls: a [`PluginCalls`] that runs the plugin's
/// Rust code directly, through the same parsing and serialization as the component. What
/// [`Fixture::reconcile`](super::Fixture::reconcile) decides with, and what a host built with
/// its `native-plugins` feature (the scale benchmark's measure of the Wasm tax) calls instead
/// of the component.
pub struct NativeCalls {
    native: Native,
    capabilities: BTreeSet<Capability>,
    app: String,
    observed: Vec<String>,
    now_ms: i64,
    label: String,
}

impl NativeCalls {
    /// The calls of plugin `P` for the App JSON `app`, with the observed objects it may see
    /// (JSON text) and the clock `now_ms`.
    pub fn of<P: Exported>(app: String, observed: Vec<String>, now_ms: i64) -> Self {
        let metadata = P::metadata();
        NativeCalls {
            native: P::NATIVE,
            capabilities: capabilities::<P>(),
            app,
            observed,
            now_ms,
            label: rules::label(&metadata),
        }
    }

    /// The host's view of a plugin error: `InvalidConfig` or `PluginError`, naming the field.
    fn refused(&self, interface: &str, err: Error) -> Failure {
        let reason = match err.kind() {
            ErrorKind::InvalidConfig => "InvalidConfig",
            _ => "PluginError",
        };
        let field = err
            .field()
            .map(|f| format!(" (field {f})"))
            .unwrap_or_default();
        Failure::new(
            reason,
            format!(
                "plugin {} refused {interface}: {}{field}",
                self.label,
                err.message()
            ),
        )
    }

    fn missing(&self, interface: &str) -> Failure {
        Failure::new(
            "CapabilityMissing",
            format!("{} does not export {interface}", self.label),
        )
    }
}

impl PluginCalls for NativeCalls {
    fn capabilities(&self) -> &BTreeSet<Capability> {
        &self.capabilities
    }
}

impl<C: NativeCall> Answer<C> for NativeCalls {
    fn answer(&mut self, call: C) -> Result<C::Answer, Failure> {
        let interface = C::CAPABILITY.interface();
        let function = self
            .native
            .function::<C::Function>(C::CAPABILITY)
            .ok_or_else(|| self.missing(interface))?;
        call.call(function, &self.app, self.observed.clone(), self.now_ms)
            .map_err(|err| self.refused(interface, err))?
            // The host's view of an answer it refuses: `BadOutput`, in its words.
            .map_err(|err| rules::failure(&self.label, interface, &err))
    }
}
