//! Pull slots: how many resolves and pulls run at once, all sources together, per registry and
//! per [`Charge`] (a namespace, or the shared sources), so that a registry that drips every
//! answer for the whole operation limit, named by one tenant, occupies only that registry's
//! slots and that tenant's, never every pull of the host.
//!
//! A pull takes a slot of its charge (at most [`PULLS_PER_CHARGE`]), then one of its registry's
//! (at most [`PULLS_PER_REGISTRY`]), then one of the host's (the puller's
//! `MAX_PULLS_IN_FLIGHT`), always in that order: no two pulls wait for each other in a circle,
//! and the host's slots, which bound the memory pulls hold, go only to pulls that run.
//!
//! Whom a pull is charged to travels with its task, as a tracing span does: the watcher's
//! driver of a source runs its resolves and pulls inside [`charged`]; any other pull (a
//! person's `wasmop plugin pull`, a test) is charged to [`Charge::Shared`].

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::plugin::charge::Charge;

/// Pulls one namespace (or the shared sources) may have at once: half of the host's
/// `MAX_PULLS_IN_FLIGHT`, so a tenant whose registries drip leaves the other half to everyone
/// else.
pub const PULLS_PER_CHARGE: usize = 2;
/// Pulls one registry (`host[:port]`) may have at once, whoever asked: a dripping registry
/// named from several namespaces still holds only two of the host's slots.
pub const PULLS_PER_REGISTRY: usize = 2;

tokio::task_local! {
    static CHARGE: Charge;
}

/// Runs `pulls` with every pull it makes charged to `charge`.
pub async fn charged<F: Future>(charge: Charge, pulls: F) -> F::Output {
    CHARGE.scope(charge, pulls).await
}

/// Whom a pull made now is charged to.
fn current_charge() -> Charge {
    CHARGE.try_with(Charge::clone).unwrap_or(Charge::Shared)
}

/// The slots of one puller.
pub struct PullSlots {
    host: Arc<Semaphore>,
    registries: Keyed<String>,
    charges: Keyed<Charge>,
}

/// The slots one pull holds; given back on drop.
#[derive(Debug)]
pub struct PullSlot {
    _held: Vec<OwnedSemaphorePermit>,
}

impl PullSlots {
    /// At most `in_flight` pulls at once, and the per-registry and per-charge bounds.
    pub fn new(in_flight: usize) -> Self {
        Self {
            host: Arc::new(Semaphore::new(in_flight)),
            registries: Keyed::new(PULLS_PER_REGISTRY),
            charges: Keyed::new(PULLS_PER_CHARGE),
        }
    }

    /// Waits for a slot for a pull from `registry` (`host[:port]`), charged as the task is
    /// (see [`charged`]).
    pub async fn acquire(&self, registry: &str) -> PullSlot {
        self.acquire_for(registry, &current_charge()).await
    }

    /// Waits for a slot for a pull from `registry` charged to `charge`.
    pub async fn acquire_for(&self, registry: &str, charge: &Charge) -> PullSlot {
        let semaphores = [
            self.charges.semaphore(charge),
            self.registries.semaphore(&registry.to_ascii_lowercase()),
            Arc::clone(&self.host),
        ];
        let mut held = Vec::with_capacity(semaphores.len());
        for semaphore in semaphores {
            // The semaphores are never closed; were one, the pull would go on without it.
            if let Ok(permit) = semaphore.acquire_owned().await {
                held.push(permit);
            }
        }
        PullSlot { _held: held }
    }
}

/// A semaphore per key, made when a key is first asked for and dropped once nobody holds or
/// waits for it: the map is only as large as the pulls in flight and waiting.
struct Keyed<K> {
    per_key: usize,
    semaphores: Mutex<HashMap<K, Arc<Semaphore>>>,
}

impl<K: Clone + Eq + Hash> Keyed<K> {
    fn new(per_key: usize) -> Self {
        Self {
            per_key,
            semaphores: Mutex::new(HashMap::new()),
        }
    }

    fn semaphore(&self, key: &K) -> Arc<Semaphore> {
        let mut semaphores = self.semaphores.lock().unwrap_or_else(|p| p.into_inner());
        // A permit and a waiter each hold a clone: the map's own is the only one left when
        // neither does.
        semaphores.retain(|_, semaphore| Arc::strong_count(semaphore) > 1);
        let semaphore = semaphores
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_key)));
        Arc::clone(semaphore)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_dripping_registry_holds_only_its_own_and_its_tenants_slots() {
        // Every slot taken is held to the end, as by a registry that never finishes answering.
        let slots = PullSlots::new(4);
        let steps = [
            // (charged to, registry, gets a slot at once)
            ("abuser", "drip.example:5000", true),
            ("abuser", "drip.example:5000", true),
            // The abuser's two slots and the registry's two are taken.
            ("abuser", "drip.example:5000", false),
            ("abuser", "ghcr.io", false),
            ("other", "DRIP.example:5000", false),
            // Another namespace on another registry is served at once.
            ("other", "ghcr.io", true),
            ("third", "quay.io", true),
            // The host's four are taken.
            ("fourth", "quay.io", false),
        ];
        let mut held = Vec::new();
        for (namespace, registry, at_once) in steps {
            let charge = Charge::namespace(namespace);
            let slot = slots.acquire_for(registry, &charge);
            match tokio::time::timeout(Duration::from_secs(60), slot).await {
                Ok(slot) => {
                    assert!(at_once, "{namespace} got a slot for {registry}");
                    held.push(slot);
                }
                Err(_) => assert!(!at_once, "{namespace} waited for {registry}"),
            }
        }
        // Those that gave up left nothing behind; a slot given back goes to the next.
        let fourth = Charge::namespace("fourth");
        let waiting = tokio::time::timeout(
            Duration::from_secs(60),
            slots.acquire_for("quay.io", &fourth),
        );
        drop(held.pop());
        assert!(waiting.await.is_ok(), "a freed slot was handed on");
        // Once nobody holds or waits for them, their semaphores go.
        drop(held);
        let _slot = slots
            .acquire_for("quay.io", &Charge::namespace("fifth"))
            .await;
        fn count<K>(keyed: &Keyed<K>) -> usize {
            keyed.semaphores.lock().expect("map").len()
        }
        assert_eq!(count(&slots.charges), 1);
        assert_eq!(count(&slots.registries), 1);
    }

    #[tokio::test]
    async fn pulls_are_charged_as_their_task_says() {
        assert_eq!(current_charge(), Charge::Shared);
        let charge = charged(Charge::namespace("team-a"), async { current_charge() }).await;
        assert_eq!(charge, Charge::namespace("team-a"));
    }
}
