//! The cache of one watched kind: each object as the JSON a reconcile observes, indexed by the
//! parent its labels name, and the parents a watch event calls to be reconciled.
//!
//! kube-runtime's `Store` keeps typed objects and answers only "all of them": a reconcile that
//! wants its parent's objects scans every object of every kind (at 10,000 Apps, 40,000 of them
//! per reconcile), and a typed Deployment takes several times the memory of its JSON. Here an
//! object is kept once, as compact JSON text, and found through its parent
//! ([`Cache::children`]). The watch's events are applied as kube-runtime's reflector applies
//! them: a listing is gathered apart and replaces the cache whole at its end.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex},
};

use kube::runtime::watcher;
use prometheus_client::{
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

/// A parent an object names: its kind mark ([`wasmop_core::observed::kind_mark`]), its
/// namespace (the object's) and its name. The App controller takes those marked
/// [`wasmop_core::observed::APP_KIND_MARK`]; a bound kind's controller those marked with its kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParentKey {
    /// The parent's kind mark.
    pub mark: String,
    /// The namespace of the object and its parent.
    pub namespace: String,
    /// The parent's name.
    pub name: String,
}

/// What the cache keeps of one object.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The parent the object's labels name (`wasmop.dev/app`, `wasmop.dev/parent-kind`): whose
    /// reconcile observes it.
    pub labelled: Option<ParentKey>,
    /// The parent a change of the object reconciles (its controlling owner for the kinds the
    /// host applies, its labelled parent for those its workloads make).
    pub trigger: Option<ParentKey>,
    /// The object as JSON, `apiVersion` and `kind` included.
    pub json: Arc<str>,
}

/// An object's namespace and name.
pub type Key = (String, String);

/// Objects by key, and the keys of each labelled parent's.
#[derive(Debug, Default)]
struct Objects {
    entries: HashMap<Key, Entry>,
    by_parent: HashMap<ParentKey, BTreeSet<Key>>,
    bytes: usize,
}

impl Objects {
    fn insert(&mut self, key: Key, entry: Entry) {
        self.remove(&key);
        if let Some(parent) = &entry.labelled {
            self.by_parent
                .entry(parent.clone())
                .or_default()
                .insert(key.clone());
        }
        self.bytes += entry.json.len();
        self.entries.insert(key, entry);
    }

    fn remove(&mut self, key: &Key) {
        let Some(old) = self.entries.remove(key) else {
            return;
        };
        self.bytes -= old.json.len();
        if let Some(parent) = &old.labelled
            && let Some(keys) = self.by_parent.get_mut(parent)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_parent.remove(parent);
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    live: Objects,
    /// A listing in progress: what it listed so far, and (for a listing after the first) the
    /// parents to reconcile at its end.
    listing: Option<(Objects, Option<HashSet<ParentKey>>)>,
    listed: bool,
}

/// The caches' size, by resource: what the host holds in memory for the objects it watches.
#[derive(Clone, Default)]
pub struct CacheMetrics {
    objects: Family<Vec<(&'static str, String)>, Gauge>,
    bytes: Family<Vec<(&'static str, String)>, Gauge>,
}

impl CacheMetrics {
    /// Creates the families and registers them in `registry` (prefix it with `wasmop`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "cache_objects",
            "Objects the host's caches hold, by resource",
            metrics.objects.clone(),
        );
        registry.register(
            "cache_bytes",
            "Bytes of the JSON the host's caches hold, by resource",
            metrics.bytes.clone(),
        );
        metrics
    }
}

/// The cache of one kind; clones share it.
#[derive(Debug, Clone)]
pub struct Cache {
    state: Arc<Mutex<State>>,
    synced: tokio::sync::watch::Sender<bool>,
    objects: Gauge,
    bytes: Gauge,
}

impl Default for Cache {
    fn default() -> Self {
        Self::new(&CacheMetrics::default(), "")
    }
}

impl Cache {
    /// An empty cache of `resource`, counted in `metrics` (added to what other caches of the
    /// same resource, other namespaces', count).
    pub fn new(metrics: &CacheMetrics, resource: &str) -> Self {
        let labels = vec![("resource", resource.to_string())];
        Self {
            state: Default::default(),
            synced: tokio::sync::watch::Sender::new(false),
            objects: metrics.objects.get_or_create(&labels).clone(),
            bytes: metrics.bytes.get_or_create(&labels).clone(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing under the lock panics; a poisoned lock still holds a consistent cache.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one watch event, each object shaped by `shape` (`None`: not cached), and returns
    /// the parents it calls to be reconciled:
    /// - a change or a deletion names the object's trigger parent;
    /// - the first listing names none: every parent is reconciled at start-up anyway, once the
    ///   caches have synced, and naming them again would reconcile each twice;
    /// - a later listing (the watch restarted after its history expired) names, at its end, once
    ///   the cache holds it, the parents of the objects listed *and* of those cached before it:
    ///   an object deleted while the watch was away is in no listing, and a reconcile during the
    ///   listing would still read the old cache.
    pub fn apply<K>(
        &self,
        event: watcher::Event<K>,
        shape: impl Fn(&K) -> Option<(Key, Entry)>,
    ) -> Vec<ParentKey> {
        // Shaped (serialised) before the lock is taken, which reconciles reading the cache wait on.
        let event = match event {
            watcher::Event::Apply(object) => watcher::Event::Apply(shape(&object)),
            watcher::Event::Delete(object) => watcher::Event::Delete(shape(&object)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(object) => watcher::Event::InitApply(shape(&object)),
            watcher::Event::InitDone => watcher::Event::InitDone,
        };
        let mut state = self.state();
        let before = (state.live.entries.len(), state.live.bytes);
        let (parents, replaced) = Self::apply_to(&mut state, event);
        let after = (state.live.entries.len(), state.live.bytes);
        drop(state);
        // The cache a listing replaced is freed here, not under the lock reconciles wait on.
        let synced = replaced.is_some();
        drop(replaced);
        // Differences, not values: the caches of one resource in several namespaces add up.
        let delta = |a: usize, b: usize| a as i64 - b as i64;
        self.objects.inc_by(delta(after.0, before.0));
        self.bytes.inc_by(delta(after.1, before.1));
        if synced {
            self.synced.send_replace(true);
        }
        parents
    }

    /// [`Cache::apply`] on the locked state; also gives, when a listing ended, the objects it
    /// replaced.
    fn apply_to(
        state: &mut State,
        event: watcher::Event<Option<(Key, Entry)>>,
    ) -> (Vec<ParentKey>, Option<Objects>) {
        let parents = match event {
            watcher::Event::Apply(shaped) => {
                let Some((key, entry)) = shaped else {
                    return (Vec::new(), None);
                };
                let trigger = entry.trigger.clone();
                state.live.insert(key, entry);
                trigger.into_iter().collect()
            }
            watcher::Event::Delete(shaped) => {
                let Some((key, entry)) = shaped else {
                    return (Vec::new(), None);
                };
                state.live.remove(&key);
                entry.trigger.into_iter().collect()
            }
            watcher::Event::Init => {
                let relisting = state.listed.then(|| {
                    state
                        .live
                        .entries
                        .values()
                        .filter_map(|e| e.trigger.clone())
                        .collect()
                });
                state.listing = Some((Objects::default(), relisting));
                Vec::new()
            }
            watcher::Event::InitApply(shaped) => {
                if let Some((listed, relisting)) = &mut state.listing
                    && let Some((key, entry)) = shaped
                {
                    if let Some(parents) = relisting {
                        parents.extend(entry.trigger.clone());
                    }
                    listed.insert(key, entry);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let Some((listed, relisting)) = state.listing.take() else {
                    return (Vec::new(), None);
                };
                let replaced = std::mem::replace(&mut state.live, listed);
                state.listed = true;
                let mut parents: Vec<_> = relisting.unwrap_or_default().into_iter().collect();
                parents.sort();
                return (parents, Some(replaced));
            }
        };
        (parents, None)
    }

    /// The JSON of the objects whose labels name `parent`, by name.
    pub fn children(&self, parent: &ParentKey) -> Vec<Arc<str>> {
        let state = self.state();
        state
            .live
            .by_parent
            .get(parent)
            .into_iter()
            .flatten()
            .filter_map(|key| state.live.entries.get(key).map(|e| e.json.clone()))
            .collect()
    }

    /// How many objects the cache holds, and the bytes of their JSON.
    pub fn size(&self) -> (usize, usize) {
        let state = self.state();
        (state.live.entries.len(), state.live.bytes)
    }

    /// Resolves once the first listing is in the cache.
    pub async fn synced(&self) {
        let mut synced = self.synced.subscribe();
        // The sender lives as long as `self`, so the wait ends only when synced.
        let _ = synced.wait_for(|synced| *synced).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test object: a name, the parent its labels name and the parent a change of it
    /// reconciles.
    #[derive(Debug, Clone)]
    struct Obj(&'static str, &'static str, &'static str);

    fn parent(name: &str) -> ParentKey {
        ParentKey {
            mark: "App.wasmop.dev".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn shape(o: &Obj) -> Option<(Key, Entry)> {
        Some((
            ("ns".into(), o.0.into()),
            Entry {
                labelled: (!o.1.is_empty()).then(|| parent(o.1)),
                trigger: (!o.2.is_empty()).then(|| parent(o.2)),
                json: Arc::from(format!("{{\"name\":\"{}\"}}", o.0)),
            },
        ))
    }

    fn names(parents: Vec<ParentKey>) -> Vec<String> {
        parents.into_iter().map(|p| p.name).collect()
    }

    fn children(cache: &Cache, name: &str) -> Vec<String> {
        cache
            .children(&parent(name))
            .iter()
            .map(|j| j.to_string())
            .collect()
    }

    /// A listing at start names no parent, changes and deletions name theirs, and a listing
    /// after the watch restarted names, at its end, the parents of what it listed and of what
    /// was cached before it (a Pod deleted while the watch was away is in no listing).
    #[test]
    fn a_relisting_names_the_listed_and_the_vanished_at_its_end() {
        use watcher::Event;
        let cache = Cache::default();
        assert!(cache.apply(Event::Init, shape).is_empty());
        assert!(
            cache
                .apply(Event::InitApply(Obj("a-0", "a", "a")), shape)
                .is_empty()
        );
        assert!(
            children(&cache, "a").is_empty(),
            "not before the listing ends"
        );
        assert!(
            cache.apply(Event::InitDone, shape).is_empty(),
            "the first listing"
        );
        assert_eq!(children(&cache, "a"), [r#"{"name":"a-0"}"#]);
        assert_eq!(
            names(cache.apply(Event::Apply(Obj("a-0", "a", "a")), shape)),
            ["a"]
        );
        assert_eq!(
            names(cache.apply(Event::Apply(Obj("gone-0", "gone", "gone")), shape)),
            ["gone"]
        );
        assert_eq!(
            names(cache.apply(Event::Delete(Obj("a-0", "a", "a")), shape)),
            ["a"]
        );
        assert!(children(&cache, "a").is_empty());
        cache.apply(Event::Apply(Obj("a-0", "a", "a")), shape);

        assert!(cache.apply(Event::Init, shape).is_empty());
        assert!(
            cache
                .apply(Event::InitApply(Obj("a-0", "a", "a")), shape)
                .is_empty()
        );
        assert!(
            cache
                .apply(Event::InitApply(Obj("b-0", "b", "b")), shape)
                .is_empty()
        );
        assert!(
            cache
                .apply(Event::InitApply(Obj("b-1", "b", "b")), shape)
                .is_empty()
        );
        assert_eq!(
            children(&cache, "gone").len(),
            1,
            "the old cache until the end"
        );
        assert_eq!(
            names(cache.apply(Event::InitDone, shape)),
            ["a", "b", "gone"]
        );
        assert!(cache.apply(Event::InitDone, shape).is_empty(), "named once");
        assert!(children(&cache, "gone").is_empty());
        assert_eq!(children(&cache, "b").len(), 2);
        assert_eq!(cache.size().0, 3);
    }

    /// An object whose labels move to another parent leaves the first one's children; one the
    /// owner reference names but no label is reconciled on change and observed by nobody.
    #[test]
    fn an_object_is_a_child_of_the_parent_its_labels_name_now() {
        use watcher::Event;
        let cache = Cache::default();
        cache.apply(Event::Init, shape);
        cache.apply(Event::InitDone, shape);
        cache.apply(Event::Apply(Obj("x", "a", "a")), shape);
        assert_eq!(children(&cache, "a").len(), 1);
        assert_eq!(
            names(cache.apply(Event::Apply(Obj("x", "b", "a")), shape)),
            ["a"]
        );
        assert!(children(&cache, "a").is_empty());
        assert_eq!(children(&cache, "b").len(), 1);
        assert_eq!(
            names(cache.apply(Event::Apply(Obj("y", "", "c")), shape)),
            ["c"]
        );
        assert!(children(&cache, "c").is_empty());
        let (objects, bytes) = cache.size();
        assert_eq!((objects, bytes), (2, 24));
        cache.apply(Event::Delete(Obj("x", "b", "a")), shape);
        cache.apply(Event::Delete(Obj("y", "", "c")), shape);
        assert_eq!(cache.size(), (0, 0));
    }

    #[tokio::test]
    async fn synced_once_the_first_listing_is_in() {
        use watcher::Event;
        let cache = Cache::default();
        cache.apply(Event::<Obj>::Init, shape);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), cache.synced());
        assert!(waiting.await.is_err());
        cache.apply(Event::<Obj>::InitDone, shape);
        cache.synced().await;
    }
}
