//! `health`: readiness and rollout progress from the StatefulSet and its Pods.

use wasmop_sdk::chrono::{self, DateTime, Utc};
use wasmop_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use wasmop_sdk::k8s_openapi::api::core::v1::Pod;
use wasmop_sdk::objects::{COMPONENT_LABEL, INSTANCE_LABEL, VERSION_LABEL};
use wasmop_sdk::{
    App, BackupJob, Condition, ConditionStatus, Health, HealthInput, HealthReport, JobState,
    Observed, Result,
};

use crate::Kvstore;
use crate::config::Config;
use crate::names;
use crate::views::{PodView, StatefulSetView};

/// Container states that will not fix themselves: the App is degraded, not
/// progressing.
const STUCK_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// How long the primary may be not ready before the store counts as
/// degraded rather than restarting: writes fail the whole time.
const PRIMARY_GRACE: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

impl Health for Kvstore {
    fn check(input: &HealthInput<Config>) -> Result<HealthReport> {
        let app = &input.app;
        let desired = app.config().replicas;
        let Some(sts) = input
            .observed
            .get_as::<StatefulSet, StatefulSetView>(&names::statefulset(app))?
        else {
            return Ok(
                HealthReport::progressing("the StatefulSet does not exist yet").condition(
                    Condition::new(
                        "ReplicasReady",
                        false,
                        "NotCreated",
                        format!("0/{desired} replicas ready"),
                    ),
                ),
            );
        };
        let pods = server_pods(app, &input.observed)?;
        let status = sts.status.clone().unwrap_or_default();
        let ready = status.ready_replicas.unwrap_or(0);
        let primary = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(names::pod(app, 0).as_str()));
        let primary_ready_since = primary.and_then(ready_since);

        let rollout = Rollout::of(&sts, &pods, desired, &input.version);
        let mut report = if let Some((pod, reason)) = pods.iter().find_map(stuck) {
            HealthReport::degraded(format!("pod {pod} is {reason}"))
        } else if primary_not_ready_for(primary, input.now) > PRIMARY_GRACE {
            HealthReport::degraded(format!(
                "primary {} has not been ready for more than {} minutes",
                names::pod(app, 0),
                PRIMARY_GRACE.num_minutes()
            ))
        } else if ready == desired && rollout.complete {
            HealthReport::healthy(format!(
                "{ready}/{desired} replicas ready on {}",
                input.version
            ))
        } else if ready == desired {
            HealthReport::progressing(format!(
                "rolling out {}: {}",
                input.version, rollout.summary
            ))
        } else {
            HealthReport::progressing(format!("{ready}/{desired} replicas ready"))
        };
        report = report
            .rollout_complete(rollout.complete && ready == desired)
            .condition(Condition::new(
                "ReplicasReady",
                ready == desired,
                if ready == desired {
                    "AllReplicasReady"
                } else {
                    "ReplicasNotReady"
                },
                format!("{ready}/{desired} replicas ready"),
            ))
            .condition(Condition::new(
                "PrimaryReady",
                primary_ready_since.is_some(),
                if primary_ready_since.is_some() {
                    "PrimaryReady"
                } else {
                    "PrimaryNotReady"
                },
                format!("{} accepts writes only when ready", names::pod(app, 0)),
            ));
        if let Some(condition) = backup_condition(app, &input.observed)? {
            report = report.condition(condition);
        }
        Ok(report)
    }
}

/// The App's server Pods (not its backup Job Pods).
pub(crate) fn server_pods(app: &App<Config>, observed: &Observed) -> Result<Vec<PodView>> {
    Ok(observed
        .all_as::<Pod, PodView>()?
        .into_iter()
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
            label(COMPONENT_LABEL) == Some(names::SERVER)
                && label(INSTANCE_LABEL) == Some(app.name())
        })
        .collect())
}

/// The version label a Pod was created with.
pub(crate) fn pod_version(pod: &PodView) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(VERSION_LABEL)
        .map(String::as_str)
}

/// When the Pod became ready, if it is.
pub(crate) fn ready_since(pod: &PodView) -> Option<i64> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")?;
    (condition.status == "True").then(|| {
        condition
            .last_transition_time
            .as_ref()
            .map_or(0, |t| t.0.as_millisecond())
    })
}

/// How long the primary has been not ready: since its Ready condition
/// flipped, or since it was created. Zero when ready or unknown, so a
/// missing Pod is "progressing" (just created) rather than degraded.
fn primary_not_ready_for(primary: Option<&PodView>, now: DateTime<Utc>) -> chrono::TimeDelta {
    let Some(pod) = primary else {
        return chrono::TimeDelta::zero();
    };
    if ready_since(pod).is_some() {
        return chrono::TimeDelta::zero();
    }
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref());
    let since = ready
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0.as_millisecond());
    since.map_or(chrono::TimeDelta::zero(), |ms| {
        chrono::TimeDelta::milliseconds(now.timestamp_millis() - ms)
    })
}

/// The first container stuck in a state that needs a human.
fn stuck(pod: &PodView) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for container in statuses {
        let reason = container
            .state
            .as_ref()?
            .waiting
            .as_ref()
            .and_then(|w| w.reason.as_deref());
        if let Some(reason) = reason.filter(|r| STUCK_REASONS.contains(r)) {
            return Some((
                pod.metadata.name.clone().unwrap_or_default(),
                reason.to_string(),
            ));
        }
    }
    None
}

/// Whether every replica runs the version, from the StatefulSet and Pods.
pub(crate) struct Rollout {
    /// All replicas updated and current, on the version.
    pub complete: bool,
    /// What is left, for messages.
    pub summary: String,
}

impl Rollout {
    pub(crate) fn of(sts: &StatefulSetView, pods: &[PodView], desired: i32, version: &str) -> Self {
        let status = sts.status.clone().unwrap_or_default();
        // The controller has not seen the latest spec yet: nothing it reports
        // is about the version we asked for.
        let seen = match (status.observed_generation, sts.metadata.generation) {
            (Some(observed), Some(generation)) => observed >= generation,
            _ => false,
        };
        let template_version = sts.template_version();
        let updated = status.updated_replicas.unwrap_or(0);
        let revision_settled =
            status.current_revision.is_some() && status.current_revision == status.update_revision;
        let stale: Vec<&str> = pods
            .iter()
            .filter(|p| pod_version(p) != Some(version))
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        let complete = seen
            && template_version == Some(version)
            && updated == desired
            && status.replicas == desired
            && revision_settled
            && stale.is_empty()
            && pods.len() == usize::try_from(desired).unwrap_or(0);
        let summary = if !seen || template_version != Some(version) {
            "waiting for the StatefulSet controller".to_string()
        } else if !stale.is_empty() {
            format!(
                "{updated}/{desired} updated, {} still on an older version",
                stale.join(", ")
            )
        } else {
            format!("{updated}/{desired} updated")
        };
        Rollout { complete, summary }
    }
}

/// `BackupSucceeded`, from the newest finished backup Job; none before the
/// first backup finished.
fn backup_condition(app: &App<Config>, observed: &Observed) -> Result<Option<Condition>> {
    if app.config().backup.is_none() {
        return Ok(None);
    }
    let jobs = BackupJob::list(observed)?;
    let last = jobs.iter().rev().find(|j| j.state != JobState::Running);
    Ok(last.map(|job| match job.state {
        JobState::Failed => Condition::new(
            "BackupSucceeded",
            ConditionStatus::False,
            "BackupFailed",
            format!("backup {} failed", job.slot),
        ),
        _ => Condition::new(
            "BackupSucceeded",
            true,
            "BackupCompleted",
            format!("backup {} completed", job.slot),
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;
    use wasmop_sdk::HealthState;
    use wasmop_sdk::testing::Fixture;

    fn healthy() -> Fixture {
        Fixture::new(fixtures::APP)
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PODS_READY)
            .now("2025-01-01T01:00:00Z")
    }

    #[test]
    fn all_ready_and_current_is_healthy_and_rolled_out() {
        let report = healthy().check::<Kvstore>().expect("checks");
        assert_eq!(report.state, HealthState::Healthy, "{}", report.message);
        assert!(report.rollout_complete);
        assert_eq!(report.message, "3/3 replicas ready on 7.2.4");
        assert_eq!(
            report.find("ReplicasReady").map(|c| c.status),
            Some(ConditionStatus::True)
        );
        assert_eq!(
            report.find("PrimaryReady").map(|c| c.status),
            Some(ConditionStatus::True)
        );
        assert!(
            report.find("BackupSucceeded").is_none(),
            "no backup finished yet"
        );
    }

    #[test]
    fn missing_statefulset_is_progressing() {
        let report = Fixture::new(fixtures::APP)
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(report.state, HealthState::Progressing);
        assert!(!report.rollout_complete);
        assert_eq!(
            report.find("ReplicasReady").map(|c| c.reason.as_str()),
            Some("NotCreated")
        );
    }

    #[test]
    fn a_replica_not_ready_is_progressing() {
        let report = Fixture::new(fixtures::APP)
            .observe(fixtures::statefulset_with_status(
                json!({"readyReplicas": 2, "availableReplicas": 2}),
            ))
            .observe_list(&fixtures::pods_with(|i, pod| {
                if i == 2 {
                    pod["status"]["conditions"][3]["status"] = "False".into();
                }
            }))
            .now("2025-01-01T01:00:00Z")
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(report.state, HealthState::Progressing);
        assert_eq!(report.message, "2/3 replicas ready");
        assert!(!report.rollout_complete);
        assert_eq!(
            report.find("ReplicasReady").map(|c| c.status),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            report.find("PrimaryReady").map(|c| c.status),
            Some(ConditionStatus::True)
        );
    }

    #[test]
    fn crash_looping_pod_is_degraded() {
        let report = Fixture::new(fixtures::APP)
            .observe(fixtures::statefulset_with_status(json!({"readyReplicas": 2})))
            .observe_list(&fixtures::pods_with(|i, pod| {
                if i == 1 {
                    pod["status"]["containerStatuses"][0]["ready"] = false.into();
                    pod["status"]["containerStatuses"][0]["state"] =
                        json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}});
                }
            }))
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(report.state, HealthState::Degraded);
        assert_eq!(report.message, "pod cache-1 is CrashLoopBackOff");
    }

    #[test]
    fn primary_down_past_the_grace_period_is_degraded() {
        let primary_down = fixtures::pods_with(|i, pod| {
            if i == 0 {
                pod["status"]["conditions"][3] = json!({"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-01T00:50:00Z"});
            }
        });
        let fixture = Fixture::new(fixtures::APP)
            .observe(fixtures::statefulset_with_status(
                json!({"readyReplicas": 2}),
            ))
            .observe_list(&primary_down);
        let early = fixture
            .clone()
            .now("2025-01-01T00:54:00Z")
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(
            early.state,
            HealthState::Progressing,
            "within the grace period"
        );
        assert_eq!(
            early.find("PrimaryReady").map(|c| c.status),
            Some(ConditionStatus::False)
        );
        let late = fixture
            .now("2025-01-01T00:56:00Z")
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(late.state, HealthState::Degraded);
    }

    #[test]
    fn rollout_to_a_new_version_completes_only_when_every_pod_runs_it() {
        let mut sts: serde_json::Value =
            serde_json::from_str(fixtures::STATEFULSET_READY).expect("json");
        sts["metadata"]["generation"] = 3.into();
        sts["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] = "7.2.5".into();
        sts["status"] = json!({"observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 1,
            "currentRevision": "cache-old", "updateRevision": "cache-new"});
        let pods = fixtures::pods_with(|i, pod| {
            if i == 2 {
                pod["metadata"]["labels"][VERSION_LABEL] = "7.2.5".into();
            }
        });
        let report = Fixture::new(fixtures::APP)
            .target_version("7.2.5")
            .observe(sts.to_string())
            .observe_list(&pods)
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(report.state, HealthState::Progressing);
        assert!(!report.rollout_complete);
        assert!(
            report
                .message
                .contains("cache-0, cache-1 still on an older version"),
            "{}",
            report.message
        );

        // Controller done, Pods relabelled: complete.
        sts["status"] = json!({"observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3,
            "currentRevision": "cache-new", "updateRevision": "cache-new"});
        let pods =
            fixtures::pods_with(|_, pod| pod["metadata"]["labels"][VERSION_LABEL] = "7.2.5".into());
        let report = Fixture::new(fixtures::APP)
            .target_version("7.2.5")
            .observe(sts.to_string())
            .observe_list(&pods)
            .check::<Kvstore>()
            .expect("checks");
        assert!(report.rollout_complete, "{}", report.message);
    }

    #[test]
    fn stale_observed_generation_is_not_complete() {
        let mut sts: serde_json::Value =
            serde_json::from_str(fixtures::STATEFULSET_READY).expect("json");
        sts["metadata"]["generation"] = 5.into();
        let report = Fixture::new(fixtures::APP)
            .observe(sts.to_string())
            .observe_list(fixtures::PODS_READY)
            .check::<Kvstore>()
            .expect("checks");
        assert!(!report.rollout_complete);
        assert_eq!(report.state, HealthState::Progressing);
        assert!(
            report
                .message
                .contains("waiting for the StatefulSet controller"),
            "{}",
            report.message
        );
    }

    #[test]
    fn backup_jobs_feed_a_condition_and_backup_pods_are_ignored() {
        let backup_pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "cache-backup-x", "labels": {"app.kubernetes.io/component": "backup",
                "app.kubernetes.io/instance": "cache", "wasmop.dev/app": "cache"}},
            "status": {"containerStatuses": [{"name": "b", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}
        });
        let report = healthy()
            .observe(fixtures::backup_job("20250101-000000", Some("Complete")))
            .observe(fixtures::backup_job("20250101-060000", Some("Failed")))
            .observe(fixtures::backup_job("20250101-120000", None))
            .observe(backup_pod.to_string())
            .check::<Kvstore>()
            .expect("checks");
        assert_eq!(
            report.state,
            HealthState::Healthy,
            "backup Pods are not servers"
        );
        let condition = report.find("BackupSucceeded").expect("condition");
        assert_eq!(condition.status, ConditionStatus::False);
        assert_eq!(condition.message, "backup 20250101-060000 failed");
    }
}
