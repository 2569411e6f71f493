//! Backup bookkeeping: the Job a slot runs as, which slots completed, and the rule that a slot
//! never runs twice.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::{
    object::PluginObject,
    observed::{BACKUP_SLOT_LABEL, ObservedObject},
    stamp::{AppRef, stamp},
    status::BackupStatus,
};

/// `backup.schedule(last_completed)`: whether a backup Job is due, and which slots expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleCall {
    /// The newest slot whose Job completed ([`last_completed_slot`]).
    pub last_completed: Option<String>,
}

/// The Job name for `slot` of `app`: `<app>-backup-<slot>` for an App,
/// `<app>-<kind>-<hash>-backup-<slot>` (the kind in lower case, 6 hex digits of the SHA-256 of
/// its kind mark) for a parent of another kind, so that an App and a `KVStore` named alike in one
/// namespace, or two `KVStore` kinds of two groups, never back up into one Job; shortened with a
/// hash when that would be over the 63 characters a Job's Pods can carry in their labels. A name
/// another parent in the namespace could still produce (an App named `cache-kvstore-1a2b3c`) is
/// not taken over: the host starts a backup only into a Job it creates or that the parent
/// controls.
pub fn job_name(app: &AppRef, slot: &str) -> String {
    let name = if app.is_app() {
        format!("{}-backup-{slot}", app.name)
    } else {
        let mark = format!("{:x}", Sha256::digest(app.kind_mark().as_bytes()));
        format!(
            "{}-{}-{}-backup-{slot}",
            app.name,
            app.kind.to_lowercase(),
            &mark[..6]
        )
    };
    if name.len() <= 63 {
        return name;
    }
    let hash = format!("{:x}", Sha256::digest(name.as_bytes()));
    // Cut on a character boundary: the host checks slots are ASCII, a native test may not.
    let mut keep = 63 - 1 - 10;
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
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

/// The backup Job of `slot` as the host creates it: named from the App and the slot (so the API
/// server refuses a second one), in the App's namespace, labelled with the slot and stamped.
pub fn prepare_job(app: &AppRef, slot: &str, mut job: PluginObject) -> PluginObject {
    let name = job_name(app, slot);
    job.metadata_mut(|metadata| {
        metadata.insert("name".into(), Value::String(name));
        metadata.insert("namespace".into(), Value::String(app.namespace.clone()));
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(BACKUP_SLOT_LABEL.into(), Value::String(slot.to_string()));
        }
    });
    stamp(app, &mut job);
    job
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

    fn parent(api_version: &str, kind: &str, name: &str) -> AppRef {
        AppRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
            generation: Some(1),
        }
    }

    fn app(name: &str) -> AppRef {
        parent("wasmop.dev/v1alpha1", "App", name)
    }

    #[test]
    fn job_names_are_stable_and_bounded() {
        assert_eq!(
            job_name(&app("kv"), "20261202-060000"),
            "kv-backup-20261202-060000"
        );
        let long = job_name(&app(&"a".repeat(60)), "20261202-060000");
        assert!(long.len() <= 63, "{long}");
        assert_eq!(
            long,
            job_name(&app(&"a".repeat(60)), "20261202-060000"),
            "same slot, same name"
        );
        assert_ne!(long, job_name(&app(&"a".repeat(60)), "20261202-120000"));
        assert!(
            job_name(&app(&"é".repeat(40)), "s").len() <= 63,
            "never cut inside a character"
        );
    }

    /// An App and a KVStore named alike in one namespace back up into Jobs of their own.
    #[test]
    fn job_names_tell_parents_of_two_kinds_apart() {
        let kv = parent("data.example.com/v1", "KVStore", "cache");
        let name = job_name(&kv, "20261202-060000");
        assert!(
            name.starts_with("cache-kvstore-") && name.ends_with("-backup-20261202-060000"),
            "{name}"
        );
        assert_ne!(name, job_name(&app("cache"), "20261202-060000"));
        // Nor with a kind of that name in another group, nor with an App named like the old
        // scheme's prefix.
        let other = parent("cache.example.org/v1", "KVStore", "cache");
        assert_ne!(name, job_name(&other, "20261202-060000"));
        assert_ne!(name, job_name(&app("cache-kvstore"), "20261202-060000"));
        let job = PluginObject::parse(
            &serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "x"}, "spec": {"template": {
                    "metadata": {"labels": {"wasmop.dev/app": "cache"}}, "spec": {}}}})
            .to_string(),
        )
        .expect("a Job");
        let prepared = prepare_job(&kv, "20261202-060000", job).to_value();
        let labels = &prepared["metadata"]["labels"];
        assert_eq!(labels["wasmop.dev/parent-kind"], "KVStore.data.example.com");
        assert_eq!(labels[BACKUP_SLOT_LABEL], "20261202-060000");
        assert_eq!(
            prepared["spec"]["template"]["metadata"]["labels"]["wasmop.dev/parent-kind"],
            "KVStore.data.example.com"
        );
        assert_eq!(
            prepared["metadata"]["ownerReferences"][0]["kind"],
            "KVStore"
        );
    }
}
