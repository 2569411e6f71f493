//! The one place the host generates bindings for the `wasmop:plugin` WIT contract, and the
//! versions of it the host loads.
//!
//! The host binds the `plugin` world of the version it speaks ([`WORLD_VERSION`]), which exports
//! every capability; a component may export any subset, so each capability is looked up on its
//! own (see `compiled`), never through the world's all-or-nothing `instantiate`.
//!
//! It also loads plugins built for 0.2.0 and 0.1.0 ([`WitVersion`]). Every interface those
//! versions have but `metadata` is the same in all three, and wasmtime type-checks a typed
//! function structurally (record fields, enum cases and variant cases by name and type, not by
//! the interface that declares them), so the host looks each export up by the name the
//! component exports it under (`wasmop:plugin/health@0.1.0`) and calls it with the generated
//! 0.3.0 types. `metadata.get` of the older versions returns other records, whose
//! `capability` enum has five cases where 0.3.0's has seven: [`v0_2::Info`] and
//! [`v0_1::Info`], written by hand here (smaller than frozen copies of the old WIT bindgen'd
//! into modules of their own, of which only these records would be used). The older `log`
//! imports are linked to the same host function ([`add_log_older`]).

// Generated code documents nothing; the WIT files are the documentation.
#![allow(missing_docs)]

use wasmtime::component::Linker;

use super::Capability;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "wasmop:plugin/plugin",
    ownership: Borrowing { duplicate_if_necessary: true },
});

/// The WIT package version this host speaks.
pub const WORLD_VERSION: &str = "0.3.0";

/// The package name all plugin interfaces live in.
pub const PACKAGE: &str = "wasmop:plugin";

/// A version of the `wasmop:plugin` package this host loads plugins of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WitVersion {
    /// `0.1.0`: no configuration schema, no printer columns.
    V0_1,
    /// `0.2.0`: `metadata.info` has the configuration schema and printer columns.
    V0_2,
    /// `0.3.0`, [`WORLD_VERSION`]: `validate` and `convert`, and `metadata.info` lists the API
    /// versions the plugin knows.
    V0_3,
}

impl WitVersion {
    /// Every version the host loads, newest first.
    pub const LOADED: [WitVersion; 3] = [WitVersion::V0_3, WitVersion::V0_2, WitVersion::V0_1];

    /// The version named `version` (`0.3.0`), if the host loads it.
    pub fn parse(version: &str) -> Option<Self> {
        Self::LOADED.into_iter().find(|v| v.as_str() == version)
    }

    /// `0.1.0`, `0.2.0`, `0.3.0`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_1 => "0.1.0",
            Self::V0_2 => "0.2.0",
            Self::V0_3 => WORLD_VERSION,
        }
    }

    /// The export or import name of `interface` in this version, e.g.
    /// `wasmop:plugin/health@0.1.0`.
    pub fn interface(self, interface: &str) -> String {
        format!("{PACKAGE}/{interface}@{}", self.as_str())
    }

    /// `wasmop:plugin@0.1.0`.
    pub fn package(self) -> String {
        format!("{PACKAGE}@{}", self.as_str())
    }

    /// Whether `metadata.info` of this version carries a configuration schema.
    pub fn has_config_schema(self) -> bool {
        self >= Self::V0_2
    }

    /// Whether this version has `capability`'s interface: the admission capabilities
    /// (`validate`, `convert`) came with 0.3.0.
    pub fn has(self, capability: Capability) -> bool {
        capability.decides() || self >= Self::V0_3
    }

    /// The versions loaded, for messages: `0.3.0 (and 0.2.0, 0.1.0)`.
    pub fn loaded() -> String {
        let older: Vec<&str> = Self::LOADED[1..].iter().map(|v| v.as_str()).collect();
        format!("{} (and {})", WORLD_VERSION, older.join(", "))
    }
}

impl std::fmt::Display for WitVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `wasmop:plugin/metadata@0.2.0` returns.
pub mod v0_2 {
    use wasmtime::component::{ComponentType, Lift};

    use super::exports::wasmop::plugin::metadata::{self as current, KindRef, PrinterColumn};

    /// `metadata.capability` of 0.1.0 and 0.2.0: 0.3.0's first five cases, in its order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, ComponentType, Lift)]
    #[component(enum)]
    #[repr(u8)]
    pub enum Capability {
        #[component(name = "spec-diff")]
        SpecDiff,
        #[component(name = "health")]
        Health,
        #[component(name = "backup")]
        Backup,
        #[component(name = "upgrade")]
        Upgrade,
        #[component(name = "finalize")]
        Finalize,
    }

    impl From<Capability> for current::Capability {
        fn from(capability: Capability) -> Self {
            match capability {
                Capability::SpecDiff => Self::SpecDiff,
                Capability::Health => Self::Health,
                Capability::Backup => Self::Backup,
                Capability::Upgrade => Self::Upgrade,
                Capability::Finalize => Self::Finalize,
            }
        }
    }

    /// `metadata.info` of 0.2.0: 0.3.0's without `versions`, with the five-case [`Capability`].
    /// Its `kind-ref` and `printer-column` records are 0.3.0's, whose bindings it uses.
    #[derive(Debug, Clone, ComponentType, Lift)]
    #[component(record)]
    pub struct Info {
        pub name: String,
        pub version: String,
        pub description: String,
        pub capabilities: Vec<Capability>,
        pub owns: Vec<KindRef>,
        pub observes: Vec<KindRef>,
        #[component(name = "config-schema")]
        pub config_schema: Option<String>,
        #[component(name = "printer-columns")]
        pub printer_columns: Vec<PrinterColumn>,
    }

    impl From<Info> for current::Info {
        fn from(old: Info) -> Self {
            Self {
                name: old.name,
                version: old.version,
                description: old.description,
                capabilities: old.capabilities.into_iter().map(Into::into).collect(),
                owns: old.owns,
                observes: old.observes,
                config_schema: old.config_schema,
                printer_columns: old.printer_columns,
                versions: Vec::new(),
            }
        }
    }
}

/// What `wasmop:plugin/metadata@0.1.0` returns.
pub mod v0_1 {
    use wasmtime::component::{ComponentType, Lift};

    use super::exports::wasmop::plugin::metadata::{self as current, KindRef};
    use super::v0_2::Capability;

    /// `metadata.info` of 0.1.0: 0.2.0's without `config-schema` and `printer-columns`. Its
    /// `capability` enum is 0.2.0's, its `kind-ref` record 0.3.0's.
    #[derive(Debug, Clone, ComponentType, Lift)]
    #[component(record)]
    pub struct Info {
        pub name: String,
        pub version: String,
        pub description: String,
        pub capabilities: Vec<Capability>,
        pub owns: Vec<KindRef>,
        pub observes: Vec<KindRef>,
    }

    impl From<Info> for current::Info {
        fn from(old: Info) -> Self {
            Self {
                name: old.name,
                version: old.version,
                description: old.description,
                capabilities: old.capabilities.into_iter().map(Into::into).collect(),
                owns: old.owns,
                observes: old.observes,
                config_schema: None,
                printer_columns: Vec::new(),
                versions: Vec::new(),
            }
        }
    }
}

/// Links `wasmop:plugin/log` of every older version the host loads (0.1.0, 0.2.0) to the host's
/// `log` (the same function as 0.3.0's: the interface did not change).
pub fn add_log_older<T: wasmop::plugin::log::Host + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    use wasmop::plugin::log;
    for version in WitVersion::LOADED
        .into_iter()
        .filter(|v| v.as_str() != WORLD_VERSION)
    {
        let mut instance = linker.instance(&version.interface("log"))?;
        instance.func_wrap(
            "emit",
            |mut caller: wasmtime::StoreContextMut<'_, T>,
             (level, message, fields): (log::Level, String, Vec<log::Field>)| {
                log::Host::emit(caller.data_mut(), level, message, fields);
                Ok(())
            },
        )?;
    }
    Ok(())
}
