//! Evaluate: one call of one capability, in a fresh Store with its deadline and memory cap, and
//! the checks on what comes back before anyone uses it: the rules of
//! [`wasmop_core::answers`] (sizes, JSON shape, condition types...) and, for the webhooks'
//! `validate` and `convert`, of [`wasmop_core::admission`], which the SDK's `Fixture` applies
//! too, held to this call's output cap.
//!
//! The canonical ABI lets a guest return a list whose entries all point at the same bytes: a
//! 64 MiB guest can return eight million entries aliasing one 4 MiB buffer, 32 TiB to copy. So
//! every Store carries wasmtime's hostcall fuel, set to `CallLimits::transfer_bytes`: one lift
//! (a result, or the arguments of one import call) may not copy more, counting every entry
//! however the entries alias. What passes is then held to the output cap and to a count per
//! list, by the answer rules.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use wasmop_core::{
    Call,
    answers::{self, AnswerError, PluginMetadata},
};
use wasmtime::{
    Store, Trap,
    component::{ComponentExportIndex, ComponentNamedList, Instance, InstancePre, Lift, Lower},
};

use super::{
    CallError, Capability,
    bindings::{WitVersion, exports::wasmop::plugin as guest},
    compiled::{CompiledPlugin, Exports},
    engine::PluginEngine,
    input::AppContext,
    limits::CallLimits,
    sandbox::{CallState, CallTags},
};

pub use wasmop_core::answers::{
    BackupDecision, CleanupDecision, GateDecision, HealthReport, HealthState, ObjectRef, Plan,
    PluginCondition,
};

/// Converts one interface's generated `plugin-error` into a [`CallError::Refused`]; each WIT
/// interface has its own copy of the type, so this is written once as a macro.
macro_rules! refused {
    ($iface:ident, $plugin:expr, $capability:expr, $err:expr) => {{
        let err = $err;
        let kind = match err.kind {
            guest::$iface::ErrorKind::InvalidConfig => "invalid-config",
            guest::$iface::ErrorKind::InvalidInput => "invalid-input",
            guest::$iface::ErrorKind::Internal => "internal",
        };
        CallError::Refused {
            plugin: $plugin,
            interface: $capability.interface(),
            kind: kind.to_string(),
            message: err.message,
            field: err.field,
        }
    }};
}

// After the macro: `macro_rules!` is in scope only below its definition, submodules included.
mod backup;
mod convert;
mod finalize;
mod health;
mod metadata;
mod plan;
mod upgrade;
mod validate;

/// One capability's call on a component: implemented in the capability's call file, for the
/// decision core's call type, by calling its `CompiledPlugin::call_*`. How
/// [`ComponentCalls`](super::component_calls::ComponentCalls) answers the core's calls.
pub trait ComponentCall: Call {
    /// Makes the call of `plugin` on `cx` with `limits`.
    fn call(
        self,
        plugin: &CompiledPlugin,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<Self::Answer, CallError>;
}

impl Exports {
    /// Looks up the function of `metadata` and of every capability in `exported`, by the names
    /// of WIT version `wit`, once at load: a component whose exports lack a function fails
    /// here, and one whose functions have other types than this host's WIT fails the
    /// `metadata` smoke call ([`typecheck`]), not its first call.
    pub(super) fn new(
        pre: &InstancePre<CallState>,
        wit: WitVersion,
        exported: &BTreeSet<Capability>,
    ) -> wasmtime::Result<Self> {
        let component = pre.component();
        let function = |interface: &str, function: &str| {
            let name = wit.interface(interface);
            let instance = component
                .get_export_index(None, &name)
                .ok_or_else(|| wasmtime::format_err!("no exported instance named `{name}`"))?;
            component
                .get_export_index(Some(&instance), function)
                .ok_or_else(|| {
                    wasmtime::format_err!(
                        "instance export `{name}` does not have export `{function}`"
                    )
                })
        };
        let metadata = function("metadata", "get")?;
        let mut capabilities = BTreeMap::new();
        for &capability in exported {
            capabilities.insert(
                capability,
                function(capability.interface(), capability.function())?,
            );
        }
        Ok(Self {
            wit,
            metadata,
            capabilities,
        })
    }
}

/// Checks that `capability`'s function `func` of the component has the types the host calls it
/// with (its call file's `Params` and `Results`): wasmtime compares them structurally, so a
/// 0.1.0 or 0.2.0 export passes where its shape is 0.3.0's.
fn typecheck(
    store: &mut Store<CallState>,
    instance: &Instance,
    capability: Capability,
    func: &ComponentExportIndex,
) -> wasmtime::Result<()> {
    match capability {
        Capability::SpecDiff => instance
            .get_typed_func::<plan::Params<'_>, plan::Results>(store, func)
            .map(drop),
        Capability::Health => instance
            .get_typed_func::<health::Params<'_>, health::Results>(store, func)
            .map(drop),
        Capability::Backup => instance
            .get_typed_func::<backup::Params<'_>, backup::Results>(store, func)
            .map(drop),
        Capability::Upgrade => instance
            .get_typed_func::<upgrade::Params<'_>, upgrade::Results>(store, func)
            .map(drop),
        Capability::Finalize => instance
            .get_typed_func::<finalize::Params<'_>, finalize::Results>(store, func)
            .map(drop),
        Capability::Validate => instance
            .get_typed_func::<validate::Params<'_>, validate::Results>(store, func)
            .map(drop),
        Capability::Convert => instance
            .get_typed_func::<convert::Params<'_>, convert::Results>(store, func)
            .map(drop),
    }
}

impl CompiledPlugin {
    /// Runs `f` against a fresh instance in a fresh Store with `limits`, and turns whatever went
    /// wrong into the specific [`CallError`].
    fn with_instance<R>(
        &self,
        engine: &PluginEngine,
        interface: &'static str,
        limits: &CallLimits,
        tags: CallTags,
        now_ms: i64,
        f: impl FnOnce(&mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let state = CallState::new(tags, limits, now_ms);
        let mut store = Store::new(engine.engine(), state);
        store.limiter(|state| state.limiter());
        store.set_epoch_deadline(limits.deadline_ticks());
        store.set_hostcall_fuel(limits.transfer_bytes());
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| f(&mut store, &instance));
        let last_words = store.data_mut().flush_stdio();
        let plugin = self.label();
        result.map_err(|err| {
            if store.data().memory_exceeded() {
                return CallError::MemoryExceeded {
                    plugin,
                    interface,
                    limit_mib: limits.memory_bytes >> 20,
                };
            }
            if let Some(reason) = overreach(&err, limits) {
                return CallError::BadOutput {
                    plugin,
                    interface,
                    reason,
                };
            }
            match err.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => CallError::DeadlineExceeded {
                    plugin,
                    interface,
                    limit: limits.deadline,
                },
                Some(trap) => CallError::Trap {
                    plugin,
                    interface,
                    message: match last_words {
                        Some(words) => format!("{trap}; guest stderr: {words}"),
                        None => trap.to_string(),
                    },
                },
                None => CallError::Host {
                    plugin,
                    interface,
                    message: format!("{err:#}"),
                },
            }
        })
    }

    /// Calls the capability's function with `params`, typed as its call file types them (`P`,
    /// `R`: the call file's `Params` and `Results`), or reports it unsupported.
    fn invoke<P, R>(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        now_ms: i64,
        capability: Capability,
        params: P,
    ) -> Result<R, CallError>
    where
        P: ComponentNamedList + Lower,
        R: ComponentNamedList + Lift,
    {
        let Some(func) = self.exports.capabilities.get(&capability) else {
            return Err(CallError::Unsupported {
                plugin: self.label(),
                interface: capability.interface(),
            });
        };
        self.with_instance(
            engine,
            capability.interface(),
            limits,
            tags,
            now_ms,
            |store, instance| {
                instance
                    .get_typed_func::<P, R>(&mut *store, func)?
                    .call(&mut *store, params)
            },
        )
    }

    /// The answer to `interface` broke one of the answer rules.
    fn bad(&self, interface: &'static str, err: AnswerError) -> CallError {
        CallError::BadOutput {
            plugin: self.label(),
            interface,
            reason: err.to_string(),
        }
    }
}

/// Why a call failed, when it failed because the guest asked the host for more than a call
/// may have: a transfer over [`CallLimits::transfer_bytes`], or more host resources than
/// [`MAX_HOST_RESOURCES`](super::limits::MAX_HOST_RESOURCES).
fn overreach(err: &wasmtime::Error, limits: &CallLimits) -> Option<String> {
    if err
        .chain()
        .any(|e| e.is::<wasmtime::component::ResourceTableError>())
    {
        return Some(format!(
            "it opened more than {} host resources (streams, pollables) at once",
            super::limits::MAX_HOST_RESOURCES
        ));
    }
    // wasmtime says so only in words, so the words are matched; host/tests/runtime.rs and
    // aliased_output.rs prove they still are.
    let exhausted = format!("{err:#}").contains("fuel allocated for hostcalls has been exhausted");
    exhausted.then(|| {
        format!(
            "it passed more than {} bytes to the host in one transfer (a result, or the \
                 arguments of one import call), counting every entry of its lists",
            limits.transfer_bytes()
        )
    })
}
