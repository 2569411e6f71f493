//! Generated WIT bindings, one world per capability, and their glue to the traits.
//!
//! Why one world per capability: `wit-component` requires every export of
//! the (merged) component type to be implemented, and merges all
//! `component-type:*` custom sections it finds. With `pub_export_macro`,
//! wit-bindgen 0.63 puts a world's *export* section inside its `export!`
//! macro expansion (in the plugin crate) and leaves only an imports-only
//! section here. So a plugin's component exports exactly the capabilities
//! whose macros [`export!`](crate::export) expands, whatever else this crate
//! compiled, and no Cargo features are needed (so no feature unification
//! surprises when several plugins build together).
//!
//! Nothing here is public API; plugins use the traits and the macro. The
//! host's deliberately broken test guests (`host/tests/plugins/fault`) do use
//! these modules directly, so keep the module names (`base`, `spec_diff`,
//! `health`, `backup`, `upgrade`, `finalize`, `validate`, `convert`) stable.

// Generated code: its docs come from the WIT, its lowering/lifting is
// necessarily unsafe (raw pointers into linear memory), and its style is
// wit-bindgen's. The hand-written glue below uses no unsafe itself.
#![allow(missing_docs, unsafe_code, clippy::all)]

use crate::error::{Error, ErrorKind};
use crate::metadata::{Capability, ColumnType};
use crate::runtime::{self, Exported};

/// `import log; export metadata;`: in every plugin.
pub mod base {
    wit_bindgen::generate!({
        path: "wit",
        world: "wasmop:plugin/base",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export spec-diff;`, expanded into a plugin only if it lists the capability.
pub mod spec_diff {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world spec-diff { export wasmop:plugin/spec-diff@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/spec-diff",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export health;`, expanded into a plugin only if it lists the capability.
pub mod health {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world health { export wasmop:plugin/health@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/health",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export backup;`, expanded into a plugin only if it lists the capability.
pub mod backup {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world backup { export wasmop:plugin/backup@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/backup",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export upgrade;`, expanded into a plugin only if it lists the capability.
pub mod upgrade {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world upgrade { export wasmop:plugin/upgrade@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/upgrade",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export finalize;`, expanded into a plugin only if it lists the capability.
pub mod finalize {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world finalize { export wasmop:plugin/finalize@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/finalize",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export validate;`, expanded into a plugin only if it lists the capability.
pub mod validate {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world validate { export wasmop:plugin/validate@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/validate",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// `export convert;`, expanded into a plugin only if it lists the capability.
pub mod convert {
    wit_bindgen::generate!({
        inline: "package wasmop:sdk; world convert { export wasmop:plugin/convert@0.3.0; }",
        path: "wit",
        world: "wasmop:sdk/convert",
        pub_export_macro: true,
        export_macro_name: "export",
    });
}

/// Maps the SDK error onto one interface's `plugin-error` (each interface
/// declares its own copy, see the WIT package docs).
macro_rules! to_wit_error {
    ($iface:path) => {{
        use $iface as w;
        |e: Error| w::PluginError {
            kind: match e.kind() {
                ErrorKind::InvalidConfig => w::ErrorKind::InvalidConfig,
                ErrorKind::InvalidInput => w::ErrorKind::InvalidInput,
                ErrorKind::Internal => w::ErrorKind::Internal,
            },
            message: e.message().to_string(),
            field: e.field().map(str::to_owned),
        }
    }};
}

mod metadata_glue {
    use super::*;
    use crate::wit::base::exports::wasmop::plugin::metadata as w;

    impl<T: Exported> w::Guest for T {
        fn get() -> w::Info {
            let m = runtime::metadata::<T>();
            let kinds = |kinds: Vec<crate::metadata::KindRef>| {
                kinds
                    .into_iter()
                    .map(|k| w::KindRef {
                        api_version: k.api_version,
                        kind: k.kind,
                    })
                    .collect()
            };
            w::Info {
                name: m.name,
                version: m.version,
                description: m.description,
                capabilities: m
                    .capabilities
                    .iter()
                    .map(|c| match c {
                        Capability::SpecDiff => w::Capability::SpecDiff,
                        Capability::Health => w::Capability::Health,
                        Capability::Backup => w::Capability::Backup,
                        Capability::Upgrade => w::Capability::Upgrade,
                        Capability::Finalize => w::Capability::Finalize,
                        Capability::Validate => w::Capability::Validate,
                        Capability::Convert => w::Capability::Convert,
                    })
                    .collect(),
                owns: kinds(m.owns),
                observes: kinds(m.observes),
                config_schema: m.config_schema,
                printer_columns: m
                    .printer_columns
                    .into_iter()
                    .map(|c| w::PrinterColumn {
                        name: c.name,
                        column_type: match c.type_ {
                            ColumnType::Integer => w::ColumnType::Integer,
                            ColumnType::Number => w::ColumnType::Number,
                            ColumnType::String => w::ColumnType::String,
                            ColumnType::Boolean => w::ColumnType::Boolean,
                            ColumnType::Date => w::ColumnType::Date,
                        },
                        json_path: c.json_path,
                        description: c.description,
                    })
                    .collect(),
                versions: m
                    .versions
                    .into_iter()
                    .map(|v| w::ApiVersion {
                        name: v.name,
                        config_schema: v.config_schema,
                    })
                    .collect(),
            }
        }
    }
}

mod spec_diff_glue {
    use super::*;
    use crate::wit::spec_diff::exports::wasmop::plugin::spec_diff as w;

    impl<T: crate::SpecDiff> w::Guest for T {
        fn plan(input: w::PlanInput) -> Result<w::Desired, w::PluginError> {
            crate::spec_diff::plan::<T>(
                &input.app,
                input.observed,
                input.current_version,
                input.target_version,
                input.now,
            )
            .map(|p| w::Desired {
                objects: p.objects,
                requeue_after: p.requeue_after_ms,
            })
            .map_err(to_wit_error!(w))
        }
    }
}

mod health_glue {
    use super::*;
    use crate::health::{ConditionStatus, HealthState};
    use crate::wit::health::exports::wasmop::plugin::health as w;

    impl<T: crate::Health> w::Guest for T {
        fn check(input: w::CheckInput) -> Result<w::Report, w::PluginError> {
            crate::health::check::<T>(&input.app, input.observed, input.version, input.now)
                .map(|r| w::Report {
                    state: match r.state {
                        HealthState::Healthy => w::State::Healthy,
                        HealthState::Progressing => w::State::Progressing,
                        HealthState::Degraded => w::State::Degraded,
                    },
                    conditions: r
                        .conditions
                        .into_iter()
                        .map(|c| w::Condition {
                            condition_type: c.condition_type,
                            status: match c.status {
                                ConditionStatus::True => w::ConditionStatus::True,
                                ConditionStatus::False => w::ConditionStatus::False,
                                ConditionStatus::Unknown => w::ConditionStatus::Unknown,
                            },
                            reason: c.reason,
                            message: c.message,
                        })
                        .collect(),
                    message: r.message,
                    rollout_complete: r.rollout_complete,
                })
                .map_err(to_wit_error!(w))
        }
    }
}

mod backup_glue {
    use super::*;
    use crate::wit::backup::exports::wasmop::plugin::backup as w;

    impl<T: crate::Backup> w::Guest for T {
        fn schedule(input: w::ScheduleInput) -> Result<w::ScheduleDecision, w::PluginError> {
            crate::backup::schedule::<T>(
                &input.app,
                input.observed,
                input.last_completed_slot,
                input.now,
            )
            .map(|d| w::ScheduleDecision {
                run: d.run.map(|(slot, job)| w::BackupRun { slot, job }),
                expire: d.expire,
                requeue_after: d.requeue_after_ms,
            })
            .map_err(to_wit_error!(w))
        }
    }
}

mod upgrade_glue {
    use super::*;
    use crate::upgrade::UpgradeDecision;
    use crate::wit::upgrade::exports::wasmop::plugin::upgrade as w;

    impl<T: crate::Upgrade> w::Guest for T {
        fn gate(input: w::GateInput) -> Result<w::GateDecision, w::PluginError> {
            crate::upgrade::gate::<T>(
                &input.app,
                input.observed,
                input.from_version,
                input.to_version,
                input.now,
            )
            .map(|d| match d {
                UpgradeDecision::Allow => w::GateDecision::Allow,
                UpgradeDecision::Wait(reason) => w::GateDecision::Wait(reason),
                UpgradeDecision::Deny(reason) => w::GateDecision::Deny(reason),
            })
            .map_err(to_wit_error!(w))
        }
    }
}

mod finalize_glue {
    use super::*;
    use crate::finalize::ObjectRef;
    use crate::wit::finalize::exports::wasmop::plugin::finalize as w;

    impl<T: crate::Finalize> w::Guest for T {
        fn cleanup(input: w::CleanupInput) -> Result<w::CleanupDecision, w::PluginError> {
            let refs = |refs: Vec<ObjectRef>| {
                refs.into_iter()
                    .map(|r| w::ObjectRef {
                        api_version: r.api_version,
                        kind: r.kind,
                        name: r.name,
                    })
                    .collect()
            };
            crate::finalize::cleanup::<T>(&input.app, input.retained, input.now)
                .map(|d| w::CleanupDecision {
                    delete: refs(d.delete),
                    keep: refs(d.keep),
                })
                .map_err(to_wit_error!(w))
        }
    }
}

mod validate_glue {
    use super::*;
    use crate::validate::Operation;
    use crate::wit::validate::exports::wasmop::plugin::validate as w;

    impl<T: crate::Validate> w::Guest for T {
        fn validate(input: w::ValidateInput) -> Result<w::Verdict, w::PluginError> {
            let operation = match input.operation {
                w::Operation::Create => Operation::Create,
                w::Operation::Update => Operation::Update,
                w::Operation::Delete => Operation::Delete,
                w::Operation::Connect => Operation::Connect,
            };
            crate::validate::validate::<T>(
                operation,
                &input.object,
                input.old_object,
                input.user_groups,
                input.now,
            )
            .map(|v| w::Verdict {
                violations: v
                    .violations
                    .into_iter()
                    .map(|v| w::Violation {
                        field: v.field,
                        message: v.message,
                    })
                    .collect(),
                warnings: v.warnings,
            })
            .map_err(to_wit_error!(w))
        }
    }
}

mod convert_glue {
    use super::*;
    use crate::wit::convert::exports::wasmop::plugin::convert as w;

    impl<T: crate::Convert> w::Guest for T {
        fn convert(input: w::ConvertInput) -> Result<String, w::PluginError> {
            crate::convert::convert::<T>(&input.object, &input.desired_api_version)
                .map_err(to_wit_error!(w))
        }
    }
}

#[cfg(test)]
mod tests {
    /// `sdk/wit/` is the crate's own copy of the contract in the workspace's `wit/`, so that
    /// the published crate builds alone; they must not drift. (In a packaged crate `../wit` is
    /// absent and there is nothing to compare.)
    #[test]
    fn the_vendored_wit_is_the_workspace_wit() {
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let (theirs, ours) = (manifest.join("../wit"), manifest.join("wit"));
        let Ok(entries) = std::fs::read_dir(&theirs) else {
            return;
        };
        let mut names: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| n.to_string_lossy().ends_with(".wit"))
            .collect();
        names.sort();
        let mut vendored: Vec<_> = std::fs::read_dir(&ours)
            .expect("sdk/wit")
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| n.to_string_lossy().ends_with(".wit"))
            .collect();
        vendored.sort();
        assert_eq!(
            names, vendored,
            "sdk/wit/ has other files than wit/: cp wit/*.wit sdk/wit/"
        );
        for name in names {
            assert_eq!(
                std::fs::read_to_string(theirs.join(&name)).expect("wit/ file"),
                std::fs::read_to_string(ours.join(&name)).expect("sdk/wit/ file"),
                "sdk/wit/{} differs from wit/: cp wit/*.wit sdk/wit/",
                name.to_string_lossy()
            );
        }
    }
}
