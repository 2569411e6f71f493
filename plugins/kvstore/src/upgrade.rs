//! `upgrade`: the version-step gate.
//!
//! Denied (never safe): downgrades, skipping a minor within a major, and
//! major steps that do not land on `X.0`. Waited on (safe later): replicas
//! not all ready, a rollout in progress, Pods not all on the current
//! version, a backup running. Anything else is allowed.

use semver::Version;
use wasmop_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use wasmop_sdk::{BackupJob, Error, JobState, Result, Upgrade, UpgradeDecision, UpgradeInput};

use crate::Kvstore;
use crate::config::Config;
use crate::health::{Rollout, pod_version, ready_since, server_pods};
use crate::names;
use crate::views::StatefulSetView;

impl Upgrade for Kvstore {
    fn gate(input: &UpgradeInput<Config>) -> Result<UpgradeDecision> {
        // status.version is written by the host from an earlier spec.version,
        // so a bad one is the host's input, not the user's.
        let from = Version::parse(&input.from).map_err(|e| {
            Error::invalid_input(format!("{:?} is not a version: {e}", input.from))
                .with_field("status.version")
        })?;
        let to = Version::parse(&input.to).map_err(|e| {
            Error::invalid_config(
                "spec.version",
                format!("{:?} is not a version: {e}", input.to),
            )
        })?;
        if let Some(reason) = forbidden(&from, &to) {
            return Ok(UpgradeDecision::Deny(reason));
        }
        if from == to {
            return Ok(UpgradeDecision::Allow);
        }
        if let Some(reason) = not_yet(input)? {
            return Ok(UpgradeDecision::Wait(reason));
        }
        Ok(UpgradeDecision::Allow)
    }
}

/// Steps that are never safe, whatever the cluster looks like.
fn forbidden(from: &Version, to: &Version) -> Option<String> {
    if to < from {
        return Some(format!(
            "downgrading from {from} to {to} is not supported: data files may not be readable"
        ));
    }
    if to.major == from.major && to.minor > from.minor + 1 {
        return Some(format!(
            "upgrade one minor at a time: go to {}.{} before {to}",
            from.major,
            from.minor + 1
        ));
    }
    if to.major > from.major + 1 {
        return Some(format!(
            "upgrade one major at a time: go to {}.0 before {to}",
            from.major + 1
        ));
    }
    if to.major == from.major + 1 && to.minor != 0 {
        return Some(format!(
            "a major upgrade must land on {}.0 first, not {to}",
            to.major
        ));
    }
    None
}

/// Why the step has to wait, if it does.
fn not_yet(input: &UpgradeInput<Config>) -> Result<Option<String>> {
    let app = &input.app;
    let desired = app.config().replicas;
    let Some(sts) = input
        .observed
        .get_as::<StatefulSet, StatefulSetView>(&names::statefulset(app))?
    else {
        return Ok(Some("the StatefulSet does not exist yet".to_string()));
    };
    let pods = server_pods(app, &input.observed)?;
    let ready = pods.iter().filter(|p| ready_since(p).is_some()).count();
    if ready != usize::try_from(desired).unwrap_or(0) {
        return Ok(Some(format!("{ready}/{desired} replicas ready")));
    }
    if let Some(pod) = pods
        .iter()
        .find(|p| pod_version(p) != Some(input.from.as_str()))
    {
        return Ok(Some(format!(
            "pod {} runs {}, not {}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod_version(pod).unwrap_or("an unknown version"),
            input.from
        )));
    }
    let rollout = Rollout::of(&sts, &pods, desired, &input.from);
    if !rollout.complete {
        return Ok(Some(format!(
            "the rollout of {} is not finished: {}",
            input.from, rollout.summary
        )));
    }
    if let Some(job) = BackupJob::list(&input.observed)?
        .iter()
        .find(|j| j.state == JobState::Running)
    {
        return Ok(Some(format!("backup {} is running", job.slot)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;
    use wasmop_sdk::ErrorKind;
    use wasmop_sdk::objects::VERSION_LABEL;
    use wasmop_sdk::testing::Fixture;

    /// A ready store on 7.2.4 asked to go to `to`.
    fn gate_to(to: &str) -> UpgradeDecision {
        Fixture::new(fixtures::app_with_versions(to, Some("7.2.4")))
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PODS_READY)
            .gate::<Kvstore>()
            .expect("gates")
    }

    #[test]
    fn patch_and_next_minor_are_allowed_when_ready() {
        assert_eq!(gate_to("7.2.5"), UpgradeDecision::Allow);
        assert_eq!(gate_to("7.3.0"), UpgradeDecision::Allow);
        assert_eq!(gate_to("7.3.7"), UpgradeDecision::Allow);
        assert_eq!(gate_to("7.2.4"), UpgradeDecision::Allow, "no step at all");
    }

    #[test]
    fn unsafe_steps_are_denied() {
        for (to, why) in [
            ("7.2.3", "downgrading"),
            ("7.1.9", "downgrading"),
            ("7.2.4-rc1", "downgrading"),
            ("7.4.0", "one minor at a time: go to 7.3"),
            ("9.0.0", "one major at a time: go to 8.0"),
            ("8.1.0", "must land on 8.0"),
        ] {
            match gate_to(to) {
                UpgradeDecision::Deny(reason) => assert!(reason.contains(why), "{to}: {reason}"),
                other => panic!("{to}: expected deny, got {other:?}"),
            }
        }
        assert_eq!(
            gate_to("8.0.1"),
            UpgradeDecision::Allow,
            "X.latest to X+1.0.y"
        );
    }

    fn wait_reason(fixture: Fixture) -> String {
        match fixture.gate::<Kvstore>().expect("gates") {
            UpgradeDecision::Wait(reason) => reason,
            other => panic!("expected wait, got {other:?}"),
        }
    }

    fn upgrade() -> Fixture {
        Fixture::new(fixtures::app_with_versions("7.2.5", Some("7.2.4")))
    }

    #[test]
    fn waits_for_every_replica_to_be_ready() {
        let pods = fixtures::pods_with(|i, pod| {
            if i == 1 {
                pod["status"]["conditions"][3]["status"] = "False".into();
            }
        });
        let reason = wait_reason(
            upgrade()
                .observe(fixtures::STATEFULSET_READY)
                .observe_list(&pods),
        );
        assert_eq!(reason, "2/3 replicas ready");
        assert_eq!(wait_reason(upgrade()), "the StatefulSet does not exist yet");
    }

    #[test]
    fn waits_while_a_pod_runs_another_version() {
        let pods = fixtures::pods_with(|i, pod| {
            if i == 2 {
                pod["metadata"]["labels"][VERSION_LABEL] = "7.2.3".into();
            }
        });
        let reason = wait_reason(
            upgrade()
                .observe(fixtures::STATEFULSET_READY)
                .observe_list(&pods),
        );
        assert_eq!(reason, "pod cache-2 runs 7.2.3, not 7.2.4");
    }

    #[test]
    fn waits_for_a_rollout_in_progress() {
        let sts = fixtures::statefulset_with_status(
            json!({"updateRevision": "cache-next", "updatedReplicas": 1}),
        );
        let reason = wait_reason(upgrade().observe(sts).observe_list(fixtures::PODS_READY));
        assert!(
            reason.starts_with("the rollout of 7.2.4 is not finished"),
            "{reason}"
        );
    }

    #[test]
    fn waits_for_a_running_backup_but_not_a_finished_one() {
        let ready = || {
            upgrade()
                .observe(fixtures::STATEFULSET_READY)
                .observe_list(fixtures::PODS_READY)
        };
        let reason = wait_reason(ready().observe(fixtures::backup_job("20250101-060000", None)));
        assert_eq!(reason, "backup 20250101-060000 is running");
        let done = ready().observe(fixtures::backup_job("20250101-060000", Some("Complete")));
        assert_eq!(
            done.gate::<Kvstore>().expect("gates"),
            UpgradeDecision::Allow
        );
    }

    #[test]
    fn bad_versions_are_typed_errors() {
        let err = Fixture::new(fixtures::app_with_versions("eight", Some("7.2.4")))
            .gate::<Kvstore>()
            .expect_err("bad target");
        assert_eq!(
            (err.kind(), err.field()),
            (ErrorKind::InvalidConfig, Some("spec.version"))
        );
        let err = Fixture::new(fixtures::app_with_versions("7.2.5", Some("v7")))
            .gate::<Kvstore>()
            .expect_err("bad current");
        assert_eq!(
            (err.kind(), err.field()),
            (ErrorKind::InvalidInput, Some("status.version"))
        );
    }
}
