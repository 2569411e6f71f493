//! `finalize`: keep or delete the data PVCs per `spec.config.retention`.
//!
//! Only this App's data claims (`data-<app>-<ordinal>`, labelled with the
//! App) are ever deleted; anything else the host passes is kept, so a label
//! mistake elsewhere cannot destroy data.

use wasmop_sdk::k8s_openapi::api::core::v1::PersistentVolumeClaim;
use wasmop_sdk::objects::APP_LABEL;
use wasmop_sdk::{Finalize, FinalizeDecision, FinalizeInput, ObjectRef, Result, log};

use crate::Kvstore;
use crate::config::{Config, Retention};
use crate::names;

impl Finalize for Kvstore {
    fn cleanup(input: &FinalizeInput<Config>) -> Result<FinalizeDecision> {
        let app = &input.app;
        let retention = app.config().retention;
        let mut decision = FinalizeDecision::default();
        for claim in input.retained.all::<PersistentVolumeClaim>()? {
            let reference = ObjectRef::to(&claim);
            let ours = claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(APP_LABEL))
                .map(String::as_str)
                == Some(app.name())
                && names::is_data_claim(app, &reference.name);
            if ours && retention == Retention::Delete {
                decision.delete.push(reference);
            } else {
                decision.keep.push(reference);
            }
        }
        log::info(
            "finalizing",
            &[
                ("retention", &format!("{retention:?}")),
                ("delete", &decision.delete.len()),
                ("keep", &decision.keep.len()),
            ],
        );
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;
    use wasmop_sdk::testing::Fixture;

    fn names(refs: &[ObjectRef]) -> Vec<&str> {
        refs.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn retain_keeps_every_claim() {
        let decision = Fixture::new(fixtures::APP)
            .observe_list(fixtures::PVCS)
            .cleanup::<Kvstore>()
            .expect("decides");
        assert!(decision.delete.is_empty());
        assert_eq!(decision.keep.len(), 6);
    }

    #[test]
    fn delete_removes_only_this_apps_data_claims() {
        let app = fixtures::app_with_config(json!({"retention": "Delete"}));
        let decision = Fixture::new(app)
            .observe_list(fixtures::PVCS)
            .cleanup::<Kvstore>()
            .expect("decides");
        assert_eq!(
            names(&decision.delete),
            ["data-cache-0", "data-cache-1", "data-cache-2"]
        );
        assert_eq!(
            names(&decision.keep),
            ["cache-scratch", "data-cache-0-old", "data-other-0"]
        );
        assert_eq!(decision.delete[0].kind, "PersistentVolumeClaim");
        assert_eq!(decision.delete[0].api_version, "v1");
    }

    #[test]
    fn nothing_retained_is_an_empty_decision() {
        let app = fixtures::app_with_config(json!({"retention": "Delete"}));
        let decision = Fixture::new(app).cleanup::<Kvstore>().expect("decides");
        assert_eq!(decision, FinalizeDecision::default());
    }

    #[test]
    fn other_kinds_are_ignored() {
        let app = fixtures::app_with_config(json!({"retention": "Delete"}));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "data-cache-0"}});
        let decision = Fixture::new(app)
            .observe(pod.to_string())
            .cleanup::<Kvstore>()
            .expect("decides");
        assert_eq!(decision, FinalizeDecision::default());
    }

    /// Deleting the App runs as the host runs it: the StatefulSet that makes the claims stops
    /// first (a claim deleted under it would come back), and `finalize` decides once it is gone.
    #[test]
    fn deletion_stops_the_statefulset_before_finalize_decides() {
        use wasmop_sdk::testing::core::Finalizer;

        let app = fixtures::app_with_config(json!({"retention": "Delete"}));
        let running = Fixture::new(app.clone())
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PVCS);
        let first = running.delete::<Kvstore>().expect("decides");
        let stopped: Vec<String> = first.stop.iter().map(ToString::to_string).collect();
        assert_eq!(stopped, ["StatefulSet/cache"]);
        assert!(
            first.delete.is_empty(),
            "claims deleted under a running set"
        );
        assert!(matches!(first.finalizer, Finalizer::Wait(_)));

        let gone = Fixture::new(app)
            .observe_list(fixtures::PVCS)
            .delete::<Kvstore>()
            .expect("decides");
        let deleted: Vec<&str> = gone.delete.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(deleted, ["data-cache-0", "data-cache-1", "data-cache-2"]);
        assert_eq!(gone.finalizer, Finalizer::Release);
        // `data-other-0` is labelled with another App: the host never shows it to this one.
        assert_eq!(
            gone.events[0].note,
            "deleted claims [data-cache-0, data-cache-1, data-cache-2], kept 2"
        );
    }
}
