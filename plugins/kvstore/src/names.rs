//! Names and labels of the objects kvstore creates, in one place so plan,
//! health, backup and finalize agree on them.

use wasmop_sdk::App;
use wasmop_sdk::objects::Scope;

/// `app.kubernetes.io/name` of every object.
pub const SERVICE_NAME: &str = "kvstore";
/// Component of the StatefulSet's Pods.
pub const SERVER: &str = "server";
/// The Valkey port.
pub const PORT: i32 = 6379;
/// Annotation on the config ConfigMap naming the plugin build that planned it.
pub const BUILD_ANNOTATION: &str = "kvstore.wasmop.dev/build";
/// Name of the data volume claim template; PVCs are `data-<app>-<ordinal>`.
pub const DATA_VOLUME: &str = "data";
/// Label the StatefulSet controller puts on each Pod.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Pod template annotation holding a hash of the rendered config, so a
/// config change rolls the Pods.
pub const CONFIG_HASH_ANNOTATION: &str = "kvstore.wasmop.dev/config-hash";

/// The scope of the server objects.
pub fn server_scope<C>(app: &App<C>) -> Scope {
    Scope::new(app, SERVICE_NAME).with_component(SERVER)
}

/// The StatefulSet, the client Service and the PDB share the App's name.
pub fn statefulset<C>(app: &App<C>) -> String {
    app.name().to_string()
}

/// The governing headless Service.
pub fn headless<C>(app: &App<C>) -> String {
    format!("{}-headless", app.name())
}

/// The ConfigMap with valkey.conf and the start script.
pub fn config_map<C>(app: &App<C>) -> String {
    format!("{}-config", app.name())
}

/// The backups PVC the plugin creates when none is configured.
pub fn backups_claim<C>(app: &App<C>) -> String {
    format!("{}-backups", app.name())
}

/// Pod `ordinal` of the StatefulSet.
pub fn pod<C>(app: &App<C>, ordinal: i32) -> String {
    format!("{}-{ordinal}", app.name())
}

/// The primary's stable DNS name (Pod 0 through the headless Service).
pub fn primary_host<C>(app: &App<C>) -> String {
    format!("{}.{}.{}.svc", pod(app, 0), headless(app), app.namespace())
}

/// Whether `claim` is one of the StatefulSet's data PVCs
/// (`data-<app>-<ordinal>`).
pub fn is_data_claim<C>(app: &App<C>, claim: &str) -> bool {
    claim
        .strip_prefix(&format!("{DATA_VOLUME}-{}-", app.name()))
        .is_some_and(|ordinal| !ordinal.is_empty() && ordinal.chars().all(|c| c.is_ascii_digit()))
}
