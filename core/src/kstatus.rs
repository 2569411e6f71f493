//! The summary conditions every tool of the ecosystem reads: `Ready`, `Reconciling` and
//! `Stalled`, derived from the host's own conditions after each reconcile.
//!
//! kstatus (sigs.k8s.io/cli-utils `pkg/kstatus/status`, used by Flux's health checks, kpt,
//! `kubectl wait` users and Argo CD's generic health) computes a resource's status as:
//! `InProgress` while `status.observedGeneration` differs from `metadata.generation` or a
//! `Reconciling` condition is True; `Failed` while a `Stalled` condition is True; `Current`
//! otherwise. With only `Available`/`Degraded`, an App was `Current` as soon as its status caught
//! up with its generation, Ready or not. So the host writes both "abnormal-true" conditions as
//! kstatus defines them, plus `Ready` for `kubectl wait --for=condition=Ready`:
//!
//! - `Ready` True only when the plugin serves, the service is `Available`, nothing is
//!   `Degraded`, no rollout is `Progressing` and no upgrade is held (`UpgradeGated`), all at the
//!   generation the status describes: the spec is realised.
//! - `Stalled` True when the App cannot get there without someone changing something: the
//!   plugin cannot be loaded (`PluginReady` False, other than `Loading`), a call or the plan
//!   failed (`Degraded` for any reason but the plugin's own health report), or the upgrade gate
//!   denied the version step.
//! - `Reconciling` True otherwise while not Ready: converging, loading, a gate that waits, a
//!   service the plugin reports degraded (it may recover on its own).
//!
//! They are derived data: they move only when the conditions they come from do, and the
//! transition Event names those, not these.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::{
    conditions::{
        AVAILABLE, DEGRADED, PLUGIN_READY, PROGRESSING, READY, RECONCILING, STALLED, UPGRADE_GATED,
        reason,
    },
    status::Cond,
};

/// The reason `Degraded` carries when the plugin's health report says so (see
/// [`crate::health::verdict`]); every other reason of a True `Degraded` is a failure.
const HEALTH_DEGRADED: &str = "Degraded";

/// `Ready`, `Reconciling` and `Stalled` for the host's `conditions` (the App's whole new set).
pub fn summary(conditions: &[Condition]) -> [Cond; 3] {
    let find = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
    let is_true = |c: Option<&Condition>| c.is_some_and(|c| c.status == "True");
    let plugin = find(PLUGIN_READY);
    let degraded = find(DEGRADED).filter(|c| c.status == "True");
    let gated = find(UPGRADE_GATED).filter(|c| c.status == "True");
    let stalled_by = match (plugin, degraded, gated) {
        (Some(p), _, _) if p.status != "True" && p.reason != reason::LOADING => Some(p),
        (_, Some(d), _) if d.reason != HEALTH_DEGRADED => Some(d),
        (_, _, Some(g)) if g.reason == "Denied" => Some(g),
        _ => None,
    };
    // Why not Ready: the first of these that holds, in the order a person would fix them.
    let not_ready: Option<(&str, &str)> = if let Some(c) = stalled_by {
        Some((&c.reason, &c.message))
    } else if !is_true(plugin) {
        Some(plugin.map_or((reason::LOADING, ""), |c| (&c.reason, &c.message)))
    } else if let Some(c) = degraded {
        Some((&c.reason, &c.message))
    } else if let Some(c) = gated {
        Some((&c.reason, &c.message))
    } else if let Some(c) = find(AVAILABLE).filter(|c| c.status != "True") {
        Some((&c.reason, &c.message))
    } else if find(AVAILABLE).is_none() {
        Some((
            "NotAvailable",
            "the service's availability is not known yet",
        ))
    } else if let Some(c) = find(PROGRESSING).filter(|c| c.status == "True") {
        Some(("Progressing", &c.message))
    } else {
        None
    };
    match not_ready {
        None => {
            let message = find(AVAILABLE).map_or("", |c| c.message.as_str());
            [
                Cond::new(READY, true, "Available", message),
                Cond::new(RECONCILING, false, "Available", ""),
                Cond::new(STALLED, false, "Available", ""),
            ]
        }
        Some((why, message)) => {
            let stalled = stalled_by.is_some();
            [
                Cond::new(READY, false, why, message),
                Cond::new(RECONCILING, !stalled, why, message),
                Cond::new(STALLED, stalled, why, message),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

    fn cond(type_: &str, status: bool, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: if status { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: format!("{type_} says {reason}"),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    /// `(Ready, Reconciling, Stalled)` and Ready's reason.
    fn states(conditions: &[Condition]) -> (bool, bool, bool, String) {
        let [ready, reconciling, stalled] = summary(conditions);
        let t = |c: &Cond| c.status == "True";
        (t(&ready), t(&reconciling), t(&stalled), ready.reason)
    }

    fn serving_healthy() -> Vec<Condition> {
        vec![
            cond(PLUGIN_READY, true, "Loaded"),
            cond(AVAILABLE, true, "Healthy"),
            cond(PROGRESSING, false, "Healthy"),
            cond(DEGRADED, false, "Healthy"),
            cond(UPGRADE_GATED, false, "NoUpgrade"),
        ]
    }

    fn with(mut conditions: Vec<Condition>, next: Condition) -> Vec<Condition> {
        conditions.retain(|c| c.type_ != next.type_);
        conditions.push(next);
        conditions
    }

    #[test]
    fn ready_only_when_serving_available_and_settled() {
        assert_eq!(
            states(&serving_healthy()),
            (true, false, false, "Available".into())
        );
        let progressing = with(serving_healthy(), cond(PROGRESSING, true, "Healthy"));
        assert_eq!(
            states(&progressing),
            (false, true, false, "Progressing".into())
        );
        let unavailable = with(serving_healthy(), cond(AVAILABLE, false, "Progressing"));
        assert_eq!(
            states(&unavailable),
            (false, true, false, "Progressing".into())
        );
        let unknown: Vec<_> = serving_healthy()
            .into_iter()
            .filter(|c| c.type_ != AVAILABLE)
            .collect();
        assert_eq!(
            states(&unknown),
            (false, true, false, "NotAvailable".into())
        );
    }

    #[test]
    fn loading_and_waiting_are_reconciling_not_stalled() {
        assert_eq!(states(&[]), (false, true, false, reason::LOADING.into()));
        let loading = with(
            serving_healthy(),
            cond(PLUGIN_READY, false, reason::LOADING),
        );
        assert_eq!(
            states(&loading),
            (false, true, false, reason::LOADING.into())
        );
        let waiting = with(serving_healthy(), cond(UPGRADE_GATED, true, "Waiting"));
        assert_eq!(states(&waiting), (false, true, false, "Waiting".into()));
        let unhealthy = with(serving_healthy(), cond(DEGRADED, true, HEALTH_DEGRADED));
        assert_eq!(states(&unhealthy), (false, true, false, "Degraded".into()));
    }

    #[test]
    fn failures_stall() {
        let rejected = with(
            serving_healthy(),
            cond(DEGRADED, true, reason::PLAN_REJECTED),
        );
        assert_eq!(
            states(&rejected),
            (false, false, true, reason::PLAN_REJECTED.into())
        );
        let broken = with(serving_healthy(), cond(PLUGIN_READY, false, "FetchFailed"));
        assert_eq!(states(&broken), (false, false, true, "FetchFailed".into()));
        let denied = with(serving_healthy(), cond(UPGRADE_GATED, true, "Denied"));
        assert_eq!(states(&denied), (false, false, true, "Denied".into()));
        // A failure is named before an unhealthy service it may explain.
        let both = with(
            with(serving_healthy(), cond(AVAILABLE, false, "Degraded")),
            cond(PLUGIN_READY, false, "PolicyRefused"),
        );
        assert_eq!(states(&both), (false, false, true, "PolicyRefused".into()));
    }

    #[test]
    fn exactly_one_of_ready_reconciling_stalled() {
        let cases = [
            serving_healthy(),
            Vec::new(),
            with(serving_healthy(), cond(DEGRADED, true, "PluginTrapped")),
            with(serving_healthy(), cond(PROGRESSING, true, "Healthy")),
        ];
        for conditions in cases {
            let (ready, reconciling, stalled, _) = states(&conditions);
            assert_eq!(
                [ready, reconciling, stalled].iter().filter(|b| **b).count(),
                1,
                "{conditions:?}"
            );
        }
    }
}
