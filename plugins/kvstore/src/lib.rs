//! `kvstore`: a replicated Valkey (Redis-compatible) key-value store as a
//! wasmop plugin.
//!
//! One App becomes a StatefulSet (Pod 0 primary, the others replicas), a
//! headless Service for peer DNS, a client Service on the primary, a
//! PodDisruptionBudget (`maxUnavailable: 1`), a ConfigMap with `valkey.conf`
//! and, with backups on, a backups volume. It implements every capability:
//!
//! - [`plan`]: the objects above, rendered for the target version;
//! - [`health`]: from the StatefulSet's and Pods' status;
//! - [`backup`]: RDB snapshots as Jobs on a cron schedule, with retention;
//! - [`upgrade`]: no downgrade, one minor at a time, all replicas ready and
//!   current, no backup running;
//! - [`finalize`]: keeps or deletes the data PVCs per `retention`.
//!
//! Configuration is documented on [`config::Config`].

pub mod backup;
pub mod config;
pub mod finalize;
pub mod health;
pub mod names;
pub mod plan;
pub mod upgrade;
pub mod views;

use wasmop_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use wasmop_sdk::k8s_openapi::api::batch::v1::Job;
use wasmop_sdk::k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use wasmop_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use wasmop_sdk::{Metadata, Plugin, Result};

/// The plugin; each capability is implemented in its own module.
pub struct Kvstore;

impl Plugin for Kvstore {
    type Config = config::Config;

    fn metadata() -> Metadata {
        Metadata::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
            .description("Replicated Valkey key-value store with scheduled backups")
            .owns::<StatefulSet>()
            .owns::<Service>()
            .owns::<PodDisruptionBudget>()
            .owns::<ConfigMap>()
            .owns::<PersistentVolumeClaim>()
            .observes::<Pod>()
            .observes::<PersistentVolumeClaim>()
            .observes::<Job>()
    }

    fn validate(config: &config::Config) -> Result<()> {
        config.validate()
    }
}

wasmop_sdk::export!(Kvstore: SpecDiff, Health, Backup, Upgrade, Finalize);

/// Fixtures shared by the capability tests.
#[cfg(test)]
pub(crate) mod fixtures {
    /// The App used by most tests: `cache` in `shop`, 3 replicas, backups
    /// every 6 hours keeping 2, created 2025-01-01T00:00:00Z.
    pub const APP: &str = include_str!("../tests/fixtures/app.json");
    /// The StatefulSet of [`APP`] with all 3 replicas ready on 7.2.4.
    pub const STATEFULSET_READY: &str = include_str!("../tests/fixtures/statefulset-ready.json");
    /// The Pods of [`APP`], all ready on 7.2.4.
    pub const PODS_READY: &str = include_str!("../tests/fixtures/pods-ready.json");
    /// The data PVCs of [`APP`] plus one of another App.
    pub const PVCS: &str = include_str!("../tests/fixtures/pvcs.json");

    /// [`APP`] with `spec.config` replaced.
    pub fn app_with_config(config: serde_json::Value) -> String {
        let mut app: serde_json::Value = serde_json::from_str(APP).expect("fixture is JSON");
        app["spec"]["config"] = config;
        app.to_string()
    }

    /// [`APP`] with `spec.version` (and optionally `status.version`) replaced.
    pub fn app_with_versions(spec: &str, status: Option<&str>) -> String {
        let mut app: serde_json::Value = serde_json::from_str(APP).expect("fixture is JSON");
        app["spec"]["version"] = spec.into();
        app["status"]["version"] = status.map_or(serde_json::Value::Null, Into::into);
        app.to_string()
    }

    /// [`STATEFULSET_READY`] with status fields overridden.
    pub fn statefulset_with_status(status: serde_json::Value) -> String {
        let mut sts: serde_json::Value =
            serde_json::from_str(STATEFULSET_READY).expect("fixture is JSON");
        if let (Some(target), Some(patch)) = (sts["status"].as_object_mut(), status.as_object()) {
            target.extend(patch.clone());
        }
        sts.to_string()
    }

    /// The Pods of [`PODS_READY`], with `edit` applied to each.
    pub fn pods_with(edit: impl Fn(usize, &mut serde_json::Value)) -> String {
        let mut pods: Vec<serde_json::Value> =
            serde_json::from_str(PODS_READY).expect("fixture is JSON");
        for (i, pod) in pods.iter_mut().enumerate() {
            edit(i, pod);
        }
        serde_json::to_string(&pods).expect("serializes")
    }

    /// A backup Job of [`APP`] for `slot`, finished as `condition`
    /// (`Complete`, `Failed`) or running (`None`).
    pub fn backup_job(slot: &str, condition: Option<&str>) -> String {
        let conditions: Vec<_> = condition
            .map(|c| serde_json::json!({"type": c, "status": "True"}))
            .into_iter()
            .collect();
        serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": format!("cache-backup-{slot}"), "namespace": "shop",
                "labels": {"wasmop.dev/app": "cache", "wasmop.dev/backup-slot": slot}
            },
            "spec": {"template": {"spec": {"containers": []}}},
            "status": {"conditions": conditions, "active": if condition.is_none() { 1 } else { 0 }}
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::testing::Fixture;
    use wasmop_sdk::{Capability, ErrorKind};

    #[test]
    fn metadata_reports_every_capability() {
        let metadata = Fixture::metadata::<Kvstore>();
        assert_eq!(metadata.name, "kvstore");
        assert_eq!(metadata.capabilities, Capability::ALL);
        assert!(metadata.owns.iter().any(|k| k.kind == "StatefulSet"));
        assert!(metadata.observes.iter().any(|k| k.kind == "Pod"));
    }

    #[test]
    fn every_capability_rejects_an_invalid_config_the_same_way() {
        let app = fixtures::app_with_config(serde_json::json!({"retention": "retain"}));
        let fixture = Fixture::new(app).current_version("7.2.4");
        let errors = [
            fixture.plan::<Kvstore>().map(|_| ()),
            fixture.check::<Kvstore>().map(|_| ()),
            fixture.schedule::<Kvstore>().map(|_| ()),
            fixture.gate::<Kvstore>().map(|_| ()),
            fixture.cleanup::<Kvstore>().map(|_| ()),
        ];
        for err in errors {
            let err = err.expect_err("invalid retention");
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert_eq!(err.field(), Some("spec.config.retention"));
            assert!(err.message().contains("Retain"), "{err}");
        }
    }
}
