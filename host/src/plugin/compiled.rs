//! Verify and precompile: from bytes that claim to be a plugin to a [`CompiledPlugin`] that is
//! known to be a component of our world, with its capabilities discovered from its exports and
//! its `metadata` smoke call passed within the deadline.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use wasmtime::component::{Component, ComponentExportIndex, InstancePre};

use super::{
    Capability, Digest, LoadError,
    bindings::{self, WitVersion},
    cache::Cache,
    compiler::CompileError,
    engine::PluginEngine,
    limits::{CallLimits, MAX_COMPONENT_BYTES},
    sandbox::{CallState, CallTags},
};

pub use wasmop_core::answers::PluginMetadata;

/// A plugin version ready to be called: compiled, linked, validated.
pub struct CompiledPlugin {
    /// Content digest of the component bytes.
    pub digest: Digest,
    /// Size of the component bytes.
    pub size: usize,
    /// What the plugin says about itself.
    pub metadata: PluginMetadata,
    /// Capabilities the component exports (and its metadata confirms).
    pub capabilities: BTreeSet<Capability>,
    /// The version of the `wasmop:plugin` WIT it was built for.
    pub wit: WitVersion,
    /// How long compiling (or loading the cached artifact) took.
    pub compile_time: Duration,
    /// Whether the compiled artifact came from the on-disk cache.
    pub from_cache: bool,
    /// Why the on-disk cache does not hold this version, when it should and does not (a full
    /// or read-only disk): it serves all the same, and a restart fetches and compiles it again.
    pub uncached: Option<String>,
    pub(super) pre: InstancePre<CallState>,
    pub(super) exports: Exports,
}

/// Export indices of the functions of `metadata` and of each capability the component has,
/// under the names of its WIT version, looked up once at load (`Exports::new`, in `call`,
/// beside the calls that use them).
pub(super) struct Exports {
    /// The version whose names they are.
    pub wit: WitVersion,
    /// `metadata.get`.
    pub metadata: ComponentExportIndex,
    /// Each exported capability's one function, e.g. `health.check` for
    /// [`Capability::Health`].
    pub capabilities: BTreeMap<Capability, ComponentExportIndex>,
}

/// The first eight bytes of a binary component (magic, then layer 1 version 0x0d).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
/// The first eight bytes of a core Wasm module.
const CORE_MODULE_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// Checks the bytes are a Wasm component at all, before spending a compile on them.
pub fn verify_component(source_ref: &str, bytes: &[u8]) -> Result<(), LoadError> {
    let refuse = |reason: String| LoadError::NotAComponent {
        source_ref: source_ref.to_string(),
        reason,
    };
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(refuse(format!(
            "{} bytes is over the {MAX_COMPONENT_BYTES} byte limit",
            bytes.len()
        )));
    }
    match bytes.get(..8) {
        Some(header) if header == COMPONENT_HEADER => Ok(()),
        Some(header) if header == CORE_MODULE_HEADER => Err(refuse(
            "it is a core Wasm module; build the plugin for wasm32-wasip2 so that it is a component".into(),
        )),
        Some(header) if header[..4] == COMPONENT_HEADER[..4] => {
            Err(refuse(format!("unknown Wasm version/layer bytes {:02x?}", &header[4..])))
        }
        _ => Err(refuse(format!("{} bytes without the Wasm magic number", bytes.len()))),
    }
}

impl CompiledPlugin {
    /// The instances the component imports and exports, by name (`wasmop:plugin/log@0.1.0`,
    /// `wasi:cli/environment@0.2.6`), each sorted: its world as the component declares it.
    pub fn world(&self) -> (Vec<String>, Vec<String>) {
        let component = self.pre.component();
        let ty = component.component_type();
        let engine = self.pre.engine();
        let mut imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let mut exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        imports.sort();
        exports.sort();
        (imports, exports)
    }

    /// Verifies, compiles (or loads from `cache`), links and validates one plugin version.
    pub fn prepare(
        engine: &PluginEngine,
        cache: Option<&Cache>,
        source_ref: &str,
        bytes: &[u8],
        digest: Digest,
    ) -> Result<Self, LoadError> {
        Self::prepare_gated(engine, cache, source_ref, bytes, digest, || ())
    }

    /// [`Self::prepare`], calling `slot` before it compiles (not when the version loads from
    /// the cache) and holding what it returns until the compile is done: how the registry takes
    /// its turn for the compile slot (see [`super::compile_queue`]).
    pub fn prepare_gated<Slot>(
        engine: &PluginEngine,
        cache: Option<&Cache>,
        source_ref: &str,
        bytes: &[u8],
        digest: Digest,
        slot: impl FnOnce() -> Slot,
    ) -> Result<Self, LoadError> {
        verify_component(source_ref, bytes)?;
        let start = Instant::now();
        // Waiting for the slot is not compiling: it is left out of `compile_time`.
        let mut waited_for_slot = Duration::ZERO;
        let (component, from_cache) = match cache.and_then(|c| c.load_compiled(engine, &digest)) {
            Some(component) => (component, true),
            None => {
                let failed = |message: String| LoadError::Compile {
                    source_ref: source_ref.to_string(),
                    message,
                };
                // A component that failed to compile fails again: it is not compiled again
                // (a bomb would cost its full timeout on every poll and every restart).
                if let Some(reason) = cache.and_then(|c| c.recall_failure(engine, &digest)) {
                    return Err(failed(format!(
                        "{reason} (remembered for digest {}; push a new version)",
                        digest.short()
                    )));
                }
                let asked = Instant::now();
                let _slot = slot();
                waited_for_slot = asked.elapsed();
                let component = match engine.compiler().compile(engine.engine(), bytes) {
                    Ok(component) => component,
                    Err(CompileError::Refused(reason)) => {
                        if let Some(cache) = cache {
                            cache.remember_failure(engine, &digest, &reason);
                        }
                        return Err(failed(reason));
                    }
                    Err(CompileError::Host(reason)) => return Err(failed(reason)),
                };
                (component, false)
            }
        };
        let compile_time = start.elapsed().saturating_sub(waited_for_slot);

        let (wit, exported) = check_world(engine, source_ref, &component)?;
        let incompatible = |reason: String| LoadError::IncompatibleWorld {
            source_ref: source_ref.to_string(),
            reason,
        };
        let pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|err| incompatible(format!("its imports cannot be satisfied: {err:#}")))?;
        let exports =
            Exports::new(&pre, wit, &exported).map_err(|err| incompatible(format!("{err:#}")))?;

        let placeholder = PluginMetadata {
            name: source_ref.to_string(),
            version: String::new(),
            description: String::new(),
            owns: Vec::new(),
            observes: Vec::new(),
            config_schema: None,
            printer_columns: Vec::new(),
            versions: Vec::new(),
        };
        let mut plugin = Self {
            digest,
            size: bytes.len(),
            metadata: placeholder,
            capabilities: exported,
            wit,
            compile_time,
            from_cache,
            uncached: None,
            pre,
            exports,
        };
        let tags = CallTags {
            plugin: format!("{source_ref}@{}", plugin.digest.short()),
            app: String::new(),
        };
        plugin
            .typecheck_exports(engine, tags.clone())
            .map_err(incompatible)?;
        let (metadata, claimed) = plugin
            .call_metadata(engine, &CallLimits::default(), tags)
            .map_err(|source| LoadError::Validation {
                source_ref: source_ref.to_string(),
                source: Box::new(source),
            })?;
        if claimed != plugin.capabilities {
            return Err(incompatible(format!(
                "metadata claims capabilities [{}] but the component exports [{}]",
                join(&claimed),
                join(&plugin.capabilities)
            )));
        }
        plugin.metadata = metadata;
        // Only a version that passed every check is kept: the cache never holds what failed.
        if !plugin.from_cache
            && let Some(cache) = cache
            && let Err(err) = cache.store_compiled(engine, &plugin.digest, plugin.pre.component())
        {
            plugin.uncached = Some(err.to_string());
        }
        Ok(plugin)
    }

    /// `name@short-digest`, how the host names this plugin in messages.
    pub fn label(&self) -> String {
        format!("{}@{}", self.metadata.name, self.digest.short())
    }
}

fn join(set: &BTreeSet<Capability>) -> String {
    set.iter()
        .map(|c| c.interface())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads the component's exports: `metadata` is required, every `wasmop:plugin` export must be
/// of one version the host loads ([`WitVersion::LOADED`]), and the other capability interfaces
/// present are the capabilities.
fn check_world(
    engine: &PluginEngine,
    source_ref: &str,
    component: &Component,
) -> Result<(WitVersion, BTreeSet<Capability>), LoadError> {
    let incompatible = |reason: String| LoadError::IncompatibleWorld {
        source_ref: source_ref.to_string(),
        reason,
    };
    let names: Vec<String> = component
        .component_type()
        .exports(engine.engine())
        .map(|(name, _)| name.to_string())
        .collect();
    let prefix = format!("{}/", bindings::PACKAGE);
    let mut capabilities = BTreeSet::new();
    let mut has_metadata = false;
    let mut wit: Option<(WitVersion, &str)> = None;
    for name in &names {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
        let Some(version) = WitVersion::parse(version) else {
            return Err(incompatible(format!(
                "it exports {name}, built for {}@{version}; this host speaks {}@{}",
                bindings::PACKAGE,
                bindings::PACKAGE,
                WitVersion::loaded()
            )));
        };
        match wit {
            Some((first, first_name)) if first != version => {
                return Err(incompatible(format!(
                    "it exports {first_name} and {name}: one component speaks one version of {}",
                    bindings::PACKAGE
                )));
            }
            Some(_) => {}
            None => wit = Some((version, name)),
        }
        match interface {
            "metadata" => has_metadata = true,
            other => match Capability::from_interface(other) {
                Some(capability) if version.has(capability) => {
                    capabilities.insert(capability);
                }
                Some(_) => {
                    return Err(incompatible(format!(
                        "it exports {name}, an interface {} does not have",
                        version.package()
                    )));
                }
                None => return Err(incompatible(format!("it exports unknown interface {name}"))),
            },
        }
    }
    if !has_metadata {
        let found = if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        };
        return Err(incompatible(format!(
            "it does not export {}/metadata@{} (it exports {found})",
            bindings::PACKAGE,
            WitVersion::loaded()
        )));
    }
    let wit = wit.map_or(WitVersion::V0_3, |(version, _)| version);
    Ok((wit, capabilities))
}
