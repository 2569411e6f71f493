//! Reflectors: a watch of one kind into a cache, each object trimmed before the cache holds it
//! and the watch backed off on its own, plus the two keys that map an object to its App (its
//! controlling owner reference, its `wasmop.dev/app` and `wasmop.dev/parent-kind` labels), for
//! a parent of any kind (`controller_of`, `labelled_parent_of`) and for the `App` (`owner_of`,
//! `app_of`). The App controller and the kind table both build on it.

use futures::{Stream, StreamExt, future::BoxFuture};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;

use super::watch_backoff::WatchBackoff;
use crate::app::App;

pub(crate) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

type Reflected<K> = (
    Store<K>,
    std::pin::Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>,
);

/// A reflector over `K` with `selector`: its cache and the stream of its watch events.
pub(crate) fn reflect<K>(client: &Client, namespace: Option<&str>, selector: &str) -> Reflected<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + crate::controller::trim::Trim
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(selector);
    let stream = reflector::reflector(
        writer,
        watcher(api::<K>(client, namespace), config).modify(|object: &mut K| {
            slim(object);
            object.trim();
        }),
    )
    .backoff(WatchBackoff::default())
    .boxed();
    (reader, stream)
}

/// Drops what neither the host nor a plugin reads from a cached object before the cache holds
/// it: `managedFields` (often the largest part of an object's metadata) and kubectl's
/// last-applied annotation (a second copy of the object). The host's fetch and the plugin
/// input leave both out anyway; dropping them at the watch is what keeps them out of memory.
pub(crate) fn slim<K: ResourceExt>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

pub(crate) fn ready_of<K>(store: Store<K>) -> BoxFuture<'static, ()>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    // kube-runtime's readiness signal wakes only the last task that polled it, and the
    // controller's runner polls the App store after us; polling again on a timer sidesteps that.
    Box::pin(async move {
        while tokio::time::timeout(
            std::time::Duration::from_millis(100),
            store.wait_until_ready(),
        )
        .await
        .is_err()
        {}
    })
}

/// The name of the parent of `kind` in the API group `group` that controls `object`: its
/// controlling owner reference (`controller: true`), the one the host sets and the only one it
/// counts as ownership (see `wasmop_core::observed`), of any version of the kind.
pub(crate) fn controller_of<'a, K: ResourceExt>(
    object: &'a K,
    group: &str,
    kind: &str,
) -> Option<&'a str> {
    let owner = object.owner_references().iter().find(|o| {
        let owner_group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        o.controller == Some(true) && o.kind == kind && owner_group == group
    })?;
    Some(&owner.name)
}

/// The name of the parent whose kind mark is `kind_mark` that `object`'s labels name
/// (`wasmop.dev/app`, with `wasmop.dev/parent-kind` naming that kind, or missing for an App:
/// [`wasmop_core::observed::parent_name`]).
pub(crate) fn labelled_parent_of<'a, K: ResourceExt>(
    object: &'a K,
    kind_mark: &str,
) -> Option<&'a str> {
    let labels = object.labels();
    wasmop_core::observed::parent_name(|key| labels.get(key).map(String::as_str), kind_mark)
}

/// The App that controls `object` ([`controller_of`]).
pub(crate) fn owner_of<K: ResourceExt>(object: &K) -> Option<ObjectRef<App>> {
    let name = controller_of(object, &App::group(&()), &App::kind(&()))?;
    Some(ObjectRef::new(name).within(&object.namespace()?))
}

/// The App named by `object`'s labels ([`labelled_parent_of`]): never when they name a parent
/// of another kind with the same name.
pub(crate) fn app_of<K: ResourceExt>(object: &K) -> Option<ObjectRef<App>> {
    let name = labelled_parent_of(object, wasmop_core::observed::APP_KIND_MARK)?;
    Some(ObjectRef::new(name).within(&object.namespace()?))
}
