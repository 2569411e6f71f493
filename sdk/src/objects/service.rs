//! Service builder: the headless Service for peer DNS and the client Service.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Scope;

/// Builds a Service selecting the scope's Pods.
#[derive(Debug, Clone)]
pub struct ServiceBuilder {
    scope: Scope,
    name: String,
    headless: bool,
    ports: Vec<ServicePort>,
    extra_selector: BTreeMap<String, String>,
}

impl ServiceBuilder {
    /// A headless Service (`clusterIP: None`) that also publishes not-ready
    /// Pods, so replicas can find each other while they start.
    pub fn headless(scope: &Scope, name: impl Into<String>) -> Self {
        ServiceBuilder {
            scope: scope.clone(),
            name: name.into(),
            headless: true,
            ports: Vec::new(),
            extra_selector: BTreeMap::new(),
        }
    }

    /// A normal ClusterIP Service for clients; only ready Pods get traffic.
    pub fn cluster_ip(scope: &Scope, name: impl Into<String>) -> Self {
        ServiceBuilder {
            headless: false,
            ..Self::headless(scope, name)
        }
    }

    /// Adds a TCP port, targeting the container port of the same number.
    pub fn port(mut self, name: impl Into<String>, port: i32) -> Self {
        self.ports.push(ServicePort {
            name: Some(name.into()),
            port,
            target_port: Some(IntOrString::Int(port)),
            protocol: Some("TCP".to_string()),
            ..Default::default()
        });
        self
    }

    /// Narrows the selector, e.g. to the primary with
    /// `statefulset.kubernetes.io/pod-name=<name>-0`.
    pub fn select(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_selector.insert(key.into(), value.into());
        self
    }

    /// The Service.
    pub fn build(self) -> Service {
        let mut selector = self.scope.selector();
        selector.extend(self.extra_selector);
        Service {
            metadata: self.scope.metadata(self.name),
            spec: Some(ServiceSpec {
                selector: Some(selector),
                ports: Some(self.ports),
                cluster_ip: self.headless.then(|| "None".to_string()),
                publish_not_ready_addresses: self.headless.then_some(true),
                type_: Some("ClusterIP".to_string()),
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
    fn headless_and_client_services_differ_only_in_addressing() {
        let scope = Scope::new(&app(), "kvstore").with_component("server");
        let headless = ServiceBuilder::headless(&scope, "cache-headless")
            .port("valkey", 6379)
            .build();
        let client = ServiceBuilder::cluster_ip(&scope, "cache")
            .port("valkey", 6379)
            .build();
        let (h, c) = (headless.spec.expect("spec"), client.spec.expect("spec"));
        assert_eq!(h.cluster_ip.as_deref(), Some("None"));
        assert_eq!(h.publish_not_ready_addresses, Some(true));
        assert_eq!(c.cluster_ip, None);
        assert_eq!(c.publish_not_ready_addresses, None);
        assert_eq!(h.selector, c.selector);
        assert_eq!(c.ports.expect("ports")[0].port, 6379);
    }

    #[test]
    fn select_narrows_only_the_selector() {
        let scope = Scope::new(&app(), "kvstore");
        let svc = ServiceBuilder::cluster_ip(&scope, "cache")
            .select("statefulset.kubernetes.io/pod-name", "cache-0")
            .build();
        let selector = svc.spec.and_then(|s| s.selector).expect("selector");
        assert_eq!(selector["statefulset.kubernetes.io/pod-name"], "cache-0");
        assert!(
            !svc.metadata
                .labels
                .expect("labels")
                .contains_key("statefulset.kubernetes.io/pod-name")
        );
    }
}
