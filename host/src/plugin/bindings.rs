//! The one place the host generates bindings for the `wasmop:plugin` WIT contract, and the
//! versions of it the host loads.
//!
//! The host binds the `plugin` world of the version it speaks ([`WORLD_VERSION`]), which exports
//! every capability; a component may export any subset, so each capability is looked up on its
//! own (see `compiled`), never through the world's all-or-nothing `instantiate`.
//!
//! It also loads plugins built for 0.1.0 ([`WitVersion`]). Every interface but `metadata` is the
//! same in both versions, and wasmtime type-checks a typed function structurally (record fields,
//! enum cases and variant cases by name and type, not by the interface that declares them), so
//! the host looks each export up by the name the component exports it under
//! (`wasmop:plugin/health@0.1.0`) and calls it with the generated 0.2.0 types. `metadata.get`
//! of 0.1.0 returns the smaller [`v0_1::Info`]: one record written by hand here (smaller than a
//! frozen copy of the 0.1.0 WIT bindgen'd into a module of its own, of which only that record
//! would be used). The 0.1.0 `log` import is linked to the same host function
//! ([`add_log_v0_1`]).

// Generated code documents nothing; the WIT files are the documentation.
#![allow(missing_docs)]

use wasmtime::component::Linker;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "wasmop:plugin/plugin",
    ownership: Borrowing { duplicate_if_necessary: true },
});

/// The WIT package version this host speaks.
pub const WORLD_VERSION: &str = "0.2.0";

/// The package name all plugin interfaces live in.
pub const PACKAGE: &str = "wasmop:plugin";

/// A version of the `wasmop:plugin` package this host loads plugins of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WitVersion {
    /// `0.1.0`: no configuration schema, no printer columns.
    V0_1,
    /// `0.2.0`, [`WORLD_VERSION`]: `metadata.info` has the configuration schema and printer
    /// columns.
    V0_2,
}

impl WitVersion {
    /// Every version the host loads, newest first.
    pub const LOADED: [WitVersion; 2] = [WitVersion::V0_2, WitVersion::V0_1];

    /// The version named `version` (`0.2.0`), if the host loads it.
    pub fn parse(version: &str) -> Option<Self> {
        Self::LOADED.into_iter().find(|v| v.as_str() == version)
    }

    /// `0.1.0`, `0.2.0`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_1 => "0.1.0",
            Self::V0_2 => WORLD_VERSION,
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

    /// The versions loaded, for messages: `0.2.0 (and 0.1.0)`.
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

/// What `wasmop:plugin/metadata@0.1.0` returns.
pub mod v0_1 {
    use wasmtime::component::{ComponentType, Lift};

    use super::exports::wasmop::plugin::metadata::{Capability, KindRef};

    /// `metadata.info` of 0.1.0: 0.2.0's without `config-schema` and `printer-columns`. Its
    /// `capability` enum and `kind-ref` record are the same as 0.2.0's, whose bindings it uses.
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
}

/// Links `wasmop:plugin/log@0.1.0`, the import of 0.1.0 plugins, to the host's `log` (the same
/// function as 0.2.0's: the interface did not change).
pub fn add_log_v0_1<T: wasmop::plugin::log::Host + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    use wasmop::plugin::log;
    let mut instance = linker.instance(&WitVersion::V0_1.interface("log"))?;
    instance.func_wrap(
        "emit",
        |mut caller: wasmtime::StoreContextMut<'_, T>,
         (level, message, fields): (log::Level, String, Vec<log::Field>)| {
            log::Host::emit(caller.data_mut(), level, message, fields);
            Ok(())
        },
    )?;
    Ok(())
}
