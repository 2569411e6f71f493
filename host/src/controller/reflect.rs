//! Reflectors: a watch of one kind into a [`Cache`], each object trimmed before the cache holds
//! it and the watch backed off on its own, plus the two keys that map an object to its parent (its
//! controlling owner reference, [`owner_of`]; its `wasmop.dev/app` and `wasmop.dev/parent-kind`
//! labels, [`labelled_of`]), of any kind. The controllers and the kind table build on it.

use futures::{StreamExt, future::BoxFuture, stream::BoxStream};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{WatchStreamExt, reflector::Store, watcher},
};
use serde::{Serialize, de::DeserializeOwned};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use wasmop_core::observed::{APP_KIND_MARK, APP_LABEL, PARENT_KIND_LABEL, kind_mark};

use super::{
    cache::{Cache, Entry},
    watch_backoff::WatchBackoff,
};

pub(crate) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A watch of `K` with `selector` into `cache`, each object slimmed ([`slim`]) and trimmed
/// before the cache holds it; returns the cache and the parents (`trigger` names each object's)
/// its watch events call to be reconciled ([`Cache::apply`]). A watch error is the watch's to
/// retry, with its own backoff, and names none.
pub(crate) fn reflect<K>(
    client: &Client,
    namespace: Option<&str>,
    cache: Cache,
    selector: &str,
    trigger: fn(&K) -> Option<ParentKey>,
) -> (Cache, BoxStream<'static, ParentKey>)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + crate::controller::trim::Trim
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let config = watcher::Config::default().labels(selector);
    let stream = watcher(api::<K>(client, namespace), config)
        .modify(|object: &mut K| {
            slim(object);
            object.trim();
        })
        .backoff(WatchBackoff::default())
        .flat_map({
            let cache = cache.clone();
            move |event| {
                let parents = match event {
                    Ok(event) => cache.apply(event, |object| shape(object, trigger)),
                    Err(err) => {
                        tracing::debug!(error = %err, "watch error; the watch retries");
                        Vec::new()
                    }
                };
                futures::stream::iter(parents)
            }
        })
        .boxed();
    (cache, stream)
}

/// What the cache keeps of `object`: its key, the parents it is labelled for and triggers, and
/// its JSON (k8s-openapi writes `apiVersion` and `kind`). `None` for an object without a name
/// or namespace, or one that does not serialise (neither happens to what the API server sends).
pub(crate) fn shape<K>(
    object: &K,
    trigger: fn(&K) -> Option<ParentKey>,
) -> Option<((String, String), Entry)>
where
    K: Resource + Serialize,
{
    let key = (
        object.meta().namespace.clone()?,
        object.meta().name.clone()?,
    );
    let json = serde_json::to_string(object).ok()?;
    Some((
        key,
        Entry {
            labelled: labelled_of(object),
            trigger: trigger(object),
            json: json.into(),
        },
    ))
}

/// Drops what neither the host nor a plugin reads from a cached object before the cache holds
/// it: `managedFields` (often the largest part of an object's metadata) and kubectl's
/// last-applied annotation (a second copy of the object). The host's fetch and the plugin
/// input leave both out anyway; dropping them at the watch is what keeps them out of memory.
/// Of `managedFields` only the host's create's entry stays, as a marker without its fields
/// ([`wasmop_core::observed::ObservedObject::create_owned`]).
pub(crate) fn slim<K: ResourceExt>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = meta.managed_fields.take().and_then(|entries| {
        let kept: Vec<_> = entries
            .into_iter()
            .filter(crate::write::is_create_entry)
            .map(|entry| ManagedFieldsEntry {
                manager: entry.manager,
                operation: entry.operation,
                ..Default::default()
            })
            .collect();
        (!kept.is_empty()).then_some(kept)
    });
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

pub use super::cache::ParentKey;

/// The parent that controls `object`: its controlling owner reference (`controller: true`),
/// the one the host sets and the only one it counts as ownership (see
/// `wasmop_core::observed`), of any kind in any version. Kubernetes allows one per object.
pub(crate) fn owner_of<K: ResourceExt>(object: &K) -> Option<ParentKey> {
    let owner = object
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Some(ParentKey {
        mark: kind_mark(group, &owner.kind),
        namespace: object.namespace()?,
        name: owner.name.clone(),
    })
}

/// The parent `object`'s labels name: `wasmop.dev/app` gives the name, `wasmop.dev/parent-kind`
/// the kind (missing: an App, [`wasmop_core::observed::parent_name`]).
pub(crate) fn labelled_of<K: ResourceExt>(object: &K) -> Option<ParentKey> {
    let labels = object.labels();
    let name = labels.get(APP_LABEL)?;
    let mark = labels
        .get(PARENT_KIND_LABEL)
        .map_or(APP_KIND_MARK, String::as_str);
    Some(ParentKey {
        mark: mark.to_string(),
        namespace: object.namespace()?,
        name: name.clone(),
    })
}
