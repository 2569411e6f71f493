//! Guard: the check of everything a plugin asks the host to create, before anything is
//! applied. A plugin is untrusted code chosen by the App's author, so its objects are held to
//! what the namespace's [`PlanPolicy`] allows: every object of an allowed kind, in the App's
//! namespace, well named, unique and bounded in size, with no metadata the host owns
//! (`fields::metadata`), no Service exposure or claim on existing volumes beyond the policy
//! (`fields`), and every pod template within the policy's Pod Security Standards level and
//! wasmop's own pod rules (`pods`: ServiceAccounts, scheduling, claim volumes, Secrets; a
//! planned ServiceAccount lends no Secret either, `secrets`, and takes no rights an RBAC
//! binding holds for its name, `grants`), and the bodies of the extra kinds the guard knows
//! how to check (`extra`). A plan that breaks any rule is rejected whole, with an
//! error naming the object, the field and the rule. Backup Jobs go through [`check_job`], the
//! same rules.
//!
//! These are the plan rules, pure: the host, `wasmop plugin run` and the SDK's `Fixture` run
//! the same [`AppCheck`]. Where a plugin may come from (registries, ConfigMaps, signatures) is
//! the host's source rules, beside its plugin sources.

mod extra;
mod fields;
mod grants;
mod live;
mod pods;
mod replicas;
mod scheduling;
mod secrets;
mod volumes;

use std::collections::BTreeSet;

use serde_json::Value;

pub use self::{
    grants::{Bound, GRANTS_APP},
    replicas::{DEFAULT_MAX_REPLICAS, MAX_REPLICAS_CEILING},
    scheduling::Scheduling,
};

use crate::{
    Failure, PlanCheck,
    kind::{Kind, plannable},
    object::PluginObject,
    observed::{APP_LABEL, BACKUP_SLOT_LABEL, PARENT_KIND_LABEL},
    pod_security::Level,
};

/// The host's labels a plan may write, with the only values it may give them: the App's name
/// (`wasmop.dev/app`) and its kind mark (`wasmop.dev/parent-kind`, [`crate::observed`]). The
/// SDK writes the first in selectors and pod templates; either with another value would mark
/// objects as another App's, or as those of a parent of another kind with the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParentLabels<'a> {
    /// The App's name.
    pub name: &'a str,
    /// Its kind mark ([`crate::observed::kind_mark`]).
    pub kind_mark: &'a str,
}

impl<'a> ParentLabels<'a> {
    /// The labels as `(key, value)`.
    fn pairs(self) -> [(&'static str, &'a str); 2] {
        [(APP_LABEL, self.name), (PARENT_KIND_LABEL, self.kind_mark)]
    }
}

/// What plugins may plan in a namespace: the plan rules of a policy. [`PlanPolicy::default`]
/// is the built-in default: `restricted`, no Secrets, ClusterIP Services only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanPolicy {
    /// The Pod Security Standards level every pod template must meet.
    pub pod_security: Level,
    /// Whether pods may use Secrets (volumes, `envFrom`, `secretKeyRef`, `imagePullSecrets`).
    pub allow_secrets: bool,
    /// Volume sources naming storage outside the namespace that pods may use
    /// (`volumes::INLINE_STORAGE`); none by default.
    pub inline_volumes: Vec<String>,
    /// Where pods may be scheduled beyond the safe defaults ([`Scheduling`]).
    pub scheduling: Scheduling,
    /// Service types a plan may use (`ClusterIP` covers headless Services).
    pub service_types: Vec<String>,
    /// Kinds a plan may hold beyond [`plannable`].
    pub extra_kinds: Vec<Kind>,
    /// Hosts Ingresses may serve: exact names, `*.suffix` wildcards, or `*` for every host and
    /// the catch-alls (see `extra`).
    pub ingress_hosts: Vec<String>,
    /// IngressClasses Ingresses may name (`None`: any, or none).
    pub ingress_classes: Option<Vec<String>>,
    /// The most PersistentVolumeClaims one App may hold ([`crate::claims`]).
    pub max_claims: usize,
    /// The most pods one workload field may ask for: replicas, parallelism, an autoscaler's
    /// bounds (`replicas`).
    pub max_replicas: usize,
    /// Whether objects an App runs that these rules forbid (applied under a laxer policy) are
    /// deleted, not only reported (`live`).
    pub remove_violations: bool,
}

impl PlanPolicy {
    /// Every kind a plan may hold under this policy.
    pub fn kinds(&self) -> impl Iterator<Item = &Kind> {
        plannable().chain(&self.extra_kinds)
    }

    /// The kind of `api_version`/`kind`, if a plan may hold it.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&Kind> {
        self.kinds().find(|k| k.is_kind_of(api_version, kind))
    }
}

impl Default for PlanPolicy {
    fn default() -> Self {
        Self {
            pod_security: Level::Restricted,
            allow_secrets: false,
            inline_volumes: Vec::new(),
            scheduling: Scheduling::default(),
            service_types: vec!["ClusterIP".into()],
            extra_kinds: Vec::new(),
            ingress_hosts: Vec::new(),
            ingress_classes: None,
            max_claims: crate::claims::DEFAULT_MAX_CLAIMS,
            max_replicas: DEFAULT_MAX_REPLICAS,
            remove_violations: false,
        }
    }
}

/// A Kubernetes object name of the DNS-subdomain kind (RFC 1123), as Secrets have.
pub fn is_dns_subdomain(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// One broken rule inside an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    /// The offending field (several, comma-separated, when one rule names more than one).
    pub path: String,
    /// The rule: `podSecurity/<upstream check ID>` or `wasmop/<rule>`.
    pub rule: String,
    /// Why, for people.
    pub reason: String,
}

/// Most objects planned for one App.
pub const MAX_OBJECTS: usize = 64;
/// Largest planned object as the plugin wrote it; etcd's own limit is 1.5 MiB.
pub const MAX_OBJECT_BYTES: usize = 512 << 10;

/// The guard for one App under one policy, as the decision core's [`PlanCheck`].
#[derive(Debug, Clone)]
pub struct AppCheck {
    /// The namespace's plan rules.
    pub policy: PlanPolicy,
    /// `PluginPolicy <name>` or `the built-in default policy`, for messages.
    pub policy_name: String,
    /// The App's name.
    pub app: String,
    /// The App's kind mark ([`crate::stamp::AppRef::kind_mark`]).
    pub kind_mark: String,
    /// The App's namespace.
    pub namespace: String,
    /// The plugin's declared `owns` kinds (`apiVersion/Kind`).
    pub owns: Vec<String>,
    /// The namespace's ServiceAccounts that RBAC bindings name (`grants`).
    pub bound: Bound,
}

impl AppCheck {
    fn parent(&self) -> ParentLabels<'_> {
        ParentLabels {
            name: &self.app,
            kind_mark: &self.kind_mark,
        }
    }
}

impl PlanCheck for AppCheck {
    fn check_plan(&self, objects: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure> {
        check(
            &self.policy,
            self.parent(),
            &self.namespace,
            &self.owns,
            objects,
        )
        .and_then(|guarded| {
            let objects: Vec<PluginObject> = guarded.into_iter().map(|g| g.object).collect();
            grants::check(&objects, &self.bound)?;
            Ok(objects)
        })
        .map_err(|err| {
            Failure::new(
                crate::conditions::reason::PLAN_REJECTED,
                format!("{err} (under {})", self.policy_name),
            )
        })
    }

    fn check_backup_job(
        &self,
        slot: &str,
        job: &PluginObject,
        accounts: &BTreeSet<String>,
        claims: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        grants::check_job(job, &self.bound)
            .and_then(|()| check_job(&self.policy, self.parent(), slot, job, accounts, claims))
            .map_err(|err| {
                Failure::new(
                    crate::conditions::reason::PLAN_REJECTED,
                    format!("{err} (under {})", self.policy_name),
                )
            })
    }

    fn prunable(&self, api_version: &str, kind: &str) -> bool {
        self.policy.kind(api_version, kind).is_some()
    }

    fn max_claims(&self) -> usize {
        self.policy.max_claims
    }

    fn check_live(
        &self,
        object: &crate::observed::ObservedObject,
        observed: &[crate::observed::ObservedObject],
    ) -> Option<String> {
        let account = object.api_version == "v1" && object.kind == "ServiceAccount";
        account
            .then(|| grants::violation(&object.name, &self.bound))
            .flatten()
            .or_else(|| {
                live::violation(
                    &self.policy,
                    self.parent(),
                    &self.namespace,
                    object,
                    observed,
                )
            })
            .map(|found| format!("{found}, under {}", self.policy_name))
    }

    fn removes_violations(&self) -> bool {
        self.policy.remove_violations
    }
}

/// An object that passed the guard.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// Its kind.
    pub kind: Kind,
    /// The object, with `metadata.namespace` set to the App's.
    pub object: PluginObject,
}

/// Why a plan was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan rejected: {object}: {reason}")]
pub struct GuardError {
    /// `Kind/name`.
    pub object: String,
    /// The rule it broke: `podSecurity/<check>`, `wasmop/<rule>`, or `wasmop/plan` for the
    /// plan's shape (kind, name, namespace, size).
    pub rule: String,
    /// What is wrong, starting with the field when there is one.
    pub reason: String,
}

/// Where the pod template of a pod-bearing kind is: the workload kinds of `apps/v1` and
/// `batch/v1`, which a policy may add (`extraKinds`) beside the built-in ones. A Pod is its own
/// template. Pods of a kind the host does not know (a CRD that makes pods) go unchecked:
/// adding such a kind is the cluster admin's call, and the README says so.
fn pod_template_path(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch/v1", "Job")
        | ("v1", "ReplicationController") => Some("spec.template"),
        ("batch/v1", "CronJob") => Some("spec.jobTemplate.spec.template"),
        ("v1", "Pod") => Some(""),
        _ => None,
    }
}

/// Whether the guard checks the body of objects of `kind` beyond their metadata: the kinds of
/// `extra`'s table, the pod-bearing kinds (their pod templates) and `Secret` (its type). A
/// policy's status names the extra kinds it adds that are none of these.
pub fn checks_body(kind: &Kind) -> bool {
    let api_version = kind.api_version();
    extra::check_of(&api_version, &kind.kind).is_some()
        || pod_template_path(&api_version, &kind.kind).is_some()
        || (api_version == "v1" && kind.kind == "Secret")
}

/// The value at the dotted `path` of `value` (`""` is `value` itself).
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|p| !p.is_empty())
        .try_fold(value, |v, key| v.get(key))
}

/// Secret types that are credentials the cluster honours: a token of any ServiceAccount of
/// the namespace (minted into the Secret), a node's bootstrap token. No policy allows them.
const MINTED_SECRET_TYPES: &[&str] = &[
    "kubernetes.io/service-account-token",
    // A bootstrap token authenticates a node joining the cluster.
    "bootstrap.kubernetes.io/token",
];

/// What a plan's pods may name because their App creates it.
#[derive(Debug, Clone)]
struct Owned {
    /// ServiceAccounts: the plan's (for a backup Job, those the App's plan created).
    accounts: BTreeSet<String>,
    /// PersistentVolumeClaims: the plan's (for a backup Job, those labelled with the App and
    /// those of the same reconcile's plan). A StatefulSet's own claims are not among them for a
    /// plan: any name `<template>-<set>-<n>` could be another App's claim (`data-billing-db-0`
    /// is also template `data-billing` of a set `db`), and a workload mounts its own claims
    /// through its claim templates, not by name.
    claims: BTreeSet<String>,
}

impl Owned {
    /// Whether a pod may mount the claim `name` ([`volumes`]).
    fn has_claim(&self, name: &str) -> bool {
        self.claims.contains(name)
    }
}

/// The rules that read past `metadata`: pod templates, Services, claims, extra kinds, `status`.
/// `owned` is what the App's pods may use (ServiceAccounts, claims); `scope` is what
/// [`extra`]'s checks read of the App and its plan.
fn check_body(
    policy: &PlanPolicy,
    host_labels: &[(&str, &str)],
    object: &PluginObject,
    owned: &Owned,
    scope: extra::Scope<'_>,
) -> Result<(), Breach> {
    let field = |name: &str| {
        object.field(name).map_err(|err| Breach {
            path: name.to_string(),
            rule: "wasmop/plan".into(),
            reason: format!("is not valid JSON: {err}"),
        })
    };
    if field("status")?.is_some_and(|status| !status.is_null()) {
        return Err(Breach {
            path: "status".into(),
            rule: "wasmop/metadata".into(),
            reason: "status is written by controllers, not planned".into(),
        });
    }
    if let Some(breach) = fields::metadata(object.metadata(), "metadata", host_labels) {
        return Err(breach);
    }
    if object.kind() == "Secret" && object.api_version() == "v1" {
        let kind = field("type")?;
        if let Some(kind) = kind.as_ref().and_then(Value::as_str)
            && MINTED_SECRET_TYPES.contains(&kind)
        {
            return Err(Breach {
                path: "type".into(),
                rule: "wasmop/secret-type".into(),
                reason: format!("{kind} Secrets are credentials the cluster honours"),
            });
        }
        return Ok(());
    }
    if object.kind() == "ServiceAccount" && object.api_version() == "v1" && !policy.allow_secrets {
        let (pull, secrets) = (field("imagePullSecrets")?, field("secrets")?);
        if let Some(breach) = secrets::service_account(pull.as_ref(), secrets.as_ref()) {
            return Err(breach);
        }
    }
    if let Some(check) = extra::check_of(object.api_version(), object.kind()) {
        let spec = field("spec")?.unwrap_or(Value::Null);
        let body = extra::Body {
            policy,
            scope,
            metadata: object.metadata(),
            spec: &spec,
        };
        if let Some(breach) = check(&body) {
            return Err(breach);
        }
    }
    let template_at = pod_template_path(object.api_version(), object.kind());
    // Only the kinds with rules on their spec pay for parsing it (a StatefulSet's is most of
    // the guard's time).
    let reads_spec =
        template_at.is_some() || matches!(object.kind(), "Service" | "PersistentVolumeClaim");
    if !reads_spec {
        return Ok(());
    }
    let spec = field("spec")?.unwrap_or(Value::Null);
    let found = match object.kind() {
        "Service" => fields::service(policy, &spec),
        "PersistentVolumeClaim" => fields::claim(&spec, "spec"),
        _ => None,
    }
    .or_else(|| {
        let counts = replicas::fields_of(object.api_version(), object.kind());
        replicas::check(policy.max_replicas, counts, &spec)
    });
    if let Some(breach) = found {
        return Err(breach);
    }
    if object.kind() == "StatefulSet" {
        let claims = spec.get("volumeClaimTemplates").and_then(Value::as_array);
        for (i, template) in claims.into_iter().flatten().enumerate() {
            let at = format!("spec.volumeClaimTemplates[{i}]");
            let claim_spec = template.get("spec").unwrap_or(&Value::Null);
            if let Some(breach) = fields::claim(claim_spec, &format!("{at}.spec")) {
                return Err(breach);
            }
            if let Some(meta) = template.get("metadata").and_then(Value::as_object)
                && let Some(breach) = fields::metadata(meta, &format!("{at}.metadata"), host_labels)
            {
                return Err(breach);
            }
        }
    }
    if let Some(at) = template_at {
        // A CronJob's Jobs carry its job template's metadata.
        if let Some(meta) = at_path(&spec, "jobTemplate.metadata").and_then(Value::as_object)
            && let Some(breach) = fields::metadata(meta, "spec.jobTemplate.metadata", host_labels)
        {
            return Err(breach);
        }
        // A missing template is the API server's to reject; an empty one still gets every
        // check, so that nothing unchecked reaches it. Only the template is copied (a
        // StatefulSet's spec is mostly other things). A Pod is its own template: its spec is
        // moved beside a copy of its metadata (checked above as `metadata`), whose annotations
        // pod security reads (the AppArmor annotations the API server still honours).
        let template = match at.strip_prefix("spec.") {
            Some(inner) => at_path(&spec, inner)
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
            None => serde_json::json!({
                "metadata": Value::Object(object.metadata().clone()),
                "spec": spec,
            }),
        };
        if !at.is_empty()
            && let Some(meta) = template.get("metadata").and_then(Value::as_object)
            && let Some(breach) = fields::metadata(meta, &format!("{at}.metadata"), host_labels)
        {
            return Err(breach);
        }
        if let Some(breach) =
            pods::check(policy, &template, at, scope.namespace, host_labels, owned)
        {
            return Err(breach);
        }
    }
    Ok(())
}

/// Checks the backup Job for `slot` the plugin asked for, by the same rules as a planned
/// object; its pods may run as the ServiceAccounts in `accounts` (those the App's plan
/// created) and mount the claims in `claims` (those labelled with the App or planned), and it
/// may carry the slot's label.
pub fn check_job(
    policy: &PlanPolicy,
    app: ParentLabels<'_>,
    slot: &str,
    job: &PluginObject,
    accounts: &BTreeSet<String>,
    claims: &BTreeSet<String>,
) -> Result<(), GuardError> {
    let reject = |rule: String, reason: String| GuardError {
        object: format!("{}/{}", job.kind(), job.name()),
        rule,
        reason,
    };
    if job.kind() != "Job" || job.api_version() != "batch/v1" {
        return Err(reject(
            "wasmop/plan".into(),
            format!("{}/{} is not a batch/v1 Job", job.api_version(), job.kind()),
        ));
    }
    if job.text_len() > MAX_OBJECT_BYTES {
        return Err(reject(
            "wasmop/plan".into(),
            format!(
                "{} bytes is over the {MAX_OBJECT_BYTES} byte limit",
                job.text_len()
            ),
        ));
    }
    let [name, kind] = app.pairs();
    let host_labels = [name, kind, (BACKUP_SLOT_LABEL, slot)];
    // A Job is none of the kinds `extra` checks, so what it would read is left empty; without
    // the namespace, its pods' affinity terms may name none (`scheduling`).
    let scope = extra::Scope {
        namespace: "",
        scalable: &BTreeSet::new(),
    };
    let owned = Owned {
        accounts: accounts.clone(),
        claims: claims.clone(),
    };
    check_body(policy, &host_labels, job, &owned, scope)
        .map_err(|b| reject(b.rule, format!("{}: {}", b.path, b.reason)))
}

/// Checks every object of a plan for the App `app` in `namespace` against `policy`; `owns`
/// are the kinds (`apiVersion/kind`) the plugin's metadata declares it plans, and a plan may
/// hold no other.
pub fn check(
    policy: &PlanPolicy,
    app: ParentLabels<'_>,
    namespace: &str,
    owns: &[String],
    objects: Vec<PluginObject>,
) -> Result<Vec<Guarded>, GuardError> {
    if objects.len() > MAX_OBJECTS {
        return Err(GuardError {
            object: format!("{} objects", objects.len()),
            rule: "wasmop/plan".into(),
            reason: format!("a plan may hold at most {MAX_OBJECTS} objects"),
        });
    }
    // Pods may run as the ServiceAccounts this plan creates (and `default`, see `pods`), and
    // mount the claims it creates (see `volumes`).
    let named = |api_version: &str, kind: &str| -> BTreeSet<String> {
        objects
            .iter()
            .filter(|o| o.kind() == kind && o.api_version() == api_version)
            .map(|o| o.name().to_string())
            .collect()
    };
    let owned = Owned {
        accounts: named("v1", "ServiceAccount"),
        claims: named("v1", "PersistentVolumeClaim"),
    };
    // An autoscaler may scale only the workloads of its own plan.
    let scalable: BTreeSet<(String, String, String)> = objects
        .iter()
        .filter(|o| extra::is_scalable(o.api_version(), o.kind()))
        .map(|o| {
            (
                o.api_version().to_string(),
                o.kind().to_string(),
                o.name().to_string(),
            )
        })
        .collect();
    let scope = extra::Scope {
        namespace,
        scalable: &scalable,
    };
    let mut seen = BTreeSet::new();
    let mut guarded = Vec::with_capacity(objects.len());
    for mut object in objects {
        let name = object.name().to_string();
        let reject = |reason: String| GuardError {
            object: format!("{}/{name}", object.kind()),
            rule: "wasmop/plan".into(),
            reason,
        };

        let kind = policy
            .kind(object.api_version(), object.kind())
            .cloned()
            .ok_or_else(|| {
                let allowed: Vec<String> = policy
                    .kinds()
                    .map(|k| format!("{}/{}", k.api_version(), k.kind))
                    .collect();
                reject(format!(
                    "{}/{} is not an allowed kind (allowed: {})",
                    object.api_version(),
                    object.kind(),
                    allowed.join(", ")
                ))
            })?;
        let declared = format!("{}/{}", object.api_version(), object.kind());
        if !owns.contains(&declared) {
            return Err(GuardError {
                object: format!("{}/{name}", object.kind()),
                rule: "wasmop/owns".into(),
                reason: format!(
                    "{declared} is not in the plugin's metadata.owns ({}): a plugin plans only \
                     the kinds it declares",
                    if owns.is_empty() {
                        "empty".to_string()
                    } else {
                        owns.join(", ")
                    }
                ),
            });
        }
        if !is_dns_subdomain(&name) {
            return Err(reject(format!(
                "metadata.name {name:?} is not a DNS-1123 subdomain"
            )));
        }
        match object.metadata().get("namespace") {
            None => {}
            Some(Value::String(ns)) if ns == namespace => {}
            Some(ns) => {
                return Err(reject(format!(
                    "metadata.namespace {ns} is not the App's namespace {namespace:?}"
                )));
            }
        }
        if object.text_len() > MAX_OBJECT_BYTES {
            return Err(reject(format!(
                "{} bytes is over the {MAX_OBJECT_BYTES} byte limit",
                object.text_len()
            )));
        }
        check_body(policy, &app.pairs(), &object, &owned, scope).map_err(|b| GuardError {
            object: format!("{}/{name}", object.kind()),
            rule: b.rule,
            reason: format!("{}: {}", b.path, b.reason),
        })?;
        if !seen.insert((kind.clone(), name.clone())) {
            return Err(reject("planned twice".into()));
        }
        object.metadata_mut(|metadata| {
            metadata.insert("namespace".into(), Value::String(namespace.to_string()));
        });
        guarded.push(Guarded { kind, object });
    }
    Ok(guarded)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The App `kv`, whose labels its plans may write.
    const KV: ParentLabels<'static> = ParentLabels {
        name: "kv",
        kind_mark: crate::observed::APP_KIND_MARK,
    };

    fn obj(value: Value) -> PluginObject {
        PluginObject::parse(&value.to_string()).expect("test objects are plugin objects")
    }

    /// Every plannable kind, as a plugin that declares them all would list them.
    fn all() -> Vec<String> {
        plannable()
            .map(|k| format!("{}/{}", k.api_version(), k.kind))
            .collect()
    }

    #[test]
    fn a_plan_holds_only_the_kinds_the_plugin_declares() {
        let owns = vec!["v1/ConfigMap".to_string()];
        check(&PlanPolicy::default(), KV, "ns", &owns, vec![cm("a")]).expect("declared");
        let sa =
            obj(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "s"}}));
        let err = check(&PlanPolicy::default(), KV, "ns", &owns, vec![cm("a"), sa])
            .expect_err("undeclared");
        assert_eq!(err.rule, "wasmop/owns");
        assert!(err.to_string().contains("ServiceAccount/s: v1/ServiceAccount is not in the plugin's metadata.owns (v1/ConfigMap)"), "{err}");
    }

    fn cm(name: &str) -> PluginObject {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
    }

    #[test]
    fn a_good_plan_passes_with_the_namespace_filled_in() {
        let plan = vec![
            cm("a"),
            obj(
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a", "namespace": "ns"}}),
            ),
        ];
        let guarded = check(&PlanPolicy::default(), KV, "ns", &all(), plan).expect("passes");
        assert_eq!(guarded.len(), 2);
        assert_eq!(guarded[0].object.metadata()["namespace"], "ns");
        assert_eq!(guarded[1].kind.plural, "statefulsets");
    }

    #[test]
    fn each_rule_names_the_object() {
        let cases = [
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
                ),
                "ConfigMap/x",
                "not the App's namespace",
            ),
            (
                obj(
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "admin"}}),
                ),
                "ClusterRole/admin",
                "not an allowed kind",
            ),
            (
                obj(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})),
                "Secret/s",
                "not an allowed kind",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}),
                ),
                "ConfigMap/Bad_Name",
                "DNS-1123",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "ownerReferences": []}}),
                ),
                "ConfigMap/o",
                "ownerReferences",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(MAX_OBJECT_BYTES)}}),
                ),
                "ConfigMap/big",
                "byte limit",
            ),
        ];
        for (object, name, reason) in cases {
            let err = check(
                &PlanPolicy::default(),
                KV,
                "ns",
                &all(),
                vec![cm("fine"), object],
            )
            .expect_err(reason);
            assert_eq!(err.object, name);
            assert!(err.reason.contains(reason), "{err}");
        }
        let err = check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &all(),
            vec![cm("a"), cm("a")],
        )
        .expect_err("duplicate");
        assert_eq!(err.to_string(), "plan rejected: ConfigMap/a: planned twice");
        let err = check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &all(),
            (0..=MAX_OBJECTS).map(|i| cm(&format!("c{i}"))).collect(),
        )
        .expect_err("too many");
        assert!(err.reason.contains("at most"), "{err}");
    }

    /// A Deployment whose pods pass restricted and wasmop's rules, with `change` applied to
    /// its pod template.
    fn deployment(name: &str, change: impl FnOnce(&mut Value)) -> PluginObject {
        let mut template = json!({
            "metadata": {"labels": {"app": name, "wasmop.dev/app": "kv"}},
            "spec": {
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "main", "image": "busybox",
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                }],
            },
        });
        change(&mut template);
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
        }))
    }

    /// The rows of the trust-boundary table (issue 21), each refused with its field and rule.
    #[test]
    fn what_an_attacker_plans_is_refused_with_field_and_rule() {
        let policy = PlanPolicy::default();
        check(&policy, KV, "ns", &all(), vec![deployment("good", |_| {})])
            .expect("the base passes");
        let job = |change: fn(&mut Value)| {
            let mut template = json!({"spec": {"restartPolicy": "Never", "containers": [
                {"name": "b", "image": "busybox"}]}});
            change(&mut template);
            obj(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "evil"},
                "spec": {"template": template}}),
            )
        };
        let cases: Vec<(PluginObject, &str, &str)> = vec![
            (
                deployment("evil", |t| {
                    t["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true);
                }),
                "podSecurity/privileged",
                "Deployment/evil: spec.template.spec.containers[0].securityContext.privileged: privileged is not allowed under restricted",
            ),
            (
                deployment("evil", |t| {
                    t["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
                }),
                "podSecurity/restrictedVolumes",
                "Deployment/evil: spec.template.spec.volumes[0].hostPath: ",
            ),
            (
                deployment("evil", |t| t["spec"]["hostPID"] = json!(true)),
                "podSecurity/hostNamespaces",
                "Deployment/evil: spec.template.spec.hostPID: ",
            ),
            (
                deployment("evil", |t| {
                    t["spec"]["serviceAccountName"] = json!("wasmop")
                }),
                "wasmop/serviceAccount",
                "Deployment/evil: spec.template.spec.serviceAccountName: ServiceAccount \"wasmop\" is not created by this plan",
            ),
            (
                deployment("evil", |t| {
                    t["metadata"]["labels"]["wasmop.dev/app"] = json!("other");
                }),
                "wasmop/metadata",
                "Deployment/evil: spec.template.metadata.labels[\"wasmop.dev/app\"]: ",
            ),
            // Pods marked as those of a KVStore named `kv`: the KVStore would see them.
            (
                deployment("evil", |t| {
                    t["metadata"]["labels"]["wasmop.dev/parent-kind"] =
                        json!("KVStore.data.example.com");
                }),
                "wasmop/metadata",
                "Deployment/evil: spec.template.metadata.labels[\"wasmop.dev/parent-kind\"]: \"KVStore.data.example.com\" is not this App's kind",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "evil",
                    "labels": {"wasmop.dev/parent-kind": "KVStore.data.example.com"}}}),
                ),
                "wasmop/metadata",
                "ConfigMap/evil: metadata.labels[\"wasmop.dev/parent-kind\"]: ",
            ),
            (
                job(|t| {
                    t["spec"]["containers"][0]["securityContext"] =
                        json!({"privileged": true, "runAsUser": 0})
                }),
                "podSecurity/privileged",
                "Job/evil: spec.template.spec.containers[0].securityContext.privileged: ",
            ),
            (
                obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "evil", "finalizers": ["example.com/hold"]}})),
                "wasmop/metadata",
                "ConfigMap/evil: metadata.finalizers: ",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "evil"},
                    "status": {"phase": "x"}}),
                ),
                "wasmop/metadata",
                "ConfigMap/evil: status: ",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "evil"},
                    "spec": {"externalIPs": ["8.8.8.8"], "ports": [{"port": 53}]}}),
                ),
                "wasmop/externalIPs",
                "Service/evil: spec.externalIPs: ",
            ),
            (
                obj(
                    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "evil"},
                    "spec": {"volumeName": "someone-elses"}}),
                ),
                "wasmop/claimSource",
                "PersistentVolumeClaim/evil: spec.volumeName: ",
            ),
            (
                obj(
                    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "evil"},
                    "spec": {"volumeClaimTemplates": [{"metadata": {"name": "d"},
                        "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "theirs"}}}]}}),
                ),
                "wasmop/claimSource",
                "StatefulSet/evil: spec.volumeClaimTemplates[0].spec.dataSource: ",
            ),
        ];
        for (object, rule, message) in cases {
            let err =
                check(&policy, KV, "ns", &all(), vec![cm("fine"), object]).expect_err(message);
            assert_eq!(err.rule, rule, "{err}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("plan rejected: {message}")),
                "{text}"
            );
        }
    }

    /// A plan may write the parent-kind label only with its own parent's kind: a KVStore's
    /// plan may not mark Pods as an App's, nor an App's as a KVStore's.
    #[test]
    fn a_plan_writes_only_its_own_kind_mark() {
        let kvstore = ParentLabels {
            name: "kv",
            kind_mark: "KVStore.data.example.com",
        };
        let marked = |mark: &str| {
            let mark = mark.to_string();
            deployment("d", move |t| {
                t["metadata"]["labels"]["wasmop.dev/parent-kind"] = json!(mark);
            })
        };
        let policy = PlanPolicy::default();
        check(
            &policy,
            kvstore,
            "ns",
            &all(),
            vec![marked("KVStore.data.example.com")],
        )
        .expect("its own kind");
        check(&policy, KV, "ns", &all(), vec![marked("App.wasmop.dev")]).expect("its own kind");
        for (parent, mark) in [
            (kvstore, "App.wasmop.dev"),
            (KV, "KVStore.data.example.com"),
        ] {
            let err = check(&policy, parent, "ns", &all(), vec![marked(mark)])
                .expect_err("another kind's mark");
            assert_eq!(err.rule, "wasmop/metadata", "{err}");
            assert!(
                err.reason
                    .starts_with("spec.template.metadata.labels[\"wasmop.dev/parent-kind\"]"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_planned_service_account_may_be_used_and_backup_jobs_get_the_same_rules() {
        let sa = obj(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kv-sa"}}),
        );
        let uses = deployment("d", |t| {
            t["spec"]["serviceAccountName"] = json!("kv-sa");
            t["spec"]["automountServiceAccountToken"] = json!(true);
        });
        check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &all(),
            vec![sa, uses.clone()],
        )
        .expect("own SA");
        let err = check(&PlanPolicy::default(), KV, "ns", &all(), vec![uses])
            .expect_err("SA not planned");
        assert_eq!(err.rule, "wasmop/serviceAccount");

        let job = |security_context: Value| {
            obj(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"},
                "spec": {"template": {"spec": {
                    "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "b", "image": "i", "securityContext": security_context}],
                }}}}),
            )
        };
        let fine = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
        let none = BTreeSet::new();
        check_job(&PlanPolicy::default(), KV, "s1", &job(fine), &none, &none).expect("fine");
        let root = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0});
        let err = check_job(&PlanPolicy::default(), KV, "s1", &job(root), &none, &none)
            .expect_err("root");
        assert_eq!(err.rule, "podSecurity/runAsUser", "{err}");
        let cm = cm("not-a-job");
        assert!(check_job(&PlanPolicy::default(), KV, "s1", &cm, &none, &none).is_err());
    }

    /// A policy adding `kinds` (`(group, version, kind, plural)`).
    fn with_extra(
        kinds: &[(&'static str, &'static str, &'static str, &'static str)],
    ) -> PlanPolicy {
        PlanPolicy {
            extra_kinds: kinds
                .iter()
                .map(|(g, v, k, p)| Kind::builtin(g, v, k, p))
                .collect(),
            ..PlanPolicy::default()
        }
    }

    /// Only canonical apiVersions are of a kind: the API server reads `/v1` as `v1`, but the
    /// guard's rules compare `v1`, so `/v1` (or any other spelling) must not pass as a kind.
    #[test]
    fn only_the_canonical_api_version_is_a_kind() {
        let policy = with_extra(&[
            ("", "v1", "Pod", "pods"),
            ("", "v1", "Secret", "secrets"),
            ("", "v1", "ReplicationController", "replicationcontrollers"),
        ]);
        let mut owns = all();
        owns.extend(
            ["Pod", "Secret", "ReplicationController"]
                .iter()
                .map(|k| format!("v1/{k}")),
        );
        let kinds = policy
            .kinds()
            .map(|k| (k.api_version(), k.kind.to_string()))
            .collect::<Vec<_>>();
        for (api_version, kind) in kinds {
            for spelling in [
                format!("/{api_version}"),
                format!("{api_version}/"),
                format!(" {api_version}"),
                format!("{api_version}/x"),
                api_version.to_uppercase(),
            ] {
                // Declared in that spelling too, so that only the kind check stands in the way.
                let mut owns = owns.clone();
                owns.push(format!("{spelling}/{kind}"));
                let object = obj(json!({"apiVersion": spelling, "kind": kind,
                    "metadata": {"name": "x"}}));
                let err = check(&policy, KV, "ns", &owns, vec![object])
                    .expect_err(&format!("{spelling} {kind} passed"));
                assert_eq!(err.rule, "wasmop/plan", "{spelling} {kind}: {err}");
            }
        }
    }

    #[test]
    fn extra_kinds_pass_only_under_a_policy_that_adds_them_and_keep_every_pod_rule() {
        let netpol = obj(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "n"}, "spec": {"podSelector": {}}}),
        );
        let owns = vec![
            "networking.k8s.io/v1/NetworkPolicy".to_string(),
            "batch/v1/CronJob".into(),
            "v1/Pod".into(),
            "v1/Secret".into(),
        ];
        let err = check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &owns,
            vec![netpol.clone()],
        )
        .expect_err("not built in");
        assert!(err.to_string().contains("is not an allowed kind"), "{err}");
        let policy = with_extra(&[
            (
                "networking.k8s.io",
                "v1",
                "NetworkPolicy",
                "networkpolicies",
            ),
            ("batch", "v1", "CronJob", "cronjobs"),
            ("", "v1", "Pod", "pods"),
            ("", "v1", "Secret", "secrets"),
        ]);
        let guarded = check(&policy, KV, "ns", &owns, vec![netpol]).expect("added by the policy");
        assert_eq!(guarded[0].kind.plural, "networkpolicies");

        // A pod spec that passes restricted, but for what each case changes.
        let hardened = |change: &dyn Fn(&mut Value)| {
            let mut spec = json!({
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "image": "i", "securityContext":
                    {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            });
            change(&mut spec);
            spec
        };
        let spec = hardened(&|s| s["containers"][0]["securityContext"]["privileged"] = json!(true));
        let cronjob = obj(
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"template": {"spec": spec}}}}}),
        );
        let err = check(&policy, KV, "ns", &owns, vec![cronjob]).expect_err("privileged");
        assert!(
            err.reason.starts_with(
                "spec.jobTemplate.spec.template.spec.containers[0].securityContext.privileged"
            ),
            "{err}"
        );
        let labelled = obj(
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"concurrencyPolicy": "Forbid",
                "jobTemplate": {"metadata": {"labels": {"wasmop.dev/app": "other"}}}}}),
        );
        let err = check(&policy, KV, "ns", &owns, vec![labelled]).expect_err("host label");
        assert!(
            err.reason.starts_with("spec.jobTemplate.metadata.labels"),
            "{err}"
        );

        let spec = hardened(&|s| s["volumes"] = json!([{"name": "r", "hostPath": {"path": "/"}}]));
        let pod = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}),
        );
        let err = check(&policy, KV, "ns", &owns, vec![pod]).expect_err("hostPath");
        assert!(err.reason.starts_with("spec.volumes[0].hostPath"), "{err}");

        let token = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t",
            "annotations": {"kubernetes.io/service-account.name": "default"}},
            "type": "kubernetes.io/service-account-token"}),
        );
        let err = check(&policy, KV, "ns", &owns, vec![token]).expect_err("minted token");
        assert_eq!(err.rule, "wasmop/secret-type", "{err}");
        let opaque = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "o"},
            "type": "Opaque", "stringData": {"k": "v"}}),
        );
        check(&policy, KV, "ns", &owns, vec![opaque]).expect("an Opaque Secret");
    }

    /// Issue 38: extra kinds' bodies, checked through the whole plan (an autoscaler's target
    /// is looked up among the plan's own workloads).
    #[test]
    fn extra_kinds_bodies_are_held_to_the_policy_through_the_plan() {
        let policy = PlanPolicy {
            ingress_hosts: vec!["kv.example.com".into()],
            ..with_extra(&[
                ("networking.k8s.io", "v1", "Ingress", "ingresses"),
                (
                    "monitoring.coreos.com",
                    "v1",
                    "ServiceMonitor",
                    "servicemonitors",
                ),
                (
                    "autoscaling",
                    "v2",
                    "HorizontalPodAutoscaler",
                    "horizontalpodautoscalers",
                ),
            ])
        };
        let mut owns = all();
        owns.extend([
            "networking.k8s.io/v1/Ingress".to_string(),
            "monitoring.coreos.com/v1/ServiceMonitor".into(),
            "autoscaling/v2/HorizontalPodAutoscaler".into(),
        ]);
        let ingress = |annotations: Value, host: &str| {
            obj(
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "kv", "annotations": annotations},
                "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "kv", "port": {"number": 80}}}}]}}]}}),
            )
        };
        let monitor = |endpoint: Value| {
            obj(
                json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": "kv"},
                "spec": {"selector": {"matchLabels": {"app": "kv"}}, "endpoints": [endpoint]}}),
            )
        };
        let hpa = |target: &str| {
            obj(
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "kv"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                         "minReplicas": 1, "maxReplicas": 5}}),
            )
        };
        let good = vec![
            deployment("web", |_| {}),
            ingress(json!({}), "kv.example.com"),
            monitor(json!({"port": "metrics"})),
            hpa("web"),
        ];
        check(&policy, KV, "ns", &owns, good).expect("within the policy");
        let cases = [
            (
                ingress(
                    json!({"nginx.ingress.kubernetes.io/configuration-snippet": "return 200;"}),
                    "kv.example.com",
                ),
                "wasmop/ingressSnippet",
                "plan rejected: Ingress/kv: metadata.annotations[\"nginx.ingress.kubernetes.io/configuration-snippet\"]: ingress-nginx copies snippets",
            ),
            (
                ingress(json!({}), "bank.example.com"),
                "wasmop/ingressHost",
                "plan rejected: Ingress/kv: spec.rules[0].host: \"bank.example.com\" is not a host the policy allows (ingressHosts: kv.example.com)",
            ),
            (
                monitor(json!({"port": "metrics",
                    "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"})),
                "wasmop/monitorFile",
                "plan rejected: ServiceMonitor/kv: spec.endpoints[0].bearerTokenFile: ",
            ),
            (
                hpa("other-app"),
                "wasmop/scaleTarget",
                "plan rejected: HorizontalPodAutoscaler/kv: spec.scaleTargetRef: Deployment/other-app is not",
            ),
        ];
        for (object, rule, message) in cases {
            let plan = vec![deployment("web", |_| {}), object];
            let err = check(&policy, KV, "ns", &owns, plan).expect_err(message);
            assert_eq!(err.rule, rule, "{err}");
            assert!(err.to_string().starts_with(message), "{err}");
        }
        // The same Ingress is refused by default: no host is listed.
        let default = PlanPolicy {
            ingress_hosts: Vec::new(),
            ..policy.clone()
        };
        let err = check(
            &default,
            KV,
            "ns",
            &owns,
            vec![ingress(json!({}), "kv.example.com")],
        )
        .expect_err("no hosts by default");
        assert_eq!(err.rule, "wasmop/ingressHost", "{err}");
        assert!(checks_body(&Kind::builtin(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses"
        )));
        assert!(checks_body(&Kind::builtin(
            "batch", "v1", "CronJob", "cronjobs"
        )));
        assert!(!checks_body(&Kind::builtin(
            "example.com",
            "v1",
            "Widget",
            "widgets"
        )));
    }

    /// The rows of issue 38's tables, each refused with its field and rule: `(policy, object,
    /// rule, "Kind/name: path")`. Every pod here passes `restricted` but for the attack.
    #[test]
    fn issue_38_what_an_attacker_plans_is_refused_with_field_and_rule() {
        let baseline = PlanPolicy {
            pod_security: Level::Baseline,
            ..PlanPolicy::default()
        };
        let pods = with_extra(&[("", "v1", "Pod", "pods")]);
        let volume = |source: Value| {
            deployment("evil", move |t| {
                t["spec"]["volumes"] = json!([{"name": "v"}]);
                if let (Some(v), Some(s)) =
                    (t["spec"]["volumes"][0].as_object_mut(), source.as_object())
                {
                    v.extend(s.clone());
                }
            })
        };
        let ephemeral = |claim: Value| volume(json!({"ephemeral": {"volumeClaimTemplate": claim}}));
        let sa = |field: &str| {
            obj(
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "evil"},
                field: [{"name": "team-b-registry"}]}),
            )
        };
        let d = PlanPolicy::default;
        let cases: Vec<(PlanPolicy, PluginObject, &str, &str)> = vec![
            (
                d(),
                ephemeral(json!({"spec": {"volumeName": "any-pv", "storageClassName": ""}})),
                "wasmop/claimSource",
                "Deployment/evil: spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.volumeName",
            ),
            (
                d(),
                ephemeral(
                    json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "other-app-data"}}}),
                ),
                "wasmop/claimSource",
                "Deployment/evil: spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSource",
            ),
            (
                d(),
                ephemeral(
                    json!({"spec": {"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "other-app-data"}}}),
                ),
                "wasmop/claimSource",
                "Deployment/evil: spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSourceRef",
            ),
            (
                d(),
                ephemeral(
                    json!({"metadata": {"labels": {"wasmop.dev/app": "someone-else"}}, "spec": {}}),
                ),
                "wasmop/metadata",
                "Deployment/evil: spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.metadata.labels[\"wasmop.dev/app\"]",
            ),
            (
                d(),
                ephemeral(json!({"metadata": {"finalizers": ["example.com/hold"]}, "spec": {}})),
                "wasmop/metadata",
                "Deployment/evil: spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.metadata.finalizers",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["priorityClassName"] = json!("system-node-critical")
                }),
                "wasmop/priorityClass",
                "Deployment/evil: spec.template.spec.priorityClassName",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["priorityClassName"] = json!("system-cluster-critical")
                }),
                "wasmop/priorityClass",
                "Deployment/evil: spec.template.spec.priorityClassName",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""})
                }),
                "wasmop/nodeLabels",
                "Deployment/evil: spec.template.spec.nodeSelector[\"node-role.kubernetes.io/control-plane\"]",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["tolerations"] = json!([{"operator": "Exists"}])
                }),
                "wasmop/tolerations",
                "Deployment/evil: spec.template.spec.tolerations[0]",
            ),
            (
                d(),
                deployment(
                    "evil",
                    |t| t["spec"]["tolerations"] = json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]),
                ),
                "wasmop/tolerations",
                "Deployment/evil: spec.template.spec.tolerations[0].key",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}})
                }),
                "wasmop/nodeLabels",
                "Deployment/evil: spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}}})
                }),
                "wasmop/nodeLabels",
                "Deployment/evil: spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "preference": {"matchExpressions": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}}]}})
                }),
                "wasmop/nodeLabels",
                "Deployment/evil: spec.template.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["runtimeClassName"] = json!("runc-privileged")
                }),
                "wasmop/runtimeClass",
                "Deployment/evil: spec.template.spec.runtimeClassName",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["schedulerName"] = json!("my-scheduler")
                }),
                "wasmop/scheduler",
                "Deployment/evil: spec.template.spec.schedulerName",
            ),
            (
                d(),
                deployment("evil", |t| {
                    t["spec"]["imagePullSecrets"] = json!([{"name": "team-b-registry"}])
                }),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.imagePullSecrets",
            ),
            (
                d(),
                sa("imagePullSecrets"),
                "wasmop/secrets",
                "ServiceAccount/evil: imagePullSecrets",
            ),
            (
                d(),
                sa("secrets"),
                "wasmop/secrets",
                "ServiceAccount/evil: secrets",
            ),
            (
                baseline.clone(),
                volume(json!({"azureFile": {"secretName": "team-b", "shareName": "s"}})),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].azureFile.secretName",
            ),
            (
                baseline.clone(),
                volume(
                    json!({"cephfs": {"monitors": ["10.0.0.1"], "secretRef": {"name": "team-b"}}}),
                ),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].cephfs.secretRef",
            ),
            (
                baseline.clone(),
                volume(json!({"cinder": {"volumeID": "x", "secretRef": {"name": "team-b"}}})),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].cinder.secretRef",
            ),
            (
                baseline.clone(),
                volume(json!({"flexVolume": {"driver": "x/y", "secretRef": {"name": "team-b"}}})),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].flexVolume.secretRef",
            ),
            (
                baseline.clone(),
                volume(
                    json!({"iscsi": {"targetPortal": "10.0.0.1", "iqn": "iqn.x", "lun": 0, "chapAuthSession": true, "secretRef": {"name": "team-b"}}}),
                ),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].iscsi.secretRef",
            ),
            (
                baseline.clone(),
                volume(
                    json!({"rbd": {"monitors": ["10.0.0.1"], "image": "i", "secretRef": {"name": "team-b"}}}),
                ),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].rbd.secretRef",
            ),
            (
                baseline.clone(),
                volume(
                    json!({"scaleIO": {"gateway": "g", "system": "s", "secretRef": {"name": "team-b"}}}),
                ),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].scaleIO.secretRef",
            ),
            (
                baseline.clone(),
                volume(json!({"storageos": {"volumeName": "v", "secretRef": {"name": "team-b"}}})),
                "wasmop/secrets",
                "Deployment/evil: spec.template.spec.volumes[0].storageos.secretRef",
            ),
            (
                pods.clone(),
                obj(
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "evil",
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}},
                    "spec": deployment_spec()}),
                ),
                "podSecurity/appArmorProfile",
                "Pod/evil: metadata.annotations[container.apparmor.security.beta.kubernetes.io/main]",
            ),
            (
                d(),
                volume(json!({"persistentVolumeClaim": {"claimName": "other-app-data"}})),
                "wasmop/claimSource",
                "Deployment/evil: spec.template.spec.volumes[0].persistentVolumeClaim.claimName",
            ),
        ];
        let owns = {
            let mut owns = all();
            owns.push("v1/Pod".into());
            owns
        };
        let mut passed = Vec::new();
        for (policy, object, rule, message) in cases {
            match check(&policy, KV, "ns", &owns, vec![cm("fine"), object]) {
                Ok(_) => passed.push(format!("{message}: accepted")),
                Err(err) => {
                    let text = err.to_string();
                    if err.rule != rule || !text.starts_with(&format!("plan rejected: {message}: "))
                    {
                        passed.push(format!("{message}: wrong refusal {} {text}", err.rule));
                    }
                }
            }
        }
        assert!(
            passed.is_empty(),
            "{} rows not refused as they should be:\n{}",
            passed.len(),
            passed.join("\n")
        );
    }

    /// Issue 38 ("Trust III"), the two gaps left: pod (anti-)affinity to other namespaces' pods
    /// and unbounded replicas, each refused through the plan with object, field and rule (and
    /// the value and bound), and each relaxed by the policy alone.
    #[test]
    fn issue_38_cross_namespace_affinity_and_replicas_are_bounded_by_the_policy() {
        let extra = with_extra(&[
            ("apps", "v1", "ReplicaSet", "replicasets"),
            ("", "v1", "ReplicationController", "replicationcontrollers"),
            ("batch", "v1", "CronJob", "cronjobs"),
            (
                "autoscaling",
                "v2",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
            ),
        ]);
        let owns: Vec<String> = extra
            .kinds()
            .map(|k| format!("{}/{}", k.api_version(), k.kind))
            .collect();
        let template =
            || json!({"metadata": {"labels": {"app": "evil"}}, "spec": deployment_spec()});
        // A workload whose spec is `spec` with a good pod template where the kind has one.
        let workload = |api_version: &str, kind: &str, spec: Value| {
            let mut spec = spec;
            match kind {
                "CronJob" => {
                    spec["schedule"] = json!("* * * * *");
                    spec["concurrencyPolicy"] = json!("Forbid");
                    spec["jobTemplate"]["spec"]["template"] = template();
                }
                "HorizontalPodAutoscaler" => {}
                _ => spec["template"] = template(),
            }
            obj(
                json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "evil"},
                "spec": spec}),
            )
        };
        let affinity =
            |affinity: Value| deployment("evil", move |t| t["spec"]["affinity"] = affinity.clone());
        let web = deployment("web", |_| {});
        let hpa = |min: Value, max: Value| {
            workload(
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
                json!({
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": min, "maxReplicas": max}),
            )
        };
        let term = "spec.template.spec.affinity";
        // (object, rule, the refusal's start, whether a policy with maxReplicas 1000 and
        // crossNamespaceAffinity lets it through)
        let cases: Vec<(PluginObject, &str, String, bool)> = vec![
            (
                workload("apps/v1", "Deployment", json!({"replicas": 100_000})),
                "wasmop/maxReplicas",
                "Deployment/evil: spec.replicas: 100000 is over the policy's maxReplicas (64)"
                    .into(),
                false,
            ),
            (
                workload("apps/v1", "StatefulSet", json!({"replicas": 65})),
                "wasmop/maxReplicas",
                "StatefulSet/evil: spec.replicas: 65 is over the policy's maxReplicas (64)".into(),
                true,
            ),
            (
                workload("apps/v1", "StatefulSet", json!({"replicas": 1e3})),
                "wasmop/maxReplicas",
                "StatefulSet/evil: spec.replicas: 1000.0 is over".into(),
                true,
            ),
            (
                workload("apps/v1", "Deployment", json!({"replicas": "100000"})),
                "wasmop/maxReplicas",
                "Deployment/evil: spec.replicas: \"100000\" is not a number".into(),
                false,
            ),
            (
                workload("apps/v1", "Deployment", json!({"replicas": 2.5})),
                "wasmop/maxReplicas",
                "Deployment/evil: spec.replicas: 2.5 is not a count of pods".into(),
                false,
            ),
            (
                workload("apps/v1", "ReplicaSet", json!({"replicas": 500})),
                "wasmop/maxReplicas",
                "ReplicaSet/evil: spec.replicas: 500 is over".into(),
                true,
            ),
            (
                workload("v1", "ReplicationController", json!({"replicas": 500})),
                "wasmop/maxReplicas",
                "ReplicationController/evil: spec.replicas: 500 is over".into(),
                true,
            ),
            (
                workload(
                    "batch/v1",
                    "Job",
                    json!({"parallelism": 1000, "completions": 1000}),
                ),
                "wasmop/maxReplicas",
                "Job/evil: spec.parallelism: 1000 is over".into(),
                true,
            ),
            (
                workload(
                    "batch/v1",
                    "CronJob",
                    json!({"jobTemplate": {"spec": {"parallelism": 1000}}}),
                ),
                "wasmop/maxReplicas",
                "CronJob/evil: spec.jobTemplate.spec.parallelism: 1000 is over".into(),
                true,
            ),
            (
                hpa(json!(1), json!(1000)),
                "wasmop/maxReplicas",
                "HorizontalPodAutoscaler/evil: spec.maxReplicas: 1000 is over".into(),
                true,
            ),
            (
                affinity(
                    json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}},
                     "namespaces": ["ns", "team-b"]}]}}),
                ),
                "wasmop/podAffinityNamespaces",
                format!(
                    "Deployment/evil: {term}.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[1]: \"team-b\" is not the pod's own namespace \"ns\""
                ),
                true,
            ),
            (
                affinity(
                    json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                     "namespaceSelector": {}}}]}}),
                ),
                "wasmop/podAffinityNamespaces",
                format!(
                    "Deployment/evil: {term}.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaceSelector: "
                ),
                true,
            ),
        ];
        let open = PlanPolicy {
            max_replicas: 1000,
            scheduling: Scheduling {
                cross_namespace_affinity: true,
                ..Scheduling::default()
            },
            ..extra.clone()
        };
        let mut wrong = Vec::new();
        for (object, rule, start, relaxed) in cases {
            let plan = vec![web.clone(), object];
            match check(&extra, KV, "ns", &owns, plan.clone()) {
                Ok(_) => wrong.push(format!("{start}: accepted")),
                Err(err) => {
                    let text = err.to_string();
                    if err.rule != rule || !text.starts_with(&format!("plan rejected: {start}")) {
                        wrong.push(format!("{start}: wrong refusal {} {text}", err.rule));
                    }
                }
            }
            if check(&open, KV, "ns", &owns, plan).is_ok() != relaxed {
                wrong.push(format!(
                    "{start}: the open policy does not decide as it should"
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));

        // Up to the bound, and same-namespace affinity, pass by default.
        let fine = vec![
            web.clone(),
            workload("apps/v1", "StatefulSet", json!({"replicas": 64})),
            workload(
                "batch/v1",
                "Job",
                json!({"parallelism": 64, "completions": 100_000}),
            ),
            hpa(json!(2), json!(64)),
            affinity(
                json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "namespaces": ["ns"]},
                {"topologyKey": "topology.kubernetes.io/zone", "namespaces": [], "namespaceSelector": null}]}}),
            ),
        ];
        // (Distinct names: the StatefulSet, Job and affinity Deployment are all `evil` of
        // different kinds, which a plan may hold.)
        check(&extra, KV, "ns", &owns, fine).expect("within the defaults");

        // Backup Jobs get both rules; their check does not know the namespace, so a term may
        // name none.
        let none = BTreeSet::new();
        let job = |spec: Value| workload("batch/v1", "Job", spec);
        let err = check_job(
            &PlanPolicy::default(),
            KV,
            "s1",
            &job(json!({"parallelism": 65})),
            &none,
            &none,
        )
        .expect_err("parallelism");
        assert_eq!(err.rule, "wasmop/maxReplicas", "{err}");
        let mut named = job(json!({})).to_value();
        named["spec"]["template"]["spec"]["affinity"] = json!({"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "namespaces": ["ns"]}]}});
        let err = check_job(&PlanPolicy::default(), KV, "s1", &obj(named), &none, &none)
            .expect_err("namespaces");
        assert_eq!(err.rule, "wasmop/podAffinityNamespaces", "{err}");
    }

    /// The pod spec of [`deployment`]'s template.
    fn deployment_spec() -> Value {
        let object = deployment("x", |_| {}).to_value();
        object["spec"]["template"]["spec"].clone()
    }

    /// Backup Jobs get the claim rules: their pods mount the claims labelled with the App (the
    /// host's claim cache) and ephemeral claims as a plan's pods do, and their ephemeral claims
    /// may carry the slot label as the Job does.
    #[test]
    fn backup_jobs_mount_only_the_apps_claims() {
        let job = |volume: Value| {
            obj(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"},
                "spec": {"template": {"spec": {
                    "automountServiceAccountToken": false, "restartPolicy": "Never",
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "b", "image": "i", "securityContext":
                        {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
                    "volumes": [volume],
                }}}}),
            )
        };
        let accounts = BTreeSet::new();
        let claims = BTreeSet::from(["kv-backups".to_string()]);
        let run = |volume: Value| {
            check_job(
                &PlanPolicy::default(),
                KV,
                "s1",
                &job(volume),
                &accounts,
                &claims,
            )
        };
        run(json!({"name": "b", "persistentVolumeClaim": {"claimName": "kv-backups"}}))
            .expect("the App's claim");
        run(
            json!({"name": "b", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels":
            {"wasmop.dev/app": "kv", "wasmop.dev/backup-slot": "s1"}}, "spec": {}}}}),
        )
        .expect("the slot's label");
        let err =
            run(json!({"name": "b", "persistentVolumeClaim": {"claimName": "shared-backups"}}))
                .expect_err("not the App's");
        assert_eq!(err.rule, "wasmop/claimSource", "{err}");
        assert!(
            err.to_string().starts_with("plan rejected: Job/b: spec.template.spec.volumes[0].persistentVolumeClaim.claimName: \"shared-backups\" is not a claim this App creates"),
            "{err}"
        );
        let err = run(json!({"name": "b", "ephemeral": {"volumeClaimTemplate": {"spec": {"volumeName": "pv-1"}}}}))
            .expect_err("an existing volume");
        assert_eq!(err.rule, "wasmop/claimSource", "{err}");
    }

    /// What the rules allow beside what they refuse: a plan's own planned claims,
    /// node-condition tolerations, and under a policy the relaxed fields.
    #[test]
    fn a_plan_mounts_its_own_claims_and_policies_relax_scheduling() {
        let claim = obj(
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "kv-backups"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        );
        let sts = obj(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "kv"},
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}}),
        );
        let mounts = |claim: &str| {
            let claim = claim.to_string();
            deployment("d", move |t| {
                t["spec"]["volumes"] =
                    json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]);
                t["spec"]["tolerations"] = json!([{"key": "node.kubernetes.io/unreachable",
                    "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]);
            })
        };
        check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &all(),
            vec![claim.clone(), sts.clone(), mounts("kv-backups")],
        )
        .expect("a planned claim");
        // A name shaped like the StatefulSet's claims is no proof (another App's
        // `data-billing-kv-0` is template `data-billing` of the set `kv`).
        for name in ["data-kv-0", "data-billing-kv-0"] {
            let err = check(
                &PlanPolicy::default(),
                KV,
                "ns",
                &all(),
                vec![claim.clone(), sts.clone(), mounts(name)],
            )
            .expect_err(name);
            assert_eq!(err.rule, "wasmop/claimSource", "{err}");
        }
        let err = check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &all(),
            vec![sts.clone(), mounts("kv-backups")],
        )
        .expect_err("not planned");
        assert_eq!(err.rule, "wasmop/claimSource");
        assert!(
            err.reason
                .contains("a pod may mount only a claim the same plan holds"),
            "{err}"
        );

        let pinned = deployment("d", |t| {
            t["spec"]["priorityClassName"] = json!("system-cluster-critical");
            t["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""});
            t["spec"]["tolerations"] =
                json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]);
            t["spec"]["runtimeClassName"] = json!("kata");
            t["spec"]["schedulerName"] = json!("volcano");
            t["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "namespaceSelector": {}}]}});
        });
        check(
            &PlanPolicy::default(),
            KV,
            "ns",
            &all(),
            vec![pinned.clone()],
        )
        .expect_err("by default");
        let open = PlanPolicy {
            scheduling: Scheduling {
                priority_classes: Some(vec!["system-cluster-critical".into()]),
                tolerations: vec!["node-role.kubernetes.io/control-plane".into()],
                node_labels: vec!["node-role.kubernetes.io/control-plane".into()],
                runtime_classes: vec!["kata".into()],
                schedulers: vec!["volcano".into()],
                cross_namespace_affinity: true,
            },
            ..PlanPolicy::default()
        };
        check(&open, KV, "ns", &all(), vec![pinned]).expect("the policy lists each");
    }

    /// With Secrets allowed, pull secrets and a ServiceAccount's Secrets pass; a bare Pod's
    /// allowed AppArmor annotation passes too, and its metadata is still checked as `metadata`.
    #[test]
    fn allowed_secrets_and_a_bare_pods_metadata() {
        let open = PlanPolicy {
            allow_secrets: true,
            ..with_extra(&[("", "v1", "Pod", "pods")])
        };
        let mut owns = all();
        owns.push("v1/Pod".into());
        let sa = obj(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "s"},
            "imagePullSecrets": [{"name": "r"}], "secrets": [{"name": "x"}]}),
        );
        let pulls = deployment("d", |t| {
            t["spec"]["imagePullSecrets"] = json!([{"name": "r"}])
        });
        check(&open, KV, "ns", &owns, vec![sa, pulls]).expect("Secrets allowed");
        let pod = |annotations: Value| {
            obj(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "annotations": annotations}, "spec": deployment_spec()}))
        };
        check(
            &open,
            KV,
            "ns",
            &owns,
            vec![pod(json!({
            "container.apparmor.security.beta.kubernetes.io/main": "runtime/default"}))],
        )
        .expect("an allowed profile");
        let err = check(
            &open,
            KV,
            "ns",
            &owns,
            vec![pod(json!({"wasmop.dev/x": "y"}))],
        )
        .expect_err("host annotation");
        assert!(
            err.reason
                .starts_with("metadata.annotations[\"wasmop.dev/x\"]"),
            "{err}"
        );
    }
}
