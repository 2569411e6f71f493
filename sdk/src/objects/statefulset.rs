//! StatefulSet builder: stable identities and one PVC per replica.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Affinity, Container, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm,
    PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Volume,
    VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::Scope;

/// Builds a StatefulSet whose selector, Pod template and volume claim
/// templates carry the scope's labels.
///
/// The claim templates are labelled too: Kubernetes copies those labels onto
/// the PVCs it creates, which is how the host finds them for `finalize`
/// (PVCs have no owner reference to the App).
#[derive(Debug, Clone)]
pub struct StatefulSetBuilder {
    scope: Scope,
    name: String,
    replicas: i32,
    service_name: String,
    containers: Vec<Container>,
    init_containers: Vec<Container>,
    volumes: Vec<Volume>,
    claims: Vec<PersistentVolumeClaim>,
    pod_annotations: BTreeMap<String, String>,
    termination_grace_period_seconds: Option<i64>,
    security_context: Option<PodSecurityContext>,
    service_account: Option<String>,
    parallel: bool,
    spread: bool,
}

impl StatefulSetBuilder {
    /// A StatefulSet named `name` with one replica; its governing Service
    /// defaults to `name` too.
    pub fn new(scope: &Scope, name: impl Into<String>) -> Self {
        let name = name.into();
        StatefulSetBuilder {
            scope: scope.clone(),
            service_name: name.clone(),
            name,
            replicas: 1,
            containers: Vec::new(),
            init_containers: Vec::new(),
            volumes: Vec::new(),
            claims: Vec::new(),
            pod_annotations: BTreeMap::new(),
            termination_grace_period_seconds: None,
            security_context: None,
            service_account: None,
            parallel: false,
            spread: false,
        }
    }

    /// Number of replicas.
    pub fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    /// The headless Service that gives Pods their DNS names.
    pub fn service_name(mut self, service: impl Into<String>) -> Self {
        self.service_name = service.into();
        self
    }

    /// Adds a container.
    pub fn container(mut self, container: Container) -> Self {
        self.containers.push(container);
        self
    }

    /// Adds an init container.
    pub fn init_container(mut self, container: Container) -> Self {
        self.init_containers.push(container);
        self
    }

    /// Adds a Pod volume (ConfigMaps, emptyDirs).
    pub fn volume(mut self, volume: Volume) -> Self {
        self.volumes.push(volume);
        self
    }

    /// Adds a ReadWriteOnce volume claim template of `size` (e.g. `1Gi`);
    /// `storage_class` none means the cluster default.
    pub fn volume_claim(
        mut self,
        name: impl Into<String>,
        size: &str,
        storage_class: Option<&str>,
    ) -> Self {
        self.claims.push(PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(self.scope.selector()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".to_string()]),
                storage_class_name: storage_class.map(str::to_owned),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(size.to_string()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }

    /// Adds a Pod template annotation; a hash of the config here rolls the
    /// Pods when the config changes.
    pub fn pod_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.pod_annotations.insert(key.into(), value.into());
        self
    }

    /// Seconds Pods get to shut down cleanly.
    pub fn termination_grace_period_seconds(mut self, seconds: i64) -> Self {
        self.termination_grace_period_seconds = Some(seconds);
        self
    }

    /// Runs the Pods as `name`, a ServiceAccount the same plan creates (the host refuses any
    /// other); without it they get no ServiceAccount token.
    pub fn service_account(mut self, name: impl Into<String>) -> Self {
        self.service_account = Some(name.into());
        self
    }

    /// Pod security context.
    pub fn security_context(mut self, context: PodSecurityContext) -> Self {
        self.security_context = Some(context);
        self
    }

    /// Start and stop Pods in parallel instead of one by one.
    pub fn parallel_pod_management(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// Prefer spreading replicas over nodes (soft anti-affinity by hostname).
    pub fn spread_across_nodes(mut self, spread: bool) -> Self {
        self.spread = spread;
        self
    }

    /// The StatefulSet.
    pub fn build(self) -> StatefulSet {
        let selector = self.scope.selector();
        let affinity = self.spread.then(|| Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            topology_key: "kubernetes.io/hostname".to_string(),
                            label_selector: Some(LabelSelector {
                                match_labels: Some(selector.clone()),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut built = StatefulSet {
            metadata: self.scope.metadata(self.name),
            spec: StatefulSetSpec {
                replicas: Some(self.replicas),
                service_name: Some(self.service_name),
                selector: LabelSelector {
                    match_labels: Some(selector),
                    ..Default::default()
                },
                pod_management_policy: Some(
                    if self.parallel {
                        "Parallel"
                    } else {
                        "OrderedReady"
                    }
                    .to_string(),
                ),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some("RollingUpdate".to_string()),
                    ..Default::default()
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.scope.labels()),
                        annotations: (!self.pod_annotations.is_empty())
                            .then_some(self.pod_annotations),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: self.containers,
                        init_containers: non_empty(self.init_containers),
                        volumes: non_empty(self.volumes),
                        termination_grace_period_seconds: self.termination_grace_period_seconds,
                        security_context: self.security_context,
                        service_account_name: self.service_account,
                        affinity,
                        ..Default::default()
                    }),
                },
                volume_claim_templates: non_empty(self.claims),
                ..Default::default()
            },
            status: None,
        };
        if let Some(pod) = built.spec.template.spec.as_mut() {
            super::harden(pod);
        }
        built
    }
}

/// Empty lists are left out, so the applied object stays minimal and
/// server-side apply does not claim ownership of empty fields.
fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::tests::app;
    use crate::objects::{APP_LABEL, VERSION_LABEL};

    #[test]
    fn selector_matches_template_and_claims_are_labelled() {
        let scope = Scope::new(&app(), "kvstore")
            .with_component("server")
            .with_version("7.2.4");
        let sts = StatefulSetBuilder::new(&scope, "cache")
            .replicas(3)
            .service_name("cache-headless")
            .container(Container {
                name: "valkey".into(),
                ..Default::default()
            })
            .volume_claim("data", "1Gi", None)
            .spread_across_nodes(true)
            .build();
        let spec = sts.spec;
        let selector = spec.selector.match_labels.expect("labels");
        let template_labels = spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .expect("labels");
        assert!(
            selector
                .iter()
                .all(|(k, v)| template_labels.get(k) == Some(v))
        );
        assert_eq!(template_labels[VERSION_LABEL], "7.2.4");
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.service_name.as_deref(), Some("cache-headless"));
        let claims = spec.volume_claim_templates.expect("claims");
        let claim_labels = claims[0].metadata.labels.as_ref().expect("labels");
        assert_eq!(claim_labels[APP_LABEL], "cache");
        assert!(
            !claim_labels.contains_key(VERSION_LABEL),
            "PVC labels must not churn"
        );
        let pod = spec.template.spec.expect("pod");
        assert!(pod.affinity.is_some());
        assert!(pod.volumes.is_none(), "empty lists are left out");
    }
}
