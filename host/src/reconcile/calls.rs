//! The decision core's [`PluginCalls`] over a loaded Wasm component: each call in a fresh
//! sandbox with the App's limits, on a blocking thread, under the engine's memory budget and the
//! wall-clock cap (see [`LoadedPlugin::run`]).

use std::{collections::BTreeSet, sync::Arc};

use tokio::runtime::Handle;
use wasmop_core::{
    Failure, PluginCalls,
    answers::{BackupDecision, CleanupDecision, GateDecision, HealthReport, Plan},
};

use crate::plugin::{
    CallError, Capability, compile::CompiledPlugin, engine::PluginEngine, input::AppContext,
    limits::CallLimits, registry::LoadedPlugin, sandbox::CallTags,
};

/// One App's plugin, ready to call. Its methods block: call them from a blocking thread (the
/// decision runs on one, see [`super::execute`]).
pub struct HostCalls {
    loaded: Arc<LoadedPlugin>,
    /// The App's namespace, whose share of the memory budget its calls take.
    namespace: String,
    input: Arc<AppContext>,
    limits: CallLimits,
    tags: CallTags,
    runtime: Handle,
}

impl HostCalls {
    /// Calls of `loaded` on `input` with `limits`, for an App of `namespace` and tagged with
    /// the App's `namespace/name`.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        loaded: Arc<LoadedPlugin>,
        input: Arc<AppContext>,
        limits: CallLimits,
        namespace: String,
        app: String,
    ) -> Self {
        let tags = CallTags {
            plugin: loaded.compiled.label(),
            app,
        };
        Self {
            loaded,
            namespace,
            input,
            limits,
            tags,
            runtime: Handle::current(),
        }
    }

    fn call<R, F>(&self, interface: &'static str, call: F) -> Result<R, Failure>
    where
        R: Send + 'static,
        F: FnOnce(
                &CompiledPlugin,
                &PluginEngine,
                &CallLimits,
                CallTags,
                &AppContext,
            ) -> Result<R, CallError>
            + Send
            + 'static,
    {
        let (limits, tags, input) = (self.limits, self.tags.clone(), Arc::clone(&self.input));
        self.runtime
            .block_on(self.loaded.run(
                interface,
                &self.namespace,
                limits.memory_bytes,
                move |plugin, engine| call(plugin, engine, &limits, tags, &input),
            ))
            .map_err(|err| Failure::new(err.reason(), err.to_string()))
    }
}

impl PluginCalls for HostCalls {
    fn capabilities(&self) -> &BTreeSet<Capability> {
        &self.loaded.compiled.capabilities
    }

    fn gate(&mut self, from: &str, to: &str) -> Result<GateDecision, Failure> {
        let (from, to) = (from.to_string(), to.to_string());
        self.call("upgrade", move |p, e, l, t, cx| {
            p.call_upgrade(e, l, t, cx, &from, &to)
        })
    }

    fn plan(&mut self, current: Option<&str>, target: &str) -> Result<Plan, Failure> {
        let (current, target) = (current.map(str::to_string), target.to_string());
        self.call("spec-diff", move |p, e, l, t, cx| {
            p.call_plan(e, l, t, cx, current.as_deref(), &target)
        })
    }

    fn health(&mut self, version: &str) -> Result<HealthReport, Failure> {
        let version = version.to_string();
        self.call("health", move |p, e, l, t, cx| {
            p.call_health(e, l, t, cx, &version)
        })
    }

    fn backup(&mut self, last_completed: Option<&str>) -> Result<BackupDecision, Failure> {
        let last = last_completed.map(str::to_string);
        self.call("backup", move |p, e, l, t, cx| {
            p.call_backup(e, l, t, cx, last.as_deref())
        })
    }

    fn finalize(&mut self) -> Result<CleanupDecision, Failure> {
        self.call("finalize", |p, e, l, t, cx| p.call_finalize(e, l, t, cx))
    }
}
