//! `backup`: RDB snapshots as Jobs on the configured cron schedule.
//!
//! Each cron tick is one slot. The newest tick at or before `now` is due if
//! the App existed then, it is not older than the starting deadline, no Job
//! exists for it and no later slot completed. Only one backup runs at a time
//! and only while the primary is ready; a skipped tick is retried until the
//! deadline passes. Retention keeps the newest `retain` successful backups:
//! older Jobs are expired here and older snapshot files are pruned by the Job
//! itself.

use std::time::Duration;

use wasmop_sdk::chrono::{DateTime, TimeDelta, Utc};
use wasmop_sdk::k8s_openapi::api::batch::v1::Job;
use wasmop_sdk::k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaimVolumeSource, PodSecurityContext, ResourceRequirements,
    SecurityContext, Volume, VolumeMount,
};
use wasmop_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use wasmop_sdk::objects::JobBuilder;
use wasmop_sdk::{
    App, Backup, BackupDecision, BackupInput, BackupJob, BackupRun, Error, JobState, Result,
    Schedule, Slot, log,
};

use crate::Kvstore;
use crate::config::{BackupConfig, Config};
use crate::health::{ready_since, server_pods};
use crate::names;

/// How soon to look again when a due backup has to wait (another backup
/// running, primary not ready).
const RETRY: Duration = Duration::from_secs(60);

/// Longest a backup Job may run before Kubernetes fails it.
const JOB_DEADLINE_SECONDS: i64 = 3600;

/// Where the backups volume is mounted in the Job.
const BACKUP_DIR: &str = "/backups";

impl Backup for Kvstore {
    fn schedule(input: &BackupInput<Config>) -> Result<BackupDecision> {
        let app = &input.app;
        // Backups switched off: leave existing Jobs (and their snapshots)
        // alone rather than expiring them.
        let Some(backup) = &app.config().backup else {
            return Ok(BackupDecision::none());
        };
        let cron = backup.cron()?;
        let now = input.now;
        let jobs = BackupJob::list(&input.observed)?;

        let next = cron.next_after(now).ok_or_else(|| {
            Error::invalid_config(
                "spec.config.backup.schedule",
                format!(
                    "{:?} does not fire in the next eight years",
                    backup.schedule
                ),
            )
        })?;
        let until_next = (next - now).to_std().unwrap_or_default();
        let mut decision = BackupDecision::none()
            .expire(expired(&jobs, backup.retain))
            .requeue_after(until_next);

        let Some(slot) = due_slot(
            app,
            backup,
            &cron,
            now,
            input.last_completed_slot.as_ref(),
            &jobs,
        ) else {
            return Ok(decision);
        };
        if let Some(running) = jobs.iter().find(|j| j.state == JobState::Running) {
            log::info(
                "backup due but another is running",
                &[("slot", &slot), ("running", &running.slot)],
            );
            decision.requeue_after = Some(until_next.min(RETRY));
            return Ok(decision);
        }
        if !primary_ready(app, &input.observed)? {
            log::info(
                "backup due but the primary is not ready",
                &[("slot", &slot)],
            );
            decision.requeue_after = Some(until_next.min(RETRY));
            return Ok(decision);
        }
        let job = job(app, backup, &slot);
        decision.run = Some(BackupRun { slot, job });
        Ok(decision)
    }
}

/// The slot to back up now, if any.
fn due_slot(
    app: &App<Config>,
    backup: &BackupConfig,
    cron: &Schedule,
    now: DateTime<Utc>,
    last_completed: Option<&Slot>,
    jobs: &[BackupJob],
) -> Option<Slot> {
    // No tick within the search window (a yearly schedule on a young
    // clock): nothing is due.
    let tick = cron.latest_at_or_before(now)?;
    let slot = Slot::at(tick);
    // A tick before the App existed is not a missed backup.
    let created = app
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond());
    if created.is_some_and(|created| tick.timestamp_millis() < created) {
        return None;
    }
    if now - tick > TimeDelta::minutes(i64::from(backup.starting_deadline_minutes)) {
        log::warn(
            "backup tick missed its starting deadline",
            &[("slot", &slot)],
        );
        return None;
    }
    // Slots in the SDK's format sort by time, so an equal or later
    // completed slot means this tick is covered.
    if last_completed.is_some_and(|last| *last >= slot) || jobs.iter().any(|j| j.slot == slot) {
        return None;
    }
    Some(slot)
}

/// Backups are taken from the primary; without it `valkey-cli --rdb` fails.
fn primary_ready(app: &App<Config>, observed: &wasmop_sdk::Observed) -> Result<bool> {
    let primary = names::pod(app, 0);
    Ok(server_pods(app, observed)?
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some(primary.as_str()) && ready_since(p).is_some()))
}

/// Slots whose Jobs can go: successful ones beyond the newest `retain`,
/// and failed ones superseded by a later success (the newest failure is
/// kept for debugging until then). Running Jobs are never expired.
fn expired(jobs: &[BackupJob], retain: u32) -> Vec<Slot> {
    let succeeded: Vec<&BackupJob> = jobs
        .iter()
        .filter(|j| j.state == JobState::Succeeded)
        .collect();
    let keep = usize::try_from(retain).unwrap_or(usize::MAX);
    let mut expire: Vec<Slot> = succeeded
        .iter()
        .take(succeeded.len().saturating_sub(keep))
        .map(|j| j.slot.clone())
        .collect();
    if let Some(newest) = succeeded.last() {
        expire.extend(
            jobs.iter()
                .filter(|j| j.state == JobState::Failed && j.slot < newest.slot)
                .map(|j| j.slot.clone()),
        );
    }
    expire.sort();
    expire
}

/// The backup Job: `valkey-cli --rdb` from the primary onto the backups
/// volume, written under a temporary name so a failed run never leaves a
/// truncated snapshot, then pruning snapshots beyond `retain`.
fn job(app: &App<Config>, backup: &BackupConfig, slot: &Slot) -> Job {
    // The client must match the running server, which is the rolled-out
    // version, not a desired one still held by the upgrade gate.
    let version = app
        .status
        .version
        .clone()
        .unwrap_or_else(|| app.version().to_string());
    let config = app.config();
    let scope = names::server_scope(app).with_version(&version);
    let claim = backup
        .claim_name
        .clone()
        .unwrap_or_else(|| names::backups_claim(app));
    let script = format!(
        "set -eu\n\
         out={BACKUP_DIR}/{slot}.rdb\n\
         valkey-cli -h {host} -p {port} --rdb \"$out.partial\"\n\
         mv \"$out.partial\" \"$out\"\n\
         ls -1t {BACKUP_DIR}/*.rdb | tail -n +{first_pruned} | xargs -r rm -f --\n",
        host = names::primary_host(app),
        port = names::PORT,
        first_pruned = u64::from(backup.retain) + 1,
    );
    let quantity = |q: &str| Quantity(q.to_string());
    JobBuilder::backup(&scope, slot)
        .container(Container {
            name: "backup".to_string(),
            image: Some(format!("{}:{version}", config.image)),
            command: Some(vec!["sh".to_string(), "-c".to_string(), script]),
            volume_mounts: Some(vec![VolumeMount {
                name: "backups".to_string(),
                mount_path: BACKUP_DIR.to_string(),
                ..Default::default()
            }]),
            resources: Some(ResourceRequirements {
                requests: Some(
                    [
                        ("cpu".to_string(), quantity("50m")),
                        ("memory".to_string(), quantity("64Mi")),
                    ]
                    .into(),
                ),
                limits: Some([("memory".to_string(), quantity("128Mi"))].into()),
                ..Default::default()
            }),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        })
        .volume(Volume {
            name: "backups".to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim,
                ..Default::default()
            }),
            ..Default::default()
        })
        .security_context(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(999),
            fs_group: Some(999),
            ..Default::default()
        })
        .backoff_limit(2)
        .active_deadline_seconds(JOB_DEADLINE_SECONDS)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;
    use wasmop_sdk::objects::SLOT_LABEL;
    use wasmop_sdk::testing::{self, Fixture};

    /// Ready store, schedule every 6 hours, retain 2, App created at
    /// 2025-01-01T00:00:00Z.
    fn ready_at(now: &str) -> Fixture {
        Fixture::new(fixtures::APP)
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PODS_READY)
            .now(now)
    }

    fn slot(text: &str) -> Slot {
        Slot::parse(text).expect("slot")
    }

    #[test]
    fn runs_the_due_tick_with_a_realistic_job() {
        let decision = ready_at("2025-01-01T06:00:30Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        let run = decision.run.expect("06:00 is due");
        assert_eq!(run.slot, slot("20250101-060000"));
        let job = run.job;
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("cache-backup-20250101-060000")
        );
        assert_eq!(
            job.metadata.labels.as_ref().map(|l| l[SLOT_LABEL].as_str()),
            Some("20250101-060000")
        );
        let pod = job.spec.and_then(|s| s.template.spec).expect("pod");
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("valkey/valkey:7.2.4"));
        let script = &container.command.as_ref().expect("command")[2];
        assert!(
            script.contains("valkey-cli -h cache-0.cache-headless.shop.svc -p 6379 --rdb"),
            "{script}"
        );
        assert!(script.contains("/backups/20250101-060000.rdb"), "{script}");
        assert!(
            script.contains("tail -n +3"),
            "retain 2 prunes from the third: {script}"
        );
        let claim = pod
            .volumes
            .as_ref()
            .and_then(|v| v[0].persistent_volume_claim.as_ref());
        assert_eq!(claim.map(|c| c.claim_name.as_str()), Some("cache-backups"));
        // Next tick at 12:00.
        assert_eq!(
            decision.requeue_after,
            Some(Duration::from_secs(6 * 3600 - 30))
        );
    }

    #[test]
    fn nothing_is_due_between_ticks_once_the_slot_ran() {
        let decision = ready_at("2025-01-01T07:00:00Z")
            .last_completed_slot("20250101-060000")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert!(decision.run.is_none());
        assert_eq!(decision.requeue_after, Some(Duration::from_secs(5 * 3600)));
    }

    #[test]
    fn an_existing_job_for_the_slot_is_never_duplicated() {
        for state in [None, Some("Complete"), Some("Failed")] {
            let decision = ready_at("2025-01-01T06:10:00Z")
                .observe(fixtures::backup_job("20250101-060000", state))
                .schedule::<Kvstore>()
                .expect("schedules");
            assert!(decision.run.is_none(), "{state:?}");
        }
    }

    #[test]
    fn ticks_before_the_app_existed_are_not_due() {
        // Created at 00:00, so the 00:00 tick counts but an App created at
        // 05:00 must wait for 06:00.
        let mut app: serde_json::Value = serde_json::from_str(fixtures::APP).expect("json");
        app["metadata"]["creationTimestamp"] = "2025-01-01T05:00:00Z".into();
        let decision = Fixture::new(app.to_string())
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PODS_READY)
            .now("2025-01-01T05:30:00Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert!(decision.run.is_none());
        assert_eq!(decision.requeue_after, Some(Duration::from_secs(30 * 60)));
    }

    #[test]
    fn a_missed_tick_runs_late_until_the_deadline() {
        let late = ready_at("2025-01-01T06:59:00Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert_eq!(late.run.map(|r| r.slot), Some(slot("20250101-060000")));
        let too_late = ready_at("2025-01-01T07:01:00Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert!(too_late.run.is_none());
    }

    #[test]
    fn waits_for_a_running_backup_and_for_the_primary() {
        let busy = ready_at("2025-01-01T12:00:00Z")
            .observe(fixtures::backup_job("20250101-060000", None))
            .schedule::<Kvstore>()
            .expect("schedules");
        assert!(busy.run.is_none());
        assert_eq!(busy.requeue_after, Some(RETRY));

        let primary_down = fixtures::pods_with(|i, pod| {
            if i == 0 {
                pod["status"]["conditions"][3]["status"] = "False".into();
            }
        });
        let down = Fixture::new(fixtures::APP)
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(&primary_down)
            .now("2025-01-01T12:00:00Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert!(down.run.is_none());
        assert_eq!(down.requeue_after, Some(RETRY));
        let logs = testing::take_logs();
        assert!(
            logs.iter()
                .any(|r| r.message.contains("primary is not ready")),
            "{logs:?}"
        );
    }

    #[test]
    fn retention_expires_old_successes_and_superseded_failures() {
        let decision = ready_at("2025-01-02T00:00:00Z")
            .observe(fixtures::backup_job("20250101-000000", Some("Complete")))
            .observe(fixtures::backup_job("20250101-060000", Some("Failed")))
            .observe(fixtures::backup_job("20250101-120000", Some("Complete")))
            .observe(fixtures::backup_job("20250101-180000", Some("Complete")))
            .last_completed_slot("20250101-180000")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert_eq!(
            decision.expire,
            [slot("20250101-000000"), slot("20250101-060000")]
        );
        assert_eq!(decision.run.map(|r| r.slot), Some(slot("20250102-000000")));
    }

    #[test]
    fn failures_are_kept_until_a_later_success() {
        let job = |s: &str, state| BackupJob {
            slot: slot(s),
            name: s.to_string(),
            state,
        };
        let jobs = [
            job("20250101-000000", JobState::Succeeded),
            job("20250101-060000", JobState::Failed),
            job("20250101-120000", JobState::Running),
        ];
        assert!(
            expired(&jobs, 2).is_empty(),
            "the failure is newer than the last success"
        );
        assert!(
            expired(&jobs[1..], 1).is_empty(),
            "no success yet: keep the failure"
        );
        assert!(expired(&jobs, 1).is_empty(), "one success, retain 1");
        let two = [
            job("20250101-000000", JobState::Succeeded),
            job("20250101-060000", JobState::Succeeded),
        ];
        assert_eq!(expired(&two, 1), [slot("20250101-000000")]);
    }

    #[test]
    fn backups_off_does_nothing_and_keeps_old_jobs() {
        let decision = Fixture::new(fixtures::app_with_config(json!({})))
            .observe(fixtures::backup_job("20250101-000000", Some("Complete")))
            .now("2025-01-01T06:00:00Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        assert_eq!(decision, BackupDecision::none());
    }

    #[test]
    fn an_existing_claim_is_used_and_not_planned() {
        let app = fixtures::app_with_config(
            json!({"backup": {"schedule": "@hourly", "claimName": "shared-backups"}}),
        );
        let decision = Fixture::new(app)
            .observe(fixtures::STATEFULSET_READY)
            .observe_list(fixtures::PODS_READY)
            .now("2025-01-01T01:00:00Z")
            .schedule::<Kvstore>()
            .expect("schedules");
        let pod = decision
            .run
            .and_then(|r| r.job.spec)
            .and_then(|s| s.template.spec)
            .expect("pod");
        let claim = pod
            .volumes
            .as_ref()
            .and_then(|v| v[0].persistent_volume_claim.as_ref());
        assert_eq!(claim.map(|c| c.claim_name.as_str()), Some("shared-backups"));
    }

    #[test]
    fn a_schedule_that_never_fires_is_a_config_error() {
        let app = fixtures::app_with_config(json!({"backup": {"schedule": "0 0 31 2 *"}}));
        let err = Fixture::new(app)
            .now("2025-01-01T00:00:00Z")
            .schedule::<Kvstore>()
            .expect_err("Feb 31");
        assert_eq!(err.field(), Some("spec.config.backup.schedule"));
    }

    #[test]
    fn a_bad_last_completed_slot_is_invalid_input() {
        let err = ready_at("2025-01-01T06:00:00Z")
            .last_completed_slot("2025-01-01T06:00:00Z")
            .schedule::<Kvstore>()
            .expect_err("not a slot");
        assert_eq!(err.kind(), wasmop_sdk::ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("last-completed-slot"));
    }
}
