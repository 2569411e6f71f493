//! `PluginPolicy` (`pluginpolicies.wasmop.dev/v1alpha1`, cluster-scoped): the cluster admin's
//! bounds for the plugins of the namespaces it selects, and [`resolve`], which picks the policy
//! that governs one namespace.
//!
//! Which policy governs a namespace, most specific first:
//! 1. a policy that names it in `spec.namespaces`;
//! 2. a policy whose `spec.namespaceSelector` selects it, the one with the most requirements
//!    (`matchLabels` entries plus `matchExpressions`) first;
//! 3. with none, the built-in default ([`Rules::default`]: restricted, the built-in kinds, no
//!    Secrets, ClusterIP Services, plugins from anywhere).
//!
//! A policy's [`Rules`] are its plan rules ([`PlanPolicy`], the decision core's guard, which
//! `wasmop plugin run` and the SDK's `Fixture` apply too) and its source rules
//! ([`SourcePolicy`], where plugins may come from, the host's alone).
//!
//! Ties are broken by policy name (alphabetical) and reported in the losing policy's status
//! (`Overlapping`). [`PROTECTED_NAMESPACES`] and the host's own namespace are never governed by
//! a selector or the default: Apps there are refused unless a policy names the namespace.

pub(crate) mod selector;
pub(crate) mod view;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use wasmop_core::{
    guard::{self, PlanPolicy},
    kind::{Kind, plannable},
    pod_security::Level,
};

use crate::plugin::{
    limits::MAX_COMPONENT_BYTES,
    source::{OciRules, SourcePolicy, TrustedKey},
};

/// The host's rules for the plugins of one namespace: what they may plan and where they may
/// come from. The default is the built-in default policy's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// What plans may hold: the guard's rules.
    pub plan: PlanPolicy,
    /// Where plugins may come from.
    pub source: SourcePolicy,
}

/// Namespaces that belong to the cluster: an App there is refused unless a policy names the
/// namespace explicitly (the host adds its own namespace).
pub const PROTECTED_NAMESPACES: &[&str] = &["kube-system", "kube-public", "kube-node-lease"];

/// Bounds for the plugins of the namespaces a policy selects.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "wasmop.dev",
    version = "v1alpha1",
    kind = "PluginPolicy",
    status = "PluginPolicyStatus",
    shortname = "wpp",
    category = "wasmop",
    printcolumn = r#"{"name":"PodSecurity","type":"string","jsonPath":".spec.podSecurity"}"#,
    printcolumn = r#"{"name":"Secrets","type":"boolean","jsonPath":".spec.allowSecrets"}"#,
    printcolumn = r#"{"name":"Namespaces","type":"integer","jsonPath":".status.namespaceCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PluginPolicySpec {
    /// Namespaces governed by name. Naming a namespace wins over every selector, and is the
    /// only way to allow Apps in kube-system, kube-public, kube-node-lease or the host's own
    /// namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces governed by label. An empty selector (`{}`) selects every namespace;
    /// without one, only `namespaces` are governed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_selector_schema")]
    pub namespace_selector: Option<LabelSelector>,
    /// The Pod Security Standards level every pod template a plugin plans must meet.
    #[serde(default)]
    pub pod_security: PodSecurity,
    /// Service types plans may use; default `[ClusterIP]` (which covers headless Services).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_types: Option<Vec<ServiceType>>,
    /// Whether pods may use Secrets (Secret volumes and every volume type's Secret reference,
    /// `envFrom`, `secretKeyRef`, `imagePullSecrets` on pods and on planned ServiceAccounts,
    /// whose `secrets` too). Default false.
    #[serde(default)]
    pub allow_secrets: bool,
    /// Volume sources pods may use that name storage outside the namespace by address or id
    /// (e.g. `nfs`, `iscsi`, `awsElasticBlockStore`; `gitRepo` and `flexVolume` too). The Pod
    /// Security Standards allow them at baseline, but a pod naming another tenant's export or
    /// disk reads its data, so by default none: pods claim new volumes instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub inline_volumes: Vec<String>,
    /// Where pods may be scheduled beyond the defaults, which hold at every podSecurity level:
    /// no `system-*` PriorityClass, tolerations only of the node-condition taints, no
    /// nodeSelector or node affinity on node-role labels, `kubernetes.io/hostname` or
    /// `metadata.name`, no pod (anti-)affinity to other namespaces' pods, no runtimeClassName,
    /// no schedulerName but `default-scheduler`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingSpec>,
    /// Kinds plans may hold beyond the built-in ones, each only in the App's namespace and
    /// only if the plugin declares it. The host checks the bodies of some (Ingress,
    /// ServiceMonitor, PodMonitor, NetworkPolicy, HorizontalPodAutoscaler, the pod templates of
    /// the workload kinds such as CronJob, a Secret's type); any other kind's body goes
    /// unchecked, and the policy's Valid condition names it. The host's ServiceAccount needs
    /// RBAC for each (see the README). RBAC kinds, wasmop's own kinds, cluster-scoped kinds,
    /// Endpoints and EndpointSlices are never allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub extra_kinds: Vec<ExtraKind>,
    /// Hosts Ingresses may serve (rules, TLS, ingress-nginx's server-alias): exact names like
    /// `shop.example.com`, or `*.apps.example.com`, which covers every name under
    /// `apps.example.com` (and an Ingress's own wildcards there) but not `apps.example.com`
    /// itself. `*` alone covers every host and the catch-alls: rules without a host and
    /// `defaultBackend`, which serve every host no other Ingress names. Default none: an
    /// Ingress is refused unless its hosts are listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^(\*|(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$"
            )
        )
    )]
    pub ingress_hosts: Vec<String>,
    /// IngressClasses Ingresses may name (`spec.ingressClassName` and the older
    /// `kubernetes.io/ingress.class` annotation). Without it, any class or none; with it, an
    /// Ingress must name one of these (an Ingress without a class gets the cluster's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    pub ingress_classes: Option<Vec<String>>,
    /// Where OCI plugins may come from: prefixes of `registry/repository`, matched on path
    /// boundaries (`ghcr.io/acme` covers `ghcr.io/acme/cache`, not `ghcr.io/acme-evil`).
    /// Without it, any registry on a public address. A registry whose `host:port` is listed
    /// here may also be on a private one (RFC 1918, loopback, CGNAT, ULA), as may those the
    /// host's `--allow-private-registries` names; link-local and metadata addresses are refused
    /// whatever this says.
    /// With it, a registry's token realm must be on the registry's own host or one of these
    /// (list `auth.docker.io` for Docker Hub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub registries: Option<Vec<String>>,
    /// Whether plugins may come from ConfigMaps in the App's namespace (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_sources: Option<bool>,
    /// Prefixes of `registry/repository` (as in `registries`) for which Apps without
    /// `imagePullSecrets` are read with the host's own credentials (`--registry-config`).
    /// Without it, none: an App reads a private registry only with its own pull secrets, so
    /// one tenant cannot pull another's private image with the host's rights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub host_credentials: Vec<String>,
    /// The largest plugin component an OCI source may deliver, as a size like `16Mi`: default
    /// `8Mi`, at most `32Mi`. A component over it is refused (`NotAComponent`) before it is
    /// read; compiles stay bounded by the host's `--compile-memory` whatever the size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(Ki|Mi)?$"))]
    pub max_component_size: Option<String>,
    /// What happens to objects an App already runs that this policy forbids (they were
    /// applied under a laxer one): `Report` (default) says so in the App's status (`Degraded`,
    /// `PolicyViolation`, naming the object and the rule) and deletes nothing; `Remove` also
    /// deletes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// The most PersistentVolumeClaims one App may hold: those it has, those its plan names
    /// and one per StatefulSet replica and claim template (default 64). Claims are never
    /// pruned, so a plan past it is refused whole (`PlanRejected`, with the count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_claims: Option<u32>,
    /// The most pods one workload may ask for (default 64, at most 1024): `replicas` of a
    /// Deployment, StatefulSet, ReplicaSet or ReplicationController, `parallelism` of a Job
    /// and of a CronJob's job template, `minReplicas` and `maxReplicas` of a
    /// HorizontalPodAutoscaler. A plan over it, or with a value that is not a whole number, is
    /// refused whole (`PlanRejected`, rule `wasmop/maxReplicas`, naming the object, the field,
    /// the value and the bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_replicas: Option<u32>,
    /// Signatures every OCI plugin must carry: a cosign signature (the `.sig` tag cosign
    /// pushes beside the image) by one of these keys, over the manifest's digest. An unsigned
    /// or otherwise signed version is refused (`SignatureInvalid`) and the last good one stays
    /// in service; ConfigMap and file sources are refused (they carry no signature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
}

/// What pods may name in their scheduling fields beyond the defaults. Each list relaxes one rule
/// of the built-in default; a name not listed is refused (`PlanRejected`, naming the field and
/// the rule `wasmop/<rule>`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// PriorityClasses pods may name in `priorityClassName` (rule `wasmop/priorityClass`).
    /// Without it, any class but `system-node-critical` and `system-cluster-critical`, which
    /// preempt every other tenant's pods (Kubernetes recommends confining them with a
    /// ResourceQuota scopeSelector, as its Priority admission plugin once confined them to
    /// kube-system). With it, exactly these; a pod without a class always passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 253)))]
    pub priority_classes: Option<Vec<String>>,
    /// Taint keys pods may tolerate (rule `wasmop/tolerations`) beyond the node-condition
    /// taints Kubernetes places itself (`node.kubernetes.io/` `not-ready`, `unreachable`,
    /// `memory-pressure`, `disk-pressure`, `pid-pressure`, `network-unavailable`), e.g.
    /// `node-role.kubernetes.io/control-plane` or a dedicated-node taint. `*` allows every
    /// key, and the empty key with operator Exists, which tolerates every taint. As
    /// Kubernetes' PodTolerationRestriction admission plugin's namespace whitelist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 317)))]
    pub tolerations: Vec<String>,
    /// Node label keys pods may select nodes by in `nodeSelector` and node affinity although
    /// they name a node's role or the node (rule `wasmop/nodeLabels`):
    /// `node-role.kubernetes.io/*` keys, `kubernetes.io/role`, `kubernetes.io/hostname`, and
    /// `metadata.name` for `matchFields`. `*` allows all. Other labels (zone, instance type,
    /// a team's own labels) are always allowed. As Kubernetes' PodNodeSelector admission
    /// plugin's namespace whitelist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 317)))]
    pub node_labels: Vec<String>,
    /// RuntimeClasses pods may name in `runtimeClassName` (rule `wasmop/runtimeClass`);
    /// default none. A runtime handler is node configuration the cluster admin chooses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    pub runtime_classes: Vec<String>,
    /// Schedulers pods may name in `schedulerName` beyond `default-scheduler` (rule
    /// `wasmop/scheduler`); default none. Another scheduler places pods past the default
    /// scheduler's rules, as nodeName does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    pub schedulers: Vec<String>,
    /// Whether pod affinity and anti-affinity terms (required and preferred) may place pods by
    /// other namespaces' pods, with `namespaces` naming another namespace or any
    /// `namespaceSelector` (`{}` selects every namespace) (rule `wasmop/podAffinityNamespaces`);
    /// default false. Such terms tell a tenant where other tenants' pods run; Kubernetes makes
    /// them a privilege to grant per namespace (the ResourceQuota scope
    /// CrossNamespacePodAffinity). A term without either, or naming only the pod's own
    /// namespace, always passes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cross_namespace_affinity: bool,
}

impl SchedulingSpec {
    /// The guard's scheduling rules under this spec.
    pub fn rules(&self) -> guard::Scheduling {
        guard::Scheduling {
            priority_classes: self.priority_classes.clone(),
            tolerations: self.tolerations.clone(),
            node_labels: self.node_labels.clone(),
            runtime_classes: self.runtime_classes.clone(),
            schedulers: self.schedulers.clone(),
            cross_namespace_affinity: self.cross_namespace_affinity,
        }
    }
}

/// The keys plugins must be signed with.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    /// Public keys, any one of which suffices.
    #[schemars(length(min = 1, max = 16))]
    pub keys: Vec<VerifyKey>,
}

/// One public key plugins may be signed with.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyKey {
    /// A name for messages, e.g. `release`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The PEM public key, as `cosign generate-key-pair` writes `cosign.pub` (ECDSA P-256 or
    /// P-384, Ed25519, RSA).
    #[schemars(length(min = 1, max = 16384))]
    pub public_key: String,
}

/// A kind beyond the built-in ones that plans may hold.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtraKind {
    /// `group/version`, or `v1` for the core group, e.g. `networking.k8s.io/v1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// The kind, e.g. `NetworkPolicy`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The plural resource name, as in RBAC rules and API paths, e.g. `networkpolicies`.
    #[schemars(length(min = 1, max = 63))]
    pub resource: String,
}

/// API groups no policy can let plans into: who may do what (RBAC, and the review APIs that
/// answer it), admission and API extension, node certificates, and wasmop's own kinds (a plan
/// that creates Apps or policies would escape the policy that governs it).
const FORBIDDEN_GROUPS: &[&str] = &[
    "rbac.authorization.k8s.io",
    "authorization.k8s.io",
    "authentication.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "certificates.k8s.io",
    // Leases are how replicas elect a leader (the host's own among them): the host's write
    // fence lets Lease writes through, so no plan may hold one.
    "coordination.k8s.io",
    "wasmop.dev",
];

/// Core kinds no policy can let plans hold: cluster-scoped objects (refused by a namespaced
/// apply anyway, named here so the policy says so), a Pod's binding to a node, and the
/// namespace's quota and limits.
const FORBIDDEN_CORE_KINDS: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ComponentStatus",
    "Binding",
    // The admin's bounds on the namespace itself: a tenant's plugin must not raise its quota.
    "ResourceQuota",
    "LimitRange",
    // A Service's endpoints written by hand route it to any address, another namespace's pods
    // included (CVE-2021-25740); only the endpoints controllers write them.
    "Endpoints",
];

/// Kinds of other groups no policy can let plans hold: a Gateway API grant lets other
/// namespaces' routes reach this one's Services; an EndpointSlice, like `Endpoints`, routes a
/// Service to any address (CVE-2021-25740).
const FORBIDDEN_KINDS: &[(&str, &str)] = &[
    ("gateway.networking.k8s.io", "ReferenceGrant"),
    ("discovery.k8s.io", "EndpointSlice"),
];

impl ExtraKind {
    /// The kind as the guard knows it, or why no policy may allow it.
    pub fn to_kind(&self) -> Result<Kind, String> {
        let (group, version) = match self.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", self.api_version.as_str()),
        };
        let word = |text: &str| {
            !text.is_empty()
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        };
        let at = format!("{}/{}", self.api_version, self.kind);
        if !word(version) || (!group.is_empty() && !word(group)) || !word(&self.kind) {
            return Err(format!("{at}: not an apiVersion and kind"));
        }
        if !word(&self.resource) || self.resource.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "{at}: resource {:?} is not a lowercase plural resource name",
                self.resource
            ));
        }
        if FORBIDDEN_GROUPS.contains(&group) {
            return Err(format!("{at}: the {group} API group is never plannable"));
        }
        if (group.is_empty() && FORBIDDEN_CORE_KINDS.contains(&self.kind.as_str()))
            || FORBIDDEN_KINDS.contains(&(group, self.kind.as_str()))
        {
            return Err(format!("{at}: never plannable"));
        }
        Ok(Kind {
            group: group.to_string().into(),
            version: version.to_string().into(),
            kind: self.kind.clone().into(),
            plural: self.resource.clone().into(),
        })
    }
}

/// What the host does with live objects a policy forbids.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Enforcement {
    /// Say so in the App's status; delete nothing.
    #[default]
    Report,
    /// Say so, and delete them.
    Remove,
}

/// A Pod Security Standards level.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurity {
    /// Pod hardening best practice.
    #[default]
    Restricted,
    /// Prevents known privilege escalations.
    Baseline,
    /// No pod restrictions beyond wasmop's own (ServiceAccounts, nodeName, scheduling,
    /// claims, Secrets).
    Privileged,
}

impl From<PodSecurity> for Level {
    fn from(level: PodSecurity) -> Self {
        match level {
            PodSecurity::Restricted => Level::Restricted,
            PodSecurity::Baseline => Level::Baseline,
            PodSecurity::Privileged => Level::Privileged,
        }
    }
}

/// A Service type.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    /// Reachable inside the cluster only (and headless Services).
    ClusterIP,
    /// A port on every node.
    NodePort,
    /// An external load balancer.
    LoadBalancer,
    /// A DNS alias.
    ExternalName,
}

impl ServiceType {
    fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
            Self::ExternalName => "ExternalName",
        }
    }
}

/// What the host reports about a policy.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginPolicyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many namespaces this policy governs.
    #[serde(default)]
    pub namespace_count: u32,
    /// The namespaces it governs, sorted (the first [`STATUS_NAMESPACES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// `Valid` (the selector is well formed) and `Overlapping` (a namespace it selects is
    /// governed by another policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Most namespaces listed in a policy's status.
pub const STATUS_NAMESPACES: usize = 50;

/// The same schema as a Kubernetes `LabelSelector`, with the operator an enum and the
/// API server's own rules on values as CEL, so a malformed selector is refused when it is
/// written rather than selecting nothing later.
fn label_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "properties": {
            "matchLabels": {
                "type": "object",
                "maxProperties": 64,
                "additionalProperties": {"type": "string"},
            },
            "matchExpressions": {
                "type": "array",
                "maxItems": 32,
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string", "maxLength": 317},
                        "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": {"type": "array", "maxItems": 64, "items": {"type": "string", "maxLength": 63}},
                    },
                    "x-kubernetes-validations": [{
                        "rule": "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",
                        "message": "In and NotIn need values; Exists and DoesNotExist take none",
                    }],
                },
            },
        },
    })
}

impl PluginPolicySpec {
    /// The rules under this policy: the guard's and the sources'.
    pub fn rules(&self) -> Rules {
        Rules {
            plan: self.plan_rules(),
            source: self.source_rules(),
        }
    }

    /// The guard's rules under this policy.
    pub fn plan_rules(&self) -> PlanPolicy {
        let defaults = PlanPolicy::default();
        PlanPolicy {
            pod_security: self.pod_security.into(),
            allow_secrets: self.allow_secrets,
            inline_volumes: self.inline_volumes.clone(),
            scheduling: self
                .scheduling
                .as_ref()
                .map_or_else(guard::Scheduling::default, SchedulingSpec::rules),
            service_types: match &self.service_types {
                Some(types) => types.iter().map(|t| t.as_str().to_string()).collect(),
                None => defaults.service_types,
            },
            // A kind no policy may allow is left out (and reported in the policy's status);
            // the rest of the policy stands.
            extra_kinds: self
                .extra_kinds
                .iter()
                .filter_map(|k| k.to_kind().ok())
                .filter(|k| !plannable().any(|p| p == k))
                .collect(),
            ingress_hosts: self.ingress_hosts.clone(),
            ingress_classes: self.ingress_classes.clone(),
            remove_violations: self.enforcement == Some(Enforcement::Remove),
            max_claims: self
                .max_claims
                .map_or(defaults.max_claims, |max| max.clamp(1, 1024) as usize),
            max_replicas: self.max_replicas.map_or(defaults.max_replicas, |max| {
                max.clamp(1, guard::MAX_REPLICAS_CEILING) as usize
            }),
        }
    }

    /// Where plugins may come from under this policy.
    pub fn source_rules(&self) -> SourcePolicy {
        SourcePolicy {
            registries: self.registries.clone(),
            config_map_sources: self.config_map_sources.unwrap_or(true),
            oci: OciRules {
                // A size that does not parse, or is over the ceiling, leaves the default (and
                // is reported in the policy's status).
                max_component_bytes: self.component_bytes().ok().flatten(),
                host_credentials: self.host_credentials.clone(),
                // With an allowlist, a token realm elsewhere than the registry itself must be
                // one of the allowed registries' hosts (Docker Hub's auth.docker.io is listed
                // like a registry): no registry can send the host to an arbitrary HTTPS URL.
                realm_hosts: self.registries.as_ref().map(|prefixes| {
                    prefixes
                        .iter()
                        .filter_map(|p| p.split('/').next())
                        .filter(|h| !h.is_empty())
                        .map(str::to_string)
                        .collect()
                }),
                // A key that does not parse stays in the set and verifies nothing (and is
                // reported in the policy's status): a typo must not turn verification off.
                keys: match &self.verify {
                    None => Vec::new(),
                    // `verify: {keys: []}` (which the schema refuses) must not mean "verify
                    // nothing": one key that never parses refuses every plugin instead.
                    Some(verify) if verify.keys.is_empty() => vec![TrustedKey {
                        name: "(none listed)".into(),
                        pem: String::new(),
                    }],
                    Some(verify) => verify
                        .keys
                        .iter()
                        .map(|k| TrustedKey {
                            name: k.name.clone(),
                            pem: k.public_key.clone(),
                        })
                        .collect(),
                },
            },
        }
    }

    /// `maxComponentSize` in bytes (`None`: not set), or why it is not a size the host takes.
    pub fn component_bytes(&self) -> Result<Option<usize>, String> {
        let Some(text) = &self.max_component_size else {
            return Ok(None);
        };
        let bytes = crate::cli::parse_bytes(text.trim())?;
        match usize::try_from(bytes) {
            Ok(bytes) if (1..=MAX_COMPONENT_BYTES).contains(&bytes) => Ok(Some(bytes)),
            _ => Err(format!(
                "{text:?} is not between 1 byte and {}Mi",
                MAX_COMPONENT_BYTES >> 20
            )),
        }
    }

    /// Why entries of `verify.keys` are unusable, one line each.
    pub fn refused_keys(&self) -> Vec<String> {
        self.verify
            .iter()
            .flat_map(|v| v.keys.iter().enumerate())
            .filter_map(|(i, k)| {
                crate::plugin::source::oci::verify::parse_key(&k.public_key)
                    .err()
                    .map(|e| format!("verify.keys[{i}] ({}): {e}", k.name))
            })
            .collect()
    }

    /// The `extraKinds` the guard lets plans hold without checking their bodies
    /// (`apiVersion/kind`), for the policy's status.
    pub fn unchecked_kinds(&self) -> Vec<String> {
        self.extra_kinds
            .iter()
            .filter_map(|k| k.to_kind().ok())
            .filter(|k| !plannable().any(|p| p == k) && !guard::checks_body(k))
            .map(|k| format!("{}/{}", k.api_version(), k.kind))
            .collect()
    }

    /// Why entries of `extraKinds` are refused, one line each.
    pub fn refused_kinds(&self) -> Vec<String> {
        self.extra_kinds
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.to_kind().err().map(|e| format!("extraKinds[{i}] {e}")))
            .collect()
    }
}

/// How a policy selects one namespace, ordered from the most specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Match {
    /// Named in `spec.namespaces`.
    Named,
    /// Selected by a selector with this many requirements (more sorts first).
    Selected(std::cmp::Reverse<usize>),
}

/// The policies that select `namespace` (with `labels`), most specific first: the first governs.
/// `protected` namespaces are selected only by name. Policies with a malformed selector select
/// by name only.
pub fn candidates<'a>(
    policies: impl IntoIterator<Item = &'a PluginPolicy>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    protected: bool,
) -> Vec<&'a PluginPolicy> {
    let mut found: Vec<(Match, String, &PluginPolicy)> = policies
        .into_iter()
        .filter_map(|policy| {
            let spec = &policy.spec;
            let how = if spec.namespaces.iter().any(|n| n == namespace) {
                Match::Named
            } else if protected {
                return None;
            } else {
                let selector = spec.namespace_selector.as_ref()?;
                if !selector::matches(selector, labels).unwrap_or(false) {
                    return None;
                }
                Match::Selected(std::cmp::Reverse(selector::requirements(selector)))
            };
            Some((how, policy.name_any(), policy))
        })
        .collect();
    found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    found.into_iter().map(|(_, _, policy)| policy).collect()
}

/// What governs the plugins of one namespace.
// One short-lived value per resolve, moved into the reconcile that asked: boxing the rules
// would add an allocation and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Plans are held to `rules`, from the policy `policy` (`None`: the built-in default).
    Governed {
        /// The governing policy's name.
        policy: Option<String>,
        /// Its rules.
        rules: Rules,
    },
    /// No App may run here.
    Refused {
        /// Why, for the App's status.
        reason: String,
    },
}

/// Which rules govern `namespace` (with `labels`); `host_namespace` is protected like
/// [`PROTECTED_NAMESPACES`].
pub fn resolve<'a>(
    policies: impl IntoIterator<Item = &'a PluginPolicy>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    host_namespace: Option<&str>,
) -> Resolution {
    let protected = is_protected(namespace, host_namespace);
    match candidates(policies, namespace, labels, protected).first() {
        Some(policy) => Resolution::Governed {
            policy: Some(policy.name_any()),
            rules: policy.spec.rules(),
        },
        None if protected => Resolution::Refused {
            reason: format!(
                "namespace {namespace} belongs to the cluster{}: Apps run here only if a \
                 PluginPolicy names it in spec.namespaces",
                if Some(namespace) == host_namespace {
                    " (it is the wasmop host's own)"
                } else {
                    ""
                }
            ),
        },
        None => Resolution::Governed {
            policy: None,
            rules: Rules::default(),
        },
    }
}

/// Whether `namespace` is refused to Apps unless a policy names it.
pub fn is_protected(namespace: &str, host_namespace: Option<&str>) -> bool {
    PROTECTED_NAMESPACES.contains(&namespace) || Some(namespace) == host_namespace
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::json;

    use super::*;

    fn policy(name: &str, spec: serde_json::Value) -> PluginPolicy {
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginPolicy",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("a PluginPolicy")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn governing(resolution: &Resolution) -> Option<&str> {
        match resolution {
            Resolution::Governed { policy, .. } => policy.as_deref(),
            Resolution::Refused { .. } => Some("<refused>"),
        }
    }

    #[test]
    fn without_a_policy_the_built_in_default_applies() {
        let got = resolve([], "team-a", &labels(&[]), None);
        assert_eq!(
            got,
            Resolution::Governed {
                policy: None,
                rules: Rules::default()
            }
        );
    }

    #[test]
    fn the_most_specific_policy_wins() {
        let all = policy(
            "all",
            json!({"namespaceSelector": {}, "podSecurity": "baseline"}),
        );
        let teams = policy(
            "teams",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "podSecurity": "privileged"}),
        );
        let prod = policy(
            "prod",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["prod"]}]}}),
        );
        let named = policy("named", json!({"namespaces": ["team-a-prod"]}));
        let set = [all.clone(), teams.clone(), prod.clone(), named.clone()];
        let team = labels(&[("team", "a")]);
        let team_prod = labels(&[("team", "a"), ("tier", "prod")]);
        assert_eq!(
            governing(&resolve(&set, "other", &labels(&[]), None)),
            Some("all")
        );
        assert_eq!(
            governing(&resolve(&set, "team-a-dev", &team, None)),
            Some("teams")
        );
        assert_eq!(
            governing(&resolve(&set, "team-a-qa", &team_prod, None)),
            Some("prod")
        );
        assert_eq!(
            governing(&resolve(&set, "team-a-prod", &team_prod, None)),
            Some("named")
        );
        let Resolution::Governed { rules, .. } = resolve(&set, "team-a-dev", &team, None) else {
            panic!("governed");
        };
        assert_eq!(rules.plan.pod_security, Level::Privileged);
        assert_eq!(rules.plan.service_types, ["ClusterIP"]);
    }

    #[test]
    fn ties_go_to_the_first_name() {
        let b = policy(
            "b",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
        );
        let a = policy(
            "a",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
        );
        let got = resolve([&b, &a], "ns", &labels(&[("team", "a")]), None);
        assert_eq!(governing(&got), Some("a"));
    }

    #[test]
    fn protected_namespaces_need_a_policy_that_names_them() {
        let everything = policy("everything", json!({"namespaceSelector": {}}));
        for ns in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "wasmop-system",
        ] {
            let got = resolve([&everything], ns, &labels(&[]), Some("wasmop-system"));
            let Resolution::Refused { reason } = got else {
                panic!("{ns} must be refused: {got:?}");
            };
            assert!(
                reason.contains(ns) && reason.contains("spec.namespaces"),
                "{reason}"
            );
        }
        let named = policy("system", json!({"namespaces": ["kube-system"]}));
        let got = resolve([&everything, &named], "kube-system", &labels(&[]), None);
        assert_eq!(governing(&got), Some("system"));
    }

    #[test]
    fn a_malformed_selector_selects_nothing() {
        let bad = policy(
            "bad",
            json!({"namespaceSelector": {"matchExpressions": [{"key": "x", "operator": "In"}]},
                   "podSecurity": "privileged"}),
        );
        assert_eq!(
            governing(&resolve([&bad], "ns", &labels(&[("x", "y")]), None)),
            None
        );
    }

    #[test]
    fn service_types_and_secrets_carry_into_the_rules() {
        let open = policy(
            "open",
            json!({"namespaces": ["ns"], "serviceTypes": ["ClusterIP", "LoadBalancer"], "allowSecrets": true}),
        );
        let rules = open.spec.plan_rules();
        assert_eq!(rules.service_types, ["ClusterIP", "LoadBalancer"]);
        assert!(rules.allow_secrets);
        assert_eq!(rules.pod_security, Level::Restricted);
    }

    #[test]
    fn scheduling_lists_carry_into_the_rules() {
        assert_eq!(
            policy("p", json!({})).spec.plan_rules().scheduling,
            guard::Scheduling::default()
        );
        let open = policy(
            "open",
            json!({"namespaces": ["ns"], "scheduling": {
                "priorityClasses": ["gold"], "tolerations": ["*"],
                "nodeLabels": ["node-role.kubernetes.io/infra"],
                "runtimeClasses": ["gvisor"], "schedulers": ["volcano"],
                "crossNamespaceAffinity": true}}),
        );
        assert_eq!(
            open.spec.plan_rules().scheduling,
            guard::Scheduling {
                priority_classes: Some(vec!["gold".into()]),
                tolerations: vec!["*".into()],
                node_labels: vec!["node-role.kubernetes.io/infra".into()],
                runtime_classes: vec!["gvisor".into()],
                schedulers: vec!["volcano".into()],
                cross_namespace_affinity: true,
            }
        );
        // The schema bounds the lists and says what each is for (`kubectl explain`).
        let crd = serde_json::to_value(PluginPolicy::crd()).expect("serialises");
        let scheduling = crd
            .pointer(
                "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/scheduling",
            )
            .expect("scheduling in the schema");
        assert_eq!(
            scheduling.pointer("/properties/tolerations/maxItems"),
            Some(&json!(64))
        );
        assert!(
            scheduling
                .pointer("/properties/priorityClasses/description")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|d| d.contains("system-node-critical")),
            "{scheduling}"
        );
    }

    #[test]
    fn extra_kinds_widen_the_rules_but_never_to_rbac_or_wasmop_kinds() {
        let wide = policy(
            "wide",
            json!({"namespaces": ["ns"], "extraKinds": [
                {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "resource": "networkpolicies"},
                {"apiVersion": "v1", "kind": "Secret", "resource": "secrets"},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "resource": "rolebindings"},
                {"apiVersion": "wasmop.dev/v1alpha1", "kind": "App", "resource": "apps"},
                {"apiVersion": "v1", "kind": "Namespace", "resource": "namespaces"},
                {"apiVersion": "v1", "kind": "ConfigMap", "resource": "configmaps"},
                {"apiVersion": "v1", "kind": "Widget", "resource": "Widgets"},
            ]}),
        );
        let rules = wide.spec.plan_rules();
        let names: Vec<String> = rules
            .extra_kinds
            .iter()
            .map(|k| format!("{}/{}", k.api_version(), k.kind))
            .collect();
        // ConfigMap is built in already; the rest are refused.
        assert_eq!(names, ["networking.k8s.io/v1/NetworkPolicy", "v1/Secret"]);
        let refused = wide.spec.refused_kinds();
        assert_eq!(refused.len(), 4, "{refused:?}");
        assert!(refused[0].starts_with("extraKinds[2] rbac.authorization.k8s.io/v1/RoleBinding"));
        assert!(refused[1].contains("wasmop.dev API group"), "{refused:?}");
        assert!(refused[3].contains("lowercase plural"), "{refused:?}");
    }

    #[test]
    fn endpoints_are_never_plannable_and_unchecked_kinds_are_named() {
        let spec = policy(
            "p",
            json!({"namespaces": ["ns"], "extraKinds": [
                {"apiVersion": "v1", "kind": "Endpoints", "resource": "endpoints"},
                {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "resource": "endpointslices"},
                {"apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice", "resource": "endpointslices"},
                {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "resource": "ingresses"},
                {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "resource": "servicemonitors"},
                {"apiVersion": "batch/v1", "kind": "CronJob", "resource": "cronjobs"},
                {"apiVersion": "v1", "kind": "Secret", "resource": "secrets"},
                {"apiVersion": "example.com/v1", "kind": "Widget", "resource": "widgets"},
                {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "resource": "prometheusrules"},
            ]}),
        )
        .spec;
        let refused = spec.refused_kinds();
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(refused[0].starts_with("extraKinds[0] v1/Endpoints: never plannable"));
        assert!(refused[1].contains("discovery.k8s.io/v1/EndpointSlice: never plannable"));
        assert!(refused[2].contains("v1beta1/EndpointSlice: never plannable"));
        assert!(
            !spec
                .plan_rules()
                .extra_kinds
                .iter()
                .any(|k| k.kind.starts_with("Endpoint"))
        );
        assert_eq!(
            spec.unchecked_kinds(),
            [
                "example.com/v1/Widget",
                "monitoring.coreos.com/v1/PrometheusRule"
            ]
        );
    }

    #[test]
    fn ingress_hosts_and_classes_carry_into_the_rules() {
        let open = policy(
            "open",
            json!({"namespaces": ["ns"], "ingressHosts": ["shop.example.com", "*.apps.example.com"],
                   "ingressClasses": ["public"]}),
        );
        let rules = open.spec.plan_rules();
        assert_eq!(
            rules.ingress_hosts,
            ["shop.example.com", "*.apps.example.com"]
        );
        assert_eq!(rules.ingress_classes, Some(vec!["public".to_string()]));
        let none = policy("none", json!({"namespaces": ["ns"]}))
            .spec
            .plan_rules();
        assert!(none.ingress_hosts.is_empty());
        assert_eq!(none.ingress_classes, None);
    }

    #[test]
    fn max_replicas_carries_into_the_rules_within_the_ceiling() {
        let sized = |max: u32| policy("p", json!({"maxReplicas": max})).spec.plan_rules();
        assert_eq!(policy("p", json!({})).spec.plan_rules().max_replicas, 64);
        assert_eq!(PlanPolicy::default().max_replicas, 64);
        assert_eq!(sized(200).max_replicas, 200);
        // Past the schema's bounds (a policy written before them), the nearest bound.
        assert_eq!(sized(0).max_replicas, 1);
        assert_eq!(sized(100_000).max_replicas, 1024);
        let crd = serde_json::to_value(PluginPolicy::crd()).expect("serialises");
        let field = crd
            .pointer(
                "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/maxReplicas",
            )
            .expect("maxReplicas in the schema");
        let bound = |key: &str| field.pointer(key).and_then(serde_json::Value::as_f64);
        assert_eq!(
            (bound("/minimum"), bound("/maximum")),
            (Some(1.0), Some(1024.0))
        );
        let affinity = crd
            .pointer(
                "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/scheduling/properties/crossNamespaceAffinity",
            )
            .expect("crossNamespaceAffinity in the schema");
        assert_eq!(affinity.pointer("/type"), Some(&json!("boolean")));
    }

    #[test]
    fn component_size_raises_the_cap_within_the_ceiling() {
        let sized = |size: &str| policy("p", json!({"maxComponentSize": size})).spec;
        assert_eq!(
            sized("16Mi").source_rules().oci.max_component_bytes,
            Some(16 << 20)
        );
        assert_eq!(sized("32Mi").component_bytes(), Ok(Some(32 << 20)));
        for bad in ["64Mi", "0", "lots"] {
            assert!(sized(bad).component_bytes().is_err(), "{bad}");
            assert_eq!(
                sized(bad).source_rules().oci.max_component_bytes,
                None,
                "{bad}"
            );
        }
        assert_eq!(policy("p", json!({})).spec.component_bytes(), Ok(None));
    }

    #[test]
    fn crd_is_cluster_scoped_with_status_and_columns() {
        let crd = PluginPolicy::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["PodSecurity", "Secrets", "Namespaces", "Age"]);
        let yaml = serde_yaml::to_string(&crd).expect("serialises");
        assert!(yaml.contains("In and NotIn need values"), "{yaml}");
        // Every ingress host entry is bounded and shaped in the schema.
        let crd = serde_json::to_value(&crd).expect("serialises");
        let hosts = crd
            .pointer(
                "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/ingressHosts",
            )
            .expect("ingressHosts in the schema");
        assert_eq!(hosts.pointer("/maxItems"), Some(&json!(64)));
        assert_eq!(hosts.pointer("/items/maxLength"), Some(&json!(253)));
        let pattern = hosts.pointer("/items/pattern").and_then(|p| p.as_str());
        assert!(pattern.is_some_and(|p| p.starts_with("^(\\*|")), "{hosts}");
    }
}
