//! The `spec-diff` capability: which objects should exist for an App.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::app::App;
use crate::error::{Error, Result};
use crate::metadata::Plugin;
use crate::observed::Observed;

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
    objects: Vec<Value>,
    requeue_after: Option<Duration>,
}

impl Plan {
    /// An empty plan.
    pub fn new() -> Self {
        Plan::default()
    }

    /// Adds one object. Fails if it has no `metadata.name`, which the host
    /// would reject anyway, so the bug surfaces in the plugin's unit tests.
    pub fn push<K: Resource + Serialize>(&mut self, object: &K) -> Result<&mut Self> {
        let value = serde_json::to_value(object).map_err(|e| {
            Error::internal(format!(
                "cannot serialize a {} {}: {e}",
                K::API_VERSION,
                K::KIND
            ))
        })?;
        let named = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !named {
            return Err(Error::internal(format!(
                "a planned {} {} has no metadata.name",
                K::API_VERSION,
                K::KIND
            )));
        }
        self.objects.push(value);
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

    /// Every planned object, as JSON.
    pub fn objects(&self) -> &[Value] {
        &self.objects
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
            .find(|v| {
                v["apiVersion"] == K::API_VERSION
                    && v["kind"] == K::KIND
                    && v["metadata"]["name"] == name
            })
            .map(|v| K::deserialize(v).map_err(|e| Error::internal(e.to_string())))
            .transpose()
    }

    /// `(apiVersion, kind, name)` of every object, in order; for tests.
    pub fn keys(&self) -> Vec<(String, String, String)> {
        self.objects
            .iter()
            .map(|v| {
                let s = |p: &str| {
                    v.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                (s("/apiVersion"), s("/kind"), s("/metadata/name"))
            })
            .collect()
    }

    // Only the native test harness rebuilds plans from the wire format.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn from_parts(objects: Vec<Value>, requeue_after: Option<Duration>) -> Self {
        Plan {
            objects,
            requeue_after,
        }
    }

    pub(crate) fn into_parts(self) -> (Vec<Value>, Option<Duration>) {
        (self.objects, self.requeue_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
