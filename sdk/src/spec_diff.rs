//! The `spec-diff` capability: which objects should exist for an App.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::app::App;
use crate::error::{Error, Result};
use crate::metadata::Plugin;
use crate::observed::Observed;
use crate::runtime;

/// Plans the objects of an App. Called on every reconcile.
pub trait SpecDiff: Plugin {
    /// Returns every object that should exist now. Must be deterministic:
    /// the same input gives the same plan.
    fn plan(input: &PlanInput<Self::Config>) -> Result<Plan>;
}

/// What a plan depends on.
#[derive(Debug, Clone)]
pub struct PlanInput<C> {
    /// The App, config typed.
    pub app: App<C>,
    /// Objects that exist now.
    pub observed: Observed,
    /// `status.version`: the rolled-out version, none before the first
    /// rollout completed.
    pub current_version: Option<String>,
    /// The version to render. Differs from `app.spec.version` while the
    /// upgrade gate holds a rollout.
    pub target_version: String,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

/// The desired objects, serialized as they are added.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    objects: Vec<Planned>,
    requeue_after: Option<Duration>,
}

/// One planned object: its key and its JSON text.
#[derive(Debug, Clone, PartialEq)]
struct Planned {
    api_version: String,
    kind: String,
    name: String,
    json: String,
}

impl Plan {
    /// An empty plan.
    pub fn new() -> Self {
        Plan::default()
    }

    /// Adds one object. Fails if it has no `metadata.name`, which the host
    /// would reject anyway, so the bug surfaces in the plugin's unit tests.
    ///
    /// The object is serialized straight to text, once: no intermediate
    /// `serde_json::Value` (building and re-serializing one was a third of
    /// a plan call, measured).
    pub fn push<K>(&mut self, object: &K) -> Result<&mut Self>
    where
        K: Resource + Metadata<Ty = ObjectMeta> + Serialize,
    {
        let name = object.metadata().name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(Error::internal(format!(
                "a planned {} {} has no metadata.name",
                K::API_VERSION,
                K::KIND
            )));
        }
        let json = serde_json::to_string(object).map_err(|e| {
            Error::internal(format!(
                "cannot serialize {} {} {name}: {e}",
                K::API_VERSION,
                K::KIND
            ))
        })?;
        self.objects.push(Planned {
            api_version: K::API_VERSION.to_string(),
            kind: K::KIND.to_string(),
            name,
            json,
        });
        Ok(self)
    }

    /// Asks the host to reconcile again after `after`.
    pub fn requeue_after(&mut self, after: Duration) -> &mut Self {
        self.requeue_after = Some(after);
        self
    }

    /// The requested requeue, if any.
    pub fn requeue(&self) -> Option<Duration> {
        self.requeue_after
    }

    /// Every planned object as the JSON text the host receives.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.objects.iter().map(|o| o.json.as_str())
    }

    /// Every planned object parsed back into JSON values; for tests.
    ///
    /// # Panics
    /// Never for a plan built with [`Plan::push`], whose texts are JSON.
    pub fn objects(&self) -> Vec<Value> {
        self.texts()
            .map(|text| serde_json::from_str(text).expect("planned objects are JSON"))
            .collect()
    }

    /// Number of planned objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is planned.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The planned object of kind `K` named `name`, typed; for tests.
    pub fn get<K: Resource + DeserializeOwned>(&self, name: &str) -> Result<Option<K>> {
        self.objects
            .iter()
            .find(|o| o.api_version == K::API_VERSION && o.kind == K::KIND && o.name == name)
            .map(|o| serde_json::from_str(&o.json).map_err(|e| Error::internal(e.to_string())))
            .transpose()
    }

    /// `(apiVersion, kind, name)` of every object, in order; for tests.
    pub fn keys(&self) -> Vec<(String, String, String)> {
        self.objects
            .iter()
            .map(|o| (o.api_version.clone(), o.kind.clone(), o.name.clone()))
            .collect()
    }

    /// Rebuilds a plan from the wire format; only the native test harness
    /// needs to.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn from_parts(texts: Vec<String>, requeue_after: Option<Duration>) -> Result<Self> {
        let objects = texts
            .into_iter()
            .map(|json| {
                let value: Value =
                    serde_json::from_str(&json).map_err(|e| Error::internal(e.to_string()))?;
                let text = |pointer: &str| {
                    value
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                Ok(Planned {
                    api_version: text("/apiVersion"),
                    kind: text("/kind"),
                    name: text("/metadata/name"),
                    json,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Plan {
            objects,
            requeue_after,
        })
    }

    /// The objects' texts and the requeue, for the wire.
    pub(crate) fn into_parts(self) -> (Vec<String>, Option<Duration>) {
        (
            self.objects.into_iter().map(|o| o.json).collect(),
            self.requeue_after,
        )
    }
}

/// A plan with its objects serialized.
#[derive(Debug, Clone, PartialEq)]
pub struct RawPlan {
    /// One JSON object per planned object.
    pub objects: Vec<String>,
    /// Requeue in milliseconds.
    pub requeue_after_ms: Option<u64>,
}

/// `spec-diff.plan` as a function: app, observed, current version, target version, now.
pub type PlanFn = fn(&str, Vec<String>, Option<String>, String, i64) -> Result<RawPlan>;

/// `spec-diff.plan`, on the WIT's raw values.
pub fn plan<P: SpecDiff>(
    app: &str,
    observed: Vec<String>,
    current_version: Option<String>,
    target_version: String,
    now_ms: i64,
) -> Result<RawPlan> {
    let input = PlanInput {
        app: runtime::read_app::<P>(app)?,
        observed: Observed::from_json("observed", observed)?,
        current_version,
        target_version,
        now: runtime::read_now(now_ms)?,
    };
    let (objects, requeue) = P::plan(&input)
        .map_err(|e| input.app.locate(e))?
        .into_parts();
    Ok(RawPlan {
        objects,
        requeue_after_ms: requeue.map(runtime::millis),
    })
}

/// `spec-diff.plan` run natively: its answer held to the host's rules, and the decision core's
/// call answered by the plugin's Rust code.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native {
    use std::time::Duration;

    use wasmop_core::{
        answers::{self, AnswerError, DEFAULT_MAX_OUTPUT_BYTES},
        decide::PlanCall,
    };

    use super::{PlanFn, RawPlan};
    use crate::{error::Error, testing::NativeCall};

    /// The answer, checked.
    pub(crate) fn checked(raw: &RawPlan) -> Result<answers::Plan, AnswerError> {
        answers::check_plan(
            &raw.objects,
            raw.requeue_after_ms.map(Duration::from_millis),
            DEFAULT_MAX_OUTPUT_BYTES,
        )
    }

    impl NativeCall for PlanCall {
        type Function = PlanFn;

        fn call(
            self,
            plan: PlanFn,
            app: &str,
            observed: Vec<String>,
            now_ms: i64,
        ) -> Result<Result<answers::Plan, AnswerError>, Error> {
            let raw = plan(app, observed, self.current, self.target, now_ms)?;
            Ok(checked(&raw))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: name.map(str::to_owned),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn push_serializes_with_api_version_and_kind() {
        let mut plan = Plan::new();
        plan.push(&cm(Some("conf"))).expect("named");
        assert_eq!(
            plan.keys(),
            [("v1".into(), "ConfigMap".into(), "conf".into())]
        );
        let back: ConfigMap = plan.get("conf").expect("typed").expect("present");
        assert_eq!(back.metadata.name.as_deref(), Some("conf"));
    }

    #[test]
    fn unnamed_objects_are_rejected() {
        let err = Plan::new()
            .push(&cm(None))
            .map(|_| ())
            .expect_err("no name");
        assert_eq!(err.kind(), crate::ErrorKind::Internal);
        assert!(err.message().contains("v1 ConfigMap"), "{err}");
    }
}
