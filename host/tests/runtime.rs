//! The plugin runtime against real wasmtime and real compiled components: the example plugins,
//! and the hostile guests in `tests/plugins/` (see its README). No cluster is needed.
//!
//! The components are built by `tests/run.sh` (`plugins/build.sh` and the fault plugins) into
//! `$CARGO_TARGET_DIR/wasm32-wasip2/release/`.

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use support::component;
use wasmop_core::admission::{ConvertRequest, Operation, ValidateRequest};
use wasmop_host::plugin::{
    CallError, Capability, Digest, LoadError,
    bindings::WitVersion,
    cache::{Cache, CacheKey},
    compiled::CompiledPlugin,
    engine::PluginEngine,
    input::AppContext,
    limits::CallLimits,
    metrics::PluginMetrics,
    registry::{Offer, PluginRegistry},
    sandbox::CallTags,
    source::{Fetched, OciRef, SourceRef},
};

fn prepare(engine: &PluginEngine, file: &str) -> Result<CompiledPlugin, LoadError> {
    let bytes = component(file);
    let digest = Digest::of(&bytes);
    CompiledPlugin::prepare(engine, None, file, &bytes, digest)
}

fn app(config: Value) -> Value {
    json!({
        "apiVersion": "wasmop.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "t", "namespace": "default", "uid": "00000000-0000-0000-0000-000000000001", "generation": 1},
        "spec": {"plugin": {"image": "x"}, "version": "7.2.4", "config": config},
    })
}

fn plan(
    engine: &PluginEngine,
    plugin: &CompiledPlugin,
    app: &Value,
    limits: &CallLimits,
) -> Result<usize, CallError> {
    let cx = AppContext::new(app, [], 1_764_633_600_000);
    plugin
        .call_plan(engine, limits, CallTags::default(), &cx, None, "7.2.4")
        .map(|p| p.objects.len())
}

#[test]
fn example_plugins_export_exactly_their_capabilities() {
    let engine = PluginEngine::new().expect("engine");
    let kvstore = prepare(&engine, "kvstore.wasm").expect("kvstore loads");
    assert_eq!(kvstore.metadata.name, "kvstore");
    assert_eq!(
        kvstore.capabilities.iter().copied().collect::<Vec<_>>(),
        [
            Capability::SpecDiff,
            Capability::Health,
            Capability::Backup,
            Capability::Upgrade,
            Capability::Finalize
        ]
    );
    let hello = prepare(&engine, "hello.wasm").expect("hello loads");
    assert_eq!(
        hello.capabilities.iter().copied().collect::<Vec<_>>(),
        [
            Capability::SpecDiff,
            Capability::Validate,
            Capability::Convert
        ]
    );
    let limits = CallLimits::default();
    let err = hello
        .call_health(
            &engine,
            &limits,
            CallTags::default(),
            &AppContext::new(&app(json!({})), [], 0),
            "1",
        )
        .expect_err("hello has no health");
    assert!(matches!(err, CallError::Unsupported { .. }), "{err}");
    assert!(
        plan(&engine, &kvstore, &app(json!({"replicas": 3})), &limits).expect("kvstore plans") >= 4
    );
}

/// Plugins built for `wasmop:plugin@0.1.0` and `0.2.0` (from frozen copies of those WITs:
/// `tests/plugins/v0-1`, `v0-2`) load in this host, which speaks 0.3.0: their exports are looked
/// up by their own version's names and called with the 0.3.0 types (the same shapes), their
/// `log` imports are served, and their `metadata.info` (other records, with a `capability` enum
/// of five cases) is read: no schema for 0.1.0, no API versions for either. A 0.3.0 plugin
/// carries its schema, columns and versions.
#[test]
fn plugins_of_every_wit_version_load_and_serve() {
    let engine = PluginEngine::new().expect("engine");
    let old = prepare(&engine, "v0_1_plugin.wasm").expect("a 0.1.0 plugin loads");
    assert_eq!(old.wit, WitVersion::V0_1);
    assert_eq!(old.metadata.name, "v0-1");
    assert_eq!(
        old.capabilities.iter().copied().collect::<Vec<_>>(),
        [Capability::SpecDiff, Capability::Health]
    );
    assert_eq!(old.metadata.owns, ["v1/ConfigMap"]);
    assert_eq!(old.metadata.config_schema, None);
    assert!(old.metadata.printer_columns.is_empty());
    assert!(old.metadata.versions.is_empty());
    let (imports, exports) = old.world();
    assert!(
        imports.contains(&"wasmop:plugin/log@0.1.0".to_string()),
        "{imports:?}"
    );
    assert!(
        exports.contains(&"wasmop:plugin/health@0.1.0".to_string()),
        "{exports:?}"
    );

    let limits = CallLimits::default();
    let app = app(json!({}));
    let cx = AppContext::new(&app, [], 1_764_633_600_000);
    // The plan logs through `log@0.1.0` before it answers.
    let plan = old
        .call_plan(&engine, &limits, CallTags::default(), &cx, None, "7.2.4")
        .expect("a 0.1.0 plan");
    assert_eq!(plan.objects.len(), 1);
    assert_eq!(plan.objects[0].to_value()["data"]["version"], "7.2.4");
    let report = old
        .call_health(&engine, &limits, CallTags::default(), &cx, "7.2.4")
        .expect("a 0.1.0 health check");
    assert!(report.rollout_complete);
    assert_eq!(report.conditions[0].reason, "BuiltFor010");
    assert_eq!(report.conditions[0].message, "checked 7.2.4");

    let two = prepare(&engine, "v0_2_plugin.wasm").expect("a 0.2.0 plugin loads");
    assert_eq!(two.wit, WitVersion::V0_2);
    assert_eq!(two.metadata.name, "v0-2");
    // `finalize`, the last case of 0.2.0's enum, read as 0.3.0's.
    assert_eq!(
        two.capabilities.iter().copied().collect::<Vec<_>>(),
        [Capability::SpecDiff, Capability::Finalize]
    );
    let schema = two.metadata.config_schema.as_ref().expect("its schema");
    assert_eq!(schema["properties"]["greeting"]["type"], "string");
    assert_eq!(two.metadata.printer_columns[0].name, "Greeting");
    assert!(two.metadata.versions.is_empty());
    let (imports, _) = two.world();
    assert!(
        imports.contains(&"wasmop:plugin/log@0.2.0".to_string()),
        "{imports:?}"
    );
    // The plan logs through `log@0.2.0` before it answers.
    let plan = two
        .call_plan(&engine, &limits, CallTags::default(), &cx, None, "7.2.4")
        .expect("a 0.2.0 plan");
    assert_eq!(plan.objects[0].name(), "v0-2");
    let cleanup = two
        .call_finalize(&engine, &limits, CallTags::default(), &cx)
        .expect("a 0.2.0 cleanup");
    assert_eq!(cleanup.keep[0].name, "kept-0");
    let err = two
        .call_validate(
            &engine,
            &limits,
            CallTags::default(),
            &validate_request(json!({})),
        )
        .expect_err("0.2.0 has no validate");
    assert!(matches!(err, CallError::Unsupported { .. }), "{err}");

    let new = prepare(&engine, "kvstore.wasm").expect("a 0.3.0 plugin loads");
    assert_eq!(new.wit, WitVersion::V0_3);
    let schema = new
        .metadata
        .config_schema
        .as_ref()
        .expect("kvstore declares its schema");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["replicas"]["maximum"], 15);
    assert!(schema.get("$defs").is_none(), "made structural at load");
    assert_eq!(new.metadata.printer_columns[0].name, "Replicas");
    assert_eq!(new.metadata.printer_columns[0].json_path, ".spec.replicas");
    assert!(
        new.metadata.versions.is_empty(),
        "kvstore knows one version"
    );
    let converting = prepare(&engine, "hello.wasm").expect("a 0.3.0 plugin loads");
    let versions: Vec<&str> = converting
        .metadata
        .versions
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(versions, ["v1alpha1", "v1"]);
    let previous = converting.metadata.versions[0]
        .config_schema
        .as_ref()
        .expect("v1alpha1's schema");
    assert_eq!(previous["properties"]["text"]["minLength"], 1);
    assert_eq!(previous["type"], "object", "made structural at load");
}

/// A `validate` request for an instance of a kind bound to hello (or the fault plugin):
/// creating it with `spec`.
fn validate_request(spec: Value) -> ValidateRequest {
    ValidateRequest {
        operation: Operation::Create,
        object: instance("greeter", "v1", spec).to_string(),
        old_object: None,
        user_groups: None,
        now_ms: 1_764_633_600_000,
    }
}

/// An instance `name` of `greet.example.com/<version>` `Greeting` with `spec` (and `version`
/// in it).
fn instance(name: &str, version: &str, mut spec: Value) -> Value {
    spec["version"] = json!("1.0.0");
    json!({
        "apiVersion": format!("greet.example.com/{version}"), "kind": "Greeting",
        "metadata": {"name": name, "namespace": "shop", "uid": "u-1", "resourceVersion": "3"},
        "spec": spec,
        "status": {"version": "1.0.0"},
    })
}

/// The webhooks' calls, on hello: a verdict naming the field (and the SDK's own denial of a
/// configuration that does not read), a warning that needs the old object, a conversion that
/// moves the configuration and keeps the rest; each in a fresh sandbox like every call.
#[test]
fn hello_validates_and_converts_its_instances() {
    let engine = PluginEngine::new().expect("engine");
    let hello = prepare(&engine, "hello.wasm").expect("hello loads");
    let limits = CallLimits::default();
    let tags = CallTags::default;

    let created = hello
        .call_validate(
            &engine,
            &limits,
            tags(),
            &validate_request(json!({"replicas": 3})),
        )
        .expect("a verdict");
    assert!(created.allowed(), "{created:?}");
    let dotted = ValidateRequest {
        object: instance("my.greeter", "v1", json!({})).to_string(),
        ..validate_request(json!({}))
    };
    let verdict = hello
        .call_validate(&engine, &limits, tags(), &dotted)
        .expect("a verdict");
    let fields: Vec<&str> = verdict
        .violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, ["metadata.name"]);
    let mut update = validate_request(json!({"replicas": 1}));
    update.operation = Operation::Update;
    update.old_object = Some(instance("greeter", "v1", json!({"replicas": 6})).to_string());
    let verdict = hello
        .call_validate(&engine, &limits, tags(), &update)
        .expect("a verdict");
    assert!(verdict.allowed());
    assert!(
        verdict.warnings[0].starts_with("scaling from 6 to 1"),
        "{verdict:?}"
    );
    let unreadable = hello
        .call_validate(
            &engine,
            &limits,
            tags(),
            &validate_request(json!({"replicas": "three"})),
        )
        .expect("a verdict");
    assert_eq!(unreadable.violations[0].field, "spec.replicas");

    let old = instance("greeter", "v1alpha1", json!({"text": "hi"}));
    let request = ConvertRequest {
        object: old.to_string(),
        desired_api_version: "greet.example.com/v1".into(),
    };
    let converted = hello
        .call_convert(&engine, &limits, tags(), &request)
        .expect("converts");
    assert_eq!(converted["apiVersion"], "greet.example.com/v1");
    assert_eq!(converted["spec"]["message"], "hi");
    assert_eq!(converted["spec"]["version"], "1.0.0");
    assert_eq!(converted["metadata"], old["metadata"]);
    assert_eq!(converted["status"], old["status"]);
    let request = ConvertRequest {
        desired_api_version: "greet.example.com/v9".into(),
        ..request
    };
    let err = hello
        .call_convert(&engine, &limits, tags(), &request)
        .expect_err("no v9");
    let CallError::Refused { kind, field, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(
        (kind.as_str(), field.as_deref()),
        ("invalid-input", Some("desired-api-version"))
    );
}

/// What the webhooks' calls answer is held to the admission rules, as every answer is to its
/// rules: a warning with a terminal escape, too many violations, a conversion that changes the
/// uid are bad output; a conversion that adds a label is not.
#[test]
fn bad_verdicts_and_conversions_are_refused_as_bad_output() {
    let engine = PluginEngine::new().expect("engine");
    let fault = prepare(&engine, "fault_plugin.wasm").expect("loads");
    assert!(fault.capabilities.contains(&Capability::Validate));
    assert!(fault.capabilities.contains(&Capability::Convert));
    let limits = CallLimits::default();
    let validate = |fault_mode: &str| {
        fault.call_validate(
            &engine,
            &limits,
            CallTags::default(),
            &validate_request(json!({"fault": fault_mode})),
        )
    };
    let refused = validate("refuse").expect("a verdict");
    assert!(!refused.allowed());
    assert_eq!(refused.warnings, ["warned"]);
    for (mode, rule) in [
        ("escape", "warnings[0] holds control characters"),
        ("violations", "65 violations; at most 64"),
    ] {
        let err = validate(mode).expect_err(mode);
        assert!(matches!(err, CallError::BadOutput { .. }), "{mode}: {err}");
        assert!(err.to_string().contains(rule), "{mode}: {err}");
        assert!(err.to_string().contains("from validate"), "{mode}: {err}");
    }

    let convert = |fault_mode: &str| {
        let request = ConvertRequest {
            object: instance("f", "v1alpha1", json!({"fault": fault_mode})).to_string(),
            desired_api_version: "greet.example.com/v1".into(),
        };
        fault.call_convert(&engine, &limits, CallTags::default(), &request)
    };
    let labelled = convert("labels").expect("labels may change");
    assert_eq!(labelled["metadata"]["labels"]["converted"], "yes");
    let err = convert("uid").expect_err("the uid may not");
    assert!(matches!(err, CallError::BadOutput { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(r#"converted object: changed metadata.uid from "u-1" to "someone-else""#),
        "{err}"
    );
}

/// An interface a version does not have is refused at load, naming it: a 0.2.0 component whose
/// `finalize` export is renamed `validate` (which came with 0.3.0).
#[test]
fn an_interface_newer_than_its_version_is_refused() {
    let engine = PluginEngine::new().expect("engine");
    let mut bytes = component("v0_2_plugin.wasm");
    replace_all(
        &mut bytes,
        "wasmop:plugin/finalize@0.2.0",
        "wasmop:plugin/validate@0.2.0",
    );
    let err = CompiledPlugin::prepare(&engine, None, "ahead", &bytes, Digest::of(&bytes))
        .err()
        .expect("validate is not 0.2.0's");
    assert_eq!(err.reason(), "IncompatibleWorld", "{err}");
    assert!(
        err.to_string().contains(
            "it exports wasmop:plugin/validate@0.2.0, an interface wasmop:plugin@0.2.0 does not have"
        ),
        "{err}"
    );
}

/// `bytes` with every occurrence of `from` replaced by `into` (of the same length, so the binary
/// stays well formed); there must be one.
fn replace_all(bytes: &mut [u8], from: &str, into: &str) {
    assert_eq!(from.len(), into.len());
    let mut found = false;
    let mut at = 0;
    while let Some(offset) = bytes[at..]
        .windows(from.len())
        .position(|w| w == from.as_bytes())
    {
        let start = at + offset;
        bytes[start..start + into.len()].copy_from_slice(into.as_bytes());
        at = start + into.len();
        found = true;
    }
    assert!(found, "{from} is in the component");
}

/// The 0.1.0 test component with its `wasmop:plugin` export names changed from `@0.1.0` to
/// `to`, for the `interfaces` given.
fn renamed(interfaces: &[&str], to: &str) -> Vec<u8> {
    let mut bytes = component("v0_1_plugin.wasm");
    for interface in interfaces {
        replace_all(
            &mut bytes,
            &format!("wasmop:plugin/{interface}@0.1.0"),
            &format!("wasmop:plugin/{interface}@{to}"),
        );
    }
    bytes
}

#[test]
fn other_wit_versions_are_refused_naming_both() {
    let engine = PluginEngine::new().expect("engine");
    let all = ["metadata", "spec-diff", "health"];
    for version in ["0.4.0", "1.0.0"] {
        let bytes = renamed(&all, version);
        let err = CompiledPlugin::prepare(&engine, None, "future", &bytes, Digest::of(&bytes))
            .err()
            .expect("a version the host does not speak");
        assert_eq!(err.reason(), "IncompatibleWorld", "{err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("built for wasmop:plugin@{version}")),
            "{message}"
        );
        assert!(
            message.contains("this host speaks wasmop:plugin@0.3.0 (and 0.2.0, 0.1.0)"),
            "{message}"
        );
    }
    // An export of the right name whose types are not that version's (a field of health's
    // `report` renamed): refused at load, not at its first call.
    let mut bytes = component("v0_1_plugin.wasm");
    replace_all(&mut bytes, "rollout-complete", "rollout-finished");
    let err = CompiledPlugin::prepare(&engine, None, "types", &bytes, Digest::of(&bytes))
        .err()
        .expect("a health export of other types");
    assert_eq!(err.reason(), "IncompatibleWorld", "{err}");
    assert!(
        err.to_string().contains(
            "its wasmop:plugin/health@0.1.0 does not have the types of wasmop:plugin/health@0.3.0"
        ),
        "{err}"
    );

    let bytes = renamed(&["spec-diff"], "0.2.0");
    let err = CompiledPlugin::prepare(&engine, None, "mixed", &bytes, Digest::of(&bytes))
        .err()
        .expect("two versions in one component");
    assert_eq!(err.reason(), "IncompatibleWorld", "{err}");
    assert!(
        err.to_string().contains("one component speaks one version"),
        "{err}"
    );
}

/// `file`'s bytes with the one occurrence of `from` replaced by `to` (of the same length).
fn patched(file: &str, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut bytes = component(file);
    let found: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_bytes())
        .map(|(at, _)| at)
        .collect();
    assert_eq!(found.len(), 1, "{from:?} once in {file}");
    bytes[found[0]..found[0] + to.len()].copy_from_slice(to.as_bytes());
    bytes
}

/// A configuration schema, a printer column or an API version the host would not put in a CRD
/// refuses the version at load, naming the plugin and the rule, like every other load check: the
/// version in service stays.
#[tokio::test]
async fn a_bad_schema_or_column_refuses_the_version_and_the_one_in_service_stays() {
    let engine = PluginEngine::new().expect("engine");
    let fault = prepare(&engine, "fault_plugin.wasm").expect("the fault plugin loads");
    let schema = fault.metadata.config_schema.as_ref().expect("its schema");
    assert_eq!(
        schema["properties"]["fault"]["description"],
        "The fault to commit"
    );
    assert_eq!(fault.metadata.printer_columns[0].json_path, ".spec.fault");

    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/fault:1"));
    let good = Fetched::new(component("fault_plugin.wasm"));
    let good_digest = good.digest.clone();
    assert!(matches!(
        registry.offer(&source, good).await,
        Offer::Loaded(_)
    ));
    for (from, to, rule) in [
        (
            r#"{"type":"object","properties""#,
            r#"{"type":"string","properties""#,
            "metadata config-schema: the configuration's schema must be of `type: object`",
        ),
        (
            ".spec.fault",
            "spec..fault",
            r#"metadata printer column "Fault": JSONPath "spec..fault" must start with `.`"#,
        ),
        (
            "v1alpha1",
            "V1alpha1",
            r#"metadata API version "V1alpha1": a version is named by 1 to 63 lower-case"#,
        ),
    ] {
        let bad = Fetched::new(patched("fault_plugin.wasm", from, to));
        let Offer::Rejected(err) = registry.offer(&source, bad).await else {
            panic!("{to}: a bad schema must be refused");
        };
        assert_eq!(err.reason(), "BadOutput", "{err}");
        let message = err.to_string();
        assert!(
            message.contains("plugin 127.0.0.1:1/plugins/fault:1"),
            "{message}"
        );
        assert!(message.contains(rule), "{message}");
        assert_eq!(
            registry
                .get(&source)
                .current
                .expect("still serving")
                .compiled
                .digest,
            good_digest
        );
    }
}

/// A fault mode, the error it must produce, and words its message must contain.
type FaultCase = (&'static str, fn(&CallError) -> bool, &'static str);

#[test]
fn every_fault_is_its_own_error_within_its_deadline_while_a_good_plugin_keeps_serving() {
    let engine = PluginEngine::new().expect("engine");
    let fault = prepare(&engine, "fault_plugin.wasm").expect("the fault plugin itself loads");
    let good = Arc::new(prepare(&engine, "hello.wasm").expect("hello loads"));

    // A good plugin is called continuously on another thread while the faults run.
    let stop = Arc::new(AtomicBool::new(false));
    let good_calls = Arc::new(AtomicUsize::new(0));
    let engine = Arc::new(engine);
    let background = {
        let (engine, good, stop, good_calls) = (
            engine.clone(),
            good.clone(),
            stop.clone(),
            good_calls.clone(),
        );
        thread::spawn(move || {
            let app = app(json!({"message": "hi"}));
            while !stop.load(Ordering::SeqCst) {
                plan(&engine, &good, &app, &CallLimits::default())
                    .expect("the good plugin keeps working");
                good_calls.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    let limits = CallLimits {
        deadline: Duration::from_millis(100),
        memory_bytes: 32 << 20,
        max_output_bytes: 1 << 20,
    };
    let cases: [FaultCase; 10] = [
        (
            "panic",
            |e| matches!(e, CallError::Trap { .. }),
            "panics on purpose",
        ),
        (
            "loop",
            |e| matches!(e, CallError::DeadlineExceeded { .. }),
            "100ms deadline",
        ),
        (
            "sleep",
            |e| matches!(e, CallError::DeadlineExceeded { .. }),
            "100ms deadline",
        ),
        (
            "memory",
            |e| matches!(e, CallError::MemoryExceeded { .. }),
            "32 MiB memory cap",
        ),
        // 4 MiB against a 1 MiB cap: refused as it is lifted (the cap plus 1 MiB per transfer).
        (
            "huge-output",
            |e| matches!(e, CallError::BadOutput { .. }),
            "bytes to the host in one transfer",
        ),
        // Lists whose entries alias one buffer: the host copies out no more than its cap.
        (
            "alias-output",
            |e| matches!(e, CallError::BadOutput { .. }),
            "bytes to the host in one transfer",
        ),
        (
            "alias-list",
            |e| matches!(e, CallError::BadOutput { .. }),
            "bytes to the host in one transfer",
        ),
        (
            "alias-log",
            |e| matches!(e, CallError::BadOutput { .. }),
            "bytes to the host in one transfer",
        ),
        (
            "malformed-json",
            |e| matches!(e, CallError::BadOutput { .. }),
            "not valid JSON",
        ),
        (
            "not-an-object",
            |e| matches!(e, CallError::BadOutput { .. }),
            "not a JSON object",
        ),
    ];
    for (mode, is_expected, message) in cases {
        let start = Instant::now();
        // Allocating to the cap is a race against the deadline on a busy machine (the other
        // tests of this binary compile kvstore on both cores); give it the time to lose.
        let limits = match mode {
            "memory" => CallLimits {
                deadline: Duration::from_secs(2),
                ..limits
            },
            _ => limits,
        };
        let err = plan(&engine, &fault, &app(json!({"fault": mode})), &limits).expect_err(mode);
        let elapsed = start.elapsed();
        assert!(is_expected(&err), "{mode}: unexpected error {err:?}");
        assert!(err.to_string().contains(message), "{mode}: {err}");
        assert!(
            err.to_string().contains("fault@"),
            "{mode}: the error names the plugin: {err}"
        );
        assert!(elapsed < Duration::from_secs(2), "{mode} took {elapsed:?}");
    }
    let refused =
        plan(&engine, &fault, &app(json!({"fault": "bogus"})), &limits).expect_err("unknown fault");
    assert_eq!(refused.reason(), "InvalidConfig", "{refused}");
    assert!(
        refused.to_string().contains("spec.config.fault"),
        "{refused}"
    );

    stop.store(true, Ordering::SeqCst);
    background.join().expect("good plugin thread");
    assert!(
        good_calls.load(Ordering::SeqCst) > 0,
        "the good plugin was never called"
    );
    // The faulty plugin is still usable for well-behaved calls afterwards, and a wait that
    // fits in the deadline is a wait like any other.
    assert_eq!(
        plan(&engine, &fault, &app(json!({"fault": "none"})), &limits).expect("recovers"),
        1
    );
    let start = Instant::now();
    assert_eq!(
        plan(&engine, &fault, &app(json!({"fault": "nap"})), &limits).expect("naps"),
        1
    );
    assert!(
        start.elapsed() >= Duration::from_millis(20),
        "the nap was cut short: {:?}",
        start.elapsed()
    );
}

#[test]
fn a_call_that_outgrows_the_sdk_arena_buffer_still_succeeds() {
    // The SDK's allocator serves a call from a 2 MiB static buffer, then grows linear memory: an
    // App with a 3 MiB annotation needs both, and must plan exactly like a small one.
    let engine = PluginEngine::new().expect("engine");
    let kvstore = prepare(&engine, "kvstore.wasm").expect("loads");
    let limits = CallLimits::default();
    let small = app(json!({"replicas": 3}));
    let mut large = small.clone();
    large["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(3 << 20)});
    assert_eq!(
        plan(&engine, &kvstore, &large, &limits).expect("plans past the buffer"),
        plan(&engine, &kvstore, &small, &limits).expect("plans")
    );
}

#[test]
fn the_wall_clock_is_the_hosts_now_and_randomness_is_fixed() {
    let engine = PluginEngine::new().expect("engine");
    let fault = prepare(&engine, "fault_plugin.wasm").expect("loads");
    let payload = |fault_mode: &str, now_ms: i64| {
        let app = app(json!({"fault": fault_mode}));
        let cx = AppContext::new(&app, [], now_ms);
        let plan = fault
            .call_plan(
                &engine,
                &CallLimits::default(),
                CallTags::default(),
                &cx,
                None,
                "1",
            )
            .expect("plans");
        plan.objects[0].to_value()["data"]["payload"].clone()
    };
    assert_eq!(payload("clock", 1_764_633_600_123), "1764633600123");
    assert_eq!(payload("clock", 42), "42", "not the machine's clock");
    let first = payload("random", 0);
    assert_eq!(payload("random", 0), first, "same input, same answer");
}

#[test]
fn each_call_gets_a_fresh_instance() {
    let engine = PluginEngine::new().expect("engine");
    let fault = prepare(&engine, "fault_plugin.wasm").expect("loads");
    let app = app(json!({"fault": "count"}));
    let cx = AppContext::new(&app, [], 0);
    for _ in 0..3 {
        let plan = fault
            .call_plan(
                &engine,
                &CallLimits::default(),
                CallTags::default(),
                &cx,
                None,
                "1",
            )
            .expect("count plans");
        assert_eq!(
            plan.objects[0].to_value()["data"]["payload"],
            "1",
            "state leaked between calls"
        );
    }
}

#[test]
fn broken_components_are_refused_with_the_reason() {
    let engine = PluginEngine::new().expect("engine");
    let err = prepare(&engine, "wrong-world.wasm")
        .err()
        .expect("a WASI command is not a plugin");
    assert_eq!(err.reason(), "IncompatibleWorld", "{err}");
    assert!(
        err.to_string()
            .contains("does not export wasmop:plugin/metadata@0.3.0 (and 0.2.0, 0.1.0)"),
        "{err}"
    );
    assert!(
        err.to_string().contains("wasi:cli/run"),
        "names what it exports instead: {err}"
    );

    let core_module = b"\0asm\x01\0\0\0".to_vec();
    let err = CompiledPlugin::prepare(
        &engine,
        None,
        "core",
        &core_module,
        Digest::of(&core_module),
    )
    .err()
    .expect("a core module is not a component");
    assert_eq!(err.reason(), "NotAComponent");
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");

    let text = b"#!/bin/sh\necho not wasm\n".to_vec();
    let err = CompiledPlugin::prepare(&engine, None, "text", &text, Digest::of(&text))
        .err()
        .expect("not wasm");
    assert!(
        err.to_string().contains("without the Wasm magic number"),
        "{err}"
    );

    let mut truncated = component("hello.wasm");
    truncated.truncate(truncated.len() / 2);
    let err = CompiledPlugin::prepare(
        &engine,
        None,
        "truncated",
        &truncated,
        Digest::of(&truncated),
    )
    .err()
    .expect("truncated");
    assert_eq!(err.reason(), "CompileFailed", "{err}");
}

#[test]
fn compiled_artifacts_are_cached_by_digest_and_engine() {
    let dir = std::env::temp_dir().join(format!("wasmop-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = Cache::open(&dir).expect("cache dir");
    let engine = PluginEngine::new().expect("engine");
    let bytes = component("kvstore.wasm");
    let digest = Digest::of(&bytes);
    let cold = CompiledPlugin::prepare(&engine, Some(&cache), "kvstore", &bytes, digest.clone())
        .expect("compiles");
    assert!(!cold.from_cache);
    let warm = CompiledPlugin::prepare(&engine, Some(&cache), "kvstore", &bytes, digest.clone())
        .expect("loads");
    assert!(warm.from_cache, "the second load must come from the cache");
    assert!(
        warm.compile_time < cold.compile_time,
        "cached {:?} vs cold {:?}",
        warm.compile_time,
        cold.compile_time
    );

    // A corrupted artifact is detected and recompiled, never deserialized.
    let artifact = std::fs::read_dir(dir.join("compiled"))
        .expect("compiled dir")
        .flatten()
        .flat_map(|fingerprint| {
            std::fs::read_dir(fingerprint.path())
                .expect("fingerprint dir")
                .flatten()
        })
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("an artifact was written");
    let mut corrupted = std::fs::read(&artifact).expect("artifact");
    let middle = corrupted.len() / 2;
    corrupted[middle] ^= 0xff;
    std::fs::write(&artifact, corrupted).expect("corrupt it");
    let again = CompiledPlugin::prepare(&engine, Some(&cache), "kvstore", &bytes, digest.clone())
        .expect("recompiles");
    assert!(!again.from_cache, "a corrupted artifact must not be used");
    let warm = CompiledPlugin::prepare(&engine, Some(&cache), "kvstore", &bytes, digest.clone())
        .expect("loads");
    assert!(warm.from_cache, "the recompiled artifact is cached again");

    // Genuine artifacts are bound to their place and to the install's key: kvstore's artifact
    // (with its tag) moved to stand for hello is refused, and another key loads nothing.
    let hello = component("hello.wasm");
    let hello_digest = Digest::of(&hello);
    let hello_path = artifact.with_file_name(format!("{}.cwasm", hello_digest.hex()));
    std::fs::copy(&artifact, &hello_path).expect("moved");
    std::fs::copy(
        artifact.with_extension("cwasm.hmac"),
        hello_path.with_extension("cwasm.hmac"),
    )
    .expect("moved its tag");
    let moved = CompiledPlugin::prepare(&engine, Some(&cache), "hello", &hello, hello_digest)
        .expect("compiles hello itself");
    assert!(
        !moved.from_cache,
        "an artifact moved to another digest was used"
    );
    assert_eq!(moved.metadata.name, "hello");
    let other = Cache::open(&dir)
        .expect("cache dir")
        .with_key(CacheKey::new(&[9; 32]).expect("a key"));
    let foreign = CompiledPlugin::prepare(&engine, Some(&other), "kvstore", &bytes, digest)
        .expect("recompiles");
    assert!(
        !foreign.from_cache,
        "an artifact tagged with another key was used"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_source_that_keeps_failing_the_same_way_tells_its_apps_once() {
    let engine = PluginEngine::new().expect("engine");
    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/down:1"));
    let mut changes = registry.subscribe();
    let down = |message: &str| LoadError::Fetch {
        source_ref: source.to_string(),
        message: message.into(),
    };
    for _ in 0..3 {
        registry.record_failure(&source, down("the registry answered 503"));
    }
    registry.record_failure(&source, down("connection refused"));
    assert_eq!(changes.try_recv().expect("the first failure"), source);
    assert_eq!(changes.try_recv().expect("a different failure"), source);
    assert!(
        changes.try_recv().is_err(),
        "repeats of one failure were broadcast"
    );
}

/// A registry down while a version serves is kept from the Apps for the grace, then told once;
/// with nothing serving, the Apps hear at once; a poll that answers clears it all.
#[tokio::test]
async fn failing_polls_reach_the_apps_only_after_the_grace_when_a_version_serves() {
    let engine = PluginEngine::new().expect("engine");
    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let (serving, empty) = (
        SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/serving:1")),
        SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/empty:1")),
    );
    let down = |source: &SourceRef| LoadError::Fetch {
        source_ref: source.to_string(),
        message: "connection refused".into(),
    };
    assert!(matches!(
        registry
            .offer(&serving, Fetched::new(component("hello.wasm")))
            .await,
        Offer::Loaded(_)
    ));
    let mut changes = registry.subscribe();
    let grace = Duration::from_millis(300);

    registry.record_poll_failure(&empty, down(&empty), grace);
    assert_eq!(
        changes.try_recv().ok(),
        Some(empty.clone()),
        "nothing serves: told at once"
    );
    assert_eq!(
        registry.get(&empty).last_error.map(|e| e.reason()),
        Some("FetchFailed")
    );

    for _ in 0..3 {
        registry.record_poll_failure(&serving, down(&serving), grace);
    }
    assert!(changes.try_recv().is_err(), "told within the grace");
    let state = registry.get(&serving);
    assert!(state.last_error.is_none(), "told within the grace");
    assert_eq!(state.poll_failing.map(|e| e.reason()), Some("FetchFailed"));

    tokio::time::sleep(grace).await;
    registry.record_poll_failure(&serving, down(&serving), grace);
    registry.record_poll_failure(&serving, down(&serving), grace);
    assert_eq!(
        changes.try_recv().ok(),
        Some(serving.clone()),
        "told after the grace"
    );
    assert!(changes.try_recv().is_err(), "told once");
    assert!(registry.get(&serving).last_error.is_some());

    registry.clear_fetch_error(&serving);
    let state = registry.get(&serving);
    assert!(state.last_error.is_none() && state.poll_failing.is_none());
    // A new streak starts a new grace.
    registry.record_poll_failure(&serving, down(&serving), grace);
    assert!(registry.get(&serving).last_error.is_none());
}

#[tokio::test]
async fn a_bad_version_never_replaces_a_good_one() {
    let engine = PluginEngine::new().expect("engine");
    let registry = PluginRegistry::new(engine, None, PluginMetrics::unregistered());
    let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/x:1"));
    let mut changes = registry.subscribe();

    let hello = Fetched::new(component("hello.wasm"));
    let hello_digest = hello.digest.clone();
    assert!(matches!(
        registry.offer(&source, hello.clone()).await,
        Offer::Loaded(_)
    ));
    assert_eq!(changes.recv().await.expect("notified"), source);
    assert!(matches!(
        registry.offer(&source, hello).await,
        Offer::Unchanged(_)
    ));

    let in_flight = registry.get(&source).current.expect("current");
    let Offer::Rejected(err) = registry
        .offer(&source, Fetched::new(component("wrong-world.wasm")))
        .await
    else {
        panic!("the wrong world must be rejected");
    };
    assert_eq!(err.reason(), "IncompatibleWorld");
    let state = registry.get(&source);
    assert_eq!(
        state.current.expect("still serving").compiled.digest,
        hello_digest
    );
    assert_eq!(
        state.last_error.expect("the failure is recorded").reason(),
        "IncompatibleWorld"
    );

    let Offer::Swapped { from, to } = registry
        .offer(&source, Fetched::new(component("kvstore.wasm")))
        .await
    else {
        panic!("a good new version swaps in");
    };
    assert_eq!(from, hello_digest);
    assert_eq!(to.compiled.metadata.name, "kvstore");
    assert!(
        registry.get(&source).last_error.is_none(),
        "a successful swap clears the error"
    );
    // A caller that took the old version before the swap still has it, whole.
    assert_eq!(in_flight.compiled.metadata.name, "hello");
    let app = app(json!({"message": "still here"}));
    let result = in_flight
        .run(
            "spec-diff",
            "default",
            CallLimits::default().memory_bytes,
            move |plugin, engine| {
                let cx = AppContext::new(&app, [], 0);
                plugin.call_plan(
                    engine,
                    &CallLimits::default(),
                    CallTags::default(),
                    &cx,
                    None,
                    "1",
                )
            },
        )
        .await
        .expect("the old version finishes its call");
    assert_eq!(result.objects.len(), 2);
}

/// A progressive rollout serves some instances with the version before: a swap keeps it loaded
/// (a tag moved back reinstates it without a compile), and a host that restarted loads it
/// again from its cache beside the one the source now offers, never putting it in service.
#[tokio::test]
async fn swapped_out_versions_stay_loaded_and_come_back_from_the_cache() {
    let dir = std::env::temp_dir().join(format!("wasmop-kept-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let source = SourceRef::Oci(OciRef::anonymous("127.0.0.1:1/plugins/kept:1"));
    let (hello, kvstore) = (
        Fetched::new(component("hello.wasm")),
        Fetched::new(component("kvstore.wasm")),
    );
    let (old, new) = (hello.digest.to_string(), kvstore.digest.to_string());
    {
        let engine = PluginEngine::new().expect("engine");
        let cache = Cache::open(&dir).expect("cache dir");
        let registry = PluginRegistry::new(engine, Some(cache), PluginMetrics::unregistered());
        registry.offer(&source, hello.clone()).await;
        assert!(matches!(
            registry.offer(&source, kvstore.clone()).await,
            Offer::Swapped { .. }
        ));
        let kept = registry
            .version(&source, &old)
            .expect("the old version stays loaded");
        assert_eq!(kept.compiled.metadata.name, "hello");
        assert_eq!(
            registry
                .get(&source)
                .current
                .expect("serving")
                .compiled
                .digest,
            kvstore.digest
        );
        // The tag moves back: the kept version is in service again, the same one.
        let Offer::Swapped { to, .. } = registry.offer(&source, hello.clone()).await else {
            panic!("a kept version swaps back in");
        };
        assert!(Arc::ptr_eq(&to, &kept), "reinstated, not compiled again");
        assert!(registry.version(&source, &new).is_some());
    }
    // A restarted host: the source offers the new version; the old one comes from the cache.
    let engine = PluginEngine::new().expect("engine");
    let cache = Cache::open(&dir).expect("cache dir");
    let registry = PluginRegistry::new(engine, Some(cache), PluginMetrics::unregistered());
    registry.offer(&source, kvstore.clone()).await;
    assert!(registry.version(&source, &old).is_none());
    let recalled = registry
        .recall(&source, &old)
        .await
        .expect("from the cache");
    assert_eq!(recalled.compiled.metadata.name, "hello");
    assert_eq!(
        registry
            .get(&source)
            .current
            .expect("serving")
            .compiled
            .digest,
        kvstore.digest,
        "a recalled version is not put in service"
    );
    assert!(registry.version(&source, &old).is_some());
    // A digest the cache never held is refused, saying why, and remembered.
    let missing = format!("sha256:{}", "0".repeat(64));
    let err = registry
        .recall(&source, &missing)
        .await
        .err()
        .expect("not in the cache");
    assert!(
        err.to_string().contains("nor in the host's plugin cache"),
        "{err}"
    );
    assert!(registry.recall_failure(&source, &missing).is_some());
    let _ = std::fs::remove_dir_all(&dir);
}
