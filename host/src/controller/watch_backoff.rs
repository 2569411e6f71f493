//! The retry schedule of every watch the host runs, and why it is not kube-runtime's default.
//!
//! kube-runtime's `Controller` puts one shared backoff (`trigger_backoff`, 0.8 s doubling to 30 s
//! plus up to 100% jitter) around the merged stream of all its triggers. An error on any watch
//! stops the controller from polling *every* watch for that long, including the requests other
//! watches have in flight. After an API server restart all watches fail together, the shared
//! delay reaches 30-60 s, and a reconnect that was paused mid-handshake outlives the client's
//! 30 s connect timeout, fails with `client error (Connect)`, and pushes the shared delay up
//! again: the host stays deaf until it is restarted (the same loop is reported for other
//! kube-rs operators in stackabletech/trino-operator#936; kube-rs chose the shared timer in
//! kube-rs/kube#763). The host therefore gives the controller a trigger backoff that never
//! waits ([`NoDelay`]) and gives each watch its own [`WatchBackoff`], which only runs while that
//! watch has nothing in flight.
//!
//! [`WatchBackoff`] is capped at a few seconds rather than client-go's 30 s: the host runs about
//! ten watches against one API server, so a short cap costs a few requests per second during an
//! outage and buys recovery within seconds of the API server's return.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// First retry after an error.
const FIRST: Duration = Duration::from_millis(500);
/// Longest wait between retries, before jitter.
const MAX: Duration = Duration::from_secs(4);

/// Exponential backoff for one watch: 0.5 s doubling to 4 s, each delay scaled by a random
/// factor in [0.75, 1.25) so that watches do not retry in lockstep; reset by the first success.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(MAX);
        Some(base.mul_f64(0.75 + fastrand::f64() / 2.0))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

/// A backoff that never waits, for kube-runtime's shared trigger backoff (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDelay;

impl Iterator for NoDelay {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoDelay {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_with_bounded_jitter_and_resets() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<Duration> = backoff.by_ref().take(8).collect();
        let bases = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0];
        for (delay, base) in delays.iter().zip(bases) {
            let secs = delay.as_secs_f64();
            assert!(
                (base * 0.75..base * 1.25).contains(&secs),
                "{secs} for base {base}"
            );
        }
        backoff.reset();
        assert!(
            backoff
                .next()
                .is_some_and(|d| d < Duration::from_millis(625))
        );
    }

    #[test]
    fn the_trigger_backoff_never_waits_nor_gives_up() {
        assert!(NoDelay.take(100).all(|d| d.is_zero()));
    }
}
