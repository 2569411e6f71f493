//! Leader election on a `coordination.k8s.io/v1` Lease, for running more than one replica:
//! only the holder reconciles; a replica that cannot renew in time steps down.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tokio::sync::watch;

/// How long a lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews, and a candidate retries.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// A holder that has not renewed for this long steps down, well before a standby may take
/// the lease (`LEASE_DURATION` after the last renewal it saw).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// One replica's claim on the lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl LeaderElector {
    /// An elector for the Lease `name` in `namespace`, as `identity` (the Pod name).
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
        }
    }

    /// Tries once to take or renew the lease; returns whether this replica holds it.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
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
        match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(mine(0, None)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(err) => Err(err),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let held_by_me = spec.holder_identity.as_deref() == Some(self.identity.as_str());
                let duration = i64::from(spec.lease_duration_seconds.unwrap_or(secs));
                let expired = spec
                    .renew_time
                    .as_ref()
                    .is_none_or(|t| now.as_second() - t.0.as_second() > duration);
                if !held_by_me && !expired && spec.holder_identity.is_some() {
                    return Ok(false);
                }
                let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!held_by_me);
                let acquired = if held_by_me { spec.acquire_time } else { None };
                lease.spec = Some(mine(transitions, acquired));
                // replace carries the resourceVersion: two candidates cannot both win.
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(err) => Err(err),
                }
            }
        }
    }

    /// Waits until this replica holds the lease, then keeps renewing it in the background; the
    /// returned receiver turns `false` if leadership is lost.
    pub async fn acquire(self) -> watch::Receiver<bool> {
        loop {
            match self.try_acquire().await {
                Ok(true) => break,
                Ok(false) => tracing::debug!(lease = %self.name, "another replica leads"),
                Err(err) => tracing::warn!(lease = %self.name, error = %err, "leader election"),
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
        tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
        let (tx, rx) = watch::channel(true);
        tokio::spawn(async move {
            let mut last_renewed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(RETRY_PERIOD).await;
                // Measured from before the attempt: the renewTime it writes is taken then too.
                let attempt = tokio::time::Instant::now();
                let left = RENEW_DEADLINE.saturating_sub(last_renewed.elapsed());
                match tokio::time::timeout(left, self.try_acquire()).await {
                    Ok(Ok(true)) => last_renewed = attempt,
                    Ok(Ok(false)) => {
                        tracing::warn!(lease = %self.name, "leadership taken by another replica");
                        let _ = tx.send(false);
                        return;
                    }
                    Ok(Err(err)) => {
                        tracing::warn!(lease = %self.name, error = %err, "renewing the lease failed")
                    }
                    Err(_) => tracing::warn!(lease = %self.name, "renewing the lease timed out"),
                }
                if last_renewed.elapsed() >= RENEW_DEADLINE {
                    tracing::warn!(lease = %self.name, "could not renew within the renew deadline; stepping down");
                    let _ = tx.send(false);
                    return;
                }
            }
        });
        rx
    }
}
