//! The kind table: every built-in kind the host watches and what it does with it. From this one
//! list come the reflector caches ([`Stores`]), what a reconcile observes
//! ([`Stores::observe`]), the controller's triggers ([`start`]) and the cache-sync wait
//! ([`Stores::sync_waits`]); tests hold the guard's plannable kinds and the install's RBAC to
//! it. Adding a built-in kind is one row here, plus its verbs in `deploy/base/rbac.yaml`
//! (the drift test below says which).

use futures::{Stream, StreamExt, future::BoxFuture, stream::BoxStream};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    batch::v1::Job,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service, ServiceAccount},
    policy::v1::PodDisruptionBudget,
};
use kube::{
    Client,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use crate::{
    app::App,
    controller::{app_of, owner_of, ready_of, reflect},
    reconcile::{
        fetch::{ObservedObject, collect},
        guard::Kind,
    },
};

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

/// One row of the table.
#[derive(Debug, Clone)]
pub struct KindRow {
    /// The kind.
    pub kind: Kind,
    /// How it is watched.
    pub watch: Watch,
    /// Whether a plan may hold it (under every policy; see the guard's `PLANNABLE`).
    pub plannable: bool,
}

macro_rules! kind_table {
    ($(
        $field:ident: $ty:ty = ($group:literal, $version:literal, $kind:literal, $plural:literal),
        $watch:ident, plannable: $plannable:literal;
    )*) => {
        /// Every built-in kind the host watches.
        pub const TABLE: &[KindRow] = &[$(
            KindRow {
                kind: Kind::builtin($group, $version, $kind, $plural),
                watch: Watch::$watch,
                plannable: $plannable,
            },
        )*];

        /// Reflector caches of every kind of [`TABLE`].
        #[derive(Clone)]
        pub struct Stores {
            $(
                #[doc = concat!("The ", $plural, " cache.")]
                pub $field: Store<$ty>,
            )*
        }

        impl Stores {
            /// Everything observed for the App `name` (uid `uid`) in `namespace`, sorted by
            /// kind and name.
            pub fn observe(&self, namespace: &str, name: &str, uid: &str) -> Vec<ObservedObject> {
                let mut out = Vec::new();
                $( collect(&mut out, &self.$field, namespace, name, uid); )*
                out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
                out
            }

            /// One wait per cache, resolving once it has synced.
            pub fn sync_waits(&self) -> Vec<(&'static str, BoxFuture<'static, ()>)> {
                vec![$( ($plural, ready_of(self.$field.clone())), )*]
            }
        }

        /// Starts a reflector per kind in `namespace` (`None`: all); returns the caches and
        /// the App each change of an object calls to be reconciled.
        pub fn start(client: &Client, namespace: Option<&str>) -> (Stores, Triggers) {
            let mut triggers: Vec<Triggers> = Vec::new();
            $(
                let ($field, stream) = reflect::<$ty>(client, namespace, Watch::$watch.selector());
                triggers.push(kind_table!(@wire $watch, $ty, stream));
            )*
            (Stores { $( $field, )* }, futures::stream::select_all(triggers).boxed())
        }
    };
    (@wire Owned, $ty:ty, $stream:expr) => {
        apps_of($stream, |object: &$ty| owner_of(object))
    };
    (@wire Labelled, $ty:ty, $stream:expr) => {
        apps_of($stream, |object: &$ty| app_of(object))
    };
}

/// The Apps that changes to watched objects call to be reconciled.
pub type Triggers = BoxStream<'static, ObjectRef<App>>;

/// The App `app` names for each object a watch event of `stream` touches. The watch's first
/// listing names none: every App is reconciled at start-up anyway, once the caches have
/// synced, and naming them again would reconcile each twice. A later listing (the watch
/// restarted) does name them: changes may have been missed meanwhile. A watch error is the
/// watch's to retry (with its backoff); it names no App.
fn apps_of<K, S>(stream: S, app: fn(&K) -> Option<ObjectRef<App>>) -> Triggers
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut listed = false;
    stream
        .filter_map(move |event| {
            futures::future::ready(match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => app(&object),
                Ok(watcher::Event::InitApply(object)) if listed => app(&object),
                Ok(watcher::Event::InitDone) => {
                    listed = true;
                    None
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
                Err(err) => {
                    tracing::debug!(error = %err, "watch error; the watch retries");
                    None
                }
            })
        })
        .boxed()
}

kind_table! {
    statefulsets: StatefulSet = ("apps", "v1", "StatefulSet", "statefulsets"), Owned, plannable: true;
    deployments: Deployment = ("apps", "v1", "Deployment", "deployments"), Owned, plannable: true;
    services: Service = ("", "v1", "Service", "services"), Owned, plannable: true;
    configmaps: ConfigMap = ("", "v1", "ConfigMap", "configmaps"), Owned, plannable: true;
    serviceaccounts: ServiceAccount = ("", "v1", "ServiceAccount", "serviceaccounts"), Owned, plannable: true;
    pdbs: PodDisruptionBudget = ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"), Owned, plannable: true;
    jobs: Job = ("batch", "v1", "Job", "jobs"), Owned, plannable: true;
    pods: Pod = ("", "v1", "Pod", "pods"), Labelled, plannable: false;
    pvcs: PersistentVolumeClaim = ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"), Labelled, plannable: true;
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::Deserialize as _;

    use super::*;
    use crate::reconcile::guard::PLANNABLE;

    fn key(kind: &Kind) -> (String, String, String, String) {
        (
            kind.group.to_string(),
            kind.version.to_string(),
            kind.kind.to_string(),
            kind.plural.to_string(),
        )
    }

    /// The guard's plannable kinds are the table's: a kind a plan may hold is one the host
    /// watches (so it can be observed and pruned), and the other way round.
    #[test]
    fn the_guard_plans_exactly_the_plannable_kinds_of_the_table() {
        let table: BTreeSet<_> = TABLE
            .iter()
            .filter(|r| r.plannable)
            .map(|r| key(&r.kind))
            .collect();
        let guard: BTreeSet<_> = PLANNABLE.iter().map(key).collect();
        assert_eq!(table, guard);
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
            if doc["kind"] != "ClusterRole" || doc["metadata"]["name"] != "wasmop" {
                continue;
            }
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
            let v: &[&str] = if row.plannable {
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
            "deploy/base/rbac.yaml (ClusterRole wasmop) against the kind table"
        );
    }
}
