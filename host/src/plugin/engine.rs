//! The one wasmtime Engine of the host: component model, Cranelift, pooling allocator, epoch
//! interruption for deadlines, and the Linker with WASI (deny-by-default, its monotonic clock
//! bounded by the call's deadline) and the `log` import (of each WIT version the host loads).

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Weak},
    thread,
};

use wasmtime::{
    Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
    component::{HasSelf, Linker},
};

use super::{
    bindings::{self, wasmop::plugin::log},
    budget::MemoryBudget,
    clock,
    compiler::{self, Compiler},
    limits::{EPOCH_TICK, MAX_MEMORY_BYTES},
    sandbox::CallState,
};

/// How many plugin instances may be alive at once (one per in-flight call). Calls beyond this
/// fail with a host error instead of queueing without bound.
pub const MAX_CONCURRENT_INSTANCES: u32 = 64;

/// Bytes of each linear memory slot kept mapped between instances.
const KEEP_RESIDENT_BYTES: usize = 4 << 20;

/// Idle slots the pool keeps warm (memory kept resident, the last module's image mapped) when
/// the caller does not size it: what [`PluginEngine::new`]'s one-call-at-a-time users need.
const DEFAULT_WARM_SLOTS: u32 = 4;

/// The shared engine, its linker and the fingerprint that keys compiled artifacts.
pub struct PluginEngine {
    engine: Engine,
    linker: Linker<CallState>,
    fingerprint: String,
    budget: MemoryBudget,
    compiler: Compiler,
}

impl PluginEngine {
    /// Builds the engine with no memory budget (one call at a time: the CLI, benchmarks).
    pub fn new() -> wasmtime::Result<Arc<Self>> {
        Self::with_budget(MemoryBudget::unlimited())
    }

    /// Builds the engine, whose calls share `budget`, and starts its epoch ticker (a thread
    /// that lives as long as the engine).
    pub fn with_budget(budget: MemoryBudget) -> wasmtime::Result<Arc<Self>> {
        Self::with_compiler(budget, Compiler::InProcess, DEFAULT_WARM_SLOTS)
    }

    /// Builds the engine, whose calls share `budget` and whose components `compiler` compiles,
    /// and starts its epoch ticker. `warm_slots` idle instance slots stay warm: size it to the
    /// calls that run at once (the host's reconcile concurrency).
    pub fn with_compiler(
        budget: MemoryBudget,
        compiler: Compiler,
        warm_slots: u32,
    ) -> wasmtime::Result<Arc<Self>> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(MAX_CONCURRENT_INSTANCES)
            // Rust components built for wasip2 carry a handful of core instances and memories
            // (the guest, the WASI adapter shims); four of each per instance is ample.
            .total_core_instances(MAX_CONCURRENT_INSTANCES * 4)
            .total_memories(MAX_CONCURRENT_INSTANCES * 2)
            .total_tables(MAX_CONCURRENT_INSTANCES * 4)
            .max_memory_size(usize::try_from(MAX_MEMORY_BYTES).unwrap_or(usize::MAX))
            // A call touches a few hundred KiB of fresh heap; resetting that much with memset
            // instead of madvise keeps the pages mapped, so the next call on the same slot does
            // not page-fault its way through them (the largest cost of a call, measured).
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            // Where the kernel has PAGEMAP_SCAN (Linux 6.7+), reset only the pages the call
            // dirtied instead of memsetting the whole resident prefix.
            .pagemap_scan(Enabled::Auto)
            .table_keep_resident(64 << 10)
            // Each slot that ran a call keeps up to KEEP_RESIDENT_BYTES resident and stays
            // affine to the last module it ran, so with wasmtime's default (100 warm slots) every
            // distinct plugin ends up holding its own warm slot: about 10 MiB more RSS per plugin,
            // measured with tests/bench. The calls in flight at once need no more warm slots
            // than that; a colder slot costs the next call a fresh copy-on-write mapping.
            .max_unused_warm_slots(warm_slots);
        let mut config = compiler::compile_config();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        clock::add_to_linker(&mut linker, CallState::clock)?;
        log::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        bindings::add_log_older(&mut linker)?;

        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let fingerprint = format!(
            "wasmop-{}-{:016x}",
            env!("CARGO_PKG_VERSION"),
            hasher.finish()
        );

        let this = Arc::new(Self {
            engine,
            linker,
            fingerprint,
            budget,
            compiler,
        });
        spawn_epoch_ticker(Arc::downgrade(&this))
            .map_err(|err| wasmtime::format_err!("starting the epoch ticker thread: {err}"))?;
        Ok(this)
    }

    /// How its components are compiled.
    pub fn compiler(&self) -> &Compiler {
        &self.compiler
    }

    /// The memory budget its calls share.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The linker every plugin is instantiated with.
    pub fn linker(&self) -> &Linker<CallState> {
        &self.linker
    }

    /// Identifies which compiled artifacts this engine can load: wasmtime's own compatibility
    /// hash of the engine settings, plus the host version.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// Deadlines are epoch deadlines, so something must advance the epoch; the thread ends when the
/// engine is dropped.
fn spawn_epoch_ticker(engine: Weak<PluginEngine>) -> std::io::Result<()> {
    thread::Builder::new()
        .name("wasmop-epoch".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.engine.increment_epoch();
                drop(engine);
                thread::sleep(EPOCH_TICK);
            }
        })?;
    Ok(())
}
