//! The `wasi:clocks/monotonic-clock` a plugin call sees, bounded by the call's deadline.
//!
//! Epoch interruption stops guest code, not the host: a guest that sleeps (a clock
//! subscription handed to `wasi:io/poll`) would hold its thread inside the host's `poll` for as
//! long as it asked, deadline or not. This implementation replaces wasmtime-wasi's for plugins:
//! a wait that ends within the call's deadline is an ordinary wait, and one that would outlast
//! it ends the call at once with the same interrupt trap as a loop that runs out of time, so a
//! sleeping plugin is reported as [`DeadlineExceeded`](super::CallError::DeadlineExceeded)
//! without keeping a thread busy to find out.

use std::time::Duration;

use wasmtime::{
    Trap,
    component::{HasData, Linker, Resource, ResourceTable},
};
use wasmtime_wasi::p2::{
    DynPollable, Pollable,
    bindings::clocks::monotonic_clock::{self, Duration as WasiDuration, Instant as WasiInstant},
    subscribe,
};

/// The clock of one call: started when the call's Store was made, limited to its deadline.
#[derive(Debug, Clone, Copy)]
pub struct CallClock {
    start: tokio::time::Instant,
    deadline: Duration,
}

impl CallClock {
    /// A clock for a call that may run for `deadline` from now.
    pub fn start(deadline: Duration) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            deadline,
        }
    }

    fn elapsed_nanos(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A pollable that is ready `wait` from now, or the interrupt trap if that is past the
    /// deadline.
    fn subscribe(
        &self,
        table: &mut ResourceTable,
        wait: Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let until = self.start.elapsed().saturating_add(wait);
        if until > self.deadline {
            return Err(Trap::Interrupt.into());
        }
        let wake = table.push(Wake {
            at: self.start + until,
        })?;
        subscribe(table, wake)
    }
}

/// What the monotonic-clock functions of one call work on.
pub struct CallClockView<'a> {
    /// The call's clock.
    pub clock: &'a CallClock,
    /// The call's resource table, where pollables live.
    pub table: &'a mut ResourceTable,
}

/// Replaces wasmtime-wasi's `wasi:clocks/monotonic-clock` in `linker` (which must already hold
/// WASI) with the deadline-bounded one.
pub fn add_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> CallClockView<'_>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let added = monotonic_clock::add_to_linker::<T, BoundedClock>(linker, view);
    linker.allow_shadowing(false);
    added
}

struct BoundedClock;

impl HasData for BoundedClock {
    type Data<'a> = CallClockView<'a>;
}

impl monotonic_clock::Host for CallClockView<'_> {
    fn now(&mut self) -> wasmtime::Result<WasiInstant> {
        Ok(self.clock.elapsed_nanos())
    }

    fn resolution(&mut self) -> wasmtime::Result<WasiDuration> {
        Ok(1)
    }

    fn subscribe_instant(&mut self, when: WasiInstant) -> wasmtime::Result<Resource<DynPollable>> {
        let wait = when.saturating_sub(self.clock.elapsed_nanos());
        self.clock.subscribe(self.table, Duration::from_nanos(wait))
    }

    fn subscribe_duration(
        &mut self,
        duration: WasiDuration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.clock
            .subscribe(self.table, Duration::from_nanos(duration))
    }
}

/// Ready at a moment within the call's deadline.
struct Wake {
    at: tokio::time::Instant,
}

#[async_trait::async_trait]
impl Pollable for Wake {
    async fn ready(&mut self) {
        tokio::time::sleep_until(self.at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_within_the_deadline_are_granted_and_longer_ones_trap() {
        let clock = CallClock::start(Duration::from_millis(100));
        let mut table = ResourceTable::new();
        assert!(
            clock
                .subscribe(&mut table, Duration::from_millis(10))
                .is_ok()
        );
        let err = clock
            .subscribe(&mut table, Duration::from_secs(1))
            .expect_err("a wait past the deadline");
        assert_eq!(err.downcast_ref::<Trap>(), Some(&Trap::Interrupt));
        // Waiting "forever" is past any deadline too, not an overflow.
        assert!(clock.subscribe(&mut table, Duration::MAX).is_err());
    }

    #[test]
    fn the_clock_counts_from_the_start_of_the_call() {
        let clock = CallClock::start(Duration::from_millis(100));
        let mut table = ResourceTable::new();
        let mut view = CallClockView {
            clock: &clock,
            table: &mut table,
        };
        let now = monotonic_clock::Host::now(&mut view).expect("now");
        assert!(now < Duration::from_secs(1).as_nanos() as u64, "{now}");
        // An instant already past is a wait of zero, granted.
        assert!(monotonic_clock::Host::subscribe_instant(&mut view, 0).is_ok());
        assert!(monotonic_clock::Host::subscribe_instant(&mut view, u64::MAX).is_err());
    }
}
