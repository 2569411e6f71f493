//! PodDisruptionBudget builder: limits voluntary evictions during drains.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Scope;

/// Builds a PodDisruptionBudget over the scope's Pods; `maxUnavailable: 1`
/// unless told otherwise.
#[derive(Debug, Clone)]
pub struct PdbBuilder {
    scope: Scope,
    name: String,
    max_unavailable: Option<IntOrString>,
    min_available: Option<IntOrString>,
}

impl PdbBuilder {
    /// A budget named `name` allowing one Pod down at a time.
    pub fn new(scope: &Scope, name: impl Into<String>) -> Self {
        PdbBuilder {
            scope: scope.clone(),
            name: name.into(),
            max_unavailable: Some(IntOrString::Int(1)),
            min_available: None,
        }
    }

    /// At most `n` Pods evicted at once (replaces any `min_available`).
    pub fn max_unavailable(mut self, n: i32) -> Self {
        self.max_unavailable = Some(IntOrString::Int(n));
        self.min_available = None;
        self
    }

    /// At least `n` Pods kept (replaces any `max_unavailable`).
    pub fn min_available(mut self, n: i32) -> Self {
        self.min_available = Some(IntOrString::Int(n));
        self.max_unavailable = None;
        self
    }

    /// The PodDisruptionBudget.
    pub fn build(self) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: self.scope.metadata(self.name),
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(self.scope.selector()),
                    ..Default::default()
                }),
                max_unavailable: self.max_unavailable,
                min_available: self.min_available,
                ..Default::default()
            }),
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::tests::app;

    #[test]
    fn defaults_to_one_unavailable_and_options_are_exclusive() {
        let scope = Scope::new(&app(), "kvstore");
        let spec = PdbBuilder::new(&scope, "cache").build().spec.expect("spec");
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(spec.min_available, None);
        let spec = PdbBuilder::new(&scope, "cache")
            .min_available(2)
            .build()
            .spec
            .expect("spec");
        assert_eq!(spec.max_unavailable, None);
        assert_eq!(spec.min_available, Some(IntOrString::Int(2)));
    }
}
