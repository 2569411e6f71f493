//! Job builder, including backup Jobs labelled with their slot.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSecurityContext, PodSpec, PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{SLOT_LABEL, Scope};
use crate::backup::Slot;

/// Builds a run-to-completion Job whose Pods carry the scope's labels.
#[derive(Debug, Clone)]
pub struct JobBuilder {
    scope: Scope,
    name: String,
    extra_labels: BTreeMap<String, String>,
    containers: Vec<Container>,
    volumes: Vec<Volume>,
    backoff_limit: i32,
    active_deadline_seconds: Option<i64>,
    ttl_seconds_after_finished: Option<i32>,
    security_context: Option<PodSecurityContext>,
    service_account: Option<String>,
}

impl JobBuilder {
    /// A Job named `name`: `restartPolicy: Never`, two retries.
    pub fn new(scope: &Scope, name: impl Into<String>) -> Self {
        JobBuilder {
            scope: scope.clone(),
            name: name.into(),
            extra_labels: BTreeMap::new(),
            containers: Vec::new(),
            volumes: Vec::new(),
            backoff_limit: 2,
            active_deadline_seconds: None,
            ttl_seconds_after_finished: None,
            security_context: None,
            service_account: None,
        }
    }

    /// A backup Job for `slot`: component `backup`, named
    /// `<app>-backup-<slot>` (the host renames it the same way) and labelled
    /// `wasmop.dev/backup-slot=<slot>`.
    pub fn backup(scope: &Scope, slot: &Slot) -> Self {
        let scope = scope.with_component("backup");
        let name = scope.child_name(&format!("backup-{slot}"));
        let mut builder = JobBuilder::new(&scope, name);
        builder
            .extra_labels
            .insert(SLOT_LABEL.to_string(), slot.to_string());
        builder
    }

    /// Adds a container.
    pub fn container(mut self, container: Container) -> Self {
        self.containers.push(container);
        self
    }

    /// Adds a Pod volume. The host's guard lets a pod mount only the App's own claims (for a
    /// backup Job: those labelled with the App or in the same reconcile's plan) and refuses
    /// Secret-bearing volumes unless the namespace's policy allows Secrets.
    pub fn volume(mut self, volume: Volume) -> Self {
        self.volumes.push(volume);
        self
    }

    /// Retries before the Job is failed.
    pub fn backoff_limit(mut self, retries: i32) -> Self {
        self.backoff_limit = retries;
        self
    }

    /// Fail the Job if it runs longer than this.
    pub fn active_deadline_seconds(mut self, seconds: i64) -> Self {
        self.active_deadline_seconds = Some(seconds);
        self
    }

    /// Let Kubernetes delete the finished Job after this long. Leave unset
    /// for backup Jobs: the host reads finished ones to know the last slot,
    /// and retention expires them.
    pub fn ttl_seconds_after_finished(mut self, seconds: i32) -> Self {
        self.ttl_seconds_after_finished = Some(seconds);
        self
    }

    /// Runs the Pods as `name`, a ServiceAccount the same plan creates (the host refuses any
    /// other); without it they get no ServiceAccount token.
    pub fn service_account(mut self, name: impl Into<String>) -> Self {
        self.service_account = Some(name.into());
        self
    }

    /// Pod security context (user, fsGroup for volume permissions).
    pub fn security_context(mut self, context: PodSecurityContext) -> Self {
        self.security_context = Some(context);
        self
    }

    /// The Job.
    pub fn build(self) -> Job {
        let mut labels = self.scope.labels();
        labels.extend(self.extra_labels);
        let mut metadata = self.scope.metadata(self.name);
        metadata.labels = Some(labels.clone());
        let mut built = Job {
            metadata,
            spec: Some(JobSpec {
                backoff_limit: Some(self.backoff_limit),
                active_deadline_seconds: self.active_deadline_seconds,
                ttl_seconds_after_finished: self.ttl_seconds_after_finished,
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        restart_policy: Some("Never".to_string()),
                        containers: self.containers,
                        volumes: (!self.volumes.is_empty()).then_some(self.volumes),
                        security_context: self.security_context,
                        service_account_name: self.service_account,
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            status: None,
        };
        let pod = built.spec.as_mut().and_then(|s| s.template.spec.as_mut());
        if let Some(pod) = pod {
            super::harden(pod);
        }
        built
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::tests::app;
    use crate::objects::{APP_LABEL, COMPONENT_LABEL};

    #[test]
    fn backup_jobs_carry_slot_and_component() {
        let scope = Scope::new(&app(), "kvstore").with_component("server");
        let slot = Slot::parse("20250101-060000").expect("slot");
        let job = JobBuilder::backup(&scope, &slot).build();
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("cache-backup-20250101-060000")
        );
        let labels = job.metadata.labels.expect("labels");
        assert_eq!(labels[SLOT_LABEL], "20250101-060000");
        assert_eq!(labels[COMPONENT_LABEL], "backup");
        assert_eq!(labels[APP_LABEL], "cache");
        let spec = job.spec.expect("spec");
        let pod_labels = spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .expect("labels");
        assert_eq!(
            pod_labels[COMPONENT_LABEL], "backup",
            "not selected by the server"
        );
        assert_eq!(
            spec.template.spec.and_then(|p| p.restart_policy).as_deref(),
            Some("Never")
        );
        assert_eq!(spec.ttl_seconds_after_finished, None);
    }
}
