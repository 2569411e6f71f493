//! Run plugin logic natively against fixtures: no wasm, no host, no cluster.
//!
//! A [`Fixture`] holds what the host would send (the App, observed objects,
//! the clock, versions) as JSON text, and each method calls a capability
//! through the same parsing and serialization the component uses, so a bad
//! config or an unserializable object fails here exactly as it would in the
//! host.
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

#[cfg(not(target_arch = "wasm32"))]
mod reconcile;
#[cfg(not(target_arch = "wasm32"))]
pub use reconcile::NativeCalls;

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
        }
    }

    /// Adds an observed object as JSON text.
    pub fn observe(mut self, json: impl Into<String>) -> Self {
        self.observed.push(json.into());
        self
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

    /// What `metadata.get` returns, capabilities included.
    pub fn metadata<P: Exported>() -> Metadata {
        runtime::metadata::<P>()
    }

    /// Calls `spec-diff.plan`.
    pub fn plan<P: SpecDiff>(&self) -> Result<Plan> {
        let raw = runtime::plan::<P>(
            &self.app,
            self.observed.clone(),
            self.current(),
            self.target(),
            self.now_ms,
        )?;
        Plan::from_parts(
            raw.objects,
            raw.requeue_after_ms.map(std::time::Duration::from_millis),
        )
    }

    /// Calls `health.check` for the target version.
    pub fn check<P: Health>(&self) -> Result<HealthReport> {
        runtime::check::<P>(&self.app, self.observed.clone(), self.target(), self.now_ms)
    }

    /// Calls `backup.schedule`.
    pub fn schedule<P: Backup>(&self) -> Result<BackupDecision> {
        let raw = runtime::schedule::<P>(
            &self.app,
            self.observed.clone(),
            self.last_completed_slot.clone(),
            self.now_ms,
        )?;
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
        runtime::gate::<P>(
            &self.app,
            self.observed.clone(),
            from,
            self.target(),
            self.now_ms,
        )
    }

    /// Calls `finalize.cleanup`; the observed objects are the retained ones.
    pub fn cleanup<P: Finalize>(&self) -> Result<FinalizeDecision> {
        runtime::cleanup::<P>(&self.app, self.observed.clone(), self.now_ms)
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
