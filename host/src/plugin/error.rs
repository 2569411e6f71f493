//! What can go wrong with a plugin, split by stage: loading a version (fetch, verify, compile,
//! validate) and calling one. Each error names the plugin and the cause, and maps to the
//! condition reason and metrics label the host reports.

use std::time::Duration;

/// Why a plugin version could not be loaded. The last good version, if any, stays in service.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// The source could not deliver the bytes (registry down, ConfigMap missing, ...).
    #[error("fetching plugin {source_ref}: {message}")]
    Fetch {
        /// The source reference as written in the App.
        source_ref: String,
        /// What failed.
        message: String,
    },
    /// The bytes received do not hash to the digest the registry promised.
    #[error(
        "plugin {source_ref}: content digest {actual} does not match the manifest's {expected}"
    )]
    DigestMismatch {
        /// The source reference.
        source_ref: String,
        /// Digest named by the manifest.
        expected: String,
        /// Digest of the bytes received.
        actual: String,
    },
    /// The App's policy wants a signature by one of its keys, and the version has none.
    #[error("plugin {source_ref} is refused by its signature check: {reason}")]
    SignatureInvalid {
        /// The source reference.
        source_ref: String,
        /// Unsigned, signed by another key, or signed for another digest.
        reason: String,
    },
    /// The bytes are not a Wasm component.
    #[error("plugin {source_ref} is not a Wasm component: {reason}")]
    NotAComponent {
        /// The source reference.
        source_ref: String,
        /// What the bytes are instead.
        reason: String,
    },
    /// A component, but not one speaking this host's `wasmop:plugin` world.
    #[error("plugin {source_ref} is incompatible with this host: {reason}")]
    IncompatibleWorld {
        /// The source reference.
        source_ref: String,
        /// Which export or import does not fit.
        reason: String,
    },
    /// Cranelift refused the component.
    #[error("compiling plugin {source_ref}: {message}")]
    Compile {
        /// The source reference.
        source_ref: String,
        /// The compiler's message.
        message: String,
    },
    /// The smoke call of `metadata` failed.
    #[error("plugin {source_ref} failed its validation call: {source}")]
    Validation {
        /// The source reference.
        source_ref: String,
        /// How the call failed.
        #[source]
        source: Box<CallError>,
    },
}

impl LoadError {
    /// The `PluginReady` condition reason for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Fetch { .. } => "FetchFailed",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::SignatureInvalid { .. } => "SignatureInvalid",
            Self::NotAComponent { .. } => "NotAComponent",
            Self::IncompatibleWorld { .. } => "IncompatibleWorld",
            Self::Compile { .. } => "CompileFailed",
            Self::Validation { source, .. } => source.reason(),
        }
    }
}

/// Why one call into a plugin failed. Only the App that made the call is affected.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The component does not export the capability.
    #[error("plugin {plugin} does not implement {interface}")]
    Unsupported {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface asked for.
        interface: &'static str,
    },
    /// The guest trapped (a Rust panic, `unreachable`, an out-of-bounds access...).
    #[error("plugin {plugin} trapped in {interface}: {message}")]
    Trap {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface called.
        interface: &'static str,
        /// The trap, with the guest's last words on stderr when it left any.
        message: String,
    },
    /// The call ran past its deadline and was interrupted.
    #[error("plugin {plugin} exceeded its {limit:?} deadline in {interface}")]
    DeadlineExceeded {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface called.
        interface: &'static str,
        /// The deadline in force.
        limit: Duration,
    },
    /// The guest tried to grow its memory past the cap.
    #[error("plugin {plugin} exceeded its {limit_mib} MiB memory cap in {interface}")]
    MemoryExceeded {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface called.
        interface: &'static str,
        /// The cap in force.
        limit_mib: u64,
    },
    /// The call did not get its share of the host's memory budget in time; it never ran.
    #[error("plugin {plugin} was not called for {interface}: {source}")]
    OverBudget {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface to call.
        interface: &'static str,
        /// How long it waited, for how much.
        #[source]
        source: super::budget::BudgetError,
    },
    /// The guest answered, but with something the host will not use: an answer that breaks
    /// one of [`wasmop_core::answers`]' rules, or a transfer over the call's limits.
    #[error("{}", wasmop_core::answers::refusal(plugin, interface, reason))]
    BadOutput {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface called.
        interface: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The guest returned its own typed error (bad config, unreadable input...).
    #[error("plugin {plugin} refused {interface}: {message}{}", field.as_ref().map(|f| format!(" (field {f})")).unwrap_or_default())]
    Refused {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface called.
        interface: &'static str,
        /// `invalid-config`, `invalid-input` or `internal`.
        kind: String,
        /// The plugin's message.
        message: String,
        /// The offending field, when the plugin named one.
        field: Option<String>,
    },
    /// The host could not set the call up (no free instance slot, a linker fault).
    #[error("plugin {plugin}: the host could not run {interface}: {message}")]
    Host {
        /// Plugin name and digest.
        plugin: String,
        /// The WIT interface called.
        interface: &'static str,
        /// What failed.
        message: String,
    },
}

impl CallError {
    /// The condition reason (and metrics label) for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unsupported { .. } => "CapabilityMissing",
            Self::Trap { .. } => "PluginTrapped",
            Self::DeadlineExceeded { .. } => "DeadlineExceeded",
            Self::MemoryExceeded { .. } => "MemoryExceeded",
            Self::OverBudget { .. } => "MemoryBudget",
            Self::BadOutput { .. } => wasmop_core::answers::BAD_OUTPUT,
            Self::Refused { kind, .. } if kind == "invalid-config" => "InvalidConfig",
            Self::Refused { .. } => "PluginError",
            Self::Host { .. } => "HostError",
        }
    }
}
