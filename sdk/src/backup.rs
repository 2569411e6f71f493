//! The `backup` capability: backup Jobs per schedule slot, and their retention.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};
use k8s_openapi::api::batch::v1::{Job, JobStatus};

use crate::app::App;
use crate::error::{Error, Result};
use crate::metadata::Plugin;
use crate::objects::SLOT_LABEL;
use crate::observed::{Observed, StatusView};
use crate::runtime;

/// Longest slot the host accepts: it appends the slot to the App's name to
/// name the Job, and Job names are DNS labels (63 characters).
pub const MAX_SLOT_LEN: usize = 40;

/// Schedules backups.
pub trait Backup: Plugin {
    /// Decides whether a backup is due now and which old ones to expire.
    fn schedule(input: &BackupInput<Self::Config>) -> Result<BackupDecision>;
}

/// The schedule's state.
#[derive(Debug, Clone)]
pub struct BackupInput<C> {
    /// The App, config typed.
    pub app: App<C>,
    /// Objects that exist now, including backup Jobs; see [`BackupJob::list`].
    pub observed: Observed,
    /// The newest slot whose Job succeeded.
    pub last_completed_slot: Option<Slot>,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

/// The stable id of one schedule tick; a slot is backed up at most once.
///
/// Slots made by [`Slot::at`] are the tick's UTC time as `YYYYMMDD-HHMMSS`,
/// so they sort in time order and read well in Job names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(String);

impl Slot {
    /// The slot of the tick at `time` (sub-second precision is dropped).
    pub fn at(time: DateTime<Utc>) -> Self {
        Slot(format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            time.year(),
            time.month(),
            time.day(),
            time.hour(),
            time.minute(),
            time.second()
        ))
    }

    /// Checks a slot from the host or a label: 1 to [`MAX_SLOT_LEN`]
    /// characters of `a-z`, `0-9` and `-`, starting and ending with a letter
    /// or digit.
    pub fn parse(text: &str) -> Result<Self> {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        let valid = !text.is_empty()
            && text.len() <= MAX_SLOT_LEN
            && text.chars().all(|c| alnum(c) || c == '-')
            && text.starts_with(alnum)
            && text.ends_with(alnum);
        if valid {
            Ok(Slot(text.to_string()))
        } else {
            Err(Error::invalid_input(format!(
                "{text:?} is not a slot (1-{MAX_SLOT_LEN} of a-z, 0-9, '-')"
            )))
        }
    }

    /// The tick time, for slots in the [`Slot::at`] format.
    pub fn time(&self) -> Option<DateTime<Utc>> {
        let s = self.0.as_bytes();
        if s.len() != 15 || s[8] != b'-' {
            return None;
        }
        let num = |range: std::ops::Range<usize>| self.0.get(range)?.parse::<u32>().ok();
        let year = i32::try_from(num(0..4)?).ok()?;
        NaiveDate::from_ymd_opt(year, num(4..6)?, num(6..8)?)?
            .and_hms_opt(num(9..11)?, num(11..13)?, num(13..15)?)
            .map(|t| t.and_utc())
    }

    /// The slot text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A backup to start now.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupRun {
    /// The tick it is for.
    pub slot: Slot,
    /// The Job; the host renames it from the slot.
    pub job: Job,
}

/// What to do now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackupDecision {
    /// A backup to start, or none.
    pub run: Option<BackupRun>,
    /// Slots whose Jobs the host should delete.
    pub expire: Vec<Slot>,
    /// When to ask again.
    pub requeue_after: Option<Duration>,
}

impl BackupDecision {
    /// Nothing to do.
    pub fn none() -> Self {
        BackupDecision::default()
    }

    /// Start `job` for `slot`.
    pub fn run(slot: Slot, job: Job) -> Self {
        BackupDecision {
            run: Some(BackupRun { slot, job }),
            ..Default::default()
        }
    }

    /// Also expire these slots.
    pub fn expire(mut self, slots: impl IntoIterator<Item = Slot>) -> Self {
        self.expire.extend(slots);
        self
    }

    /// Ask again after `after`.
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.requeue_after = Some(after);
        self
    }
}

/// Where a backup Job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Not finished (pending or running).
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished and failed (out of retries or past its deadline).
    Failed,
}

/// A backup Job found among the observed objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupJob {
    /// Its slot, from the `wasmop.dev/backup-slot` label.
    pub slot: Slot,
    /// `metadata.name`.
    pub name: String,
    /// Whether it finished.
    pub state: JobState,
}

impl BackupJob {
    /// Every observed Job carrying a valid slot label, oldest slot first.
    /// Jobs without the label are not backups and are skipped, and so are
    /// Jobs whose label is not a valid slot (a user's Job must not stop
    /// backups).
    pub fn list(observed: &Observed) -> Result<Vec<BackupJob>> {
        // Metadata and status only: the Job's Pod template is never needed.
        let mut jobs: Vec<BackupJob> = observed
            .all_as::<Job, StatusView<JobStatus>>()?
            .into_iter()
            .filter_map(|job| {
                let slot = job.metadata.labels.as_ref()?.get(SLOT_LABEL)?;
                let slot = Slot::parse(slot).ok()?;
                Some(BackupJob {
                    slot,
                    name: job.metadata.name.clone().unwrap_or_default(),
                    state: job_state(job.status.as_ref()),
                })
            })
            .collect();
        jobs.sort_by(|a, b| a.slot.cmp(&b.slot));
        Ok(jobs)
    }
}

/// Reads a Job's terminal conditions. `SuccessCriteriaMet` and
/// `FailureTarget` (Kubernetes 1.31+) precede the terminal conditions while
/// Pods are still terminating, so they count as running.
fn job_state(status: Option<&JobStatus>) -> JobState {
    let Some(status) = status else {
        return JobState::Running;
    };
    let holds = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == t && c.status == "True")
    };
    if holds("Complete") {
        JobState::Succeeded
    } else if holds("Failed") {
        JobState::Failed
    } else {
        JobState::Running
    }
}

/// A backup decision with its Job serialized.
#[derive(Debug, Clone, PartialEq)]
pub struct RawBackupDecision {
    /// `(slot, job JSON)` to run.
    pub run: Option<(String, String)>,
    /// Slots to expire.
    pub expire: Vec<String>,
    /// Requeue in milliseconds.
    pub requeue_after_ms: Option<u64>,
}

/// `backup.schedule` as a function: app, observed, last completed slot, now.
pub type ScheduleFn = fn(&str, Vec<String>, Option<String>, i64) -> Result<RawBackupDecision>;

/// `backup.schedule`, on the WIT's raw values.
pub fn schedule<P: Backup>(
    app: &str,
    observed: Vec<String>,
    last_completed_slot: Option<String>,
    now_ms: i64,
) -> Result<RawBackupDecision> {
    let last_completed_slot = last_completed_slot
        .map(|s| Slot::parse(&s).map_err(|e| e.with_field("last-completed-slot")))
        .transpose()?;
    let input = BackupInput {
        app: runtime::read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        last_completed_slot,
        now: runtime::read_now(now_ms)?,
    };
    let decision = P::schedule(&input).map_err(|e| input.app.locate(e))?;
    let run = match decision.run {
        Some(run) => Some((run.slot.to_string(), runtime::to_json(&run.job)?)),
        None => None,
    };
    Ok(RawBackupDecision {
        run,
        expire: decision.expire.iter().map(Slot::to_string).collect(),
        requeue_after_ms: decision.requeue_after.map(runtime::millis),
    })
}

/// `backup.schedule` run natively: its answer held to the host's rules, and the decision core's
/// call answered by the plugin's Rust code.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native {
    use std::time::Duration;

    use wasmop_core::{
        answers::{self, AnswerError, DEFAULT_MAX_OUTPUT_BYTES},
        backup::ScheduleCall,
    };

    use super::{RawBackupDecision, ScheduleFn};
    use crate::{error::Error, testing::NativeCall};

    /// The answer, checked.
    pub(crate) fn checked(raw: RawBackupDecision) -> Result<answers::BackupDecision, AnswerError> {
        answers::check_backup(
            raw.run,
            raw.expire,
            raw.requeue_after_ms.map(Duration::from_millis),
            DEFAULT_MAX_OUTPUT_BYTES,
        )
    }

    impl NativeCall for ScheduleCall {
        type Function = ScheduleFn;

        fn call(
            self,
            schedule: ScheduleFn,
            app: &str,
            observed: Vec<String>,
            now_ms: i64,
        ) -> Result<Result<answers::BackupDecision, AnswerError>, Error> {
            let raw = schedule(app, observed, self.last_completed, now_ms)?;
            Ok(checked(raw))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("test timestamp")
            .with_timezone(&Utc)
    }

    #[test]
    fn slot_round_trips_time() {
        let slot = Slot::at(utc("2025-03-09T06:00:00.250Z"));
        assert_eq!(slot.as_str(), "20250309-060000");
        assert_eq!(slot.time(), Some(utc("2025-03-09T06:00:00Z")));
        assert_eq!(Slot::parse("nightly").expect("valid").time(), None);
        assert!(Slot::at(utc("2025-01-01T00:00:00Z")) < Slot::at(utc("2025-01-01T06:00:00Z")));
    }

    #[test]
    fn slot_parse_rejects_non_labels() {
        for bad in [
            "",
            "-a",
            "a-",
            "2025:01",
            "UPPER",
            &"a".repeat(MAX_SLOT_LEN + 1),
        ] {
            assert!(Slot::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(Slot::parse("20250101-000000").is_ok());
    }

    fn job(name: &str, slot: Option<&str>, condition: Option<&str>) -> serde_json::Value {
        let mut labels = serde_json::Map::new();
        if let Some(slot) = slot {
            labels.insert(SLOT_LABEL.into(), slot.into());
        }
        let conditions: Vec<_> = condition
            .map(|t| json!({"type": t, "status": "True"}))
            .into_iter()
            .collect();
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"template": {}},
            "status": {"conditions": conditions}
        })
    }

    #[test]
    fn lists_backup_jobs_by_slot() {
        let observed = Observed::from_values([
            job("b", Some("20250102-000000"), None),
            job("a", Some("20250101-000000"), Some("Complete")),
            job("c", Some("20250103-000000"), Some("Failed")),
            job("d", Some("20250104-000000"), Some("SuccessCriteriaMet")),
            job("unrelated", None, Some("Complete")),
            job("bad-label", Some("Not A Slot"), None),
        ])
        .expect("valid");
        let jobs = BackupJob::list(&observed).expect("typed");
        let summary: Vec<_> = jobs.iter().map(|j| (j.name.as_str(), j.state)).collect();
        assert_eq!(
            summary,
            [
                ("a", JobState::Succeeded),
                ("b", JobState::Running),
                ("c", JobState::Failed),
                ("d", JobState::Running),
            ]
        );
    }
}
