//! Upgrade: which version the plan renders. A new App installs `spec.version` directly; a
//! change of `spec.version` asks the plugin's gate, holds at the rolled-out version while the
//! gate waits or denies, and rolls forward once it allows. `status.version` moves only when
//! health reports the rollout at the new version complete.

use crate::{answers::GateDecision, status::UpgradeStatus};

/// `upgrade.gate(from, to)`: whether the step from the rolled-out version may roll out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCall {
    /// The rolled-out version.
    pub from: String,
    /// `spec.version`.
    pub to: String,
}

/// What the gate said about a step, as `status.upgrade.state` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    /// The step rolls out.
    Allowed,
    /// Held; the gate is asked again next time.
    Waiting,
    /// Refused until `spec.version` changes.
    Denied,
}

impl GateState {
    /// As written in `status.upgrade.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "Allowed",
            Self::Waiting => "Waiting",
            Self::Denied => "Denied",
        }
    }
}

/// What the reconcile does about versions this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to upgrade: render `version`.
    Steady {
        /// The version to render.
        version: String,
    },
    /// The gate must be asked about `from -> to`.
    AskGate {
        /// The rolled-out version.
        from: String,
        /// The desired version.
        to: String,
    },
    /// The gate allowed `from -> to` earlier; keep rolling toward `to`.
    Rolling {
        /// The version rolled out before.
        from: String,
        /// The version being rolled out.
        to: String,
    },
}

/// Decides the step from the spec, the rolled-out version and the recorded upgrade.
pub fn step(desired: &str, rolled_out: Option<&str>, upgrade: Option<&UpgradeStatus>) -> Step {
    match rolled_out {
        None => Step::Steady {
            version: desired.to_string(),
        },
        Some(current) if current == desired => Step::Steady {
            version: desired.to_string(),
        },
        Some(current) => match upgrade {
            // An allowed step in flight finishes first, even if the target moved meanwhile:
            // asking the gate about the new target now would render `current` again while it
            // waits, rolling the half-done step back. The new target is asked about once the
            // step has rolled out.
            Some(u) if u.from == current && u.state == GateState::Allowed.as_str() => {
                Step::Rolling {
                    from: current.to_string(),
                    to: u.to.clone(),
                }
            }
            _ => Step::AskGate {
                from: current.to_string(),
                to: desired.to_string(),
            },
        },
    }
}

/// The version to render and the upgrade record after the gate answered.
pub fn after_gate(from: &str, to: &str, decision: &GateDecision) -> (String, UpgradeStatus) {
    let record = |state: GateState, reason: &str| UpgradeStatus {
        from: from.to_string(),
        to: to.to_string(),
        state: state.as_str().to_string(),
        // The gate's words reach `status.upgrade.reason` verbatim otherwise.
        reason: crate::status::bounded(reason.to_string()),
    };
    match decision {
        GateDecision::Allow => (to.to_string(), record(GateState::Allowed, "")),
        GateDecision::Wait(reason) => (from.to_string(), record(GateState::Waiting, reason)),
        GateDecision::Deny(reason) => (from.to_string(), record(GateState::Denied, reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_reason_reaches_the_status_bounded() {
        let (_, record) = after_gate("1.0.0", "1.1.0", &GateDecision::Wait("w".repeat(1 << 20)));
        assert!(
            record.reason.len() <= crate::status::MAX_MESSAGE_BYTES + '…'.len_utf8(),
            "{} bytes",
            record.reason.len()
        );
    }

    #[test]
    fn a_new_app_installs_the_desired_version() {
        assert_eq!(
            step("7.2.4", None, None),
            Step::Steady {
                version: "7.2.4".into()
            }
        );
    }

    #[test]
    fn a_version_change_asks_the_gate_then_keeps_rolling() {
        let ask = step("7.3.0", Some("7.2.4"), None);
        assert_eq!(
            ask,
            Step::AskGate {
                from: "7.2.4".into(),
                to: "7.3.0".into()
            }
        );
        let (render, record) = after_gate("7.2.4", "7.3.0", &GateDecision::Allow);
        assert_eq!(render, "7.3.0");
        assert_eq!(
            step("7.3.0", Some("7.2.4"), Some(&record)),
            Step::Rolling {
                from: "7.2.4".into(),
                to: "7.3.0".into()
            }
        );
    }

    #[test]
    fn waiting_and_denial_hold_the_rolled_out_version() {
        let (render, record) = after_gate(
            "7.2.4",
            "7.3.0",
            &GateDecision::Wait("backup running".into()),
        );
        assert_eq!(render, "7.2.4");
        assert_eq!(record.state, "Waiting");
        // A waiting gate is asked again next time.
        assert!(matches!(
            step("7.3.0", Some("7.2.4"), Some(&record)),
            Step::AskGate { .. }
        ));
        let (render, record) =
            after_gate("7.2.4", "9.0.0", &GateDecision::Deny("two majors".into()));
        assert_eq!(
            (render.as_str(), record.state.as_str()),
            ("7.2.4", "Denied")
        );
    }

    #[test]
    fn a_changed_target_mid_rollout_finishes_the_step_then_asks_again() {
        let (_, record) = after_gate("7.2.4", "7.3.0", &GateDecision::Allow);
        // The target moves to 7.4.0 while 7.3.0 rolls out: 7.3.0 keeps rolling (no roll back
        // to 7.2.4 while the gate is asked about 7.4.0)...
        assert_eq!(
            step("7.4.0", Some("7.2.4"), Some(&record)),
            Step::Rolling {
                from: "7.2.4".into(),
                to: "7.3.0".into()
            }
        );
        // ...and once 7.3.0 rolled out, the gate is asked about 7.3.0 -> 7.4.0.
        assert_eq!(
            step("7.4.0", Some("7.3.0"), Some(&record)),
            Step::AskGate {
                from: "7.3.0".into(),
                to: "7.4.0".into()
            }
        );
        // Going back to the rolled-out version is the user's call: it renders at once.
        assert_eq!(
            step("7.2.4", Some("7.2.4"), Some(&record)),
            Step::Steady {
                version: "7.2.4".into()
            }
        );
    }
}
