//! Warm-up: before a replica reconciles anything, the plugins of its parents (Apps and every
//! bound kind's instances) load, and a standby keeps them loaded while it waits for the lease
//! (controller-runtime's warm replicas). Reads only: the sources' registries and ConfigMaps.

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::{broadcast, watch};

use crate::{
    parent::Parent,
    plugin::source::SourceRef,
    reconcile::{
        Context,
        prepare::{Resolved, resolve_plugin},
    },
};

/// How long a standby waits for its parents' plugins to load before it reports ready anyway: a
/// plugin that takes longer (a large component compiling on a busy machine) must not keep a
/// rollout of the host's Deployment waiting on the standby; it goes on loading.
pub(super) const WARM_UP_LIMIT: Duration = Duration::from_secs(120);

/// How long a replica that leads (or runs alone) waits at start for the plugins of its parents
/// before it reconciles them. From the compiled cache a plugin loads in milliseconds; a
/// reconcile that finds it still loading only says so, and the parent is reconciled again once
/// it has loaded, so without the wait every App of a restarted host took two reconciles.
pub(super) const LEADER_WARM_UP_LIMIT: Duration = Duration::from_secs(2);

/// How long the warm-up waits for the PluginBindings to be read once (to know which bound kinds
/// to wait for): they come with the first listing, in milliseconds, unless the host may not
/// list them.
pub(super) const BINDINGS_LISTING_WAIT: Duration = Duration::from_secs(10);

/// How often a standby looks for parents whose plugin it has not loaded yet.
pub(super) const WARM_PASS: Duration = Duration::from_secs(2);

/// Starts loading the plugin of every parent in `parents`, as its reconcile would (the
/// namespace's policy first, then the source it allows); returns how many wait for theirs
/// (loading, or a namespace whose policy is not known yet).
pub(super) fn loading(ctx: &Context, parents: impl Iterator<Item = Parent>) -> usize {
    parents
        .filter(|parent| {
            matches!(
                resolve_plugin(parent, ctx),
                Resolved::PolicyUnknown
                    | Resolved::Holding(wasmop_core::decide::PluginState::Loading { .. })
            )
        })
        .count()
}

/// Calls `waiting` (which starts loads and counts what still waits) until it returns 0, or
/// [`WARM_UP_LIMIT`] has passed, or, once this replica leads, [`LEADER_WARM_UP_LIMIT`] (a
/// replica that takes the lease while warming up, as in a rolling update, must not wait for all
/// of its warm-up). It looks again as soon as `changes` (the plugin registry's) says a source
/// loaded or failed, and otherwise after a pause.
pub(super) async fn warm_up(
    mut waiting: impl FnMut() -> usize,
    leading: &watch::Receiver<bool>,
    mut changes: broadcast::Receiver<SourceRef>,
) {
    let started = Instant::now();
    loop {
        let loading = waiting();
        if loading == 0 {
            tracing::info!(
                waited_s = started.elapsed().as_secs_f64(),
                "warm: the plugins the Apps and bound kinds use are loaded"
            );
            return;
        }
        let leads = *leading.borrow();
        if leads && started.elapsed() >= LEADER_WARM_UP_LIMIT {
            tracing::info!(
                loading,
                "parents whose plugin is still loading; reconciling, which says so"
            );
            return;
        }
        if started.elapsed() >= WARM_UP_LIMIT {
            tracing::warn!(
                loading,
                "warm-up: parents whose plugin is still loading; reporting ready, it goes on loading"
            );
            return;
        }
        // A pass reads every parent: at 10,000 not something to run back to back, so a change
        // is waited for at most a pause, and the changes of a burst (several plugins loading
        // from the compiled cache at once) are taken together.
        let pause = Duration::from_millis(if leads { 100 } else { 250 });
        let changed = async {
            match changes.recv().await {
                // No registry any more: only the pause is left to wait for.
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    tokio::time::sleep(BURST).await;
                }
            }
        };
        let _ = tokio::time::timeout(pause, changed).await;
    }
}

/// How long the warm-up lets plugin loads pile up after the first it hears of, before it looks.
const BURST: Duration = Duration::from_millis(10);

/// Which bound kinds (by kind mark) are warm: their instances' cache synced and the plugin
/// those instances use loaded (or given up on, see [`WARM_UP_LIMIT`]). Each bound kind's
/// controller says so of its own kind; the warm-up of the whole replica waits for every kind
/// bound at the time.
#[derive(Clone)]
pub(crate) struct Warmth(Arc<watch::Sender<BTreeSet<String>>>);

impl Default for Warmth {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(BTreeSet::new())))
    }
}

impl Warmth {
    /// Marks `mark` warm.
    pub(crate) fn warm(&self, mark: &str) {
        self.0
            .send_if_modified(|warm| warm.insert(mark.to_string()));
    }

    /// Forgets `mark` (its controller stopped).
    pub(crate) fn forget(&self, mark: &str) {
        self.0.send_if_modified(|warm| warm.remove(mark));
    }

    /// How many of `marks` are not warm yet.
    pub(crate) fn cold<'a>(&self, marks: impl Iterator<Item = &'a String>) -> usize {
        let warm = self.0.borrow();
        marks.filter(|mark| !warm.contains(*mark)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::Warmth;

    #[test]
    fn warmth_counts_the_kinds_not_warm_yet() {
        let warmth = Warmth::default();
        let marks = [
            "Db.example.com".to_string(),
            "Cache.example.com".to_string(),
        ];
        assert_eq!(warmth.cold(marks.iter()), 2);
        warmth.warm("Db.example.com");
        assert_eq!(warmth.cold(marks.iter()), 1);
        // A kind warm twice is warm once; a stopped one is cold again.
        warmth.clone().warm("Db.example.com");
        warmth.warm("Cache.example.com");
        assert_eq!(warmth.cold(marks.iter()), 0);
        warmth.forget("Db.example.com");
        assert_eq!(warmth.cold(marks.iter()), 1);
    }
}
