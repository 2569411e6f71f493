//! The kind table: every built-in kind the host watches and what it does with it. From this one
//! list come the caches ([`Stores`], [`Cache`]), what a reconcile observes
//! ([`Stores::observe`]), the controller's triggers ([`start`]) and the cache-sync wait
//! ([`Stores::sync_waits`]); a test holds the install's RBAC to it. The kinds themselves, and
//! which of them every plan may hold ([`wasmop_core::kind::plannable`], the guard's), are the
//! decision core's ([`wasmop_core::kind`]); every plannable kind is a row here (a test says
//! so). Adding a built-in kind is one row here (and, if plans may hold it, one entry of
//! [`wasmop_core::kind::PLANNABLE`]), plus its verbs in `deploy/base/rbac.yaml` (the drift test
//! below says which).

use std::borrow::Cow;

use futures::{StreamExt, future::BoxFuture, stream::BoxStream};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    batch::v1::Job,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service, ServiceAccount},
    policy::v1::PodDisruptionBudget,
};
use kube::Client;

use serde_json::Value;
use wasmop_core::{
    kind::{self, Kind},
    observed::ObservedObject,
    stamp::AppRef,
};

use crate::controller::{
    cache::{Cache, CacheMetrics},
    reflect::{ParentKey, labelled_of, owner_of, reflect},
};

/// How the API server is reached for `kind`.
pub fn api_resource(kind: &Kind) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind),
        &kind.plural,
    )
}

/// Adds to `out` the objects of `cache` labelled for `parent`, as observed by the parent of
/// uid `uid`.
fn collect(out: &mut Vec<ObservedObject>, cache: &Cache, parent: &ParentKey, uid: &str) {
    for json in cache.children(parent) {
        // The cache holds what serde_json wrote; it reads back.
        let Ok(value) = serde_json::from_str::<Value>(&json) else {
            continue;
        };
        // Ownership, backup slot and the managedFields cut as for every observed object.
        out.extend(ObservedObject::from_value(value, uid));
    }
}

/// How the host watches a kind, and what a change to one of its objects reconciles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Objects the host applies (`app.kubernetes.io/managed-by=wasmop`); a change reconciles
    /// the controlling App.
    Owned,
    /// Objects an App's workloads make (Pods, claims), found by the `wasmop.dev/app` label; a
    /// change reconciles the App the label names.
    Labelled,
}

impl Watch {
    /// The label selector of the kind's watch.
    pub fn selector(self) -> &'static str {
        match self {
            Watch::Owned => "app.kubernetes.io/managed-by=wasmop",
            Watch::Labelled => "wasmop.dev/app",
        }
    }
}

/// One row of the table: the kind (how it is watched is the macro's, [`Watch`]).
#[derive(Debug, Clone)]
pub struct KindRow {
    /// The kind.
    pub kind: Kind,
}

macro_rules! kind_table {
    ($(
        $field:ident: $ty:ty = $kind:expr, $watch:ident;
    )*) => {
        /// Every built-in kind the host watches.
        pub const TABLE: &[KindRow] = &[$(
            KindRow {
                kind: $kind,
            },
        )*];

        /// The caches of every kind of [`TABLE`].
        #[derive(Clone)]
        pub struct Stores {
            $(
                #[doc = concat!("The ", stringify!($field), " cache.")]
                pub $field: Cache,
            )*
        }

        impl Stores {
            /// Everything observed for `app` (a parent of any kind) in its namespace: the
            /// objects labelled with its name and kind, sorted by kind and name.
            pub fn observe(&self, app: &AppRef) -> Vec<ObservedObject> {
                let parent = ParentKey {
                    mark: app.kind_mark(),
                    namespace: app.namespace.clone(),
                    name: app.name.clone(),
                };
                let mut out = Vec::new();
                $( collect(&mut out, &self.$field, &parent, &app.uid); )*
                out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
                out
            }

            /// One wait per cache, named by its resource, resolving once it has synced.
            pub fn sync_waits(&self) -> Vec<(Cow<'static, str>, BoxFuture<'static, ()>)> {
                vec![$( ($kind.plural, {
                    let cache = self.$field.clone();
                    Box::pin(async move { cache.synced().await }) as BoxFuture<'static, ()>
                }), )*]
            }
        }

        /// Starts a reflector per kind in `namespace` (`None`: all); returns the caches and
        /// the parent each change of an object calls to be reconciled.
        pub fn start(
            client: &Client,
            namespace: Option<&str>,
            metrics: &CacheMetrics,
        ) -> (Stores, Triggers) {
            let mut triggers: Vec<Triggers> = Vec::new();
            $(
                let ($field, stream) = reflect::<$ty>(
                    client,
                    namespace,
                    Cache::new(metrics, &$kind.plural),
                    Watch::$watch.selector(),
                    kind_table!(@trigger $watch),
                );
                triggers.push(stream);
            )*
            (Stores { $( $field, )* }, futures::stream::select_all(triggers).boxed())
        }
    };
    (@trigger Owned) => { owner_of };
    (@trigger Labelled) => { labelled_of };
}

/// The parents (Apps, instances of bound kinds) that changes to watched objects call to be
/// reconciled.
pub type Triggers = BoxStream<'static, ParentKey>;

kind_table! {
    statefulsets: StatefulSet = kind::STATEFUL_SET, Owned;
    deployments: Deployment = kind::DEPLOYMENT, Owned;
    services: Service = kind::SERVICE, Owned;
    configmaps: ConfigMap = kind::CONFIG_MAP, Owned;
    serviceaccounts: ServiceAccount = kind::SERVICE_ACCOUNT, Owned;
    pdbs: PodDisruptionBudget = kind::POD_DISRUPTION_BUDGET, Owned;
    jobs: Job = kind::JOB, Owned;
    pods: Pod = Kind::builtin("", "v1", "Pod", "pods"), Labelled;
    pvcs: PersistentVolumeClaim = kind::PERSISTENT_VOLUME_CLAIM, Labelled;
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::Deserialize as _;
    use wasmop_core::kind::plannable;
    use wasmop_core::observed::{APP_LABEL, PARENT_KIND_LABEL};

    use kube::ResourceExt as _;

    use super::*;

    fn pod(name: &str, app: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.labels = Some(BTreeMap::from([(APP_LABEL.to_string(), app.to_string())]));
        pod
    }

    /// What a reconcile observes comes from the cache's JSON: the objects its labels name, of
    /// its namespace only, with `apiVersion` and `kind`, and trimmed as the kind's objects are.
    #[test]
    fn a_parent_observes_its_objects_from_the_cache() {
        use kube::runtime::watcher::Event;
        let cache = Cache::default();
        let shape = |p: &Pod| crate::controller::reflect::shape(p, labelled_of);
        cache.apply(Event::Init, shape);
        let mut elsewhere = pod("a-0", "a");
        elsewhere.metadata.namespace = Some("other".into());
        for p in [pod("a-0", "a"), pod("a-1", "a"), pod("b-0", "b"), elsewhere] {
            cache.apply(Event::InitApply(p), shape);
        }
        cache.apply(Event::InitDone, shape);
        let parent = ParentKey {
            mark: wasmop_core::observed::APP_KIND_MARK.into(),
            namespace: "ns".into(),
            name: "a".into(),
        };
        let mut out = Vec::new();
        collect(&mut out, &cache, &parent, "uid-a");
        let seen: Vec<_> = out
            .iter()
            .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str()))
            .collect();
        assert_eq!(seen, [("v1", "Pod", "a-0"), ("v1", "Pod", "a-1")]);
        assert_eq!(cache.size().0, 4);
    }

    /// Only the controlling owner reference names the App: another `App` reference put in
    /// front of it (anyone who can patch the object can add one) does not divert the trigger.
    #[test]
    fn the_controlling_owner_reference_names_the_app() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let reference = |name: &str, controller: Option<bool>| OwnerReference {
            api_version: "wasmop.dev/v1alpha1".into(),
            kind: "App".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller,
            ..Default::default()
        };
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.owner_references = Some(vec![
            reference("decoy", None),
            reference("decoy2", Some(false)),
            reference("real", Some(true)),
        ]);
        let owner = crate::controller::reflect::owner_of(&cm).expect("an owner");
        assert_eq!(
            (
                owner.mark.as_str(),
                owner.name.as_str(),
                owner.namespace.as_str()
            ),
            (wasmop_core::observed::APP_KIND_MARK, "real", "ns")
        );
        cm.metadata.owner_references = Some(vec![reference("decoy", None)]);
        assert!(crate::controller::reflect::owner_of(&cm).is_none());
    }

    /// An App and a KVStore named alike in one namespace: a Pod of the KVStore's (the kind label
    /// beside the App label) names the KVStore, and a Pod with the App label alone (an App's,
    /// from its template or from before the kind label) or the App's kind names the App.
    /// Owner references name the parent by kind and group, in any version.
    #[test]
    fn a_parent_of_another_kind_named_alike_is_told_apart() {
        use crate::controller::reflect::labelled_of;
        use wasmop_core::observed::APP_KIND_MARK;
        let marked = |kind: &str| {
            let mut pod = pod("cache-0", "cache");
            pod.labels_mut()
                .insert(PARENT_KIND_LABEL.into(), kind.into());
            pod
        };
        let mark = |p: &Pod| labelled_of(p).map(|k| (k.mark, k.name));
        let named = |m: &str| Some((m.to_string(), "cache".to_string()));
        assert_eq!(
            mark(&marked("KVStore.data.example.com")),
            named("KVStore.data.example.com")
        );
        assert_eq!(mark(&pod("cache-0", "cache")), named(APP_KIND_MARK));
        assert_eq!(mark(&marked(APP_KIND_MARK)), named(APP_KIND_MARK));

        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "data.example.com/v2".into(),
            kind: "KVStore".into(),
            name: "cache".into(),
            uid: "kv-uid".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        let owner = crate::controller::reflect::owner_of(&cm).expect("an owner");
        assert_eq!(
            (owner.mark.as_str(), owner.name.as_str()),
            ("KVStore.data.example.com", "cache")
        );
    }

    /// Every kind a plan may hold is watched: the host observes what it applies, and prunes
    /// only what it observes.
    #[test]
    fn every_plannable_kind_is_a_row() {
        for kind in plannable() {
            assert!(
                TABLE.iter().any(|row| row.kind == *kind),
                "{}/{} is plannable but not in the kind table",
                kind.api_version(),
                kind.kind
            );
        }
    }

    /// The install's RBAC drifts from the table in neither direction: every plannable kind can
    /// be read, applied and pruned, every other watched kind read, and the host's namespaced
    /// role grants nothing on any other resource (the role is no wider than what plans may
    /// contain).
    #[test]
    fn the_installed_role_grants_exactly_what_the_table_needs() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/base/rbac.yaml"
        ))
        .expect("deploy/base/rbac.yaml");
        let mut granted: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let doc = serde_json::Value::deserialize(doc).expect("YAML");
            if doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == "wasmop" {
                // The role bound is the aggregate of the labelled roles, wasmop-base among them.
                assert_eq!(
                    doc["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"],
                    serde_json::json!({"wasmop.dev/aggregate-to-host": "true"})
                );
                assert_eq!(doc["rules"], serde_json::json!([]));
                continue;
            }
            if doc["kind"] != "ClusterRole" || doc["metadata"]["name"] != "wasmop-base" {
                continue;
            }
            assert_eq!(
                doc["metadata"]["labels"]["wasmop.dev/aggregate-to-host"], "true",
                "wasmop-base must be aggregated into wasmop"
            );
            for rule in doc["rules"].as_array().expect("rules") {
                let strings = |v: &serde_json::Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                };
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        granted
                            .entry((group.clone(), resource))
                            .or_default()
                            .extend(strings(&rule["verbs"]));
                    }
                }
            }
        }
        let verbs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let mut needed: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for row in TABLE {
            let v: &[&str] = if plannable().any(|k| *k == row.kind) {
                &["get", "list", "watch", "create", "patch", "delete"]
            } else {
                &["get", "list", "watch"]
            };
            needed.insert(
                (row.kind.group.to_string(), row.kind.plural.to_string()),
                verbs(v),
            );
        }
        // The App itself: read, finalizer and status writes; Events on it.
        for (group, resource, v) in [
            (
                "wasmop.dev",
                "apps",
                &["get", "list", "watch", "patch", "update"][..],
            ),
            ("wasmop.dev", "apps/finalizers", &["update"][..]),
            ("wasmop.dev", "apps/status", &["get", "patch", "update"][..]),
            ("events.k8s.io", "events", &["create", "patch"][..]),
        ] {
            needed.insert((group.into(), resource.into()), verbs(v));
        }
        assert_eq!(
            granted, needed,
            "deploy/base/rbac.yaml (ClusterRole wasmop-base) against the kind table"
        );
    }
}
