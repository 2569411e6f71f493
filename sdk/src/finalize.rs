//! The `finalize` capability: what happens to retained objects (PVCs) on deletion.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};

use crate::app::App;
use crate::error::Result;
use crate::metadata::Plugin;
use crate::observed::Observed;

/// Decides about objects that outlive the App.
pub trait Finalize: Plugin {
    /// Lists which retained objects to delete and which to keep. Objects in
    /// neither list are kept.
    fn cleanup(input: &FinalizeInput<Self::Config>) -> Result<FinalizeDecision>;
}

/// The objects left behind.
#[derive(Debug, Clone)]
pub struct FinalizeInput<C> {
    /// The App being deleted, config typed.
    pub app: App<C>,
    /// Objects labelled with the App but not owned by it (typically PVCs).
    pub retained: Observed,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

/// Names one object in the App's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `PersistentVolumeClaim`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectRef {
    /// The object of kind `K` named `name`.
    pub fn of<K: Resource>(name: impl Into<String>) -> Self {
        ObjectRef {
            api_version: K::API_VERSION.to_string(),
            kind: K::KIND.to_string(),
            name: name.into(),
        }
    }

    /// A reference to `object`.
    pub fn to<K: Resource + Metadata<Ty = ObjectMeta>>(object: &K) -> Self {
        Self::of::<K>(object.metadata().name.clone().unwrap_or_default())
    }
}

/// What to do with the retained objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalizeDecision {
    /// Deleted before the host removes its finalizer.
    pub delete: Vec<ObjectRef>,
    /// Left in place.
    pub keep: Vec<ObjectRef>,
}
