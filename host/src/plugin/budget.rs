//! The memory budget: the sum of the memory caps of the plugin calls in flight never exceeds
//! it, so that many Apps each allowed a large cap cannot together exhaust the host. A call
//! reserves its cap (plus [`CALL_OVERHEAD_BYTES`] for what the host copies in and out) before
//! it starts and gives it back when its thread finishes; a call that cannot get its share
//! waits, in order, up to [`MAX_WAIT`], then fails with [`BudgetError`] instead of risking the
//! process.
//!
//! [`MemoryBudget::from_cgroup`] derives the default from the container's cgroup limit
//! (`memory.max` of cgroup v2, `memory.limit_in_bytes` of v1), else from the machine's memory,
//! leaving [`host_reserve`] for the host itself.

use std::{sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// The budget, in MiB permits.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    total_mib: u32,
    permits: Arc<Semaphore>,
}

/// Budget held by one call; released on drop.
#[derive(Debug)]
pub struct Reservation(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl MemoryBudget {
    /// A budget of `bytes` (at least one call's overhead plus 1 MiB).
    pub fn new(bytes: u64) -> Self {
        let mib = (bytes / MIB).clamp(CALL_OVERHEAD_BYTES / MIB + 1, Semaphore::MAX_PERMITS as u64);
        let total_mib = u32::try_from(mib).unwrap_or(u32::MAX);
        Self {
            total_mib,
            permits: Arc::new(Semaphore::new(total_mib as usize)),
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
        u64::from(self.total_mib) * MIB
    }

    /// The largest memory cap one call may have: the budget less one call's overhead.
    pub fn max_call_bytes(&self) -> u64 {
        self.total_bytes().saturating_sub(CALL_OVERHEAD_BYTES)
    }

    /// MiB not reserved by calls in flight.
    pub fn available_mib(&self) -> usize {
        self.permits.available_permits()
    }

    /// Reserves the share of a call whose memory cap is `memory_bytes`, waiting up to `wait`.
    pub async fn reserve(
        &self,
        memory_bytes: u64,
        wait: Duration,
    ) -> Result<Reservation, BudgetError> {
        let wanted = memory_bytes
            .saturating_add(CALL_OVERHEAD_BYTES)
            .div_ceil(MIB);
        let wanted = u32::try_from(wanted)
            .unwrap_or(u32::MAX)
            .min(self.total_mib);
        let started = std::time::Instant::now();
        match tokio::time::timeout(wait, Arc::clone(&self.permits).acquire_many_owned(wanted)).await
        {
            Ok(Ok(permit)) => Ok(Reservation(Some(permit))),
            // The semaphore is never closed; if it were, running unbudgeted beats failing all.
            Ok(Err(_closed)) => Ok(Reservation(None)),
            Err(_) => Err(BudgetError {
                wanted_mib: u64::from(wanted),
                budget_mib: u64::from(self.total_mib),
                waited: started.elapsed(),
            }),
        }
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

    #[tokio::test]
    async fn calls_wait_for_budget_and_get_it_back() {
        // 512 MiB: two calls of 200 MiB (212 with overhead) fit, a third waits.
        let budget = MemoryBudget::new(512 * MIB);
        let first = budget.reserve(200 * MIB, MAX_WAIT).await.expect("fits");
        let _second = budget.reserve(200 * MIB, MAX_WAIT).await.expect("fits");
        assert_eq!(budget.available_mib(), 512 - 2 * 212);
        let err = budget
            .reserve(200 * MIB, Duration::from_millis(20))
            .await
            .expect_err("over budget");
        assert_eq!((err.wanted_mib, err.budget_mib), (212, 512));
        assert!(
            err.to_string().contains("512 MiB plugin memory budget"),
            "{err}"
        );
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(200 * MIB, MAX_WAIT).await.is_ok() })
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
            .reserve(1 << 30, MAX_WAIT)
            .await
            .expect("clamped to the budget");
        assert_eq!(budget.available_mib(), 0);
        drop(all);
        assert_eq!(budget.max_call_bytes(), 52 * MIB);
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
