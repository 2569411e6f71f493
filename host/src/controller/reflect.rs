//! Reflectors: a watch of one kind into a cache, each object trimmed before the cache holds it
//! and the watch backed off on its own, plus the two keys that map an object to its App (its
//! controlling owner reference, its `wasmop.dev/app` label). The App controller and the kind
//! table both build on it.

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

/// The App that controls `object`: its controlling owner reference (`controller: true`), the
/// one the host sets and the only one it counts as ownership (see `wasmop_core::observed`).
pub(crate) fn owner_of<K: ResourceExt>(object: &K) -> Option<ObjectRef<App>> {
    let api_version = App::api_version(&());
    let owner = object.owner_references().iter().find(|o| {
        o.controller == Some(true) && o.kind == App::kind(&()) && o.api_version == api_version
    })?;
    Some(ObjectRef::new(&owner.name).within(&object.namespace()?))
}

/// The App named by `object`'s `wasmop.dev/app` label.
pub(crate) fn app_of<K: ResourceExt>(object: &K) -> Option<ObjectRef<App>> {
    let name = object.labels().get(wasmop_core::observed::APP_LABEL)?;
    Some(ObjectRef::new(name).within(&object.namespace()?))
}
