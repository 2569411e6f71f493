//! The kind table: every built-in kind the host watches and what it does with it. From this one
//! list come the reflector caches ([`Stores`]), what a reconcile observes
//! ([`Stores::observe`]), the controller's triggers ([`start`]) and the cache-sync wait
//! ([`Stores::sync_waits`]); a test holds the install's RBAC to it. The kinds themselves, and
//! which of them every plan may hold ([`wasmop_core::kind::plannable`], the guard's), are the
//! decision core's ([`wasmop_core::kind`]); every plannable kind is a row here (a test says
//! so). Adding a built-in kind is one row here (and, if plans may hold it, one entry of
//! [`wasmop_core::kind::PLANNABLE`]), plus its verbs in `deploy/base/rbac.yaml` (the drift test
//! below says which).

use std::{borrow::Cow, collections::HashSet, sync::Arc};

use futures::{Stream, StreamExt, future::BoxFuture, stream::BoxStream};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    batch::v1::Job,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service, ServiceAccount},
    policy::v1::PodDisruptionBudget,
};
use kube::{
    Client, Resource, ResourceExt,
    runtime::{reflector::Store, watcher},
};

use serde::Serialize;
use serde_json::Value;
use wasmop_core::{
    kind::{self, Kind},
    observed::{ObservedObject, labelled_for},
    stamp::AppRef,
};

use crate::controller::reflect::{ParentKey, labelled_of, owner_of, ready_of, reflect};

/// How the API server is reached for `kind`.
pub fn api_resource(kind: &Kind) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind),
        &kind.plural,
    )
}

/// Adds to `out` the objects of `store` labelled with `app` (its name and kind mark `mark`,
/// [`labelled_for`]) in its namespace.
fn collect<K>(out: &mut Vec<ObservedObject>, store: &Store<K>, app: &AppRef, mark: &str)
where
    K: Resource<DynamicType = ()> + Clone + Serialize + 'static,
{
    for object in store.state() {
        if object.namespace().as_deref() != Some(app.namespace.as_str())
            || !labelled_for(
                |key| object.labels().get(key).map(String::as_str),
                &app.name,
                mark,
            )
        {
            continue;
        }
        let Ok(mut json) = serde_json::to_value(Arc::as_ref(&object)) else {
            continue;
        };
        if let Some(map) = json.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                Value::String(K::api_version(&()).into_owned()),
            );
            map.insert("kind".into(), Value::String(K::kind(&()).into_owned()));
        }
        // Ownership, backup slot and the managedFields cut as for every observed object.
        out.extend(ObservedObject::from_value(json, &app.uid));
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

        /// Reflector caches of every kind of [`TABLE`].
        #[derive(Clone)]
        pub struct Stores {
            $(
                #[doc = concat!("The ", stringify!($field), " cache.")]
                pub $field: Store<$ty>,
            )*
        }

        impl Stores {
            /// Everything observed for `app` (a parent of any kind) in its namespace: the
            /// objects labelled with its name and kind, sorted by kind and name.
            pub fn observe(&self, app: &AppRef) -> Vec<ObservedObject> {
                let mark = app.kind_mark();
                let mut out = Vec::new();
                $( collect(&mut out, &self.$field, app, &mark); )*
                out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
                out
            }

            /// One wait per cache, named by its resource, resolving once it has synced.
            pub fn sync_waits(&self) -> Vec<(Cow<'static, str>, BoxFuture<'static, ()>)> {
                vec![$( ($kind.plural, ready_of(self.$field.clone())), )*]
            }
        }

        /// Starts a reflector per kind in `namespace` (`None`: all); returns the caches and
        /// the App each change of an object calls to be reconciled.
        pub fn start(client: &Client, namespace: Option<&str>) -> (Stores, Triggers) {
            let mut triggers: Vec<Triggers> = Vec::new();
            $(
                let ($field, stream) = reflect::<$ty>(client, namespace, Watch::$watch.selector());
                triggers.push(kind_table!(@wire $watch, $ty, $field.clone(), stream));
            )*
            (Stores { $( $field, )* }, futures::stream::select_all(triggers).boxed())
        }
    };
    (@wire Owned, $ty:ty, $store:expr, $stream:expr) => {
        apps_of($stream, $store, |object: &$ty| owner_of(object))
    };
    (@wire Labelled, $ty:ty, $store:expr, $stream:expr) => {
        apps_of($stream, $store, |object: &$ty| labelled_of(object))
    };
}

/// The parents (Apps, instances of bound kinds) that changes to watched objects call to be
/// reconciled.
pub type Triggers = BoxStream<'static, ParentKey>;

/// The Apps the watch events of `stream` (the watch behind `cache`) call to be reconciled; a
/// watch error is the watch's to retry (with its backoff) and names none.
fn apps_of<K, S>(stream: S, cache: Store<K>, app: fn(&K) -> Option<ParentKey>) -> Triggers
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut triggering = Triggering::new(app);
    stream
        .flat_map(move |event| {
            let apps = match event {
                Ok(event) => triggering.on(event, || cache.state()),
                Err(err) => {
                    tracing::debug!(error = %err, "watch error; the watch retries");
                    Vec::new()
                }
            };
            futures::stream::iter(apps)
        })
        .boxed()
}

/// Which Apps one watch's events name, listing by listing.
///
/// - A change or a deletion names the object's App.
/// - The first listing names none: every App is reconciled at start-up anyway, once the caches
///   have synced, and naming them again would reconcile each twice.
/// - A later listing (the watch restarted after its history expired) names, once it is done and
///   the cache holds it, every App of the objects listed *and* of those cached before it: an
///   object deleted while the watch was away is in no listing, and a reconcile during the
///   listing would still read the old cache (the reflector swaps the new one in at its end).
struct Triggering<K> {
    app: fn(&K) -> Option<ParentKey>,
    listed: bool,
    relisting: Option<HashSet<ParentKey>>,
}

impl<K> Triggering<K> {
    fn new(app: fn(&K) -> Option<ParentKey>) -> Self {
        Self {
            app,
            listed: false,
            relisting: None,
        }
    }

    /// The Apps `event` names; `cached` is what the cache holds before the event.
    fn on(
        &mut self,
        event: watcher::Event<K>,
        cached: impl FnOnce() -> Vec<Arc<K>>,
    ) -> Vec<ParentKey> {
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                (self.app)(&object).into_iter().collect()
            }
            watcher::Event::Init => {
                self.relisting = self
                    .listed
                    .then(|| cached().iter().filter_map(|o| (self.app)(o)).collect());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if let Some(apps) = &mut self.relisting {
                    apps.extend((self.app)(&object));
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                self.listed = true;
                let mut apps: Vec<_> = self
                    .relisting
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                apps.sort();
                apps
            }
        }
    }
}

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

    use super::*;

    fn pod(name: &str, app: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.labels = Some(BTreeMap::from([(APP_LABEL.to_string(), app.to_string())]));
        pod
    }

    fn names(apps: Vec<ParentKey>) -> Vec<String> {
        apps.into_iter().map(|a| a.name).collect()
    }

    /// A listing at start names no App, changes and deletions name theirs, and a listing after
    /// the watch restarted names, at its end, the Apps of what it listed and of what was cached
    /// before it (a Pod deleted while the watch was away is in no listing).
    #[test]
    fn a_relisting_names_the_listed_and_the_vanished_at_its_end() {
        use kube::runtime::watcher::Event;
        let mut t = Triggering::new(|p: &Pod| crate::controller::reflect::labelled_of(p));
        let nothing = Vec::new;
        assert!(t.on(Event::Init, nothing).is_empty());
        assert!(t.on(Event::InitApply(pod("a-0", "a")), nothing).is_empty());
        assert!(
            t.on(Event::InitDone, nothing).is_empty(),
            "the first listing"
        );
        assert_eq!(names(t.on(Event::Apply(pod("a-0", "a")), nothing)), ["a"]);
        assert_eq!(names(t.on(Event::Delete(pod("a-0", "a")), nothing)), ["a"]);

        let cached = || vec![Arc::new(pod("a-0", "a")), Arc::new(pod("gone-0", "gone"))];
        assert!(t.on(Event::Init, cached).is_empty());
        assert!(t.on(Event::InitApply(pod("a-0", "a")), nothing).is_empty());
        assert!(t.on(Event::InitApply(pod("b-0", "b")), nothing).is_empty());
        assert!(t.on(Event::InitApply(pod("b-1", "b")), nothing).is_empty());
        assert_eq!(names(t.on(Event::InitDone, nothing)), ["a", "b", "gone"]);
        assert!(t.on(Event::InitDone, nothing).is_empty(), "named once");
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
