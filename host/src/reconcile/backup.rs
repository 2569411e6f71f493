//! Backup: runs the Job the plugin's schedule asks for, named from the App and the slot, so a
//! slot never runs twice, across host restarts too (the API server refuses a second create),
//! and deletes the Jobs of expired slots.

use k8s_openapi::api::batch::v1::Job;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{
    apply::stamp,
    fetch::{BACKUP_SLOT_LABEL, ObservedObject},
};
use crate::{
    app::{App, BackupStatus},
    plugin::object::PluginObject,
};

/// The Job name for `slot` of `app`: `<app>-backup-<slot>`, shortened with a hash when that
/// would be over the 63 characters a Job's Pods can carry in their labels.
pub fn job_name(app: &str, slot: &str) -> String {
    let name = format!("{app}-backup-{slot}");
    if name.len() <= 63 {
        return name;
    }
    let hash = format!("{:x}", Sha256::digest(name.as_bytes()));
    let keep = 63 - 1 - 10;
    format!("{}-{}", name[..keep].trim_end_matches('-'), &hash[..10])
}

/// The newest slot whose Job completed, from the observed backup Jobs.
pub fn last_completed_slot(observed: &[ObservedObject]) -> Option<String> {
    observed
        .iter()
        .filter(|o| o.kind == "Job")
        .filter_map(|o| {
            let slot = o.backup_slot.clone()?;
            let done = o
                .json
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > 0;
            done.then_some(slot)
        })
        .max()
}

/// Whether any backup Job of the App is still running.
pub fn running(observed: &[ObservedObject]) -> bool {
    observed.iter().any(|o| {
        o.kind == "Job"
            && o.backup_slot.is_some()
            && o.json
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
            && o.json
                .pointer("/status/failed")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
    })
}

/// Whether `slot` comes after the last slot started (slots sort in tick order, as the WIT
/// contract requires): a backup the host already ran is never run again.
pub fn is_new_slot(last: Option<&BackupStatus>, slot: &str) -> bool {
    last.is_none_or(|last| slot > last.slot.as_str())
}

/// Creates the backup Job for `slot`; `Ok(false)` when the slot's Job already exists.
pub async fn start(
    client: &Client,
    app: &App,
    slot: &str,
    mut job: PluginObject,
) -> Result<(bool, BackupStatus), kube::Error> {
    let name = job_name(&app.name_any(), slot);
    job.metadata_mut(|metadata| {
        metadata.insert("name".into(), Value::String(name.clone()));
        metadata.insert(
            "namespace".into(),
            Value::String(app.namespace().unwrap_or_default()),
        );
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(BACKUP_SLOT_LABEL.into(), Value::String(slot.to_string()));
        }
    });
    stamp(app, &mut job);
    let job: Job = serde_json::to_value(&job)
        .and_then(serde_json::from_value)
        .map_err(kube::Error::SerdeError)?;
    let api: Api<Job> = Api::namespaced(client.clone(), &app.namespace().unwrap_or_default());
    let status = BackupStatus {
        slot: slot.to_string(),
        job: name,
        completed: false,
    };
    match api.create(&PostParams::default(), &job).await {
        Ok(_) => Ok((true, status)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok((false, status)),
        Err(err) => Err(err),
    }
}

/// Deletes the Jobs of `slots` (retention); Jobs already gone are fine.
pub async fn expire(
    client: &Client,
    app: &App,
    slots: &[String],
    observed: &[ObservedObject],
) -> Result<Vec<String>, kube::Error> {
    let api: Api<Job> = Api::namespaced(client.clone(), &app.namespace().unwrap_or_default());
    let mut deleted = Vec::new();
    for object in observed.iter().filter(|o| o.kind == "Job" && o.owned) {
        let Some(slot) = &object.backup_slot else {
            continue;
        };
        if !slots.contains(slot) {
            continue;
        }
        match api.delete(&object.name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(object.name.clone()),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_at_or_before_the_last_started_never_runs_again() {
        let last = BackupStatus {
            slot: "20261205-100000".into(),
            job: "kv-backup-20261205-100000".into(),
            completed: true,
        };
        assert!(is_new_slot(None, "20261205-100000"));
        assert!(is_new_slot(Some(&last), "20261205-110000"));
        // The same slot once its Job expired, and an earlier one: never again.
        assert!(!is_new_slot(Some(&last), "20261205-100000"));
        assert!(!is_new_slot(Some(&last), "20261205-090000"));
    }

    #[test]
    fn job_names_are_stable_and_bounded() {
        assert_eq!(
            job_name("kv", "20261202-060000"),
            "kv-backup-20261202-060000"
        );
        let long = job_name(&"a".repeat(60), "20261202-060000");
        assert!(long.len() <= 63, "{long}");
        assert_eq!(
            long,
            job_name(&"a".repeat(60), "20261202-060000"),
            "same slot, same name"
        );
        assert_ne!(long, job_name(&"a".repeat(60), "20261202-120000"));
    }
}
