//! Slim read-only views of observed objects: only the fields kvstore reads.
//!
//! Reading a Pod or StatefulSet as the full k8s-openapi type compiles the
//! deserializers of the whole `PodSpec` tree into the component; these views
//! keep the release component well under its size budget (see
//! `Observed::all_as` in the SDK). Unknown fields are skipped.

use serde::Deserialize;
use wasmop_sdk::StatusView;
use wasmop_sdk::k8s_openapi::api::apps::v1::StatefulSetStatus;
use wasmop_sdk::k8s_openapi::api::core::v1::PodStatus;
use wasmop_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasmop_sdk::objects::VERSION_LABEL;

/// A Pod's metadata and status.
pub type PodView = StatusView<PodStatus>;

/// A StatefulSet's metadata, status and Pod template labels.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StatefulSetView {
    /// `metadata`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The part of `spec` kvstore reads.
    #[serde(default)]
    pub spec: SpecView,
    /// `status`.
    #[serde(default)]
    pub status: Option<StatefulSetStatus>,
}

/// `spec.template.metadata` only.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SpecView {
    /// `spec.template`.
    #[serde(default)]
    pub template: TemplateView,
}

/// `template.metadata` only.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TemplateView {
    /// `template.metadata`.
    #[serde(default)]
    pub metadata: Option<ObjectMeta>,
}

impl StatefulSetView {
    /// The version label of the Pod template: what new Pods will run.
    pub fn template_version(&self) -> Option<&str> {
        self.spec
            .template
            .metadata
            .as_ref()?
            .labels
            .as_ref()?
            .get(VERSION_LABEL)
            .map(String::as_str)
    }
}
