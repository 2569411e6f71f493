//! The status writer: builds conditions, keeps `lastTransitionTime` unless a condition flips,
//! and patches the status subresource only when something changed.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};

use crate::app::{App, AppStatus};

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
                message: truncate(c.message, 1024),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
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

/// Writes `status` if it differs from what the App has; returns whether it wrote.
pub async fn write(api: &Api<App>, app: &App, status: &AppStatus) -> Result<bool, kube::Error> {
    if app.status.as_ref() == Some(status) {
        return Ok(false);
    }
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({
        "apiVersion": "wasmop.dev/v1alpha1",
        "kind": "App",
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(crate::crd_install::FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(true)
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
