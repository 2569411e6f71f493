//! Leader election on a `coordination.k8s.io/v1` Lease, for running more than one replica:
//! only the holder reconciles.
//!
//! The rules are client-go's (`k8s.io/client-go/tools/leaderelection/leaderelection.go`,
//! `tryAcquireOrRenew` and `release`):
//! - a candidate never compares the holder's `renewTime` with its own clock (the two clocks
//!   may disagree by more than the lease): it records when *it* observed the record change,
//!   and takes the lease only once `leaseDurationSeconds` passed on its own clock without a
//!   change;
//! - the holder renews every [`RETRY_PERIOD`] and gives up when it could not renew within
//!   [`RENEW_DEADLINE`] of its last success, which is shorter than [`LEASE_DURATION`], so it has
//!   stopped before any candidate may take over;
//! - on graceful shutdown the holder releases the lease (empty holder, a one-second duration), so
//!   a standby takes over at its next retry instead of after a whole lease.
//!
//! A replica that loses the lease exits at once (as controller-runtime does): a deposed leader
//! must not finish the reconciles it had started. And every write first asks the election's
//! [`Fence`] (checked in the client's HTTP stack by [`crate::write::WriteFenceLayer`]): a leader
//! frozen past its renew deadline (a stopped process, a paused VM) that wakes with reconciles in
//! flight exits there, before its renewer has even run, since the monotonic clock it checks kept
//! running through the freeze. controller-runtime has no such check; its deposed leader may
//! write until its renewer notices.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tokio::{sync::watch, task::JoinHandle, time::Instant};

/// How long a lease holds without renewal (client-go's default for controllers: 15 s).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews, and a candidate retries (client-go: 2 s).
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// A holder that has not renewed for this long steps down (client-go: 10 s), well before a
/// candidate may take the lease ([`LEASE_DURATION`] after it last saw the record change).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// What one attempt on the lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the lease (took or renewed it).
    Held,
    /// Another replica holds a valid lease.
    HeldByOther,
    /// The Lease changed between the read and the write; try again.
    Conflict,
}

/// The lease record as last observed, and when (on this replica's clock).
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// One replica's claim on the lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    observed: Mutex<Option<Observed>>,
    fence: Fence,
}

impl LeaderElector {
    /// An elector for the Lease `name` in `namespace`, as `identity` (the Pod name), that
    /// arms `fence` once it leads and keeps it up to date while it renews.
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, fence: Fence) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            observed: Mutex::new(None),
            fence,
        }
    }

    /// Records `spec` as observed now if it differs from what was observed before; returns when
    /// the current record was first observed.
    fn observe(&self, spec: &LeaseSpec) -> Instant {
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match observed.as_ref() {
            Some(o) if o.spec == *spec => o.at,
            _ => {
                let at = Instant::now();
                *observed = Some(Observed {
                    spec: spec.clone(),
                    at,
                });
                at
            }
        }
    }

    /// Tries once to take or renew the lease.
    pub async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let secs = LEASE_DURATION.as_secs() as i32;
        let mine = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(secs),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let spec = mine(0, None);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(spec.clone()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.observe(&spec);
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
                Err(err) => Err(err),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let observed_at = self.observe(&spec);
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let held_by_me = holder == Some(self.identity.as_str());
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(secs)).unwrap_or(0),
        );
        // Valid while the record has not changed for a whole lease duration on our clock.
        let valid = observed_at.elapsed() < duration;
        if holder.is_some() && !held_by_me && valid {
            return Ok(Attempt::HeldByOther);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!held_by_me);
        let acquired = if held_by_me { spec.acquire_time } else { None };
        let next = mine(transitions, acquired);
        lease.spec = Some(next.clone());
        // replace carries the resourceVersion: two candidates cannot both win.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observe(&next);
                Ok(Attempt::Held)
            }
            // Someone wrote the Lease since we read it: a candidate, or anyone annotating it.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Conflict),
            Err(err) => Err(err),
        }
    }

    /// Gives the lease up if this replica holds it: empty holder, one-second duration (as
    /// client-go's `release`), so a standby need not wait out the lease.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: spec.lease_transitions,
            ..Default::default()
        });
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// Waits until this replica holds the lease, then keeps renewing it in the background.
    pub async fn acquire(self) -> Leadership {
        loop {
            match tokio::time::timeout(RETRY_PERIOD * 2, self.try_acquire()).await {
                Ok(Ok(Attempt::Held)) => break,
                Ok(Ok(_)) => tracing::debug!(lease = %self.name, "another replica leads"),
                Ok(Err(err)) => {
                    tracing::warn!(lease = %self.name, error = %err, "leader election")
                }
                Err(_) => tracing::warn!(lease = %self.name, "leader election timed out"),
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
        tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
        // Before anything can write: the fence must know this process leads from now on.
        self.fence.held_at(Instant::now());
        let elector = Arc::new(self);
        let (tx, rx) = watch::channel(true);
        let renewer = tokio::spawn(renew(Arc::clone(&elector), tx));
        Leadership {
            elector,
            renewer,
            leading: rx,
        }
    }
}

/// The fence of one election: when its elector last held the lease for certain (acquired or
/// renewed it), once it has led. Clones share it: the elector updates it, the client's
/// [`crate::write::WriteFenceLayer`] checks it before every write. Unarmed (a process that does
/// not elect a leader, or a standby that has not led yet) it lets every write pass.
#[derive(Clone, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    fn held_at(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// How long ago the lease was last held for certain; `None` while unarmed.
    fn held_ago(&self) -> Option<Duration> {
        let last = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        last.map(|at| at.elapsed())
    }

    /// Whether a write may be sent now: unarmed, or the lease held within the renew deadline.
    fn allows_writes(&self) -> bool {
        self.held_ago().is_none_or(|ago| ago < RENEW_DEADLINE)
    }

    /// The check before every write: in a process that leads, exits (as a lost lease does)
    /// unless the lease was held within the renew deadline, so a replica that could have been
    /// deposed never writes. A no-op while unarmed.
    pub fn ensure_leading(&self) {
        if !self.allows_writes() {
            tracing::error!(
                held_ago_s = self.held_ago().unwrap_or_default().as_secs(),
                "about to write without having held the lease within the renew deadline; exiting"
            );
            std::process::exit(1);
        }
    }
}

/// Renews until the renew deadline passes without a renewal or another replica holds the
/// lease; then `tx` turns `false`.
async fn renew(elector: Arc<LeaderElector>, tx: watch::Sender<bool>) {
    let mut last_renewed = Instant::now();
    elector.fence.held_at(last_renewed);
    loop {
        tokio::time::sleep(RETRY_PERIOD).await;
        // Measured from before the attempt: the renewTime it writes is taken then too.
        let attempt = Instant::now();
        let left = RENEW_DEADLINE.saturating_sub(last_renewed.elapsed());
        match tokio::time::timeout(left, elector.try_acquire()).await {
            Ok(Ok(Attempt::Held)) => {
                last_renewed = attempt;
                elector.fence.held_at(attempt);
            }
            Ok(Ok(Attempt::HeldByOther)) => {
                tracing::error!(lease = %elector.name, "leadership taken by another replica");
                let _ = tx.send(false);
                return;
            }
            // As client-go: a failed renewal is retried until the renew deadline.
            Ok(Ok(Attempt::Conflict)) => {
                tracing::warn!(lease = %elector.name, "renewing the lease conflicted; retrying")
            }
            Ok(Err(err)) => {
                tracing::warn!(lease = %elector.name, error = %err, "renewing the lease failed")
            }
            Err(_) => tracing::warn!(lease = %elector.name, "renewing the lease timed out"),
        }
        if last_renewed.elapsed() >= RENEW_DEADLINE {
            tracing::error!(lease = %elector.name, "could not renew within the renew deadline");
            let _ = tx.send(false);
            return;
        }
    }
}

/// This replica leads until [`Leadership::watch`] turns `false` or it releases the lease.
pub struct Leadership {
    elector: Arc<LeaderElector>,
    renewer: JoinHandle<()>,
    leading: watch::Receiver<bool>,
}

impl Leadership {
    /// Turns `false` when leadership is lost (renew deadline passed, or the lease taken); its
    /// sender is dropped when the lease is released.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Stops renewing and gives the lease up (graceful shutdown, once no reconcile runs).
    pub async fn release(self) {
        self.renewer.abort();
        if *self.leading.borrow()
            && let Err(err) = self.elector.release().await
        {
            tracing::warn!(lease = %self.elector.name, error = %err, "releasing the lease failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_steps_down_before_a_candidate_may_take_over() {
        // client-go requires LeaseDuration > RenewDeadline > RetryPeriod * JitterFactor (1.2).
        assert!(LEASE_DURATION > RENEW_DEADLINE);
        assert!(RENEW_DEADLINE.as_secs_f64() > RETRY_PERIOD.as_secs_f64() * 1.2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_fence_closes_at_the_renew_deadline_and_reopens_on_renewal() {
        let fence = Fence::default();
        tokio::time::advance(RENEW_DEADLINE * 2).await;
        assert!(
            fence.allows_writes(),
            "unarmed: no election, every write passes"
        );
        let elector_side = fence.clone();
        elector_side.held_at(Instant::now());
        tokio::time::advance(RENEW_DEADLINE - Duration::from_millis(1)).await;
        assert!(fence.allows_writes(), "held within the renew deadline");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!fence.allows_writes(), "not held within the renew deadline");
        elector_side.held_at(Instant::now());
        assert!(fence.allows_writes(), "renewed");
    }
}
