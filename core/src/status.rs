//! The App's status as the host writes it, and the conditions' bookkeeping: `lastTransitionTime`
//! changes only when a condition's status flips.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of an App, written only by the host.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One word summary: Pending, Progressing, Ready, Degraded, Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The service version that is rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The plugin version currently serving this App.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginStatus>,
    /// Standard conditions: PluginReady, Available, Progressing, Degraded, UpgradeGated; the
    /// summary as kstatus reads it (Ready, Reconciling, Stalled); and the plugin's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The most recent backup the host started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupStatus>,
    /// The version step in flight, while `spec.version` differs from `status.version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
}

/// A backup the host started.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// The schedule slot it ran for.
    pub slot: String,
    /// The Job that runs it.
    pub job: String,
    /// Whether the Job completed successfully.
    #[serde(default)]
    pub completed: bool,
}

/// A version step and what the plugin's gate said about it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// The rolled-out version.
    pub from: String,
    /// The desired version.
    pub to: String,
    /// `Allowed` (rolling out), `Waiting` or `Denied`.
    pub state: String,
    /// The gate's reason for waiting or denying.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Which plugin serves an App.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The source reference as written in the spec.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Content digest of the loaded component (`sha256:...`).
    pub digest: String,
    /// The first 12 hex digits of the digest, for printer columns.
    pub short_digest: String,
    /// Capabilities the component exports.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// When this digest went into service for the App (RFC 3339); a host restart that loads
    /// the same digest again leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<String>,
}

/// A condition to set, without its bookkeeping fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// Condition type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

impl Cond {
    /// A condition of `type_` with `status`, `reason` and `message`.
    pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: type_.into(),
            status: if status { "True" } else { "False" },
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The conditions of the new status: `lastTransitionTime` comes from the previous condition of
/// the same type when its status did not change, and is `now` otherwise.
pub fn merge_conditions(
    previous: &[Condition],
    next: Vec<Cond>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    next.into_iter()
        .map(|c| {
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == c.status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: c.type_,
                status: c.status.to_string(),
                reason: c.reason,
                message: bounded(c.message),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// The most bytes of plugin-influenced text the host writes into a status field or an Event
/// (a condition message, an upgrade gate's reason, an Event's note): Kubernetes' own
/// `Condition.message` has no limit, so without one a plugin could write up to its output
/// cap into etcd on every reconcile.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `message` cut to [`MAX_MESSAGE_BYTES`] on a character boundary, marked `…` when cut.
pub fn bounded(message: String) -> String {
    truncate(message, MAX_MESSAGE_BYTES)
}

fn truncate(mut message: String, max: usize) -> String {
    if message.len() > max {
        let mut cut = max;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// The types whose status flipped between `previous` and `next`, with the new condition.
pub fn transitions<'a>(previous: &[Condition], next: &'a [Condition]) -> Vec<&'a Condition> {
    next.iter()
        .filter(|c| {
            previous
                .iter()
                .find(|p| p.type_ == c.type_)
                .is_none_or(|p| p.status != c.status)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("valid")
    }

    #[test]
    fn transition_time_changes_only_when_the_status_flips() {
        let first = merge_conditions(
            &[],
            vec![Cond::new("Available", false, "Starting", "0/3")],
            Some(1),
            at(100),
        );
        assert_eq!(first[0].last_transition_time, Time(at(100)));

        let same = merge_conditions(
            &first,
            vec![Cond::new("Available", false, "Starting", "1/3")],
            Some(1),
            at(200),
        );
        assert_eq!(
            same[0].last_transition_time,
            Time(at(100)),
            "message changes are not transitions"
        );
        assert!(transitions(&first, &same).is_empty());

        let flipped = merge_conditions(
            &same,
            vec![Cond::new("Available", true, "Ready", "3/3")],
            Some(2),
            at(300),
        );
        assert_eq!(flipped[0].last_transition_time, Time(at(300)));
        assert_eq!(flipped[0].observed_generation, Some(2));
        assert_eq!(transitions(&same, &flipped).len(), 1);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let cut = truncate("é".repeat(600), 1024);
        assert!(cut.len() <= 1024 + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
