//! The capability table: every capability a plugin may export, one per optional WIT interface,
//! and each capability's facts in one entry: its WIT interface name, its function and, for the
//! capabilities the decision core calls, the call it makes and what that call answers.
//!
//! The table has two parts. The decision capabilities (`spec-diff` to `finalize`) are called by
//! the decision core on a reconcile or deletion: each is bound to its call type, and
//! [`PluginCalls`] makes every caller (the host's and the CLI's `ComponentCalls`, the SDK's
//! `NativeCalls`, [`NoPlugin`](crate::decide::NoPlugin)) answer it. The admission capabilities
//! (`validate`, `convert`) are called by the host's webhooks, one object at a time and outside
//! any reconcile ([`crate::admission`]): they are capabilities like the others (exported,
//! discovered, listed in metadata) but never a decision's call, so no [`PluginCalls`] answers
//! them.
//!
//! Adding a capability touches its WIT interface (and `metadata.capability`, and the `plugin`
//! world), its SDK trait, its host call file (`host/src/plugin/call/`), its decision stage (or
//! its webhook) and one entry here. From the entry come the [`Capability`] variant,
//! [`Capability::ALL`], [`Capability::interface`] and [`Capability::function`], and for a
//! decision capability the [`Call`] impl of its call type and its bound of [`PluginCalls`].

use std::{collections::BTreeSet, fmt};

use crate::{
    answers::{BackupDecision, CleanupDecision, GateDecision, HealthReport, Plan},
    backup::ScheduleCall,
    calls::{Answer, Call},
    decide::PlanCall,
    deletion::CleanupCall,
    health::CheckCall,
    upgrade::GateCall,
};

/// Declares the capabilities from their table entries (see the module docs): the decision
/// capabilities first, then the admission ones, which is WIT order.
macro_rules! capabilities {
    (
        decisions {$(
            $(#[doc = $doc:literal])*
            $variant:ident = $interface:literal / $function:literal, $call:ty => $answer:ty;
        )+}
        admission {$(
            $(#[doc = $adoc:literal])*
            $avariant:ident = $ainterface:literal / $afunction:literal;
        )+}
    ) => {
        /// One thing a plugin can do; each is one exported WIT interface. In WIT order: the
        /// order of the cases of `metadata.capability`, by which the host reads the list a
        /// plugin's metadata gives.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Capability {
            $($(#[doc = $doc])* $variant,)+
            $($(#[doc = $adoc])* $avariant,)+
        }

        impl Capability {
            /// Every capability, in WIT order.
            pub const ALL: [Capability; [$($interface,)+ $($ainterface,)+].len()] =
                [$(Self::$variant,)+ $(Self::$avariant,)+];

            /// The WIT interface name, e.g. `spec-diff`.
            pub fn interface(self) -> &'static str {
                match self {
                    $(Self::$variant => $interface,)+
                    $(Self::$avariant => $ainterface,)+
                }
            }

            /// The interface's one function, e.g. `plan`.
            pub fn function(self) -> &'static str {
                match self {
                    $(Self::$variant => $function,)+
                    $(Self::$avariant => $afunction,)+
                }
            }

            /// Whether the decision core calls it on a reconcile or deletion (through
            /// [`PluginCalls`]); `false` for the admission capabilities, which the host's
            /// webhooks call.
            pub fn decides(self) -> bool {
                matches!(self, $(Self::$variant)|+)
            }
        }

        $(
            impl Call for $call {
                const CAPABILITY: Capability = Capability::$variant;
                type Answer = $answer;
            }
        )+

        /// One plugin's capabilities, each called on the App and objects the caller prepared:
        /// an [`Answer`] to the [`Call`] of every decision capability in the table (the
        /// admission capabilities are no decision's calls). The decision core asks
        /// `calls.answer(call)` only of a capability in [`Self::capabilities`].
        pub trait PluginCalls: $(Answer<$call> +)+ {
            /// The capabilities the plugin exports.
            fn capabilities(&self) -> &BTreeSet<Capability>;
        }
    };
}

capabilities! {
    decisions {
        /// `spec-diff`: the plan of objects that should exist.
        SpecDiff = "spec-diff" / "plan", PlanCall => Plan;
        /// `health`: how the service is doing.
        Health = "health" / "check", CheckCall => HealthReport;
        /// `backup`: when to run a backup Job.
        Backup = "backup" / "schedule", ScheduleCall => BackupDecision;
        /// `upgrade`: whether a version step may roll out.
        Upgrade = "upgrade" / "gate", GateCall => GateDecision;
        /// `finalize`: what to do with retained objects on deletion.
        Finalize = "finalize" / "cleanup", CleanupCall => CleanupDecision;
    }
    admission {
        /// `validate`: whether the API server may write an instance of a bound kind
        /// ([`crate::admission::check_verdict`]).
        Validate = "validate" / "validate";
        /// `convert`: an instance of a bound kind at another of its API versions
        /// ([`crate::admission::check_converted`]).
        Convert = "convert" / "convert";
    }
}

impl Capability {
    /// The capability an interface name stands for.
    pub fn from_interface(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.interface() == name)
    }

    /// The capability at `index` of the WIT enum `metadata.capability` (a generated binding's
    /// discriminant), when this table has one there.
    pub fn from_wit_index(index: usize) -> Option<Self> {
        Self::ALL.get(index).copied()
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WIT text of `file` in the workspace's `wit/`, if this is a checkout (a packaged
    /// crate has no `../wit`).
    fn wit(file: &str) -> Option<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../wit")
            .join(file);
        std::fs::read_to_string(path).ok()
    }

    /// The names listed between the line starting with `opening` and the next `}`, one per
    /// line, as `strip` leaves them.
    fn listed(text: &str, opening: &str, strip: impl Fn(&str) -> Option<String>) -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.trim_start().starts_with(opening))
            .skip(1)
            .take_while(|l| l.trim() != "}")
            .map(str::trim)
            .filter(|l| !l.starts_with("//"))
            .filter_map(strip)
            .collect()
    }

    #[test]
    fn the_table_is_the_wit() {
        let names: Vec<String> = Capability::ALL
            .iter()
            .map(|c| c.interface().to_string())
            .collect();
        // By position: the bindings' discriminants are read as indices into the table.
        if let Some(metadata) = wit("metadata.wit") {
            let cases = listed(&metadata, "enum capability", |l| {
                l.strip_suffix(',').map(str::to_string)
            });
            assert_eq!(cases, names, "metadata.capability is the table, in order");
        }
        if let Some(worlds) = wit("worlds.wit") {
            let exports = listed(&worlds, "world plugin", |l| {
                l.strip_prefix("export ")
                    .and_then(|e| e.strip_suffix(';'))
                    .map(str::to_string)
            });
            assert_eq!(
                exports, names,
                "the plugin world exports the table, in order"
            );
        }
        for capability in Capability::ALL {
            let name = capability.interface();
            if let Some(interface) = wit(&format!("{name}.wit")) {
                assert!(
                    interface.contains(&format!("interface {name} {{")),
                    "{name}.wit"
                );
                let function = format!("    {}: func(", capability.function());
                assert!(interface.contains(&function), "{name}.wit has {function}");
            }
        }
    }

    /// The printer columns' types are read by position too ([`crate::answers::ColumnType`]).
    #[test]
    fn column_types_are_the_wit() {
        let Some(metadata) = wit("metadata.wit") else {
            return;
        };
        let cases = listed(&metadata, "enum column-type", |l| {
            l.strip_suffix(',')
                .map(|c| c.trim_start_matches('%').to_string())
        });
        let ours: Vec<String> = crate::answers::ColumnType::ALL
            .iter()
            .map(|t| t.as_str().to_string())
            .collect();
        assert_eq!(
            cases, ours,
            "metadata.column-type is ColumnType::ALL, in order"
        );
    }

    #[test]
    fn interface_names_round_trip() {
        for c in Capability::ALL {
            assert_eq!(Capability::from_interface(c.interface()), Some(c));
            assert_eq!(c.to_string(), c.interface());
        }
        assert_eq!(Capability::from_interface("metadata"), None);
        assert_eq!(Capability::from_wit_index(0), Some(Capability::SpecDiff));
        assert_eq!(Capability::from_wit_index(Capability::ALL.len()), None);
    }

    #[test]
    fn only_the_decision_capabilities_decide() {
        let deciding: Vec<Capability> = Capability::ALL
            .into_iter()
            .filter(|c| c.decides())
            .collect();
        assert_eq!(
            deciding,
            [
                Capability::SpecDiff,
                Capability::Health,
                Capability::Backup,
                Capability::Upgrade,
                Capability::Finalize
            ]
        );
        // Appended to the WIT enum, after the cases 0.2.0 plugins know.
        assert_eq!(Capability::from_wit_index(5), Some(Capability::Validate));
        assert_eq!(Capability::from_wit_index(6), Some(Capability::Convert));
        assert_eq!(Capability::Convert.function(), "convert");
    }
}
