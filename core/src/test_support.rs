//! What the core's tests share: the snapshot of App `ns/kv` (uid `u-1`, generation 3) at a fixed
//! clock, with the plugin in a given state.

use k8s_openapi::jiff::Timestamp;

use crate::{
    decide::{PluginState, Snapshot},
    observed::ObservedObject,
    stamp::AppRef,
    status::{AppStatus, PluginStatus},
};

/// The snapshot of App `ns/kv` with `plugin`, `previous` status and `observed` objects.
pub fn snapshot_with(
    plugin: PluginState,
    previous: AppStatus,
    observed: Vec<ObservedObject>,
) -> Snapshot {
    Snapshot {
        app: AppRef {
            name: "kv".into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
            generation: Some(3),
        },
        desired_version: "1.0".into(),
        previous,
        observed,
        now: Timestamp::from_second(1_800_000_000).expect("time"),
        plugin,
    }
}

/// `kv@0.1.0` serving, exporting `capabilities` (WIT interface names).
pub fn serving(capabilities: &[&str]) -> PluginState {
    PluginState::Serving {
        label: "kv@0.1.0 (sha256:abc)".into(),
        status: PluginStatus {
            reference: "registry/kv:1".into(),
            digest: "sha256:abc".into(),
            short_digest: "abc".into(),
            capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
            loaded_at: None,
        },
        newer_refused: None,
        uncached: None,
    }
}
