//! A plugin of an earlier WIT version, `wasmop:plugin@0.2.0`, built from a frozen copy of that
//! WIT (`../wit`, as it was released): the host speaking 0.3.0 must still load it (its
//! `metadata.info` has a configuration schema and printer columns, but no API versions, and a
//! `capability` enum of five cases), call its `spec-diff` and `finalize` (looked up by their
//! 0.2.0 names) and serve its `log@0.2.0` import. Written with wit-bindgen alone, since the SDK
//! speaks only the current version.

// Generated code: its lowering and lifting is unsafe, its style wit-bindgen's.
#![allow(missing_docs, unsafe_code, clippy::all)]

wit_bindgen::generate!({
    inline: "package wasmop:test; world v0-2 {
        include wasmop:plugin/base@0.2.0;
        export wasmop:plugin/spec-diff@0.2.0;
        export wasmop:plugin/finalize@0.2.0;
    }",
    path: "wit",
    world: "wasmop:test/v0-2",
    generate_all,
});

use exports::wasmop::plugin::{finalize, metadata, spec_diff};
use wasmop::plugin::log;

struct V02;

impl metadata::Guest for V02 {
    fn get() -> metadata::Info {
        metadata::Info {
            name: "v0-2".into(),
            version: "0.2.0".into(),
            description: "built against wasmop:plugin@0.2.0".into(),
            // The last case of 0.2.0's enum, which 0.3.0 follows with two more.
            capabilities: vec![
                metadata::Capability::SpecDiff,
                metadata::Capability::Finalize,
            ],
            owns: vec![metadata::KindRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            }],
            observes: vec![],
            config_schema: Some(
                r#"{"type":"object","properties":{"greeting":{"type":"string"}}}"#.into(),
            ),
            printer_columns: vec![metadata::PrinterColumn {
                name: "Greeting".into(),
                column_type: metadata::ColumnType::String,
                json_path: ".spec.greeting".into(),
                description: String::new(),
            }],
        }
    }
}

impl spec_diff::Guest for V02 {
    fn plan(input: spec_diff::PlanInput) -> Result<spec_diff::Desired, spec_diff::PluginError> {
        log::emit(log::Level::Info, "planning", &[]);
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "v0-2"},
            "data": {"version": input.target_version},
        });
        Ok(spec_diff::Desired {
            objects: vec![object.to_string()],
            requeue_after: None,
        })
    }
}

impl finalize::Guest for V02 {
    fn cleanup(
        input: finalize::CleanupInput,
    ) -> Result<finalize::CleanupDecision, finalize::PluginError> {
        Ok(finalize::CleanupDecision {
            delete: vec![],
            keep: vec![finalize::ObjectRef {
                api_version: "v1".into(),
                kind: "PersistentVolumeClaim".into(),
                name: format!("kept-{}", input.retained.len()),
            }],
        })
    }
}

export!(V02);
