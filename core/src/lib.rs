//! The decision core of wasmop: what one reconcile of an App should do, computed as plain data
//! from a snapshot and the plugin's answers ([`decide::decide`]), for one small executor to
//! perform. The host, `wasmop plugin run` and the SDK's `Fixture` all run it, with the same
//! plan rules: the guard ([`guard::AppCheck`] under a [`guard::PlanPolicy`]), the Pod Security
//! Standards ([`pod_security`]) and the kinds plans may hold ([`kind`]). Beside the reconcile,
//! the rules on what a plugin answers the host's webhooks about one instance of a bound kind
//! ([`admission`]).

pub mod admission;
pub mod answers;
pub mod backup;
pub mod calls;
pub mod capability;
pub mod claims;
pub mod conditions;
pub mod decide;
pub mod decision;
pub mod deletion;
pub mod guard;
pub mod health;
pub mod kind;
pub mod kstatus;
pub mod object;
pub mod observed;
pub mod pod_security;
pub mod rollout;
pub mod snapshot;
pub mod stamp;
pub mod status;
pub mod structural;
#[cfg(test)]
mod test_support;
pub mod upgrade;

pub use calls::{Answer, Call, Failure, PlanCheck, PluginCalls};
pub use decide::{PluginState, Snapshot, decide};
pub use decision::{Decision, Event, ObjectKey, Phase, Requeue};
pub use deletion::{Deletion, Finalizer, decide_deletion};
