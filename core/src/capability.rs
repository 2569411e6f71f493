//! The capability table: every capability a plugin may export, one per optional WIT interface,
//! and each capability's facts in one entry: its WIT interface name, the call the decision core
//! makes of it and what that call answers.
//!
//! Adding a capability touches its WIT interface (and `metadata.capability`, and the `plugin`
//! world), its SDK trait, its host call file (`host/src/plugin/call/`), its decision stage and
//! one entry here. From the entry come the [`Capability`] variant, [`Capability::ALL`],
//! [`Capability::interface`] and [`Capability::function`], the [`Call`] impl of its call type
//! and the bound of [`PluginCalls`] that makes every caller (the host's and the CLI's
//! `ComponentCalls`, the SDK's `NativeCalls`, [`NoPlugin`](crate::decide::NoPlugin)) answer it.

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

/// Declares the capabilities from their table entries (see the module docs).
macro_rules! capabilities {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $interface:literal / $function:literal, $call:ty => $answer:ty;
    )+) => {
        /// One thing a plugin can do; each is one exported WIT interface. In WIT order: the
        /// order of the cases of `metadata.capability`, by which the host reads the list a
        /// plugin's metadata gives.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Capability {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Capability {
            /// Every capability, in WIT order.
            pub const ALL: [Capability; [$($interface),+].len()] = [$(Self::$variant),+];

            /// The WIT interface name, e.g. `spec-diff`.
            pub fn interface(self) -> &'static str {
                match self {
                    $(Self::$variant => $interface,)+
                }
            }

            /// The interface's one function, e.g. `plan`.
            pub fn function(self) -> &'static str {
                match self {
                    $(Self::$variant => $function,)+
                }
            }
        }

        $(
            impl Call for $call {
                const CAPABILITY: Capability = Capability::$variant;
                type Answer = $answer;
            }
        )+

        /// One plugin's capabilities, each called on the App and objects the caller prepared:
        /// an [`Answer`] to the [`Call`] of every capability in the table. The decision core
        /// asks `calls.answer(call)` only of a capability in [`Self::capabilities`].
        pub trait PluginCalls: $(Answer<$call> +)+ {
            /// The capabilities the plugin exports.
            fn capabilities(&self) -> &BTreeSet<Capability>;
        }
    };
}

capabilities! {
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
}
