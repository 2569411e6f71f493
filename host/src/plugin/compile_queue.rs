//! Turns for compiles, fair between tenants. Every new version of a plugin source waits here for
//! its source's turn ([`CompileQueue::submit`], then [`Ticket::admitted`]); one that must be
//! compiled (it is not in the on-disk cache) then waits for the compile slot
//! ([`Admitted::compile_slot`]).
//!
//! - **Newest only.** A source prepares one version at a time. A version still waiting when a
//!   newer one of the same source is submitted is skipped ([`Superseded`]): a ConfigMap
//!   rewritten ten times while a compile runs is compiled once more, not ten times.
//! - **Backoff for a source that keeps changing.** A version that arrives within [`QUIET`] of
//!   its source's previous one being done finds the source changing. The first such version
//!   starts at once (a fix pushed right after a broken version does not wait); the next waits
//!   [`FIRST_INTERVAL`] after the one before it was done, and each further one twice as long as
//!   the one before, up to [`MAX_INTERVAL`]. A version after a quiet spell starts at once and the
//!   count starts over. A ConfigMap rewritten every 6 s compiles 5 times in its first minute and
//!   once a minute after; a plugin author's edits, 20 s or more apart, never wait.
//! - **Round-robin between namespaces.** [`COMPILE_SLOTS`] compile runs at a time. The slot goes
//!   to the [`Charge`] (a namespace, or the shared sources) served least recently, its oldest
//!   waiter first, and a charge has at most one compile in flight: however many compiles one
//!   namespace queues, another's first compile waits for at most the one in flight.
//!
//! Time is tokio's, so that tests run it paused.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use tokio::{
    sync::{Notify, oneshot},
    time::Instant,
};

use super::{charge::Charge, source::SourceRef};

/// The wait before the third version of a source that keeps changing: about three times
/// kvstore's compile, so that a source rewritten in a loop spends at most a quarter of the slot
/// even before the interval grows.
pub const FIRST_INTERVAL: Duration = Duration::from_secs(5);
/// The longest a source that keeps changing waits between versions: one compile a minute, the
/// pace of a tag polled every minute (`--poll-interval`'s default).
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// A version that arrives this long after its source's previous one was done finds a quiet
/// source: it starts at once and the backoff starts over. Shorter than a plugin author's loop
/// (build, test, push: half a minute or more), longer than a loop a program runs.
pub const QUIET: Duration = Duration::from_secs(20);
/// Compiles at once, all tenants together: each already uses every core (Cranelift compiles
/// functions in parallel), so a second would only halve the speed of both.
pub const COMPILE_SLOTS: usize = 1;

/// A version of a source that a newer one replaced before its turn came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a newer version of the source arrived before this one's turn")]
pub struct Superseded;

/// The turns of every source and the compile slot (cheap to clone; clones share the queue).
#[derive(Clone, Default)]
pub struct CompileQueue {
    shared: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Numbers tickets and slot waiters, in the order they arrive.
    next_id: u64,
    sources: HashMap<SourceRef, Turns>,
    slots_in_use: usize,
    /// Compiles in flight by charge.
    compiling: HashMap<Charge, usize>,
    /// Versions waiting for the compile slot, oldest first.
    waiting: VecDeque<SlotWaiter>,
    /// When each charge with a compile waiting or in flight last got the slot (the count of
    /// grants then); a charge not in it has not been served while it waited.
    served: HashMap<Charge, u64>,
    grants: u64,
}

/// One source's turns.
struct Turns {
    /// How long after the last version was done the next may start, unless the source was
    /// quiet in between: zero after a quiet spell, then [`FIRST_INTERVAL`], doubling.
    interval: Duration,
    last_done: Option<Instant>,
    /// The ticket of the version being prepared, if one is.
    busy: Option<u64>,
    /// The newest version waiting for its turn.
    pending: Option<Pending>,
    /// Told of every new version and every version done, so that waiting tickets look again.
    changed: Arc<Notify>,
}

struct Pending {
    ticket: u64,
    /// When the first version since the last turn arrived (kept as newer ones replace it):
    /// whether the source was quiet is decided by it.
    since: Instant,
}

struct SlotWaiter {
    id: u64,
    charge: Charge,
    grant: oneshot::Sender<CompileSlot>,
}

impl CompileQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a new version of `source`, whose compile is charged to `charge`. The version a
    /// source had waiting, if any, is skipped. Synchronous, so that versions are ordered as
    /// they are submitted, whatever order their tasks then run in.
    pub fn submit(&self, source: &SourceRef, charge: Charge) -> Ticket {
        let mut state = lock(&self.shared);
        let now = Instant::now();
        state.forget_idle(now);
        let ticket = state.id();
        let turns = state
            .sources
            .entry(source.clone())
            .or_insert_with(|| Turns {
                interval: Duration::ZERO,
                last_done: None,
                busy: None,
                pending: None,
                changed: Arc::new(Notify::new()),
            });
        let since = turns.pending.as_ref().map_or(now, |p| p.since);
        turns.pending = Some(Pending { ticket, since });
        // The version this one replaces, if any, learns it is skipped.
        turns.changed.notify_waiters();
        Ticket {
            shared: Arc::clone(&self.shared),
            source: source.clone(),
            charge,
            id: ticket,
        }
    }

    /// Drops what is known of `source` (no App uses it any more): a version waiting for its
    /// turn is skipped.
    pub fn forget(&self, source: &SourceRef) {
        if let Some(turns) = lock(&self.shared).sources.remove(source) {
            turns.changed.notify_waiters();
        }
    }
}

/// A version waiting for its source's turn; dropping it withdraws the version.
pub struct Ticket {
    shared: Arc<Mutex<State>>,
    source: SourceRef,
    charge: Charge,
    id: u64,
}

impl Ticket {
    /// Waits for the version's turn: until the source has no other version being prepared and
    /// its interval has passed. [`Superseded`] if a newer version was submitted first (or the
    /// source was forgotten).
    pub async fn admitted(self) -> Result<Admitted, Superseded> {
        let asked = Instant::now();
        loop {
            let changed: Arc<Notify>;
            let (notified, ready_at) = {
                let mut state = lock(&self.shared);
                let now = Instant::now();
                let Some(turns) = state.sources.get_mut(&self.source) else {
                    return Err(Superseded);
                };
                let since = match &turns.pending {
                    Some(pending) if pending.ticket == self.id => pending.since,
                    _ => return Err(Superseded),
                };
                changed = Arc::clone(&turns.changed);
                // Created under the lock, so that no change made after this look is missed.
                let notified = changed.notified();
                if turns.busy.is_some() {
                    (notified, None)
                } else {
                    let quiet = turns
                        .last_done
                        .is_none_or(|done| since.saturating_duration_since(done) >= QUIET);
                    let ready_at = match turns.last_done {
                        Some(done) if !quiet => done + turns.interval,
                        _ => now,
                    };
                    if ready_at <= now {
                        turns.interval = if quiet {
                            Duration::ZERO
                        } else {
                            turns
                                .interval
                                .saturating_mul(2)
                                .clamp(FIRST_INTERVAL, MAX_INTERVAL)
                        };
                        turns.pending = None;
                        turns.busy = Some(self.id);
                        return Ok(Admitted {
                            shared: Arc::clone(&self.shared),
                            source: self.source.clone(),
                            charge: self.charge.clone(),
                            ticket: self.id,
                            waited: now.saturating_duration_since(asked),
                        });
                    }
                    (notified, Some(ready_at))
                }
            };
            match ready_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        if let Some(turns) = state.sources.get_mut(&self.source)
            && turns.pending.as_ref().is_some_and(|p| p.ticket == self.id)
        {
            turns.pending = None;
        }
    }
}

/// A version whose turn came: its source prepares no other until this is dropped.
pub struct Admitted {
    shared: Arc<Mutex<State>>,
    source: SourceRef,
    charge: Charge,
    ticket: u64,
    waited: Duration,
}

impl Admitted {
    /// How long the version waited for its source's turn.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// What the version's compile is charged to.
    pub fn charge(&self) -> &Charge {
        &self.charge
    }

    /// Waits for the compile slot (see the module's round-robin).
    pub async fn compile_slot(&self) -> CompileSlot {
        let (grant, granted) = oneshot::channel();
        let (id, grants) = {
            let mut state = lock(&self.shared);
            let id = state.id();
            state.waiting.push_back(SlotWaiter {
                id,
                charge: self.charge.clone(),
                grant,
            });
            (id, state.dispatch(&self.shared))
        };
        send(grants);
        // Withdraws the waiter should this future be dropped before its grant.
        let _waiting = Waiting {
            shared: Arc::clone(&self.shared),
            id,
        };
        // The sender is dropped unsent only with the queue itself; compiling unslotted then
        // beats never compiling.
        granted.await.unwrap_or(CompileSlot { held: None })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        if let Some(turns) = state.sources.get_mut(&self.source)
            && turns.busy == Some(self.ticket)
        {
            turns.busy = None;
            turns.last_done = Some(Instant::now());
            turns.changed.notify_waiters();
        }
    }
}

/// The compile slot, held while compiling; the next waiter gets it when this is dropped.
pub struct CompileSlot {
    held: Option<(Arc<Mutex<State>>, Charge)>,
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        let Some((shared, charge)) = self.held.take() else {
            return;
        };
        let grants = {
            let mut state = lock(&shared);
            state.slots_in_use = state.slots_in_use.saturating_sub(1);
            if let Some(count) = state.compiling.get_mut(&charge) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    state.compiling.remove(&charge);
                }
            }
            state.dispatch(&shared)
        };
        send(grants);
    }
}

/// A slot waiter's place, given up when its future is dropped.
struct Waiting {
    shared: Arc<Mutex<State>>,
    id: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        if let Some(at) = state.waiting.iter().position(|w| w.id == self.id) {
            state.waiting.remove(at);
        }
    }
}

impl State {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Gives free slots to waiters: the charge served least recently (one never served while
    /// waiting first) that has no compile in flight, its oldest waiter. The grants are sent by
    /// the caller once the lock is released (a grant whose waiter is gone is dropped, and
    /// dropping it takes the lock).
    fn dispatch(
        &mut self,
        shared: &Arc<Mutex<State>>,
    ) -> Vec<(oneshot::Sender<CompileSlot>, CompileSlot)> {
        let mut grants = Vec::new();
        while self.slots_in_use < COMPILE_SLOTS {
            let next = self
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| !self.compiling.contains_key(&w.charge))
                .min_by_key(|(_, w)| (self.served.get(&w.charge).copied().unwrap_or(0), w.id))
                .map(|(at, _)| at);
            let Some(waiter) = next.and_then(|at| self.waiting.remove(at)) else {
                break;
            };
            self.grants += 1;
            self.served.insert(waiter.charge.clone(), self.grants);
            self.slots_in_use += 1;
            *self.compiling.entry(waiter.charge.clone()).or_default() += 1;
            let slot = CompileSlot {
                held: Some((Arc::clone(shared), waiter.charge)),
            };
            grants.push((waiter.grant, slot));
        }
        // A charge with nothing waiting or in flight is forgotten: when it comes back it is
        // one that has not been served while waiting.
        self.served.retain(|charge, _| {
            self.compiling.contains_key(charge) || self.waiting.iter().any(|w| &w.charge == charge)
        });
        grants
    }

    /// Forgets sources with nothing waiting or being prepared whose last version was done so
    /// long ago that the next would find them quiet and free to start: what is kept is only
    /// what changes a turn.
    fn forget_idle(&mut self, now: Instant) {
        let idle = QUIET.max(MAX_INTERVAL);
        self.sources.retain(|_, turns| {
            turns.busy.is_some()
                || turns.pending.is_some()
                || turns
                    .last_done
                    .is_some_and(|done| now.saturating_duration_since(done) < idle)
        });
    }
}

fn send(grants: Vec<(oneshot::Sender<CompileSlot>, CompileSlot)>) {
    for (to, slot) in grants {
        // A waiter that gave up drops the slot here, which hands it on.
        let _ = to.send(slot);
    }
}

fn lock(shared: &Mutex<State>) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use super::*;

    fn source(name: &str) -> SourceRef {
        SourceRef::ConfigMap {
            namespace: "ns".into(),
            name: name.into(),
            key: "plugin.wasm".into(),
        }
    }

    /// When each version got its turn (seconds after the start), by its number.
    type Log = Arc<StdMutex<Vec<(usize, f64)>>>;

    /// Submits version `n` of `source` and, in a task, waits for its turn, then compiles for
    /// `compile` holding the slot; logs the turn, or nothing if it was skipped.
    fn offer(
        queue: &CompileQueue,
        source: &SourceRef,
        charge: Charge,
        n: usize,
        compile: Duration,
        start: Instant,
        log: &Log,
    ) -> tokio::task::JoinHandle<bool> {
        let ticket = queue.submit(source, charge);
        let log = Arc::clone(log);
        tokio::spawn(async move {
            let Ok(admitted) = ticket.admitted().await else {
                return false;
            };
            let slot = admitted.compile_slot().await;
            log.lock()
                .expect("log")
                .push((n, start.elapsed().as_secs_f64()));
            tokio::time::sleep(compile).await;
            drop(slot);
            true
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_keeps_changing_compiles_a_few_times_a_minute() {
        // (rewritten every, for, compiles at most in the first minute, at most in all), with a
        // compile of 1.5 s (kvstore's).
        let cases = [
            // A ConfigMap rewritten 10 times a minute: 5 in the first minute, then one a minute
            // (10 of its 50 versions in 5 minutes).
            (Duration::from_secs(6), 5, 5, 10),
            // Twice a second: no more.
            (Duration::from_millis(500), 5, 5, 10),
            // A plugin author, every 25 s: every version, none waits.
            (Duration::from_secs(25), 5, 3, 12),
        ];
        for (every, minutes, first_minute, at_most) in cases {
            let queue = CompileQueue::new();
            let cm = source("rewritten");
            let start = Instant::now();
            let log: Log = Arc::default();
            let mut tasks = Vec::new();
            let versions = (minutes * 60 * 1000) / every.as_millis() as usize;
            for n in 0..versions {
                let charge = Charge::namespace("abuser");
                let compile = Duration::from_millis(1500);
                tasks.push(offer(&queue, &cm, charge, n, compile, start, &log));
                tokio::time::sleep(every).await;
            }
            let mut compiled = 0;
            for task in tasks {
                compiled += usize::from(task.await.expect("joined"));
            }
            let log = log.lock().expect("log").clone();
            let in_first = log.iter().filter(|(_, at)| *at < 60.0).count();
            println!(
                "every {every:?} for {minutes} min: {versions} versions, {compiled} compiled, \
                 {in_first} in the first minute, at {:?}",
                log.iter().map(|(_, at)| *at).collect::<Vec<_>>()
            );
            assert_eq!(compiled, log.len());
            assert!(
                in_first <= first_minute,
                "every {every:?}: {in_first} in the first minute"
            );
            assert!(compiled <= at_most, "every {every:?}: {compiled} compiles");
            assert_eq!(
                log.last().map(|(n, _)| *n),
                Some(versions - 1),
                "every {every:?}: the newest version is the last compiled"
            );
            if every >= QUIET {
                assert_eq!(
                    compiled, versions,
                    "a quiet source's every version compiles"
                );
                let waited = log
                    .iter()
                    .any(|(n, at)| (at - (*n as f64) * every.as_secs_f64()).abs() > 0.001);
                assert!(!waited, "a quiet source waited: {log:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_newest_waiting_version_is_compiled() {
        let queue = CompileQueue::new();
        let cm = source("cm");
        let first = queue
            .submit(&cm, Charge::Shared)
            .admitted()
            .await
            .expect("first turn");
        let (v2, v3, v4) = (
            queue.submit(&cm, Charge::Shared),
            queue.submit(&cm, Charge::Shared),
            queue.submit(&cm, Charge::Shared),
        );
        assert_eq!(v2.admitted().await.err(), Some(Superseded));
        assert_eq!(v3.admitted().await.err(), Some(Superseded));
        let newest = tokio::spawn(v4.admitted());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let done = Instant::now();
        drop(first);
        let newest = newest
            .await
            .expect("joined")
            .expect("the newest version's turn");
        // The second version of a source starts as soon as the first is done...
        assert_eq!(newest.waited(), Duration::from_secs(3));
        assert_eq!(done.elapsed(), Duration::ZERO);
        drop(newest);
        // ...the third, arriving soon after, waits the first interval, the fourth twice that.
        for interval in [FIRST_INTERVAL, FIRST_INTERVAL * 2] {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let next = queue.submit(&cm, Charge::Shared).admitted().await;
            let next = next.expect("its turn");
            assert_eq!(next.waited(), interval - Duration::from_secs(1));
        }

        // A forgotten source's waiting version is skipped.
        let waiting = queue.submit(&cm, Charge::Shared);
        queue.forget(&cm);
        assert_eq!(waiting.admitted().await.err(), Some(Superseded));
    }

    #[tokio::test(start_paused = true)]
    async fn the_compile_slot_goes_round_the_namespaces() {
        // Each compile takes 2 s. `a` queues four sources, `b` two and `c` one, all at once.
        let queue = CompileQueue::new();
        let start = Instant::now();
        let log: Log = Arc::default();
        let order = [("a", 4), ("b", 2), ("c", 1)];
        let mut tasks = Vec::new();
        let mut names = Vec::new();
        for (namespace, count) in order {
            for i in 0..count {
                let n = names.len();
                names.push(namespace);
                let src = source(&format!("{namespace}-{i}"));
                let charge = Charge::namespace(namespace);
                let compile = Duration::from_secs(2);
                tasks.push(offer(&queue, &src, charge, n, compile, start, &log));
                tokio::task::yield_now().await;
            }
        }
        for task in tasks {
            assert!(task.await.expect("joined"), "nothing is skipped");
        }
        let log = log.lock().expect("log").clone();
        let served: String = log.iter().map(|(n, _)| names[*n]).collect();
        assert_eq!(served, "abcabaa");
        // `c`'s only compile waited for one of `a`'s and one of `b`'s; alone, it would not wait.
        let c = log
            .iter()
            .find(|(n, _)| names[*n] == "c")
            .map(|(_, at)| *at);
        assert_eq!(c, Some(4.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_flooding_the_queue_delays_another_by_one_compile() {
        // (compiles the abuser queues first, the namespace of the compile after them, its time
        // to the slot at most), each compile taking 2 s. In the abuser's own namespace it is one
        // more of its compiles and waits for all of them, as every compile did with one queue.
        for (queued, namespace, at_most) in [
            (0, "other", 0.0),
            (1, "other", 2.0),
            (20, "other", 2.0),
            (20, "abuser", 40.0),
        ] {
            let queue = CompileQueue::new();
            let start = Instant::now();
            let log: Log = Arc::default();
            let mut tasks = Vec::new();
            for i in 0..queued {
                let src = source(&format!("abuse-{i}"));
                let compile = Duration::from_secs(2);
                let charge = Charge::namespace("abuser");
                tasks.push(offer(&queue, &src, charge, i + 1, compile, start, &log));
            }
            tokio::task::yield_now().await;
            let other = source("other");
            let charge = Charge::namespace(namespace);
            let compile = Duration::from_secs(2);
            tasks.push(offer(&queue, &other, charge, 0, compile, start, &log));
            for task in tasks {
                task.await.expect("joined");
            }
            let log = log.lock().expect("log").clone();
            let at = log.iter().find(|(n, _)| *n == 0).map(|(_, at)| *at);
            println!("a compile of {namespace} after {queued} of the abuser's: at {at:?} s");
            assert!(
                at.is_some_and(|at| at <= at_most),
                "{queued} queued: {at:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_leaves_the_slot_to_the_next() {
        let queue = CompileQueue::new();
        let (a, b, c) = (source("a"), source("b"), source("c"));
        let admit = |s: &SourceRef, ns: &str| queue.submit(s, Charge::namespace(ns)).admitted();
        let (first, second, third) = (
            admit(&a, "x").await.expect("turn"),
            admit(&b, "y").await.expect("turn"),
            admit(&c, "z").await.expect("turn"),
        );
        let slot = first.compile_slot().await;
        let gave_up = tokio::time::timeout(Duration::from_secs(1), second.compile_slot()).await;
        assert!(gave_up.is_err(), "the slot is held");
        let waiting = tokio::spawn(async move { third.compile_slot().await });
        tokio::task::yield_now().await;
        drop(slot);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the next waiter got the slot")
            .expect("joined");
    }
}
