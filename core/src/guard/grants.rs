//! The guard's rule on planned ServiceAccounts: a plan may not create a ServiceAccount that an
//! RBAC binding already names. RBAC grants rights to a ServiceAccount by namespace and name,
//! whether or not the account exists (a binding may be written before its account, or outlive
//! it), so whoever creates an account of that name gets the binding's rights with it; an App
//! author would get them through the host, which may create ServiceAccounts where the author
//! may not. The host's executor already refuses to adopt an existing account it does not
//! manage, so what is left is the account a binding names but nobody has created yet (or
//! anymore), and a binding written later for an account the App created.
//!
//! A binding grants to the App's account on purpose when it carries the annotation
//! [`GRANTS_APP`] with the value `<namespace>/<app>`: the cluster admin (or whoever may write
//! RBAC in the namespace) says which App the rights are for. A binding to a group
//! (`system:serviceaccounts:<namespace>`, `system:serviceaccounts`, `system:authenticated`)
//! grants to every account of the namespace, the App's among them, as it does to any account
//! created there: that grant is the binding author's choice for the whole namespace and is not
//! checked.
//!
//! Upstream: RBAC's authorizer matches a ServiceAccount subject by name and namespace (an empty
//! namespace in a RoleBinding's subject means the binding's own,
//! `k8s.io/kubernetes/pkg/registry/rbac/validation/rule.go`, `appliesToUser`), and the RBAC
//! docs warn that "ServiceAccount ... bindings can be created before the ServiceAccount".

use std::collections::BTreeMap;

use k8s_openapi::{
    api::rbac::v1::{ClusterRoleBinding, RoleBinding, Subject},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::GuardError;
use crate::object::PluginObject;

/// The annotation on a RoleBinding or ClusterRoleBinding that grants its rights to the
/// ServiceAccounts of one App (`<namespace>/<app>`), which may then plan them.
pub const GRANTS_APP: &str = "wasmop.dev/grants-app";

/// The ServiceAccounts of one namespace that bindings name, each with the words that say
/// which binding (for an App's status: a RoleBinding of another namespace, or a
/// ClusterRoleBinding, is not named, as the App's author may not read it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bound(BTreeMap<String, Naming>);

/// Which binding names an account.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Naming {
    /// How a message names the binding.
    words: String,
    /// Whether only RoleBindings of other namespaces name it (see [`Bound::keep_owned`]).
    foreign: bool,
}

impl Bound {
    /// The accounts of `namespace` that `role_bindings` and `cluster_role_bindings` name,
    /// leaving out the bindings that grant to the App `app` on purpose ([`GRANTS_APP`]).
    pub fn of<'a>(
        role_bindings: impl IntoIterator<Item = &'a RoleBinding>,
        cluster_role_bindings: impl IntoIterator<Item = &'a ClusterRoleBinding>,
        namespace: &str,
        app: &str,
    ) -> Self {
        let grantee = format!("{namespace}/{app}");
        let for_app = |meta: &ObjectMeta| {
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(GRANTS_APP))
                .is_some_and(|value| value.trim() == grantee)
        };
        let mut bound: BTreeMap<String, Naming> = BTreeMap::new();
        // The words are made only for a binding that names an account here: every binding of
        // the cluster is read for every App.
        let mut name_by = |name: String, words: &dyn Fn() -> String, foreign: bool| {
            let naming = bound.entry(name).or_insert_with(|| Naming {
                words: words(),
                foreign,
            });
            if naming.foreign && !foreign {
                *naming = Naming {
                    words: words(),
                    foreign,
                };
            }
        };
        for binding in role_bindings {
            if for_app(&binding.metadata) {
                continue;
            }
            let home = binding.metadata.namespace.clone().unwrap_or_default();
            let foreign = home != namespace;
            let words = || match foreign {
                false => format!("RoleBinding {}", name_any(&binding.metadata)),
                true => "a RoleBinding of another namespace".to_string(),
            };
            for name in accounts(binding.subjects.as_deref(), &home, namespace) {
                name_by(name, &words, foreign);
            }
        }
        for binding in cluster_role_bindings {
            if for_app(&binding.metadata) {
                continue;
            }
            // A ClusterRoleBinding's ServiceAccount subject must name its namespace.
            for name in accounts(binding.subjects.as_deref(), "", namespace) {
                name_by(name, &|| "a ClusterRoleBinding".to_string(), false);
            }
        }
        Self(bound)
    }

    /// Which binding names the account `name`, if one does.
    pub fn binding_of(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(|n| n.words.as_str())
    }

    /// Forgets the accounts in `owned` (those the App already runs) that only other
    /// namespaces' RoleBindings name. Whoever administers another namespace may name any
    /// account there; counting that against an account the App already has would let one
    /// tenant freeze another's App (and, under `enforcement: Remove`, have its account
    /// deleted). An account not created yet stays held: that is a grant waiting for a name.
    pub fn keep_owned<'a>(&mut self, owned: impl IntoIterator<Item = &'a str>) {
        for name in owned {
            if self.0.get(name).is_some_and(|n| n.foreign) {
                self.0.remove(name);
            }
        }
    }
}

/// The object's name, or its `generateName` (`kube::ResourceExt::name_any`, without kube).
fn name_any(metadata: &ObjectMeta) -> String {
    metadata
        .name
        .clone()
        .or_else(|| metadata.generate_name.clone())
        .unwrap_or_default()
}

/// The names of the ServiceAccounts of `namespace` among `subjects` of a binding in `home`
/// (`""` for a ClusterRoleBinding): `ServiceAccount` subjects, and `User` subjects named as an
/// account's token authenticates (`system:serviceaccount:<namespace>:<name>`), which RBAC
/// matches by that user name.
fn accounts<'a>(
    subjects: Option<&'a [Subject]>,
    home: &'a str,
    namespace: &'a str,
) -> impl Iterator<Item = String> + 'a {
    subjects
        .unwrap_or_default()
        .iter()
        .filter_map(move |s| match s.kind.as_str() {
            "ServiceAccount" => {
                let subject_namespace = match s.namespace.as_deref() {
                    Some(ns) if !ns.is_empty() => ns,
                    _ => home,
                };
                (subject_namespace == namespace).then(|| s.name.clone())
            }
            "User" => {
                let (ns, name) = s
                    .name
                    .strip_prefix("system:serviceaccount:")?
                    .split_once(':')?;
                (ns == namespace).then(|| name.to_string())
            }
            _ => None,
        })
}

/// The first planned ServiceAccount a binding names, as the guard's error.
pub fn check(objects: &[PluginObject], bound: &Bound) -> Result<(), GuardError> {
    let found = objects
        .iter()
        .filter(|o| o.kind() == "ServiceAccount" && o.api_version() == "v1")
        .find_map(|o| Some((o.name(), bound.binding_of(o.name())?)));
    match found {
        None => Ok(()),
        Some((name, binding)) => Err(GuardError {
            object: format!("ServiceAccount/{name}"),
            rule: RULE.into(),
            reason: reason(name, binding),
        }),
    }
}

/// A backup Job's pods may not run as an account a binding names either (the plan's accounts
/// are checked as they are planned; this holds when a binding came later).
pub fn check_job(job: &PluginObject, bound: &Bound) -> Result<(), GuardError> {
    let spec = job
        .field("spec")
        .ok()
        .flatten()
        .unwrap_or(serde_json::Value::Null);
    let pod = spec.pointer("/template/spec");
    let account = ["serviceAccountName", "serviceAccount"]
        .into_iter()
        .filter_map(|field| pod?.get(field)?.as_str())
        // `default` runs without a token (see `pods`), so a binding to it lends the pod nothing.
        .filter(|name| *name != "default")
        .find_map(|name| Some((name, bound.binding_of(name)?)));
    match account {
        None => Ok(()),
        Some((name, binding)) => Err(GuardError {
            object: format!("{}/{}", job.kind(), job.name()),
            rule: RULE.into(),
            reason: format!(
                "spec.template.spec.serviceAccountName: {}",
                reason(name, binding)
            ),
        }),
    }
}

/// Why a live ServiceAccount `name` breaks the rule, if it does.
pub fn violation(name: &str, bound: &Bound) -> Option<String> {
    let binding = bound.binding_of(name)?;
    Some(format!(
        "ServiceAccount/{name}: {} ({RULE})",
        reason(name, binding)
    ))
}

const RULE: &str = "wasmop/serviceAccountBinding";

fn reason(name: &str, binding: &str) -> String {
    format!(
        "{binding} names ServiceAccount {name:?}, so creating the account would hand its rights \
         to this App; plan another name, or annotate the binding {GRANTS_APP}: <namespace>/<app> \
         (for an instance of a bound kind <namespace>/<Kind>.<group>/<name>) if the rights are \
         meant for it"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn role_binding(namespace: &str, name: &str, subjects: serde_json::Value) -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": subjects,
        }))
        .expect("a RoleBinding")
    }

    fn cluster_binding(subjects: serde_json::Value) -> ClusterRoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": "ci-cluster-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": subjects,
        }))
        .expect("a ClusterRoleBinding")
    }

    fn sa(name: &str) -> PluginObject {
        PluginObject::parse(
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
                .to_string(),
        )
        .expect("an object")
    }

    /// Every way a binding names an account of the App's namespace counts; other namespaces'
    /// accounts, users, groups and the App's own grant do not.
    #[test]
    fn bindings_name_accounts_by_namespace_and_name() {
        let rbs = [
            // No namespace in the subject: the binding's own.
            role_binding(
                "team-a",
                "deployer",
                json!([{"kind": "ServiceAccount", "name": "ci"}]),
            ),
            // Another namespace's binding granting there to an account of team-a.
            role_binding(
                "team-b",
                "reader",
                json!([{"kind": "ServiceAccount", "name": "reader", "namespace": "team-a"}]),
            ),
            // team-b's own account, a user and a group: not accounts of team-a.
            role_binding(
                "team-b",
                "own",
                json!([
                    {"kind": "ServiceAccount", "name": "own"},
                    {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
                    {"kind": "Group", "name": "system:serviceaccounts:team-a", "apiGroup": "rbac.authorization.k8s.io"},
                ]),
            ),
        ];
        let crbs = [cluster_binding(json!([
            {"kind": "ServiceAccount", "name": "admin", "namespace": "team-a"},
            // RBAC matches a User subject against the name an account's token carries.
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                "name": "system:serviceaccount:team-a:root"},
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                "name": "system:serviceaccount:team-b:elsewhere"},
        ]))];
        let bound = Bound::of(&rbs, &crbs, "team-a", "kv");
        assert_eq!(bound.binding_of("ci"), Some("RoleBinding deployer"));
        assert_eq!(
            bound.binding_of("reader"),
            Some("a RoleBinding of another namespace")
        );
        assert_eq!(bound.binding_of("admin"), Some("a ClusterRoleBinding"));
        assert_eq!(bound.binding_of("root"), Some("a ClusterRoleBinding"));
        for free in ["own", "alice", "kv", "default", "elsewhere"] {
            assert_eq!(bound.binding_of(free), None, "{free}");
        }

        let err = check(&[sa("kv"), sa("admin")], &bound).expect_err("a bound account");
        assert_eq!(err.object, "ServiceAccount/admin");
        assert_eq!(err.rule, RULE);
        assert!(
            err.reason
                .contains("a ClusterRoleBinding names ServiceAccount \"admin\""),
            "{}",
            err.reason
        );
        check(&[sa("kv")], &bound).expect("an account no binding names");
    }

    /// The annotation grants to one App only: the same binding still binds for any other.
    #[test]
    fn a_binding_for_the_app_lets_it_plan_the_account() {
        let mut rb = role_binding(
            "team-a",
            "deployer",
            json!([{"kind": "ServiceAccount", "name": "ci"}]),
        );
        rb.metadata.annotations = Some([(GRANTS_APP.to_string(), "team-a/kv".to_string())].into());
        let rbs = [rb];
        assert_eq!(Bound::of(&rbs, [], "team-a", "kv"), Bound::default());
        assert!(
            Bound::of(&rbs, [], "team-a", "other")
                .binding_of("ci")
                .is_some()
        );
        // Only the namespace/app pair: the bare App name would let another namespace's App
        // of the same name claim it.
        let mut bare = rbs[0].clone();
        bare.metadata.annotations = Some([(GRANTS_APP.to_string(), "kv".to_string())].into());
        assert!(
            Bound::of([&bare], [], "team-a", "kv")
                .binding_of("ci")
                .is_some()
        );
        assert!(violation("ci", &Bound::of([&bare], [], "team-a", "kv")).is_some());
    }

    /// A backup Job runs as an account the plan created; one a binding names since is refused.
    #[test]
    fn a_backup_job_may_not_run_as_a_bound_account() {
        let rbs = [role_binding(
            "team-a",
            "deployer",
            json!([{"kind": "ServiceAccount", "name": "ci"}]),
        )];
        let bound = Bound::of(&rbs, [], "team-a", "kv");
        let job = |account: &str| {
            PluginObject::parse(
                &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"},
                    "spec": {"template": {"spec": {"serviceAccountName": account}}}})
                .to_string(),
            )
            .expect("a Job")
        };
        let err = check_job(&job("ci"), &bound).expect_err("a bound account");
        assert!(
            err.reason
                .contains("RoleBinding deployer names ServiceAccount \"ci\""),
            "{}",
            err.reason
        );
        check_job(&job("backup"), &bound).expect("an unbound account");
    }

    /// Another namespace's RoleBinding holds an account the App has not created yet, but not
    /// one it already runs; the App's own namespace's and cluster bindings hold either.
    #[test]
    fn another_namespaces_binding_cannot_freeze_an_account_the_app_runs() {
        let rbs = [
            role_binding(
                "team-b",
                "grab",
                json!([{"kind": "ServiceAccount", "name": "kv", "namespace": "team-a"},
                    {"kind": "ServiceAccount", "name": "new", "namespace": "team-a"}]),
            ),
            role_binding(
                "team-a",
                "own",
                json!([{"kind": "ServiceAccount", "name": "ci"}]),
            ),
        ];
        let mut bound = Bound::of(&rbs, [], "team-a", "kv");
        bound.keep_owned(["kv", "ci"]);
        assert_eq!(bound.binding_of("kv"), None);
        assert_eq!(
            bound.binding_of("new"),
            Some("a RoleBinding of another namespace")
        );
        assert_eq!(bound.binding_of("ci"), Some("RoleBinding own"));
    }
}
