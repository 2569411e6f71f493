//! Run plugin logic natively against fixtures: no wasm, no host, no cluster.
//!
//! A [`Fixture`] holds what the host would send (the App, observed objects,
//! the clock, versions) as JSON text, and each method calls a capability
//! through the same parsing and serialization the component uses, so a bad
//! config or an unserializable object fails here exactly as it would in the
//! host. What the plugin answers is then held to the host's rules on answers
//! (`wasmop_core::answers`: no condition type of the host's, CamelCase words,
//! lists and sizes within their caps...): an answer the host would refuse as
//! `BadOutput` is an `internal` error here, with the host's message.
//!
//! ```
//! use wasmop_sdk::testing::{self, Fixture};
//! # use wasmop_sdk::{Metadata, Plan, PlanInput, Plugin, Result, SpecDiff};
//! # struct Echo;
//! # impl Plugin for Echo {
//! #     type Config = serde_json::Value;
//! #     fn metadata() -> Metadata { Metadata::new("echo", "0.1.0") }
//! # }
//! # impl SpecDiff for Echo {
//! #     fn plan(_: &PlanInput<serde_json::Value>) -> Result<Plan> { Ok(Plan::new()) }
//! # }
//! let app = testing::app("demo", "default", "1.0.0", serde_json::json!({}));
//! let plan = Fixture::new(app).now("2025-01-01T06:00:00Z").plan::<Echo>().expect("plans");
//! assert!(plan.is_empty());
//! ```

use chrono::DateTime;
use k8s_openapi::api::batch::v1::Job;
use serde::Serialize;
use serde_json::Value;

use crate::backup::{Backup, BackupDecision, BackupRun, Slot};
use crate::error::{Error, Result};
use crate::finalize::{Finalize, FinalizeDecision};
use crate::health::{Health, HealthReport};
use crate::log::Record;
use crate::metadata::Metadata;
use crate::runtime::{self, Exported};
use crate::spec_diff::{Plan, SpecDiff};
use crate::upgrade::{Upgrade, UpgradeDecision};
use crate::validate::{Operation, Validate, Verdict};

mod answers;
mod convert;
#[cfg(not(target_arch = "wasm32"))]
mod native;
#[cfg(not(target_arch = "wasm32"))]
mod reconcile;
#[cfg(not(target_arch = "wasm32"))]
pub use native::{NativeCall, NativeCalls};

/// The decision core's types, for what [`Fixture::reconcile`] returns.
#[cfg(not(target_arch = "wasm32"))]
pub use wasmop_core as core;

/// The clock fixtures start with: 2025-01-01T00:00:00Z.
pub const DEFAULT_NOW_MS: i64 = 1_735_689_600_000;

/// Builds the JSON of an App named `name` in `namespace` with `spec.version`
/// and `spec.config`.
pub fn app(name: &str, namespace: &str, version: &str, config: Value) -> String {
    serde_json::json!({
        "apiVersion": crate::app::API_VERSION,
        "kind": crate::app::KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": "00000000-0000-0000-0000-000000000000", "generation": 1},
        "spec": {"plugin": {"image": "registry.example/plugin:test"}, "version": version, "config": config},
    })
    .to_string()
}

/// Builds the JSON of an instance of a kind bound to the plugin (`kind` in
/// `api_version`, such as `KVStore` in `data.example.com/v1`) named `name` in
/// `namespace`: `spec` is the config's fields (an object) with `version` beside
/// them, as the kind's CRD has them (a `config` that is no object counts as
/// none).
///
/// ```
/// let kv = wasmop_sdk::testing::instance(
///     "data.example.com/v1", "KVStore", "cache", "shop", "7.2.4",
///     serde_json::json!({"replicas": 3}),
/// );
/// assert!(kv.contains(r#""spec":{"replicas":3,"version":"7.2.4"}"#));
/// ```
pub fn instance(
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
    version: &str,
    config: Value,
) -> String {
    let mut spec = match config {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    spec.insert("version".into(), Value::String(version.into()));
    serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "uid": "00000000-0000-0000-0000-000000000001", "generation": 1},
        "spec": spec,
    })
    .to_string()
}

/// The log records the current thread wrote since the last call.
pub fn take_logs() -> Vec<Record> {
    crate::log::sink::take()
}

/// What the host would send, as JSON text.
#[derive(Debug, Clone)]
pub struct Fixture {
    app: String,
    observed: Vec<String>,
    now_ms: i64,
    current_version: Option<String>,
    target_version: Option<String>,
    last_completed_slot: Option<String>,
    old_object: Option<String>,
    user_groups: Option<Vec<String>>,
    /// The plan rules [`Fixture::reconcile`] holds plans to (`None`: the built-in default
    /// policy's); see `Fixture::with_policy`.
    #[cfg(not(target_arch = "wasm32"))]
    policy: Option<wasmop_core::guard::PlanPolicy>,
}

impl Fixture {
    /// A fixture for the App JSON `app` (e.g. `include_str!` of a fixture
    /// file, or [`app`]). The clock starts at [`DEFAULT_NOW_MS`].
    pub fn new(app: impl Into<String>) -> Self {
        Fixture {
            app: app.into(),
            observed: Vec::new(),
            now_ms: DEFAULT_NOW_MS,
            current_version: None,
            target_version: None,
            last_completed_slot: None,
            old_object: None,
            user_groups: None,
            #[cfg(not(target_arch = "wasm32"))]
            policy: None,
        }
    }

    /// Adds an observed object as JSON text.
    pub fn observe(mut self, json: impl Into<String>) -> Self {
        self.observed.push(json.into());
        self
    }

    /// The observed objects, as JSON text: the cluster around the App (after
    /// [`Fixture::after`], with what a decision applied).
    pub fn observed(&self) -> &[String] {
        &self.observed
    }

    /// Adds observed objects from a JSON array (a `kubectl get -o json`
    /// `items` list works).
    ///
    /// # Panics
    /// If `json` is not an array: fixtures are test code.
    pub fn observe_list(mut self, json: &str) -> Self {
        let items: Vec<Value> =
            serde_json::from_str(json).expect("fixture is a JSON array of objects");
        self.observed.extend(items.iter().map(Value::to_string));
        self
    }

    /// Adds an observed object built in the test.
    ///
    /// # Panics
    /// If it cannot be serialized.
    pub fn observe_object<K: Serialize>(self, object: &K) -> Self {
        let json = serde_json::to_string(object).expect("fixture object serializes");
        self.observe(json)
    }

    /// Sets the clock.
    ///
    /// # Panics
    /// If `rfc3339` is not an RFC 3339 timestamp.
    pub fn now(mut self, rfc3339: &str) -> Self {
        self.now_ms = DateTime::parse_from_rfc3339(rfc3339)
            .expect("fixture time is RFC 3339")
            .timestamp_millis();
        self
    }

    /// Sets the clock in Unix milliseconds, as the host sends it.
    pub fn now_ms(mut self, ms: i64) -> Self {
        self.now_ms = ms;
        self
    }

    /// Sets the rolled-out version (default: the App's `status.version`).
    pub fn current_version(mut self, version: impl Into<String>) -> Self {
        self.current_version = Some(version.into());
        self
    }

    /// Sets the version to render or gate to (default: `spec.version`).
    pub fn target_version(mut self, version: impl Into<String>) -> Self {
        self.target_version = Some(version.into());
        self
    }

    /// Sets the newest completed backup slot.
    pub fn last_completed_slot(mut self, slot: impl Into<String>) -> Self {
        self.last_completed_slot = Some(slot.into());
        self
    }

    /// Sets the stored object an update is judged against ([`Fixture::validate`]), JSON text.
    pub fn old_object(mut self, json: impl Into<String>) -> Self {
        self.old_object = Some(json.into());
        self
    }

    /// Sets the groups of the user asking ([`Fixture::validate`]); by default the host does not
    /// say.
    pub fn user_groups<G: Into<String>>(mut self, groups: impl IntoIterator<Item = G>) -> Self {
        self.user_groups = Some(groups.into_iter().map(Into::into).collect());
        self
    }

    /// What `metadata.get` returns, capabilities included.
    pub fn metadata<P: Exported>() -> Metadata {
        runtime::metadata::<P>()
    }

    /// The configuration's schema as the host takes it at load: made structural (what `wasmop
    /// plugin crd` puts in a CRD's `spec`), `None` for a free-form configuration. An error
    /// where the host would refuse the plugin, in the host's words (and likewise for the rest
    /// of the metadata, printer columns included).
    pub fn config_schema<P: Exported>() -> Result<Option<serde_json::Value>> {
        let metadata = runtime::metadata::<P>();
        let checked = answers::metadata(&metadata).map_err(answers::refused::<P>("metadata"))?;
        Ok(checked.config_schema)
    }

    /// Calls `spec-diff.plan`.
    pub fn plan<P: SpecDiff>(&self) -> Result<Plan> {
        let raw = crate::spec_diff::plan::<P>(
            &self.app,
            self.observed.clone(),
            self.current(),
            self.target(),
            self.now_ms,
        )?;
        crate::spec_diff::native::checked(&raw).map_err(answers::refused::<P>("spec-diff"))?;
        Plan::from_parts(
            raw.objects,
            raw.requeue_after_ms.map(std::time::Duration::from_millis),
        )
    }

    /// Calls `health.check` for the target version.
    pub fn check<P: Health>(&self) -> Result<HealthReport> {
        let report = crate::health::check::<P>(
            &self.app,
            self.observed.clone(),
            self.target(),
            self.now_ms,
        )?;
        crate::health::native::checked(&report).map_err(answers::refused::<P>("health"))?;
        Ok(report)
    }

    /// Calls `backup.schedule`.
    pub fn schedule<P: Backup>(&self) -> Result<BackupDecision> {
        let raw = crate::backup::schedule::<P>(
            &self.app,
            self.observed.clone(),
            self.last_completed_slot.clone(),
            self.now_ms,
        )?;
        crate::backup::native::checked(raw.clone()).map_err(answers::refused::<P>("backup"))?;
        let run = match raw.run {
            Some((slot, job)) => Some(BackupRun {
                slot: Slot::parse(&slot)?,
                job: serde_json::from_str::<Job>(&job)
                    .map_err(|e| Error::internal(e.to_string()))?,
            }),
            None => None,
        };
        Ok(BackupDecision {
            run,
            expire: raw
                .expire
                .iter()
                .map(|s| Slot::parse(s))
                .collect::<Result<_>>()?,
            requeue_after: raw.requeue_after_ms.map(std::time::Duration::from_millis),
        })
    }

    /// Calls `upgrade.gate` from the current to the target version.
    pub fn gate<P: Upgrade>(&self) -> Result<UpgradeDecision> {
        let from = self.current().unwrap_or_default();
        let decision = crate::upgrade::gate::<P>(
            &self.app,
            self.observed.clone(),
            from,
            self.target(),
            self.now_ms,
        )?;
        crate::upgrade::native::checked(&decision).map_err(answers::refused::<P>("upgrade"))?;
        Ok(decision)
    }

    /// Calls `finalize.cleanup`; the observed objects are the retained ones.
    pub fn cleanup<P: Finalize>(&self) -> Result<FinalizeDecision> {
        let decision =
            crate::finalize::cleanup::<P>(&self.app, self.observed.clone(), self.now_ms)?;
        crate::finalize::native::checked(&decision).map_err(answers::refused::<P>("finalize"))?;
        Ok(decision)
    }

    /// Calls `validate.validate` for `operation`: the App is the object being written (on
    /// `Delete`, the one being deleted), [`Fixture::old_object`] the stored one (sent on
    /// `Update` only, as the host does), with [`Fixture::user_groups`] and the clock. The
    /// verdict is held to the host's rules ([`wasmop_core::admission::check_verdict`]).
    ///
    /// ```
    /// use wasmop_sdk::testing::{self, Fixture};
    /// use wasmop_sdk::{Admission, Metadata, Operation, Plugin, Result, Validate, Verdict};
    /// struct Picky;
    /// impl Plugin for Picky {
    ///     type Config = serde_json::Value;
    ///     fn metadata() -> Metadata { Metadata::new("picky", "0.1.0") }
    /// }
    /// impl Validate for Picky {
    ///     fn review(input: &Admission<serde_json::Value>) -> Result<Verdict> {
    ///         Ok(match input.in_group("admins") {
    ///             true => Verdict::allow(),
    ///             false => Verdict::allow().deny("", "only admins"),
    ///         })
    ///     }
    /// }
    /// wasmop_sdk::export!(Picky: Validate);
    /// # fn main() {
    /// let kind = testing::instance("x.example.com/v1", "Thing", "t", "ns", "1", serde_json::json!({}));
    /// let fixture = Fixture::new(kind);
    /// assert!(!fixture.validate::<Picky>(Operation::Create).expect("judged").allowed());
    /// let admin = fixture.user_groups(["admins"]);
    /// assert!(admin.validate::<Picky>(Operation::Create).expect("judged").allowed());
    /// # }
    /// ```
    pub fn validate<P: Validate>(&self, operation: Operation) -> Result<Verdict> {
        let old = match operation {
            Operation::Update => self.old_object.clone(),
            _ => None,
        };
        let verdict = crate::validate::validate::<P>(
            operation,
            &self.app,
            old,
            self.user_groups.clone(),
            self.now_ms,
        )?;
        wasmop_core::admission::check_verdict(
            &verdict,
            wasmop_core::answers::DEFAULT_MAX_OUTPUT_BYTES,
        )
        .map_err(answers::refused::<P>("validate"))?;
        Ok(verdict)
    }

    fn app_field(&self, pointer: &str) -> Option<String> {
        let app: Value = serde_json::from_str(&self.app).ok()?;
        app.pointer(pointer)?.as_str().map(str::to_owned)
    }

    fn current(&self) -> Option<String> {
        self.current_version
            .clone()
            .or_else(|| self.app_field("/status/version"))
    }

    fn target(&self) -> String {
        self.target_version
            .clone()
            .or_else(|| self.app_field("/spec/version"))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::ErrorKind;
    use crate::health::Condition;
    use crate::metadata::Plugin;
    use crate::spec_diff::PlanInput;
    use crate::upgrade::UpgradeInput;

    /// Answers as a careless plugin would, by `spec.config.answer`: a condition type the host
    /// writes itself, a plan past the output cap; and a gate reason past it, always.
    struct Careless;

    impl Plugin for Careless {
        type Config = Value;

        fn metadata() -> Metadata {
            Metadata::new("careless", "0.1.0")
        }
    }

    impl SpecDiff for Careless {
        fn plan(input: &PlanInput<Value>) -> Result<Plan> {
            let mut plan = Plan::new();
            if input.app.config()["answer"] == "huge" {
                let data = [("x".to_string(), "x".repeat(MAX_OUTPUT))];
                plan.push(&k8s_openapi::api::core::v1::ConfigMap {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some("huge".into()),
                        ..Default::default()
                    },
                    data: Some(data.into_iter().collect()),
                    ..Default::default()
                })?;
            }
            Ok(plan)
        }
    }

    impl Health for Careless {
        fn check(input: &crate::health::HealthInput<Value>) -> Result<HealthReport> {
            let mut report = HealthReport::healthy("fine").rollout_complete(true);
            if input.app.config()["answer"] == "reserved" {
                report
                    .conditions
                    .push(Condition::new("Degraded", false, "AllGood", "mine"));
            }
            Ok(report)
        }
    }

    impl Upgrade for Careless {
        fn gate(_: &UpgradeInput<Value>) -> Result<UpgradeDecision> {
            Ok(UpgradeDecision::Wait("w".repeat(MAX_OUTPUT + 1)))
        }
    }

    crate::export!(Careless: SpecDiff, Health, Upgrade);

    const MAX_OUTPUT: usize = wasmop_core::answers::DEFAULT_MAX_OUTPUT_BYTES;

    fn fixture(answer: &str) -> Fixture {
        Fixture::new(app("demo", "default", "1.0.0", json!({"answer": answer})))
    }

    /// The host's words for a reserved condition type (`CallError::BadOutput`), but for the
    /// label: the host names the plugin by its digest.
    const RESERVED: &str = "plugin careless@0.1.0 returned bad output from health: condition \
                            type \"Degraded\" is the host's or repeated";

    #[test]
    fn a_condition_type_of_the_hosts_fails_as_the_host_refuses_it() {
        assert!(fixture("fine").check::<Careless>().is_ok());
        let err = fixture("reserved")
            .check::<Careless>()
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert_eq!(
            err.message(),
            format!("the host would refuse this answer as BadOutput: {RESERVED}")
        );
    }

    #[test]
    fn a_reconcile_reports_a_refused_answer_as_the_host_does() {
        let decision = fixture("reserved")
            .reconcile::<Careless>()
            .expect("reconciles");
        let degraded = decision
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .expect("Degraded is set");
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "BadOutput")
        );
        assert_eq!(degraded.message, RESERVED);
        assert_eq!(decision.requeue, wasmop_core::Requeue::Backoff);
        let fine = fixture("fine").reconcile::<Careless>().expect("reconciles");
        assert!(
            fine.status
                .conditions
                .iter()
                .all(|c| c.type_ != "Degraded" || c.status == "False"),
            "{:?}",
            fine.status.conditions
        );
    }

    /// A plugin whose metadata the host would refuse to load.
    struct Nameless;

    impl Plugin for Nameless {
        type Config = Value;

        fn metadata() -> Metadata {
            Metadata::new("", "0.1.0")
        }
    }

    crate::export!(Nameless);

    #[test]
    fn metadata_the_host_would_not_load_fails_a_reconcile() {
        let err = fixture("fine")
            .reconcile::<Nameless>()
            .expect_err("refused");
        assert_eq!(
            err.message(),
            "the host would refuse this answer as BadOutput: plugin @0.1.0 returned bad output \
             from metadata: metadata name \"\" must be 1 to 63 characters"
        );
    }

    /// The SDK's `Slot` is built in the component, where the core is not linked: its rule is
    /// held to the host's here.
    #[test]
    fn slots_the_sdk_makes_are_slots_the_host_takes() {
        use wasmop_core::answers;
        assert_eq!(crate::backup::MAX_SLOT_LEN, answers::MAX_SLOT_BYTES);
        let (longest, too_long) = ("a".repeat(40), "a".repeat(41));
        for slot in [
            "20261202-060000",
            "a",
            "7",
            &longest,
            &too_long,
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "é",
        ] {
            assert_eq!(
                crate::backup::Slot::parse(slot).is_ok(),
                answers::is_slot(slot),
                "{slot:?}"
            );
        }
    }

    #[test]
    fn plans_and_gates_are_held_to_the_same_rules() {
        assert!(fixture("fine").plan::<Careless>().is_ok());
        let err = fixture("huge").plan::<Careless>().expect_err("refused");
        let message = err.message();
        assert!(
            message.starts_with(
                "the host would refuse this answer as BadOutput: plugin careless@0.1.0 returned \
                 bad output from spec-diff: "
            ) && message.ends_with(&format!(
                "bytes of output is over the {MAX_OUTPUT} byte cap"
            )),
            "{message}"
        );
        let err = fixture("fine").gate::<Careless>().expect_err("refused");
        assert_eq!(
            err.message(),
            format!(
                "the host would refuse this answer as BadOutput: plugin careless@0.1.0 returned \
                 bad output from upgrade: {} bytes of output is over the {MAX_OUTPUT} byte cap",
                MAX_OUTPUT + 1
            )
        );
    }
}
