//! What one reconcile of one App should do, as plain data: the [`decide`](fn@crate::decide)
//! output an executor performs.

use std::time::Duration;

use crate::{object::PluginObject, status::AppStatus};

/// Everything a reconcile of one App does, in the order an executor performs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Planned objects the App does not control yet (some of `apply`): each must be absent
    /// (the executor creates it) or already the App's, or the plan is refused when the
    /// executor comes to it (taking over a user's object would let pruning or garbage
    /// collection delete it later).
    pub adopt: Vec<ObjectKey>,
    /// Whether the App must carry the cleanup finalizer before any of this is written
    /// ([`crate::deletion::needs_finalizer`]); the executor adds it first if it is missing.
    pub finalizer: bool,
    /// Objects to server-side apply, stamped: those not already in place, in waves
    /// ([`Decision::waves`]), each in plan order.
    pub apply: Vec<PluginObject>,
    /// How many of `apply`, from its start, are the first wave: what workloads use
    /// (configuration, accounts, Services, claims), applied and all accepted before the rest
    /// (workloads and every other kind), so that a refused ConfigMap never leaves a Deployment
    /// rolling out to Pods that cannot start.
    pub first_wave: usize,
    /// Planned objects already as planned, which cost no write.
    pub in_place: usize,
    /// Owned objects the plan no longer holds, to delete.
    pub prune: Vec<ObjectKey>,
    /// A backup Job to create, with its slot.
    pub backup_start: Option<(String, PluginObject)>,
    /// Backup Jobs of expired slots, to delete.
    pub backup_expire: Vec<ObjectKey>,
    /// The status to write (written only if it differs from the App's).
    pub status: AppStatus,
    /// Events to publish once the writes succeeded.
    pub events: Vec<Event>,
    /// When to look again.
    pub requeue: Requeue,
}

impl Decision {
    /// The objects to apply, wave by wave: every object of a wave is applied (in parallel, if
    /// the executor likes) before any of the next.
    pub fn waves(&self) -> impl Iterator<Item = &[PluginObject]> {
        let (used, users) = self.apply.split_at(self.first_wave.min(self.apply.len()));
        [used, users].into_iter().filter(|wave| !wave.is_empty())
    }

    /// Whether the decision writes nothing but (perhaps) the status.
    pub fn writes_nothing(&self) -> bool {
        self.adopt.is_empty()
            && self.apply.is_empty()
            && self.prune.is_empty()
            && self.backup_start.is_none()
            && self.backup_expire.is_empty()
    }
}

/// An object by `apiVersion`, `kind` and name (two kinds of one name in different groups are
/// different objects).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `StatefulSet`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// A Kubernetes Event on the App.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Warning rather than Normal.
    pub warning: bool,
    /// CamelCase.
    pub reason: String,
    /// For people.
    pub note: String,
}

impl Event {
    /// A Normal event.
    pub fn normal(reason: &str, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason: reason.into(),
            note: crate::status::bounded(note.into()),
        }
    }

    /// A Warning event.
    pub fn warning(reason: &str, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason: reason.into(),
            note: crate::status::bounded(note.into()),
        }
    }
}

/// When to reconcile the App again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// After this long.
    After(Duration),
    /// After the App's next backoff step: something failed (the executor keeps the count).
    Backoff,
}

/// The App's one-word state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing known yet.
    Pending,
    /// Converging.
    Progressing,
    /// Rolled out and healthy.
    Ready,
    /// Serving less than it should, or the plugin failed.
    Degraded,
    /// The plugin cannot be used.
    Failed,
}

impl Phase {
    /// As written in `status.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Progressing => "Progressing",
            Self::Ready => "Ready",
            Self::Degraded => "Degraded",
            Self::Failed => "Failed",
        }
    }
}
