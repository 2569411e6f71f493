//! Per-call limits for plugins: named constants with the reason next to them, and the clamp
//! that keeps an App's override within the host's maxima.

use std::time::Duration;

/// A plan for a few dozen objects takes microseconds; 100 ms leaves room for a slow plugin on a
/// loaded node while a runaway loop still costs the reconcile little.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(100);
/// No App may hold a reconcile worker longer than this, whatever it asks for.
pub const MAX_DEADLINE: Duration = Duration::from_secs(2);
/// Enough for serde_json over a large StatefulSet and its Pods many times over.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
/// The pooling allocator reserves slots of this size; an App cannot ask for more.
pub const MAX_MEMORY_BYTES: u64 = 256 << 20;
/// A plan larger than this is a bug or an attack; the API server would refuse most of it anyway.
/// The core's, which the SDK's `Fixture` holds answers to as well.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = wasmop_core::answers::DEFAULT_MAX_OUTPUT_BYTES;
/// Components are a few hundred KiB to a couple of MiB (kvstore, at opt-level "s", is 0.9 MB):
/// what a source may deliver unless the App's policy raises it (`maxComponentSize`).
pub const DEFAULT_COMPONENT_BYTES: usize = 8 << 20;
/// The most any policy may raise that to, and the most the host ever compiles: compile cost
/// grows with size, and the compile worker's memory bounds it whatever the size.
pub const MAX_COMPONENT_BYTES: usize = 32 << 20;
/// The most a ConfigMap may hold, keys and values of `data` and `binaryData` together
/// (Kubernetes' `ValidateConfigMap`: `totalSize > core.MaxSecretSize`, 1 MiB). A component served
/// from a ConfigMap (`spec.plugin.configMap`) must fit, with its key.
pub const CONFIGMAP_MAX_BYTES: usize = 1 << 20;
/// What a plugin may print to stdout/stderr per call before the rest is dropped.
pub const MAX_STDIO_BYTES: usize = 64 << 10;
/// What the canonical ABI counts against a transfer besides string bytes: a few dozen bytes of
/// bookkeeping per list entry, so a plan of thousands of small objects still fits.
pub const TRANSFER_OVERHEAD_BYTES: usize = 1 << 20;
/// Host-side resources (WASI streams, pollables) one call may hold at once; a plugin uses a
/// handful, and each costs the host memory outside the plugin's own cap.
pub const MAX_HOST_RESOURCES: usize = 1024;
/// How often the epoch ticker advances; deadlines are rounded up to whole ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Wall-clock deadline of the call.
    pub deadline: Duration,
    /// Largest linear memory the instance may grow to.
    pub memory_bytes: u64,
    /// Largest total size of the strings the call may return.
    pub max_output_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_DEADLINE,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

impl CallLimits {
    /// The defaults with an App's overrides applied, clamped to the host maxima.
    pub fn with_overrides(timeout_ms: Option<u32>, memory_mib: Option<u32>) -> Self {
        let mut limits = Self::default();
        if let Some(ms) = timeout_ms {
            limits.deadline = Duration::from_millis(u64::from(ms).max(1)).min(MAX_DEADLINE);
        }
        if let Some(mib) = memory_mib {
            limits.memory_bytes = (u64::from(mib).max(1) << 20).min(MAX_MEMORY_BYTES);
        }
        limits
    }

    /// The most bytes one transfer from the guest may make the host copy: a result, or the
    /// arguments of one import call (wasmtime's "hostcall fuel"). Bounds what a guest can make
    /// the host allocate per transfer whatever its lists alias: the canonical ABI lets every
    /// entry of a list point at the same bytes.
    pub fn transfer_bytes(&self) -> usize {
        self.max_output_bytes
            .saturating_add(TRANSFER_OVERHEAD_BYTES)
    }

    /// The deadline in epoch ticks, rounded up so a call never gets less than it asked for.
    pub fn deadline_ticks(&self) -> u64 {
        let tick = EPOCH_TICK.as_nanos().max(1);
        (self.deadline.as_nanos().div_ceil(tick)).max(1) as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_are_clamped_to_host_maxima() {
        let limits = CallLimits::with_overrides(Some(60_000), Some(4096));
        assert_eq!(limits.deadline, MAX_DEADLINE);
        assert_eq!(limits.memory_bytes, MAX_MEMORY_BYTES);
        let limits = CallLimits::with_overrides(Some(0), Some(0));
        assert_eq!(limits.deadline, Duration::from_millis(1));
        assert_eq!(limits.memory_bytes, 1 << 20);
        assert_eq!(
            CallLimits::with_overrides(None, None),
            CallLimits::default()
        );
    }

    #[test]
    fn deadline_rounds_up_to_ticks() {
        let limits = CallLimits {
            deadline: Duration::from_millis(101),
            ..Default::default()
        };
        // 101 ms at 5 ms a tick is 21 ticks, plus one because the current tick is partly gone.
        assert_eq!(limits.deadline_ticks(), 22);
    }
}
