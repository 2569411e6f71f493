//! Guard: the host's check of everything a plugin asks it to create, before anything is
//! applied. A plugin is untrusted code chosen by the App's author, so its objects are held to
//! what the namespace's [`Policy`] allows: every object of an allowed kind, in the App's
//! namespace, well named, unique and bounded in size, with no metadata the host owns
//! ([`fields::metadata`]), no Service exposure or claim on existing volumes beyond the policy
//! ([`fields`]), and every pod template within the policy's Pod Security Standards level and
//! wasmop's own pod rules ([`pods`]). A plan that breaks any rule is rejected whole, with an
//! error naming the object, the field and the rule. Backup Jobs go through [`check_job`], the
//! same rules.

mod fields;
mod pods;

use std::{borrow::Cow, collections::BTreeSet};

use serde_json::Value;
use wasmop_core::{Failure, PlanCheck};

use super::{fetch::BACKUP_SLOT_LABEL, pod_security::Level};
use crate::plugin::{
    object::PluginObject,
    source::{OciRules, SourceRef, is_dns_subdomain, is_under, repository_of},
};

/// What plugins may create in a namespace. [`Policy::default`] is the built-in default:
/// `restricted`, no Secrets, ClusterIP Services only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The Pod Security Standards level every pod template must meet.
    pub pod_security: Level,
    /// Whether pods may use Secrets (volumes, `envFrom`, `secretKeyRef`).
    pub allow_secrets: bool,
    /// Service types a plan may use (`ClusterIP` covers headless Services).
    pub service_types: Vec<String>,
    /// Kinds a plan may hold beyond [`PLANNABLE`].
    pub extra_kinds: Vec<Kind>,
    /// Where OCI plugins may come from: prefixes of `registry/repository` (`None`: anywhere).
    pub registries: Option<Vec<String>>,
    /// Whether plugins may come from ConfigMaps in the App's namespace.
    pub config_map_sources: bool,
    /// Whose credentials OCI plugins are read with, and whose signatures they need.
    pub oci: OciRules,
}

impl Policy {
    /// Whether an App may load its plugin from `source`, or why not.
    pub fn allows_source(&self, source: &SourceRef) -> Result<(), String> {
        match source {
            SourceRef::Oci(oci) => {
                let Some(prefixes) = &self.registries else {
                    return Ok(());
                };
                let repository = repository_of(&oci.reference)
                    .ok_or_else(|| format!("invalid OCI reference {:?}", oci.reference))?;
                if prefixes.iter().any(|p| is_under(&repository, p)) {
                    Ok(())
                } else {
                    Err(format!(
                        "{repository} is not under a registry the policy allows ({})",
                        prefixes.join(", ")
                    ))
                }
            }
            // Only OCI artifacts carry signatures.
            SourceRef::ConfigMap { .. } | SourceRef::File(_) if !self.oci.keys.is_empty() => Err(
                "the policy requires plugins signed by one of its keys (spec.verify), \
                     and only OCI images carry signatures"
                    .into(),
            ),
            SourceRef::ConfigMap { .. } if !self.config_map_sources => {
                Err("the policy does not allow plugins from ConfigMaps".into())
            }
            SourceRef::ConfigMap { .. } | SourceRef::File(_) => Ok(()),
        }
    }

    /// Every kind a plan may hold under this policy.
    pub fn kinds(&self) -> impl Iterator<Item = &Kind> {
        PLANNABLE.iter().chain(&self.extra_kinds)
    }

    /// The kind of `api_version`/`kind`, if a plan may hold it.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&Kind> {
        self.kinds().find(|k| k.is_kind_of(api_version, kind))
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            pod_security: Level::Restricted,
            allow_secrets: false,
            service_types: vec!["ClusterIP".into()],
            extra_kinds: Vec::new(),
            registries: None,
            config_map_sources: true,
            oci: OciRules::default(),
        }
    }
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

/// A kind plugins may plan, and how the host reaches it.
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
    /// How the API server is reached for this kind.
    pub fn api_resource(&self) -> kube::api::ApiResource {
        kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(&self.group, &self.version, &self.kind),
            &self.plural,
        )
    }

    /// A kind the host knows at compile time.
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
    /// asks for every object of every plan).
    pub fn is_kind_of(&self, api_version: &str, kind: &str) -> bool {
        self.kind == kind
            && match api_version.split_once('/') {
                Some((group, version)) => self.group == group && self.version == version,
                None => self.group.is_empty() && self.version == api_version,
            }
    }
}

/// What a plan may contain under every policy. A planned PersistentVolumeClaim (say, for
/// backups) is applied but never pruned: claims are deleted only through `finalize`. Further
/// kinds only as a [`PluginPolicy`](crate::policy::PluginPolicy) adds them (`extraKinds`);
/// RBAC, wasmop's own kinds and cluster-scoped objects never.
pub const PLANNABLE: &[Kind] = &[
    Kind::builtin("apps", "v1", "StatefulSet", "statefulsets"),
    Kind::builtin("apps", "v1", "Deployment", "deployments"),
    Kind::builtin("", "v1", "Service", "services"),
    Kind::builtin("", "v1", "ConfigMap", "configmaps"),
    Kind::builtin("", "v1", "ServiceAccount", "serviceaccounts"),
    Kind::builtin(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
    Kind::builtin("batch", "v1", "Job", "jobs"),
    Kind::builtin("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
];

/// Most objects planned for one App.
pub const MAX_OBJECTS: usize = 64;
/// Largest planned object as the plugin wrote it; etcd's own limit is 1.5 MiB.
pub const MAX_OBJECT_BYTES: usize = 512 << 10;

/// The guard for one App under one policy, as the decision core's [`PlanCheck`].
#[derive(Debug, Clone)]
pub struct AppCheck {
    /// The namespace's rules.
    pub policy: Policy,
    /// `PluginPolicy <name>` or `the built-in default policy`, for messages.
    pub policy_name: String,
    /// The App's name.
    pub app: String,
    /// The App's namespace.
    pub namespace: String,
    /// The plugin's declared `owns` kinds (`apiVersion/Kind`).
    pub owns: Vec<String>,
}

impl PlanCheck for AppCheck {
    fn check_plan(&self, objects: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure> {
        check(
            &self.policy,
            &self.app,
            &self.namespace,
            &self.owns,
            objects,
        )
        .map(|guarded| guarded.into_iter().map(|g| g.object).collect())
        .map_err(|err| {
            Failure::new(
                "PlanRejected",
                format!("{err} (under {})", self.policy_name),
            )
        })
    }

    fn check_backup_job(
        &self,
        slot: &str,
        job: &PluginObject,
        accounts: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        check_job(&self.policy, &self.app, slot, job, accounts).map_err(|err| {
            Failure::new(
                "PlanRejected",
                format!("{err} (under {})", self.policy_name),
            )
        })
    }

    fn prunable(&self, api_version: &str, kind: &str) -> bool {
        self.policy.kind(api_version, kind).is_some()
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

/// The rules that read past `metadata`: pod templates, Services, claims, `status`. `accounts`
/// are the ServiceAccounts the App's pods may run as.
fn check_body(
    policy: &Policy,
    host_labels: &[(&str, &str)],
    object: &PluginObject,
    accounts: &BTreeSet<String>,
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
    };
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
        // moved, and its metadata was checked above.
        let template = match at.strip_prefix("spec.") {
            Some(inner) => at_path(&spec, inner)
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
            None => Value::Object(serde_json::Map::from_iter([("spec".to_string(), spec)])),
        };
        if let Some(meta) = template.get("metadata").and_then(Value::as_object)
            && let Some(breach) = fields::metadata(meta, &format!("{at}.metadata"), host_labels)
        {
            return Err(breach);
        }
        if let Some(breach) = pods::check(policy, &template, at, accounts) {
            return Err(breach);
        }
    }
    Ok(())
}

/// Checks the backup Job for `slot` the plugin asked for, by the same rules as a planned
/// object; its pods may run as the ServiceAccounts in `accounts` (those the App's plan
/// created), and it may carry the slot's label.
pub fn check_job(
    policy: &Policy,
    app: &str,
    slot: &str,
    job: &PluginObject,
    accounts: &BTreeSet<String>,
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
    let host_labels = [(fields::APP_LABEL, app), (BACKUP_SLOT_LABEL, slot)];
    check_body(policy, &host_labels, job, accounts)
        .map_err(|b| reject(b.rule, format!("{}: {}", b.path, b.reason)))
}

/// Checks every object of a plan for the App `app` in `namespace` against `policy`; `owns`
/// are the kinds (`apiVersion/kind`) the plugin's metadata declares it plans, and a plan may
/// hold no other.
pub fn check(
    policy: &Policy,
    app: &str,
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
    // Pods may run as the ServiceAccounts this plan creates (and `default`, see `pods`).
    let accounts: BTreeSet<String> = objects
        .iter()
        .filter(|o| o.kind() == "ServiceAccount" && o.api_version() == "v1")
        .map(|o| o.name().to_string())
        .collect();
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
        check_body(policy, &[(fields::APP_LABEL, app)], &object, &accounts).map_err(|b| {
            GuardError {
                object: format!("{}/{name}", object.kind()),
                rule: b.rule,
                reason: format!("{}: {}", b.path, b.reason),
            }
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

    fn obj(value: Value) -> PluginObject {
        PluginObject::parse(&value.to_string()).expect("test objects are plugin objects")
    }

    /// Every plannable kind, as a plugin that declares them all would list them.
    fn all() -> Vec<String> {
        PLANNABLE
            .iter()
            .map(|k| format!("{}/{}", k.api_version(), k.kind))
            .collect()
    }

    #[test]
    fn a_plan_holds_only_the_kinds_the_plugin_declares() {
        let owns = vec!["v1/ConfigMap".to_string()];
        check(&Policy::default(), "kv", "ns", &owns, vec![cm("a")]).expect("declared");
        let sa =
            obj(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "s"}}));
        let err = check(&Policy::default(), "kv", "ns", &owns, vec![cm("a"), sa])
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
        let guarded = check(&Policy::default(), "kv", "ns", &all(), plan).expect("passes");
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
                &Policy::default(),
                "kv",
                "ns",
                &all(),
                vec![cm("fine"), object],
            )
            .expect_err(reason);
            assert_eq!(err.object, name);
            assert!(err.reason.contains(reason), "{err}");
        }
        let err = check(
            &Policy::default(),
            "kv",
            "ns",
            &all(),
            vec![cm("a"), cm("a")],
        )
        .expect_err("duplicate");
        assert_eq!(err.to_string(), "plan rejected: ConfigMap/a: planned twice");
        let err = check(
            &Policy::default(),
            "kv",
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
        let policy = Policy::default();
        check(
            &policy,
            "kv",
            "ns",
            &all(),
            vec![deployment("good", |_| {})],
        )
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
                check(&policy, "kv", "ns", &all(), vec![cm("fine"), object]).expect_err(message);
            assert_eq!(err.rule, rule, "{err}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("plan rejected: {message}")),
                "{text}"
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
            &Policy::default(),
            "kv",
            "ns",
            &all(),
            vec![sa, uses.clone()],
        )
        .expect("own SA");
        let err =
            check(&Policy::default(), "kv", "ns", &all(), vec![uses]).expect_err("SA not planned");
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
        check_job(&Policy::default(), "kv", "s1", &job(fine), &BTreeSet::new()).expect("fine");
        let root = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0});
        let err = check_job(&Policy::default(), "kv", "s1", &job(root), &BTreeSet::new())
            .expect_err("root");
        assert_eq!(err.rule, "podSecurity/runAsUser", "{err}");
        let cm = cm("not-a-job");
        assert!(check_job(&Policy::default(), "kv", "s1", &cm, &BTreeSet::new()).is_err());
    }

    #[test]
    fn sources_are_held_to_the_policy_registries_on_path_boundaries() {
        use crate::plugin::source::OciRef;
        let policy = Policy {
            registries: Some(vec![
                "ghcr.io/acme".into(),
                "127.0.0.1:15000/plugins/".into(),
            ]),
            config_map_sources: false,
            ..Policy::default()
        };
        let oci = |r: &str| SourceRef::Oci(OciRef::anonymous(r));
        assert!(policy.allows_source(&oci("ghcr.io/acme/cache:1")).is_ok());
        assert!(policy.allows_source(&oci("ghcr.io/acme/team/db@sha256:0000000000000000000000000000000000000000000000000000000000000000")).is_ok());
        assert!(
            policy
                .allows_source(&oci("127.0.0.1:15000/plugins/kvstore:1.0"))
                .is_ok()
        );
        let err = policy
            .allows_source(&oci("ghcr.io/acme-evil/cache:1"))
            .expect_err("not on a boundary");
        assert!(
            err.contains("ghcr.io/acme-evil/cache is not under"),
            "{err}"
        );
        assert!(policy.allows_source(&oci("docker.io/library/x:1")).is_err());
        let cm = SourceRef::ConfigMap {
            namespace: "ns".into(),
            name: "p".into(),
            key: "plugin.wasm".into(),
        };
        assert!(policy.allows_source(&cm).is_err());
        assert!(Policy::default().allows_source(&cm).is_ok());
        assert!(
            Policy::default()
                .allows_source(&oci("anything.example/x:1"))
                .is_ok()
        );
        // A policy that wants signatures takes only what can carry one.
        let signed = Policy {
            oci: OciRules {
                keys: vec![crate::plugin::source::TrustedKey {
                    name: "release".into(),
                    pem: String::new(),
                }],
                ..OciRules::default()
            },
            ..Policy::default()
        };
        let err = signed.allows_source(&cm).expect_err("unsigned by nature");
        assert!(err.contains("spec.verify"), "{err}");
        assert!(signed.allows_source(&oci("ghcr.io/acme/x:1")).is_ok());
    }

    /// A policy adding `kinds` (`(group, version, kind, plural)`).
    fn with_extra(kinds: &[(&'static str, &'static str, &'static str, &'static str)]) -> Policy {
        Policy {
            extra_kinds: kinds
                .iter()
                .map(|(g, v, k, p)| Kind::builtin(g, v, k, p))
                .collect(),
            ..Policy::default()
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
        let err = check(&Policy::default(), "kv", "ns", &owns, vec![netpol.clone()])
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
        let guarded = check(&policy, "kv", "ns", &owns, vec![netpol]).expect("added by the policy");
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
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}}),
        );
        let err = check(&policy, "kv", "ns", &owns, vec![cronjob]).expect_err("privileged");
        assert!(
            err.reason.starts_with(
                "spec.jobTemplate.spec.template.spec.containers[0].securityContext.privileged"
            ),
            "{err}"
        );
        let labelled = obj(
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"metadata": {"labels": {"wasmop.dev/app": "other"}}}}}),
        );
        let err = check(&policy, "kv", "ns", &owns, vec![labelled]).expect_err("host label");
        assert!(
            err.reason.starts_with("spec.jobTemplate.metadata.labels"),
            "{err}"
        );

        let spec = hardened(&|s| s["volumes"] = json!([{"name": "r", "hostPath": {"path": "/"}}]));
        let pod = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}),
        );
        let err = check(&policy, "kv", "ns", &owns, vec![pod]).expect_err("hostPath");
        assert!(err.reason.starts_with("spec.volumes[0].hostPath"), "{err}");

        let token = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t",
            "annotations": {"kubernetes.io/service-account.name": "default"}},
            "type": "kubernetes.io/service-account-token"}),
        );
        let err = check(&policy, "kv", "ns", &owns, vec![token]).expect_err("minted token");
        assert_eq!(err.rule, "wasmop/secret-type", "{err}");
        let opaque = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "o"},
            "type": "Opaque", "stringData": {"k": "v"}}),
        );
        check(&policy, "kv", "ns", &owns, vec![opaque]).expect("an Opaque Secret");
    }
}
