//! The one place the host generates bindings for the `wasmop:plugin` WIT contract.
//!
//! The host binds the `plugin` world, which exports every capability; a component may export
//! any subset, so each capability is looked up on its own (see `compile`), never through the
//! world's all-or-nothing `instantiate`.

// Generated code documents nothing; the WIT files are the documentation.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "wasmop:plugin/plugin",
    ownership: Borrowing { duplicate_if_necessary: true },
});

/// The WIT package version this host speaks.
pub const WORLD_VERSION: &str = "0.1.0";

/// The package name all plugin interfaces live in.
pub const PACKAGE: &str = "wasmop:plugin";
