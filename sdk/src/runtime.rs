//! The boundary between the WIT's raw values (JSON text, milliseconds) and the
//! typed traits. Shared by the component exports and by [`testing`](crate::testing),
//! so unit tests exercise the same parsing and serialization as the host.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::backup::{Backup, BackupInput, Slot};
use crate::error::{Error, Result};
use crate::finalize::{Finalize, FinalizeDecision, FinalizeInput};
use crate::health::{Health, HealthInput, HealthReport};
use crate::metadata::{Capability, Metadata, Plugin};
use crate::observed::Observed;
use crate::spec_diff::{PlanInput, SpecDiff};
use crate::upgrade::{Upgrade, UpgradeDecision, UpgradeInput};

/// Implemented by [`export!`](crate::export) for the plugin type: the
/// capabilities it was exported with, reported by `metadata.get`.
pub trait Exported: Plugin {
    /// Exactly the capability interfaces the component exports.
    const CAPABILITIES: &'static [Capability];
    /// The same capabilities as plain functions, for native runs of the whole reconcile
    /// ([`Fixture::reconcile`](crate::testing::Fixture::reconcile)).
    const NATIVE: Native;
}

/// `spec-diff.plan` as a function: app, observed, current version, target version, now.
pub type PlanFn = fn(&str, Vec<String>, Option<String>, String, i64) -> Result<RawPlan>;
/// `health.check` as a function: app, observed, version, now.
pub type CheckFn = fn(&str, Vec<String>, String, i64) -> Result<HealthReport>;
/// `backup.schedule` as a function: app, observed, last completed slot, now.
pub type ScheduleFn = fn(&str, Vec<String>, Option<String>, i64) -> Result<RawBackupDecision>;
/// `upgrade.gate` as a function: app, observed, from, to, now.
pub type GateFn = fn(&str, Vec<String>, String, String, i64) -> Result<UpgradeDecision>;
/// `finalize.cleanup` as a function: app, retained, now.
pub type CleanupFn = fn(&str, Vec<String>, i64) -> Result<FinalizeDecision>;

/// The exported capabilities as functions, `None` where the plugin does not export one; built
/// by [`export!`](crate::export) from the same list as [`Exported::CAPABILITIES`].
#[derive(Clone, Copy)]
pub struct Native {
    /// `spec-diff`.
    pub plan: Option<PlanFn>,
    /// `health`.
    pub check: Option<CheckFn>,
    /// `backup`.
    pub schedule: Option<ScheduleFn>,
    /// `upgrade`.
    pub gate: Option<GateFn>,
    /// `finalize`.
    pub cleanup: Option<CleanupFn>,
}

impl Native {
    /// No capability.
    pub const NONE: Native = Native {
        plan: None,
        check: None,
        schedule: None,
        gate: None,
        cleanup: None,
    };
}

/// A plan with its objects serialized.
#[derive(Debug, Clone, PartialEq)]
pub struct RawPlan {
    /// One JSON object per planned object.
    pub objects: Vec<String>,
    /// Requeue in milliseconds.
    pub requeue_after_ms: Option<u64>,
}

/// A backup decision with its Job serialized.
#[derive(Debug, Clone, PartialEq)]
pub struct RawBackupDecision {
    /// `(slot, job JSON)` to run.
    pub run: Option<(String, String)>,
    /// Slots to expire.
    pub expire: Vec<String>,
    /// Requeue in milliseconds.
    pub requeue_after_ms: Option<u64>,
}

/// `metadata.get`.
pub fn metadata<P: Exported>() -> Metadata {
    let mut metadata = P::metadata();
    metadata.capabilities = P::CAPABILITIES.to_vec();
    metadata
}

/// `spec-diff.plan`.
pub fn plan<P: SpecDiff>(
    app: &str,
    observed: Vec<String>,
    current_version: Option<String>,
    target_version: String,
    now_ms: i64,
) -> Result<RawPlan> {
    let input = PlanInput {
        app: read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        current_version,
        target_version,
        now: read_now(now_ms)?,
    };
    let (objects, requeue) = P::plan(&input)?.into_parts();
    Ok(RawPlan {
        objects,
        requeue_after_ms: requeue.map(millis),
    })
}

/// `health.check`.
pub fn check<P: Health>(
    app: &str,
    observed: Vec<String>,
    version: String,
    now_ms: i64,
) -> Result<HealthReport> {
    let input = HealthInput {
        app: read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        version,
        now: read_now(now_ms)?,
    };
    P::check(&input)
}

/// `backup.schedule`.
pub fn schedule<P: Backup>(
    app: &str,
    observed: Vec<String>,
    last_completed_slot: Option<String>,
    now_ms: i64,
) -> Result<RawBackupDecision> {
    let last_completed_slot = last_completed_slot
        .map(|s| Slot::parse(&s).map_err(|e| e.with_field("last-completed-slot")))
        .transpose()?;
    let input = BackupInput {
        app: read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        last_completed_slot,
        now: read_now(now_ms)?,
    };
    let decision = P::schedule(&input)?;
    let run = match decision.run {
        Some(run) => Some((run.slot.to_string(), to_json(&run.job)?)),
        None => None,
    };
    Ok(RawBackupDecision {
        run,
        expire: decision.expire.iter().map(Slot::to_string).collect(),
        requeue_after_ms: decision.requeue_after.map(millis),
    })
}

/// `upgrade.gate`.
pub fn gate<P: Upgrade>(
    app: &str,
    observed: Vec<String>,
    from: String,
    to: String,
    now_ms: i64,
) -> Result<UpgradeDecision> {
    let input = UpgradeInput {
        app: read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        from,
        to,
        now: read_now(now_ms)?,
    };
    P::gate(&input)
}

/// `finalize.cleanup`.
pub fn cleanup<P: Finalize>(
    app: &str,
    retained: Vec<String>,
    now_ms: i64,
) -> Result<FinalizeDecision> {
    let input = FinalizeInput {
        app: read_app::<P>(app)?,
        retained: Observed::from_json("retained", retained)?,
        now: read_now(now_ms)?,
    };
    P::cleanup(&input)
}

/// Reads the App and runs the plugin's validation, so no capability ever
/// sees a config that fails it.
fn read_app<P: Plugin>(json: &str) -> Result<App<P::Config>> {
    let app = App::from_json(json).map_err(|e| match e.field() {
        Some(_) => e,
        None => e.with_field("app"),
    })?;
    P::validate(app.config())?;
    Ok(app)
}

fn read_now(now_ms: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(now_ms).ok_or_else(|| {
        Error::invalid_input(format!("{now_ms} ms is out of range")).with_field("now")
    })
}

fn to_json<T: serde::Serialize>(object: &T) -> Result<String> {
    serde_json::to_string(object)
        .map_err(|e| Error::internal(format!("cannot serialize output: {e}")))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
