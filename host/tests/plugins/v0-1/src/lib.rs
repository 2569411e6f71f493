//! A plugin of the previous WIT version, `wasmop:plugin@0.1.0`, built from a frozen copy of that
//! WIT (`../wit`, as it was released): the host speaking 0.2.0 must still load it, call its
//! `spec-diff` and `health` (looked up by their 0.1.0 names) and serve its `log@0.1.0` import.
//! Written with wit-bindgen alone, since the SDK speaks only the current version.

// Generated code: its lowering and lifting is unsafe, its style wit-bindgen's.
#![allow(missing_docs, unsafe_code, clippy::all)]

wit_bindgen::generate!({
    inline: "package wasmop:test; world v0-1 {
        include wasmop:plugin/base@0.1.0;
        export wasmop:plugin/spec-diff@0.1.0;
        export wasmop:plugin/health@0.1.0;
    }",
    path: "wit",
    world: "wasmop:test/v0-1",
    generate_all,
});

use exports::wasmop::plugin::{health, metadata, spec_diff};
use wasmop::plugin::log;

struct V01;

impl metadata::Guest for V01 {
    fn get() -> metadata::Info {
        metadata::Info {
            name: "v0-1".into(),
            version: "0.1.0".into(),
            description: "built against wasmop:plugin@0.1.0".into(),
            capabilities: vec![metadata::Capability::SpecDiff, metadata::Capability::Health],
            owns: vec![metadata::KindRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            }],
            observes: vec![],
        }
    }
}

impl spec_diff::Guest for V01 {
    fn plan(input: spec_diff::PlanInput) -> Result<spec_diff::Desired, spec_diff::PluginError> {
        log::emit(
            log::Level::Info,
            "planning",
            &[log::Field {
                key: "version".into(),
                value: input.target_version.clone(),
            }],
        );
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "v0-1"},
            "data": {"version": input.target_version},
        });
        Ok(spec_diff::Desired {
            objects: vec![object.to_string()],
            requeue_after: None,
        })
    }
}

impl health::Guest for V01 {
    fn check(input: health::CheckInput) -> Result<health::Report, health::PluginError> {
        Ok(health::Report {
            state: health::State::Healthy,
            conditions: vec![health::Condition {
                condition_type: "Old".into(),
                status: health::ConditionStatus::True,
                reason: "BuiltFor010".into(),
                message: format!("checked {}", input.version),
            }],
            message: "fine".into(),
            rollout_complete: true,
        })
    }
}

export!(V01);
