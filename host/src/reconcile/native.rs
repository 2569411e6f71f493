//! The `native-plugins` feature (the scale benchmark only): the hello and kvstore plugins'
//! Rust code, linked into the host, answers in place of their components. The component is
//! still fetched, verified, compiled and reported as usual; only the calls differ, so that the
//! benchmark compares a whole reconcile with and without Wasm.

use wasmop_core::PluginCalls;
use wasmop_sdk::testing::NativeCalls;

use crate::plugin::{input::AppContext, registry::LoadedPlugin};

/// The native calls for `loaded`, when it is a plugin this build links.
pub fn calls(loaded: &LoadedPlugin, input: &AppContext) -> Option<Box<dyn PluginCalls + Send>> {
    let (app, observed, now_ms) = input.parts();
    let (app, observed) = (app.to_string(), observed.to_vec());
    let calls = match loaded.compiled.metadata.name.as_str() {
        "hello" => NativeCalls::of::<hello::Hello>(app, observed, now_ms),
        "kvstore" => NativeCalls::of::<kvstore::Kvstore>(app, observed, now_ms),
        _ => return None,
    };
    Some(Box::new(calls))
}
