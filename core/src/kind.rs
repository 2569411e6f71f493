//! Kinds as the guard knows them, and the built-in kinds every plan may hold ([`plannable`]).
//!
//! The host's kind table (`host/src/controller/kinds.rs`: reflector caches, observation,
//! triggers) names its rows with these constants, so a plannable kind is written once; the
//! table's test holds that every plannable kind is watched.

use std::borrow::Cow;

/// A kind: its group, version, name and resource (plural).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind {
    /// API group, empty for the core group.
    pub group: Cow<'static, str>,
    /// API version within the group.
    pub version: Cow<'static, str>,
    /// Kind name.
    pub kind: Cow<'static, str>,
    /// Resource (plural) name.
    pub plural: Cow<'static, str>,
}

impl Kind {
    /// A kind known at compile time.
    pub const fn builtin(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
    ) -> Self {
        Self {
            group: Cow::Borrowed(group),
            version: Cow::Borrowed(version),
            kind: Cow::Borrowed(kind),
            plural: Cow::Borrowed(plural),
        }
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether an object of `api_version` and `kind` is of this kind (no allocation: the guard
    /// asks for every object of every plan). Only the canonical spelling matches: `v1` for the
    /// core group, `group/version` otherwise. The API server also reads `/v1` as `v1`, but every
    /// rule of the guard that looks at a kind compares the canonical string, so a spelling it
    /// does not know would pass them by.
    pub fn is_kind_of(&self, api_version: &str, kind: &str) -> bool {
        self.kind == kind
            && match api_version.split_once('/') {
                Some((group, version)) => {
                    !self.group.is_empty() && self.group == group && self.version == version
                }
                None => self.group.is_empty() && self.version == api_version,
            }
    }
}

/// `apps/v1` StatefulSet.
pub const STATEFUL_SET: Kind = Kind::builtin("apps", "v1", "StatefulSet", "statefulsets");
/// `apps/v1` Deployment.
pub const DEPLOYMENT: Kind = Kind::builtin("apps", "v1", "Deployment", "deployments");
/// `v1` Service.
pub const SERVICE: Kind = Kind::builtin("", "v1", "Service", "services");
/// `v1` ConfigMap.
pub const CONFIG_MAP: Kind = Kind::builtin("", "v1", "ConfigMap", "configmaps");
/// `v1` ServiceAccount.
pub const SERVICE_ACCOUNT: Kind = Kind::builtin("", "v1", "ServiceAccount", "serviceaccounts");
/// `policy/v1` PodDisruptionBudget.
pub const POD_DISRUPTION_BUDGET: Kind = Kind::builtin(
    "policy",
    "v1",
    "PodDisruptionBudget",
    "poddisruptionbudgets",
);
/// `batch/v1` Job.
pub const JOB: Kind = Kind::builtin("batch", "v1", "Job", "jobs");
/// `v1` PersistentVolumeClaim.
pub const PERSISTENT_VOLUME_CLAIM: Kind =
    Kind::builtin("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims");

/// What a plan may contain under every policy, in the order a refusal lists them. A planned
/// PersistentVolumeClaim (say, for backups) is applied but never pruned: claims are deleted
/// only through `finalize`. Further kinds only as a policy adds them
/// ([`PlanPolicy::extra_kinds`](crate::guard::PlanPolicy::extra_kinds)); RBAC, wasmop's own
/// kinds and cluster-scoped objects never.
pub const PLANNABLE: &[Kind] = &[
    STATEFUL_SET,
    DEPLOYMENT,
    SERVICE,
    CONFIG_MAP,
    SERVICE_ACCOUNT,
    POD_DISRUPTION_BUDGET,
    JOB,
    PERSISTENT_VOLUME_CLAIM,
];

/// The kinds of [`PLANNABLE`].
pub fn plannable<'a>() -> impl Iterator<Item = &'a Kind> + Clone {
    PLANNABLE.iter()
}
