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
use wasmop_sdk::{ColumnType, Metadata, Plugin, Result};

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
            .printer_column(
                "Replicas",
                ColumnType::Integer,
                ".spec.replicas",
                "Valkey Pods asked for",
            )
            .printer_column(
                "Backups",
                ColumnType::String,
                ".spec.backup.schedule",
                "Cron schedule of the backups",
            )
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
        assert_eq!(
            metadata.capabilities,
            [
                Capability::SpecDiff,
                Capability::Health,
                Capability::Backup,
                Capability::Upgrade,
                Capability::Finalize
            ]
        );
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

/// The whole reconcile, as the host runs it, over kvstore's own logic.
#[cfg(test)]
mod reconcile_tests {
    use proptest::prelude::*;
    use serde_json::json;
    use wasmop_sdk::testing::{Fixture, core::Requeue};

    use super::{Kvstore, fixtures};

    #[test]
    fn a_ready_cluster_reconciles_to_no_writes() {
        let fixture = Fixture::new(fixtures::APP)
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PODS_READY)
            .now("2025-01-02T07:00:00Z");
        let first = fixture.reconcile::<Kvstore>().expect("reconciles");
        assert!(!first.apply.is_empty(), "the plan is applied once");
        assert!(
            first
                .apply
                .iter()
                .all(|o| o.to_value()["metadata"]["labels"]["wasmop.dev/app"] == "cache"),
            "every object carries the host's labels"
        );
        let second = fixture
            .after(&first)
            .reconcile::<Kvstore>()
            .expect("reconciles");
        assert!(second.writes_nothing(), "{second:#?}");
        assert_eq!(second.status, first.status);
        assert!(second.events.is_empty(), "{:?}", second.events);
    }

    /// [`fixtures::APP`] as an instance of a `KVStore` kind bound to kvstore: the same
    /// config, as the whole `spec` beside `version`.
    fn kvstore_instance() -> String {
        let app: serde_json::Value = serde_json::from_str(fixtures::APP).expect("JSON");
        let mut spec = app["spec"]["config"].clone();
        spec["version"] = app["spec"]["version"].clone();
        json!({
            "apiVersion": "data.example.com/v1", "kind": "KVStore",
            "metadata": {"name": "cache", "namespace": "shop", "uid": "kv-uid", "generation": 1},
            "spec": spec,
        })
        .to_string()
    }

    /// kvstore serves an instance of a bound kind unchanged: its objects are owned by the
    /// instance's own kind and uid and carry the kind label (their templates too, so the
    /// Pods and claims are the KVStore's); the reconcile is idempotent.
    #[test]
    fn a_kvstore_kind_instance_reconciles_with_owners_and_labels_of_its_kind() {
        let fixture = Fixture::new(kvstore_instance()).now("2025-01-02T07:00:00Z");
        let first = fixture.reconcile::<Kvstore>().expect("reconciles");
        assert!(!first.apply.is_empty(), "{first:#?}");
        for object in &first.apply {
            let object = object.to_value();
            let labels = &object["metadata"]["labels"];
            assert_eq!(labels["wasmop.dev/app"], "cache");
            assert_eq!(labels["wasmop.dev/parent-kind"], "KVStore.data.example.com");
            if object["kind"] != "PersistentVolumeClaim" {
                let owner = &object["metadata"]["ownerReferences"][0];
                assert_eq!(owner["apiVersion"], "data.example.com/v1", "{object}");
                assert_eq!(owner["kind"], "KVStore", "{object}");
                assert_eq!(owner["uid"], "kv-uid", "{object}");
            }
        }
        let set = first
            .apply
            .iter()
            .map(|o| o.to_value())
            .find(|o| o["kind"] == "StatefulSet")
            .expect("a StatefulSet");
        assert_eq!(
            set["spec"]["template"]["metadata"]["labels"]["wasmop.dev/parent-kind"],
            "KVStore.data.example.com",
            "its Pods are the KVStore's"
        );
        for claim in set["spec"]["volumeClaimTemplates"]
            .as_array()
            .expect("claims")
        {
            assert_eq!(
                claim["metadata"]["labels"]["wasmop.dev/parent-kind"], "KVStore.data.example.com",
                "its claims are the KVStore's"
            );
        }
        let second = fixture
            .after(&first)
            .reconcile::<Kvstore>()
            .expect("reconciles");
        assert!(second.writes_nothing(), "{second:#?}");

        // A bad config names the field where the kind has it.
        let mut bad: serde_json::Value = serde_json::from_str(&kvstore_instance()).expect("JSON");
        bad["spec"]["replicas"] = json!("three");
        let err = Fixture::new(bad.to_string())
            .plan::<Kvstore>()
            .expect_err("replicas is a number");
        assert_eq!(err.field(), Some("spec.replicas"));
        // So does kvstore's own validation, which names fields as an App has them.
        bad["spec"]["replicas"] = json!(0);
        let err = Fixture::new(bad.to_string())
            .plan::<Kvstore>()
            .expect_err("at least one replica");
        assert_eq!(err.field(), Some("spec.replicas"));
        let app = fixtures::app_with_config(json!({"replicas": 0}));
        let err = Fixture::new(app)
            .plan::<Kvstore>()
            .expect_err("at least one replica");
        assert_eq!(err.field(), Some("spec.config.replicas"));
    }

    /// The App `cache` and the KVStore `cache` in one namespace: neither observes, prunes nor
    /// takes as its own what the other made; a plan naming the other's object must adopt it,
    /// which the host refuses.
    #[test]
    fn an_app_and_a_kvstore_named_alike_leave_each_other_alone() {
        let now = "2025-01-02T07:00:00Z";
        let app = Fixture::new(fixtures::APP).now(now);
        let app_cluster = app.after(&app.reconcile::<Kvstore>().expect("reconciles"));
        let kv = Fixture::new(kvstore_instance()).now(now);
        let kv_cluster = kv.after(&kv.reconcile::<Kvstore>().expect("reconciles"));
        // Each parent with the other's objects around it (and none of its own yet).
        for (parent, others) in [(&app, &kv_cluster), (&kv, &app_cluster)] {
            let mut fixture = parent.clone();
            for object in others.observed() {
                fixture = fixture.observe(object.clone());
            }
            let decision = fixture.reconcile::<Kvstore>().expect("reconciles");
            assert!(decision.prune.is_empty(), "{:?}", decision.prune);
            let adopted: Vec<String> = decision.adopt.iter().map(|k| k.to_string()).collect();
            assert!(
                adopted.iter().any(|k| k.contains("StatefulSet")),
                "the other's StatefulSet is not taken as its own: {adopted:?}"
            );
        }

        // The App's data claims (labelled `wasmop.dev/app: cache` alone, as an App's claim
        // templates make them): deleting the KVStore with `retention: Delete` reaches none.
        let deleting = |parent: String| {
            let mut parent: serde_json::Value = serde_json::from_str(&parent).expect("JSON");
            match parent["spec"].get_mut("config") {
                Some(config) => config["retention"] = json!("Delete"),
                None => parent["spec"]["retention"] = json!("Delete"),
            }
            let deletion = Fixture::new(parent.to_string())
                .observe_list(fixtures::PVCS)
                .delete::<Kvstore>()
                .expect("decides");
            let mut names: Vec<String> = deletion.delete.iter().map(|k| k.name.clone()).collect();
            names.sort();
            names
        };
        assert_eq!(
            deleting(fixtures::APP.to_string()),
            ["data-cache-0", "data-cache-1", "data-cache-2"]
        );
        assert!(deleting(kvstore_instance()).is_empty());
    }

    #[test]
    fn an_invalid_config_is_a_degraded_status_and_a_backoff() {
        let app = fixtures::app_with_config(json!({"replicas": 0}));
        let decision = Fixture::new(app).reconcile::<Kvstore>().expect("decides");
        assert_eq!(decision.requeue, Requeue::Backoff);
        assert!(decision.apply.is_empty());
        let degraded = decision
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .expect("a Degraded condition");
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "InvalidConfig")
        );
    }

    proptest! {
        /// Idempotence over kvstore's inputs: whatever the config, versions and clock, the
        /// second reconcile (the plan carried out) writes nothing, and once the cluster stops
        /// changing a third decides exactly what the second did: no status change, no Event.
        #[test]
        fn reconcile_is_idempotent(
            replicas in 1u32..6,
            storage in proptest::sample::select(vec!["1Gi", "10Gi", "500Mi"]),
            schedule in proptest::option::of(proptest::sample::select(vec!["0 */6 * * *", "*/15 * * * *", "0 3 * * 1"])),
            retain in 1u32..5,
            hours in 0i64..200,
            upgrade in any::<bool>(),
        ) {
            let mut config = json!({"replicas": replicas, "storage": storage});
            if let Some(schedule) = schedule {
                config["backup"] = json!({"schedule": schedule, "retain": retain});
            }
            let mut app: serde_json::Value = serde_json::from_str(&fixtures::app_with_config(config)).expect("JSON");
            if upgrade {
                app["spec"]["version"] = json!("7.4.0");
            }
            let fixture = Fixture::new(app.to_string())
                .now_ms(1_735_689_600_000 + hours * 3_600_000);
            let first = fixture.reconcile::<Kvstore>().expect("reconciles");
            let applied = fixture.after(&first);
            let second = applied.reconcile::<Kvstore>().expect("reconciles");
            prop_assert!(second.writes_nothing(), "{:#?}", second);
            let third = applied.after(&second).reconcile::<Kvstore>().expect("reconciles");
            prop_assert!(third.writes_nothing(), "{:#?}", third);
            prop_assert_eq!(&third.status, &second.status);
            prop_assert!(third.events.is_empty(), "{:?}", third.events);
        }
    }
}
