//! Who a plugin source's work (its compiles and its pulls) is charged to: the namespace whose
//! Apps use it, or, for a source the Apps of several namespaces use, a shared bucket.
//!
//! Sources are keyed by everything that decides what reading them yields (reference, access,
//! keys: see [`SourceRef`](super::source::SourceRef)), so a ConfigMap, or an image read with an
//! App's pull secrets, always belongs to one namespace. Only an image read anonymously or with
//! the host's credentials (and a development file) can be named by Apps of several namespaces.
//! Such a source is charged to its one namespace while only that namespace's Apps ask for it,
//! and to [`Charge::Shared`] once several do. Charging it to the first namespace that asked
//! would let a tenant that names another's image first queue that image behind its own
//! abuse; in the shared bucket it waits only behind other shared sources, and it costs neither
//! namespace its share.

use std::{
    collections::HashMap,
    fmt,
    sync::Mutex,
    time::{Duration, Instant},
};

/// Whose share a source's compiles and pulls count against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Charge {
    /// The one namespace whose Apps use the source.
    Namespace(String),
    /// Sources the Apps of several namespaces use, and work no App asked for (a person's
    /// `wasmop plugin` command, tests).
    Shared,
}

impl Charge {
    /// The namespace `namespace`.
    pub fn namespace(namespace: impl Into<String>) -> Self {
        Self::Namespace(namespace.into())
    }
}

impl fmt::Display for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Namespace(namespace) => write!(f, "namespace {namespace}"),
            Self::Shared => write!(f, "shared sources"),
        }
    }
}

/// The namespaces whose Apps asked for one source recently, and so what it is charged to.
#[derive(Debug)]
pub struct Askers {
    /// A namespace that has not asked for this long no longer counts.
    forget_after: Duration,
    asked: Mutex<HashMap<String, Instant>>,
}

impl Askers {
    /// No namespace yet; one that stops asking counts for `forget_after`.
    pub fn new(forget_after: Duration) -> Self {
        Self {
            forget_after,
            asked: Mutex::new(HashMap::new()),
        }
    }

    /// Records that an App of `namespace` asked for the source now.
    pub fn asked(&self, namespace: &str) {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        match asked.get_mut(namespace) {
            Some(at) => *at = Instant::now(),
            None => {
                asked.insert(namespace.to_string(), Instant::now());
            }
        }
    }

    /// What the source's work is charged to now.
    pub fn charge(&self) -> Charge {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.retain(|_, at| at.elapsed() < self.forget_after);
        match (asked.len(), asked.keys().next()) {
            (1, Some(namespace)) => Charge::Namespace(namespace.clone()),
            _ => Charge::Shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_its_namespaces_until_another_asks() {
        let askers = Askers::new(Duration::from_secs(60));
        assert_eq!(askers.charge(), Charge::Shared, "nobody asked yet");
        askers.asked("team-a");
        askers.asked("team-a");
        assert_eq!(askers.charge(), Charge::namespace("team-a"));
        askers.asked("team-b");
        assert_eq!(askers.charge(), Charge::Shared);

        // A namespace that stopped asking no longer counts: the source is the other's again.
        let forgetful = Askers::new(Duration::from_millis(50));
        forgetful.asked("team-b");
        std::thread::sleep(Duration::from_millis(60));
        forgetful.asked("team-a");
        assert_eq!(forgetful.charge(), Charge::namespace("team-a"));
    }
}
