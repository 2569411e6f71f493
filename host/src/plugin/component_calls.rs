//! The decision core's [`PluginCalls`] over a compiled component, for the host's reconciles and
//! for `wasmop plugin run` alike: each call in a fresh sandbox with the App's limits (see
//! [`super::call`]), its failure in the host's words. They differ only in how one call runs,
//! the [`Runner`]: the host's on a blocking thread under the engine's memory budget and the
//! wall-clock cap ([`LoadedPlugin::run`]), the CLI's on its own thread.

use std::{collections::BTreeSet, sync::Arc};

use tokio::runtime::Handle;
use wasmop_core::{Answer, Failure, PluginCalls};

use super::{
    Capability, call::ComponentCall, compiled::CompiledPlugin, engine::PluginEngine,
    input::AppContext, limits::CallLimits, registry::LoadedPlugin, sandbox::CallTags,
};

/// How one call of a [`ComponentCalls`] runs.
pub enum Runner<'a> {
    /// The host's: on a blocking thread, with the App's namespace's share of the engine's
    /// memory budget, under the wall-clock cap ([`LoadedPlugin::run`]). The calls block on
    /// `runtime`: make them from a blocking thread (the decision runs on one, see
    /// `reconcile::execute`).
    Budgeted {
        /// The plugin version in service.
        loaded: Arc<LoadedPlugin>,
        /// The App's namespace, whose share of the memory budget its calls take.
        namespace: String,
        /// The runtime the calls' threads run on.
        runtime: Handle,
    },
    /// `wasmop plugin run`'s: on the calling thread, with the sandbox and limits alone.
    Here {
        /// The plugin.
        compiled: &'a CompiledPlugin,
        /// Its engine.
        engine: &'a PluginEngine,
    },
}

/// One App's plugin, ready to call: a component's answers to the decision core.
pub struct ComponentCalls<'a> {
    runner: Runner<'a>,
    input: Arc<AppContext>,
    limits: CallLimits,
    tags: CallTags,
}

impl ComponentCalls<'static> {
    /// The host's calls of `loaded` on `input` with `limits`, for an App of `namespace` and
    /// tagged with the App's `namespace/name`.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn budgeted(
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
            runner: Runner::Budgeted {
                loaded,
                namespace,
                runtime: Handle::current(),
            },
            input,
            limits,
            tags,
        }
    }
}

impl<'a> ComponentCalls<'a> {
    /// Calls of `compiled` on `input` with `limits`, on the calling thread, tagged with `app`.
    pub fn here(
        compiled: &'a CompiledPlugin,
        engine: &'a PluginEngine,
        input: Arc<AppContext>,
        limits: CallLimits,
        app: String,
    ) -> Self {
        let tags = CallTags {
            plugin: compiled.label(),
            app,
        };
        Self {
            runner: Runner::Here { compiled, engine },
            input,
            limits,
            tags,
        }
    }

    fn compiled(&self) -> &CompiledPlugin {
        match &self.runner {
            Runner::Budgeted { loaded, .. } => &loaded.compiled,
            Runner::Here { compiled, .. } => compiled,
        }
    }
}

impl PluginCalls for ComponentCalls<'_> {
    fn capabilities(&self) -> &BTreeSet<Capability> {
        &self.compiled().capabilities
    }
}

impl<C: ComponentCall> Answer<C> for ComponentCalls<'_> {
    fn answer(&mut self, call: C) -> Result<C::Answer, Failure> {
        let (limits, tags) = (self.limits, self.tags.clone());
        let result = match &self.runner {
            Runner::Budgeted {
                loaded,
                namespace,
                runtime,
            } => {
                let input = Arc::clone(&self.input);
                runtime.block_on(loaded.run(
                    C::CAPABILITY.interface(),
                    namespace,
                    limits.memory_bytes,
                    move |plugin, engine| call.call(plugin, engine, &limits, tags, &input),
                ))
            }
            Runner::Here { compiled, engine } => {
                call.call(compiled, engine, &limits, tags, &self.input)
            }
        };
        result.map_err(|err| Failure::new(err.reason(), err.to_string()))
    }
}
