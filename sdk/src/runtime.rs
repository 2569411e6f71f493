//! The boundary between the WIT's raw values (JSON text, milliseconds) and the
//! typed traits, shared by the component exports and by [`testing`](crate::testing), so
//! unit tests exercise the same parsing and serialization as the host. Each capability's own
//! function lives beside its trait (e.g. [`crate::health::check`]); here is what they share.

use std::{any::Any, time::Duration};

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::error::{Error, Result};
use crate::metadata::{ApiVersion, Capability, Metadata, Plugin};

/// Implemented by [`export!`](crate::export) for the plugin type: the
/// capabilities it was exported with, reported by `metadata.get`.
pub trait Exported: Plugin {
    /// Exactly the capability interfaces the component exports.
    const CAPABILITIES: &'static [Capability];
    /// The same capabilities as plain functions, for native runs of the whole reconcile
    /// ([`Fixture::reconcile`](crate::testing::Fixture::reconcile)).
    const NATIVE: Native;

    /// The API versions of a bound kind the plugin knows, for `metadata.get`: those of
    /// [`Convert`](crate::Convert) when it is exported ([`crate::convert::versions`]), none
    /// otherwise.
    fn versions() -> Vec<ApiVersion> {
        Vec::new()
    }
}

/// The exported capabilities as functions: each capability's WIT function as its module
/// declares it (e.g. [`CheckFn`](crate::health::CheckFn) for `health`), by capability. Built by
/// [`export!`](crate::export) from the same list as [`Exported::CAPABILITIES`].
#[derive(Clone, Copy)]
pub struct Native(pub &'static [(Capability, &'static (dyn Any + Send + Sync))]);

impl Native {
    /// No capability.
    pub const NONE: Native = Native(&[]);

    /// The function of `capability`, as type `F`; `None` when the plugin does not export it.
    pub fn function<F: Copy + 'static>(&self, capability: Capability) -> Option<F> {
        let (_, function) = self.0.iter().find(|(c, _)| *c == capability)?;
        function.downcast_ref::<F>().copied()
    }
}

/// `metadata.get`.
pub fn metadata<P: Exported>() -> Metadata {
    let mut metadata = P::metadata();
    metadata.capabilities = P::CAPABILITIES.to_vec();
    metadata.config_schema = crate::metadata::config_schema::<P::Config>();
    metadata.versions = P::versions();
    metadata
}

/// Reads the App and runs the plugin's validation, so no capability ever
/// sees a config that fails it.
pub(crate) fn read_app<P: Plugin>(json: &str) -> Result<App<P::Config>> {
    let app = App::from_json(json).map_err(|e| match e.field() {
        Some(_) => e,
        None => e.with_field("app"),
    })?;
    P::validate(app.config()).map_err(|e| app.locate(e))?;
    Ok(app)
}

pub(crate) fn read_now(now_ms: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(now_ms).ok_or_else(|| {
        Error::invalid_input(format!("{now_ms} ms is out of range")).with_field("now")
    })
}

pub(crate) fn to_json<T: serde::Serialize>(object: &T) -> Result<String> {
    serde_json::to_string(object)
        .map_err(|e| Error::internal(format!("cannot serialize output: {e}")))
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
