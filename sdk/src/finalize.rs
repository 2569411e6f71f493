//! The `finalize` capability: what happens to retained objects (PVCs) on deletion.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};

use crate::app::App;
use crate::error::Result;
use crate::metadata::Plugin;
use crate::observed::Observed;
use crate::runtime;

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

/// `finalize.cleanup` as a function: app, retained, now.
pub type CleanupFn = fn(&str, Vec<String>, i64) -> Result<FinalizeDecision>;

/// `finalize.cleanup`, on the WIT's raw values.
pub fn cleanup<P: Finalize>(
    app: &str,
    retained: Vec<String>,
    now_ms: i64,
) -> Result<FinalizeDecision> {
    let input = FinalizeInput {
        app: runtime::read_app::<P>(app)?,
        retained: Observed::from_json("retained", retained)?,
        now: runtime::read_now(now_ms)?,
    };
    P::cleanup(&input).map_err(|e| input.app.locate(e))
}

/// `finalize.cleanup` run natively: its answer held to the host's rules, and the decision core's
/// call answered by the plugin's Rust code.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native {
    use wasmop_core::{
        answers::{self, AnswerError, CleanupDecision, DEFAULT_MAX_OUTPUT_BYTES},
        deletion::CleanupCall,
    };

    use super::{CleanupFn, FinalizeDecision, ObjectRef};
    use crate::{error::Error, testing::NativeCall};

    /// The answer, checked.
    pub(crate) fn checked(decision: &FinalizeDecision) -> Result<CleanupDecision, AnswerError> {
        let refs = |refs: &[ObjectRef]| {
            refs.iter()
                .map(|r| answers::ObjectRef {
                    api_version: r.api_version.clone(),
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                })
                .collect()
        };
        let checked = CleanupDecision {
            delete: refs(&decision.delete),
            keep: refs(&decision.keep),
        };
        answers::check_cleanup(&checked, DEFAULT_MAX_OUTPUT_BYTES)?;
        Ok(checked)
    }

    impl NativeCall for CleanupCall {
        type Function = CleanupFn;

        fn call(
            self,
            cleanup: CleanupFn,
            app: &str,
            retained: Vec<String>,
            now_ms: i64,
        ) -> Result<Result<CleanupDecision, AnswerError>, Error> {
            let decision = cleanup(app, retained, now_ms)?;
            Ok(checked(&decision))
        }
    }
}
