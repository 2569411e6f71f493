//! What the reflector caches keep of the objects an App's workloads make (Pods, claims): their
//! number follows replicas and claim templates, not the plan's size, and their metadata comes
//! from templates a plugin writes (up to the API server's 256 KiB of annotations each), so a
//! cache holding them whole grows with what a plugin chooses. Only what the host and the
//! SDK's documented observed shape use is kept; the objects a plan applies (owned kinds) are
//! kept whole, bounded by the plan.

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    batch::v1::Job,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, PodSpec, Service, ServiceAccount},
    policy::v1::PodDisruptionBudget,
};

/// Annotation prefixes of a claim that storage controllers write and read (binding,
/// provisioning, resizing); every other annotation is dropped from the cache.
const CLAIM_ANNOTATION_PREFIXES: &[&str] = &[
    "pv.kubernetes.io/",
    "volume.kubernetes.io/",
    "volume.beta.kubernetes.io/",
];

/// Drops from a cached object what neither the host nor a plugin reads.
pub trait Trim {
    /// Trims `self` in place (nothing, for most kinds).
    fn trim(&mut self) {}
}

impl Trim for StatefulSet {}
impl Trim for Deployment {}
impl Trim for Service {}
impl Trim for ConfigMap {}
impl Trim for ServiceAccount {}
impl Trim for PodDisruptionBudget {}
impl Trim for Job {}

/// A Pod keeps its metadata but annotations, its status, its node and its containers' names
/// and images: what a health check reads (readiness, restarts, the version it runs).
impl Trim for Pod {
    fn trim(&mut self) {
        self.metadata.annotations = None;
        if let Some(spec) = self.spec.take() {
            let names_and_images = |containers: Vec<k8s_openapi::api::core::v1::Container>| {
                containers
                    .into_iter()
                    .map(|c| k8s_openapi::api::core::v1::Container {
                        name: c.name,
                        image: c.image,
                        ..Default::default()
                    })
                    .collect()
            };
            self.spec = Some(PodSpec {
                node_name: spec.node_name,
                containers: names_and_images(spec.containers),
                init_containers: spec.init_containers.map(names_and_images),
                ..Default::default()
            });
        }
    }
}

/// A claim keeps everything but the annotations storage controllers do not use.
impl Trim for PersistentVolumeClaim {
    fn trim(&mut self) {
        if let Some(annotations) = self.metadata.annotations.as_mut() {
            annotations.retain(|key, _| {
                CLAIM_ANNOTATION_PREFIXES
                    .iter()
                    .any(|prefix| key.starts_with(prefix))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pods_and_a_claims_bulk_stays_out_of_the_cache() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "kv-0", "labels": {"app": "kv", "version": "7.2"},
                "annotations": {"big": "x".repeat(200_000)}},
            "spec": {"nodeName": "n1", "containers": [{"name": "kv", "image": "kv:7.2",
                "env": [{"name": "BIG", "value": "y".repeat(100_000)}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("a pod");
        pod.trim();
        let kept = serde_json::to_string(&pod).expect("serialises");
        assert!(kept.len() < 1_000, "{} bytes kept", kept.len());
        assert!(
            kept.contains("\"version\":\"7.2\"") && kept.contains("kv:7.2"),
            "{kept}"
        );
        assert!(kept.contains("\"Ready\"") && kept.contains("n1"), "{kept}");

        let mut claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data-kv-0", "labels": {"wasmop.dev/app": "kv"},
                "annotations": {"x": "z".repeat(200_000),
                    "pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        }))
        .expect("a claim");
        claim.trim();
        let annotations = claim.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["pv.kubernetes.io/bind-completed"]
        );
    }
}
