//! The `upgrade` capability: whether a version step is safe now.

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::error::Result;
use crate::metadata::Plugin;
use crate::observed::Observed;
use crate::runtime;

/// Gates version steps. Called while `spec.version` differs from
/// `status.version`; the host holds the old version until it allows.
pub trait Upgrade: Plugin {
    /// Decides about the step `input.from` -> `input.to`.
    fn gate(input: &UpgradeInput<Self::Config>) -> Result<UpgradeDecision>;
}

/// The step being asked about.
#[derive(Debug, Clone)]
pub struct UpgradeInput<C> {
    /// The App, config typed.
    pub app: App<C>,
    /// Objects that exist now, including backup Jobs.
    pub observed: Observed,
    /// The rolled-out version.
    pub from: String,
    /// The desired version.
    pub to: String,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeDecision {
    /// Roll out now.
    Allow,
    /// Not yet; the reason says what is awaited. The host asks again.
    Wait(String),
    /// Never, for this step; the reason says why.
    Deny(String),
}

impl UpgradeDecision {
    /// Waits, with a reason.
    pub fn wait(reason: impl Into<String>) -> Self {
        UpgradeDecision::Wait(reason.into())
    }

    /// Denies, with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        UpgradeDecision::Deny(reason.into())
    }

    /// Whether this is [`UpgradeDecision::Allow`].
    pub fn is_allow(&self) -> bool {
        matches!(self, UpgradeDecision::Allow)
    }
}

/// `upgrade.gate` as a function: app, observed, from, to, now.
pub type GateFn = fn(&str, Vec<String>, String, String, i64) -> Result<UpgradeDecision>;

/// `upgrade.gate`, on the WIT's raw values.
pub fn gate<P: Upgrade>(
    app: &str,
    observed: Vec<String>,
    from: String,
    to: String,
    now_ms: i64,
) -> Result<UpgradeDecision> {
    let input = UpgradeInput {
        app: runtime::read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        from,
        to,
        now: runtime::read_now(now_ms)?,
    };
    P::gate(&input).map_err(|e| input.app.locate(e))
}

/// `upgrade.gate` run natively: its answer held to the host's rules, and the decision core's
/// call answered by the plugin's Rust code.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native {
    use wasmop_core::{
        answers::{self, AnswerError, DEFAULT_MAX_OUTPUT_BYTES, GateDecision},
        upgrade::GateCall,
    };

    use super::{GateFn, UpgradeDecision};
    use crate::{error::Error, testing::NativeCall};

    /// The answer, checked.
    pub(crate) fn checked(decision: &UpgradeDecision) -> Result<GateDecision, AnswerError> {
        let checked = match decision {
            UpgradeDecision::Allow => GateDecision::Allow,
            UpgradeDecision::Wait(reason) => GateDecision::Wait(reason.clone()),
            UpgradeDecision::Deny(reason) => GateDecision::Deny(reason.clone()),
        };
        answers::check_gate(&checked, DEFAULT_MAX_OUTPUT_BYTES)?;
        Ok(checked)
    }

    impl NativeCall for GateCall {
        type Function = GateFn;

        fn call(
            self,
            gate: GateFn,
            app: &str,
            observed: Vec<String>,
            now_ms: i64,
        ) -> Result<Result<GateDecision, AnswerError>, Error> {
            let decision = gate(app, observed, self.from, self.to, now_ms)?;
            Ok(checked(&decision))
        }
    }
}
