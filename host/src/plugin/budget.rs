//! The memory budget: the sum of the memory caps of the plugin calls in flight never exceeds
//! it, so that many Apps each allowed a large cap cannot together exhaust the host. A call
//! reserves its cap (plus [`CALL_OVERHEAD_BYTES`] for what the host copies in and out) before
//! it starts and gives it back when its thread finishes; a call that cannot get its share
//! waits, in order, up to [`MAX_WAIT`], then fails with [`BudgetError`] instead of risking the
//! process.
//!
//! Fair between namespaces: while a call of another namespace waits, one namespace may hold at
//! most half of the budget ([`MemoryBudget::share_mib`]). Its calls past that wait (in order,
//! up to [`MAX_WAIT`], like any wait) and keep their places, while the other namespaces' calls
//! behind them go first. A namespace alone may use the whole budget, and one call larger than
//! half still runs when its namespace holds nothing, so that the largest cap a budget allows is
//! never refused for fairness.
//!
//! [`MemoryBudget::from_cgroup`] derives the default from the container's cgroup limit
//! (`memory.max` of cgroup v2, `memory.limit_in_bytes` of v1), else from the machine's memory,
//! leaving [`host_reserve`] for the host itself.

use std::{
    collections::{HashMap, VecDeque},
    fmt,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};

/// What a call costs the host beyond its linear memory: the output it may return (the 4 MiB
/// `DEFAULT_MAX_OUTPUT_BYTES`), one transfer from the guest in flight while it is copied out
/// (`CallLimits::transfer_bytes`, 5 MiB), its Store and instance. The input is serialised once
/// per reconcile and shared by its calls.
pub const CALL_OVERHEAD_BYTES: u64 = 12 << 20;

/// Longest a call waits for budget before it fails.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

const MIB: u64 = 1 << 20;

/// A call that did not get its share of the budget in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "waited {waited:?} for {wanted_mib} MiB of the host's {budget_mib} MiB plugin memory budget \
     (other calls hold it); retrying later"
)]
pub struct BudgetError {
    /// What the call asked for.
    pub wanted_mib: u64,
    /// The whole budget.
    pub budget_mib: u64,
    /// How long it waited.
    pub waited: Duration,
}

/// The budget, in MiB (cheap to clone; clones share it).
#[derive(Clone)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    total_mib: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free_mib: u64,
    /// MiB held by calls in flight, by namespace.
    held: HashMap<String, u64>,
    /// Calls waiting, oldest first.
    waiting: VecDeque<Waiter>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    namespace: String,
    wanted_mib: u64,
    grant: oneshot::Sender<Reservation>,
}

/// Budget held by one call; released on drop.
#[derive(Debug)]
pub struct Reservation {
    held: Option<Held>,
}

struct Held {
    inner: Arc<Inner>,
    namespace: String,
    mib: u64,
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} MiB for {}", self.mib, self.namespace)
    }
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("total_mib", &self.inner.total_mib)
            .field("available_mib", &self.available_mib())
            .finish()
    }
}

impl MemoryBudget {
    /// A budget of `bytes` (at least one call's overhead plus 1 MiB).
    pub fn new(bytes: u64) -> Self {
        let total_mib = (bytes / MIB).clamp(CALL_OVERHEAD_BYTES / MIB + 1, u64::from(u32::MAX));
        Self {
            inner: Arc::new(Inner {
                total_mib,
                state: Mutex::new(State {
                    free_mib: total_mib,
                    ..State::default()
                }),
            }),
        }
    }

    /// No budget (the CLI and benchmarks, which run one call at a time).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX)
    }

    /// The default: the cgroup limit (else the machine's memory) minus [`host_reserve`].
    /// Returns the budget and where its size came from, for the start-up log.
    pub fn from_cgroup() -> (Self, String) {
        let (limit, from) = match cgroup_limit() {
            Some(limit) => (limit, "cgroup memory limit"),
            None => match mem_total() {
                Some(total) => (total, "machine memory"),
                None => (4 << 30, "assumed 4 GiB (no cgroup limit or /proc/meminfo)"),
            },
        };
        let budget = limit.saturating_sub(host_reserve(limit));
        (
            Self::new(budget),
            format!("{} MiB of the {from} {} MiB", budget / MIB, limit / MIB),
        )
    }

    /// The budget in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.inner.total_mib * MIB
    }

    /// The largest memory cap one call may have: the budget less one call's overhead.
    pub fn max_call_bytes(&self) -> u64 {
        self.total_bytes().saturating_sub(CALL_OVERHEAD_BYTES)
    }

    /// MiB not reserved by calls in flight.
    pub fn available_mib(&self) -> usize {
        usize::try_from(self.inner.lock().free_mib).unwrap_or(usize::MAX)
    }

    /// MiB reserved by calls of `namespace` in flight.
    pub fn held_mib(&self, namespace: &str) -> u64 {
        self.inner.lock().held.get(namespace).copied().unwrap_or(0)
    }

    /// The most one namespace may hold while a call of another waits: half the budget.
    pub fn share_mib(&self) -> u64 {
        self.inner.total_mib / 2
    }

    /// Reserves the share of a call of `namespace` whose memory cap is `memory_bytes`, waiting
    /// up to `wait`.
    pub async fn reserve(
        &self,
        namespace: &str,
        memory_bytes: u64,
        wait: Duration,
    ) -> Result<Reservation, BudgetError> {
        let wanted_mib = memory_bytes
            .saturating_add(CALL_OVERHEAD_BYTES)
            .div_ceil(MIB)
            .min(self.inner.total_mib);
        let started = Instant::now();
        let (grant, granted) = oneshot::channel();
        let (id, grants) = {
            let mut state = self.inner.lock();
            state.next_id += 1;
            let id = state.next_id;
            state.waiting.push_back(Waiter {
                id,
                namespace: namespace.to_string(),
                wanted_mib,
                grant,
            });
            (id, state.dispatch(&self.inner))
        };
        send(grants);
        // Gives up the call's place if it times out (or its future is dropped).
        let _waiting = Waiting {
            inner: Arc::clone(&self.inner),
            id,
        };
        match tokio::time::timeout(wait, granted).await {
            Ok(Ok(reservation)) => Ok(reservation),
            // The sender is dropped unsent only with the budget itself; running unbudgeted
            // then beats failing all.
            Ok(Err(_dropped)) => Ok(Reservation { held: None }),
            Err(_) => Err(BudgetError {
                wanted_mib,
                budget_mib: self.inner.total_mib,
                waited: started.elapsed(),
            }),
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Serves waiting calls in order. A call whose namespace would pass its share while a call
    /// of another namespace waits is passed over and keeps its place; the first other call that
    /// does not fit stops the rest, so that a large call is not starved by smaller ones behind
    /// it. The grants are sent by the caller once the lock is released (a grant whose waiter
    /// gave up is dropped, and dropping it takes the lock).
    fn dispatch(&mut self, inner: &Arc<Inner>) -> Vec<(oneshot::Sender<Reservation>, Reservation)> {
        let share = inner.total_mib / 2;
        let mut grants = Vec::new();
        let mut at = 0;
        while let Some(waiter) = self.waiting.get(at) {
            let held = self.held.get(&waiter.namespace).copied().unwrap_or(0);
            let others_wait = self
                .waiting
                .iter()
                .any(|other| other.namespace != waiter.namespace);
            if others_wait && held > 0 && held + waiter.wanted_mib > share {
                at += 1;
                continue;
            }
            if waiter.wanted_mib > self.free_mib {
                break;
            }
            let Some(waiter) = self.waiting.remove(at) else {
                break;
            };
            self.free_mib -= waiter.wanted_mib;
            *self.held.entry(waiter.namespace.clone()).or_default() += waiter.wanted_mib;
            let reservation = Reservation {
                held: Some(Held {
                    inner: Arc::clone(inner),
                    namespace: waiter.namespace,
                    mib: waiter.wanted_mib,
                }),
            };
            grants.push((waiter.grant, reservation));
        }
        grants
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(Held {
            inner,
            namespace,
            mib,
        }) = self.held.take()
        else {
            return;
        };
        let grants = {
            let mut state = inner.lock();
            state.free_mib += mib;
            if let Some(held) = state.held.get_mut(&namespace) {
                *held = held.saturating_sub(mib);
                if *held == 0 {
                    state.held.remove(&namespace);
                }
            }
            state.dispatch(&inner)
        };
        send(grants);
    }
}

/// A waiting call's place, given up when its future ends unserved.
struct Waiting {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let grants = {
            let mut state = self.inner.lock();
            let Some(at) = state.waiting.iter().position(|w| w.id == self.id) else {
                return;
            };
            state.waiting.remove(at);
            // It may have been the call that stopped the others.
            state.dispatch(&self.inner)
        };
        send(grants);
    }
}

fn send(grants: Vec<(oneshot::Sender<Reservation>, Reservation)>) {
    for (to, reservation) in grants {
        // A call that gave up drops its reservation here, which serves the next.
        let _ = to.send(reservation);
    }
}

/// Memory kept out of the budget for the host itself (caches, compiled code, buffers): a
/// quarter of the limit, at least 192 MiB, at most 1 GiB.
pub fn host_reserve(limit: u64) -> u64 {
    (limit / 4).clamp(192 * MIB, 1 << 30)
}

fn cgroup_limit() -> Option<u64> {
    // cgroup v2 at the unified mount; v1's memory controller. "max" (v2) or a huge number (v1)
    // means no limit.
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            return parse_limit(&text);
        }
    }
    None
}

fn parse_limit(text: &str) -> Option<u64> {
    let limit = text.trim().parse::<u64>().ok()?;
    // cgroup v1 reports "no limit" as a page-rounded i64::MAX.
    (limit < (1 << 62)).then_some(limit)
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory cap of a call that reserves `mib` in all (its overhead included).
    fn costing(mib: u64) -> u64 {
        (mib - CALL_OVERHEAD_BYTES / MIB) * MIB
    }

    #[tokio::test]
    async fn calls_wait_for_budget_and_get_it_back() {
        // 512 MiB: two calls of 200 MiB (212 with overhead) fit, a third waits.
        let budget = MemoryBudget::new(512 * MIB);
        let first = budget
            .reserve("a", 200 * MIB, MAX_WAIT)
            .await
            .expect("fits");
        let _second = budget
            .reserve("a", 200 * MIB, MAX_WAIT)
            .await
            .expect("fits");
        assert_eq!(budget.available_mib(), 512 - 2 * 212);
        assert_eq!(budget.held_mib("a"), 2 * 212);
        let err = budget
            .reserve("a", 200 * MIB, Duration::from_millis(20))
            .await
            .expect_err("over budget");
        assert_eq!((err.wanted_mib, err.budget_mib), (212, 512));
        assert!(
            err.to_string().contains("512 MiB plugin memory budget"),
            "{err}"
        );
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve("a", 200 * MIB, MAX_WAIT).await.is_ok() })
        };
        drop(first);
        assert!(
            waiting.await.expect("joined"),
            "the waiting call got the freed share"
        );
    }

    #[tokio::test]
    async fn a_cap_larger_than_the_budget_takes_all_of_it_rather_than_none() {
        let budget = MemoryBudget::new(64 * MIB);
        let all = budget
            .reserve("a", 1 << 30, MAX_WAIT)
            .await
            .expect("clamped to the budget");
        assert_eq!(budget.available_mib(), 0);
        drop(all);
        assert_eq!(budget.available_mib(), 64);
        assert_eq!(budget.max_call_bytes(), 52 * MIB);
    }

    #[tokio::test(start_paused = true)]
    async fn at_its_share_a_namespace_waits_in_order_while_others_are_served() {
        // 200 MiB, a share of 100. Alone, `a` may take more than half.
        let budget = MemoryBudget::new(200 * MIB);
        assert_eq!(budget.share_mib(), 100);
        let _a1 = budget
            .reserve("a", costing(60), MAX_WAIT)
            .await
            .expect("alone");
        let _a2 = budget
            .reserve("a", costing(60), MAX_WAIT)
            .await
            .expect("alone");
        let b1 = budget
            .reserve("b", costing(60), MAX_WAIT)
            .await
            .expect("fits");
        // `a`'s next call does not fit (20 MiB are free) and waits, first in line...
        let a3 = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve("a", costing(40), MAX_WAIT).await })
        };
        tokio::task::yield_now().await;
        // ...but `a` is past its share while `b` waits, so `b`'s call that fits goes first.
        let asked = Instant::now();
        let b2 = budget
            .reserve("b", costing(20), MAX_WAIT)
            .await
            .expect("served past `a`");
        assert_eq!(asked.elapsed(), Duration::ZERO);
        // `a`'s call waits as long as any call, then fails as any does.
        let err = a3
            .await
            .expect("joined")
            .expect_err("nothing was freed for `a`");
        assert_eq!(err.waited, MAX_WAIT);
        // With nobody else waiting, `a` may pass its share again.
        drop((b1, b2));
        let _a4 = budget
            .reserve("a", costing(80), MAX_WAIT)
            .await
            .expect("alone again");
        assert_eq!(budget.held_mib("a"), 200);
        assert_eq!(budget.held_mib("b"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_flooding_the_budget_delays_another_by_one_call() {
        // A host with a 1 GiB limit (a 768 MiB budget); the abuser runs `calls` calls at once,
        // again and again, each holding its reservation for 2 s (its deadline); the other
        // namespace makes one call a second in. How long its reservation waits.
        const HOLD: Duration = Duration::from_secs(2);
        let cases = [
            // (abuser's calls at once, abuser's cap MiB, the other call's namespace and cap MiB,
            // its wait)
            (0, 256, "other", 256, Duration::ZERO..=Duration::ZERO),
            (12, 256, "other", 64, Duration::ZERO..=Duration::ZERO),
            (40, 256, "other", 256, Duration::ZERO..=HOLD),
            (40, 64, "other", 256, Duration::ZERO..=HOLD),
            // The same call in the abuser's own namespace is one more of its calls: it waits in
            // line behind the 38 queued before it, up to MAX_WAIT, as every call did when the
            // budget had one queue for all.
            (40, 256, "abuser", 256, HOLD * 10..=MAX_WAIT),
        ];
        for (calls, abuser_mib, namespace, other_mib, wait) in cases {
            let budget = MemoryBudget::new(768 * MIB);
            let stop = tokio::time::Instant::now() + Duration::from_secs(60);
            let abusers: Vec<_> = (0..calls)
                .map(|_| {
                    let budget = budget.clone();
                    tokio::spawn(async move {
                        while tokio::time::Instant::now() < stop {
                            if let Ok(held) =
                                budget.reserve("abuser", abuser_mib * MIB, MAX_WAIT).await
                            {
                                tokio::time::sleep(HOLD).await;
                                drop(held);
                            }
                        }
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let asked = Instant::now();
            let reservation = budget.reserve(namespace, other_mib * MIB, MAX_WAIT).await;
            let waited = asked.elapsed();
            println!(
                "{calls} calls of {abuser_mib} MiB at once: a {other_mib} MiB call of {namespace} \
                 waited {waited:?} (served: {})",
                reservation.is_ok()
            );
            assert!(
                wait.contains(&waited),
                "{calls} x {abuser_mib} MiB: waited {waited:?}"
            );
            if namespace == "other" {
                assert!(
                    reservation.is_ok(),
                    "{calls} x {abuser_mib} MiB: {reservation:?}"
                );
            }
            drop(reservation);
            for abuser in abusers {
                abuser.await.expect("joined");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_does_not_hold_back_those_behind_it() {
        let budget = MemoryBudget::new(100 * MIB);
        let _held = budget
            .reserve("a", costing(60), MAX_WAIT)
            .await
            .expect("fits");
        // 50 MiB do not fit; the 30 MiB behind them wait in order until the 50 give up.
        let large = budget.reserve("b", costing(50), Duration::from_secs(1));
        let small = {
            let budget = budget.clone();
            tokio::spawn(async move {
                let asked = Instant::now();
                let held = budget.reserve("c", costing(30), MAX_WAIT).await;
                (held.is_ok(), asked.elapsed())
            })
        };
        assert!(large.await.is_err());
        let (served, waited) = small.await.expect("joined");
        assert!(served);
        assert_eq!(waited, Duration::from_secs(1));
    }

    #[test]
    fn limits_parse_like_the_kernel_writes_them() {
        assert_eq!(parse_limit("536870912\n"), Some(512 * MIB));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(host_reserve(512 * MIB), 192 * MIB);
        assert_eq!(host_reserve(2 << 30), 512 * MIB);
        assert_eq!(host_reserve(64 << 30), 1 << 30);
    }
}
