//! Progressive delivery of a bound kind's plugin: a new digest behind the binding's source is
//! shadow-planned against every instance, moved to a few canaries, analysed, then rolled out in
//! batches, or rolled back and marked bad ([`wasmop_core::rollout`] decides every step).
//!
//! - [`RolloutSpec`]: the binding's `spec.rollout`, and [`Settings`], what the host reads of it;
//! - [`Rollouts`]: the state of each binding's rollout as its status holds it, which every
//!   reconcile reads to pick the digest serving its instance ([`Rollouts::pick`]);
//! - [`driver`]: the task beside each bound kind's controller that steps the rollout and
//!   writes the binding's status; [`shadow`]: the dry-run plans.
//!
//! The state lives in the binding's status, never only in memory: a host killed mid-rollout
//! reads it back and goes on from there.

pub mod cli;
pub(crate) mod driver;
pub(crate) mod shadow;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, RwLock},
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wasmop_core::rollout::{self, Canary, Policy, State};

/// The annotation with which an instance pins a digest of its binding's plugin (where the
/// binding's `spec.rollout.allowPinning` lets it): `sha256:<64 hex>`, one the binding has
/// served (`status.rollout.known`).
pub const PIN_ANNOTATION: &str = "wasmop.dev/plugin-digest";

/// The annotation `wasmop rollout abort` sets on a binding: the candidate digest to roll back
/// and mark bad.
pub const ABORT_ANNOTATION: &str = "wasmop.dev/rollout-abort";

/// How a binding delivers a new version of its plugin.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// `Immediate` (the default): every instance moves to a new digest at once, within one poll
    /// of the source. `Progressive`: shadow plans, canaries, analysis, batches, rollback.
    #[serde(default)]
    pub strategy: Strategy,
    /// Which instances move first (by default one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
    /// After the canaries, each step moves this percentage of the instances (1-100, default
    /// 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub batch_percent: Option<u32>,
    /// How long a step's instances must stay Ready on the new digest before the next step
    /// (seconds, default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub soak_seconds: Option<u32>,
    /// How long a step may take to get its instances Ready on the new digest before the
    /// rollout is rolled back (seconds, default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 86400))]
    pub progress_deadline_seconds: Option<u32>,
    /// Holds the rollout where it is (no further step; a Degraded canary still rolls back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Whether an instance may pin a digest the binding has served with the
    /// `wasmop.dev/plugin-digest` annotation (default false). A pinned instance is left out of
    /// rollouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_pinning: Option<bool>,
}

/// How a new digest reaches the instances.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Strategy {
    /// Every instance at once.
    #[default]
    Immediate,
    /// Shadow plans, canaries, analysis, batches.
    Progressive,
}

/// Which instances a progressive rollout moves first: exactly one of the three.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.count), has(self.percent), has(self.matchLabels)].filter(x, x).size() <= 1",
    "message": "set at most one of count, percent or matchLabels"
}]))]
pub struct CanarySpec {
    /// This many instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<u32>,
    /// This percentage of the instances, rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<u32>,
    /// The instances carrying all these labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
}

/// What the host reads of a progressive binding's `spec.rollout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The decision core's policy.
    pub policy: Policy,
    /// The canary selector's labels, for `Canary::Selected`.
    pub match_labels: BTreeMap<String, String>,
    /// Whether instances may pin a digest.
    pub allow_pinning: bool,
}

impl Settings {
    /// The settings of a binding's rollout; `None` for `Immediate`.
    pub fn of(spec: Option<&RolloutSpec>) -> Option<Self> {
        let spec = spec.filter(|s| s.strategy == Strategy::Progressive)?;
        let canary = spec.canary.clone().unwrap_or_default();
        let (canary, match_labels) = match (canary.count, canary.percent, canary.match_labels) {
            (_, _, Some(labels)) if !labels.is_empty() => (Canary::Selected, labels),
            (_, Some(percent), _) => (Canary::Percent(percent.clamp(1, 100)), BTreeMap::new()),
            (count, _, _) => (Canary::Count(count.unwrap_or(1).max(1)), BTreeMap::new()),
        };
        Some(Self {
            policy: Policy {
                canary,
                batch_percent: spec.batch_percent.unwrap_or(25).clamp(1, 100),
                soak: Duration::from_secs(spec.soak_seconds.unwrap_or(60).into()),
                progress_deadline: Duration::from_secs(
                    spec.progress_deadline_seconds.unwrap_or(600).max(10).into(),
                ),
                paused: spec.paused.unwrap_or(false),
            },
            match_labels,
            allow_pinning: spec.allow_pinning.unwrap_or(false),
        })
    }

    /// Whether an instance with `labels` is a selected canary.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.match_labels.is_empty()
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// How many instances are on which digest, in the binding's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceCounts {
    /// On the stable digest.
    pub stable: u32,
    /// On the candidate.
    pub candidate: u32,
    /// Pinning a digest.
    pub pinned: u32,
    /// On no digest yet, or another one (moving, or their plugin cannot be called).
    pub other: u32,
}

/// Which digest serves an instance, as a reconcile asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// The binding's rollout state is not read yet: decide nothing (it is, within a moment of
    /// the kind's controller starting).
    Unknown,
    /// The digest the source offers now: no version was ever recorded (the first load).
    Offered,
    /// This digest.
    Digest(String),
    /// The instance pins a digest it may not: why.
    Refused {
        /// CamelCase.
        reason: &'static str,
        /// For the instance's author.
        message: String,
    },
}

/// The rollout state of every progressive binding, by binding name, as its status holds it.
#[derive(Clone, Default)]
pub struct Rollouts {
    states: Arc<RwLock<HashMap<String, Arc<State>>>>,
    /// `wasmop_rollout_*`.
    pub metrics: RolloutMetrics,
}

impl Rollouts {
    /// No rollout known yet, its metrics registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        Self {
            states: Arc::default(),
            metrics: RolloutMetrics::register(registry),
        }
    }

    /// The state of `binding`'s rollout, once read.
    pub fn get(&self, binding: &str) -> Option<Arc<State>> {
        self.states
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(binding)
            .cloned()
    }

    /// Records what `binding`'s status says now.
    pub fn set(&self, binding: &str, state: State) {
        self.states
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(binding.to_string(), Arc::new(state));
    }

    /// Forgets `binding` (its kind is no longer served, or no longer progressive).
    pub fn forget(&self, binding: &str) {
        self.states
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(binding);
    }

    /// Which digest serves the instance `key` (`namespace/name`, with `labels` and the
    /// `pin` annotation, if any) of `binding`.
    pub fn pick(
        &self,
        binding: &str,
        settings: &Settings,
        key: &str,
        labels: &BTreeMap<String, String>,
        pin: Option<&str>,
    ) -> Pick {
        let Some(state) = self.get(binding) else {
            return Pick::Unknown;
        };
        if let Some(pin) = pin {
            if !settings.allow_pinning {
                return Pick::Refused {
                    reason: "PinRefused",
                    message: format!(
                        "the annotation {PIN_ANNOTATION} pins {pin:?}, but PluginBinding \
                         {binding} does not allow pinning (spec.rollout.allowPinning)"
                    ),
                };
            }
            if !state.known.iter().any(|k| k == pin) {
                return Pick::Refused {
                    reason: "PinUnknown",
                    message: format!(
                        "the annotation {PIN_ANNOTATION} pins {pin:?}, which PluginBinding \
                         {binding}'s plugin has not served (status.rollout.known lists those \
                         that may be pinned)"
                    ),
                };
            }
            return Pick::Digest(pin.to_string());
        }
        let selected = settings.selects(labels);
        match (&state.candidate, &state.stable) {
            (Some(candidate), _)
                if rollout::serves_candidate(&state, key, selected, &settings.policy) =>
            {
                Pick::Digest(candidate.clone())
            }
            (_, Some(stable)) => Pick::Digest(stable.clone()),
            (_, None) => Pick::Offered,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BindingLabel {
    binding: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstancesLabels {
    binding: String,
    /// `stable`, `candidate`, `pinned`, `other`.
    on: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    binding: String,
    /// `complete`, `rolled_back`, `stopped`, `aborted`.
    outcome: &'static str,
}

/// `wasmop_rollout_*`.
#[derive(Clone, Default)]
pub struct RolloutMetrics {
    step: Family<BindingLabel, Gauge>,
    instances: Family<InstancesLabels, Gauge>,
    outcomes: Family<OutcomeLabels, Counter>,
    shadow_seconds: Family<BindingLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl RolloutMetrics {
    /// Registers the families in `registry` (prefix it with `wasmop`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "rollout_step",
            "Where each progressive binding's rollout is: -1 none in progress, 0 shadow plans, \
             1 canaries, 2 and up the batches",
            metrics.step.clone(),
        );
        registry.register(
            "rollout_instances",
            "Instances of each progressive binding's kind by the digest serving them (stable, \
             candidate, pinned, other)",
            metrics.instances.clone(),
        );
        registry.register(
            "rollout_outcomes",
            "Rollouts ended, by outcome (complete, rolled_back, stopped, aborted)",
            metrics.outcomes.clone(),
        );
        registry.register(
            "rollout_shadow_seconds",
            "How long the last shadow plans of each progressive binding took, in seconds",
            metrics.shadow_seconds.clone(),
        );
        metrics
    }

    pub(crate) fn observe(&self, binding: &str, state: &State, counts: &InstanceCounts) {
        use rollout::Phase;
        let step = match state.phase {
            Phase::Shadow => 0,
            Phase::Canary => 1,
            Phase::Batches => 1 + i64::from(state.step),
            Phase::Stable | Phase::Stopped | Phase::RolledBack => -1,
        };
        self.step
            .get_or_create(&BindingLabel {
                binding: binding.to_string(),
            })
            .set(step);
        for (on, n) in [
            ("stable", counts.stable),
            ("candidate", counts.candidate),
            ("pinned", counts.pinned),
            ("other", counts.other),
        ] {
            self.instances
                .get_or_create(&InstancesLabels {
                    binding: binding.to_string(),
                    on,
                })
                .set(i64::from(n));
        }
    }

    pub(crate) fn ended(&self, binding: &str, outcome: &'static str) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                binding: binding.to_string(),
                outcome,
            })
            .inc();
    }

    pub(crate) fn shadowed(&self, binding: &str, took: Duration) {
        self.shadow_seconds
            .get_or_create(&BindingLabel {
                binding: binding.to_string(),
            })
            .set(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progressive(canary: CanarySpec) -> Settings {
        Settings::of(Some(&RolloutSpec {
            strategy: Strategy::Progressive,
            canary: Some(canary),
            ..RolloutSpec::default()
        }))
        .expect("progressive")
    }

    #[test]
    fn immediate_has_no_settings_and_progressive_has_defaults() {
        assert_eq!(Settings::of(None), None);
        assert_eq!(Settings::of(Some(&RolloutSpec::default())), None);
        let settings = progressive(CanarySpec::default());
        assert_eq!(settings.policy.canary, Canary::Count(1));
        assert_eq!(settings.policy.batch_percent, 25);
        assert_eq!(settings.policy.soak, Duration::from_secs(60));
        assert!(!settings.allow_pinning);
        let selected = progressive(CanarySpec {
            match_labels: Some(BTreeMap::from([("tier".into(), "canary".into())])),
            ..CanarySpec::default()
        });
        assert_eq!(selected.policy.canary, Canary::Selected);
        assert!(selected.selects(&BTreeMap::from([("tier".into(), "canary".into())])));
        assert!(!selected.selects(&BTreeMap::new()));
    }

    #[test]
    fn a_pin_must_be_allowed_and_known() {
        let rollouts = Rollouts::default();
        let mut settings = progressive(CanarySpec::default());
        let labels = BTreeMap::new();
        assert_eq!(
            rollouts.pick("b", &settings, "ns/a", &labels, None),
            Pick::Unknown
        );
        rollouts.set(
            "b",
            State {
                stable: Some("sha256:aa".into()),
                known: vec!["sha256:aa".into(), "sha256:bb".into()],
                ..State::default()
            },
        );
        assert_eq!(
            rollouts.pick("b", &settings, "ns/a", &labels, None),
            Pick::Digest("sha256:aa".into())
        );
        assert!(matches!(
            rollouts.pick("b", &settings, "ns/a", &labels, Some("sha256:bb")),
            Pick::Refused {
                reason: "PinRefused",
                ..
            }
        ));
        settings.allow_pinning = true;
        assert_eq!(
            rollouts.pick("b", &settings, "ns/a", &labels, Some("sha256:bb")),
            Pick::Digest("sha256:bb".into())
        );
        // A digest of another source, in the host's cache, is not the binding's to pin.
        assert!(matches!(
            rollouts.pick("b", &settings, "ns/a", &labels, Some("sha256:cc")),
            Pick::Refused {
                reason: "PinUnknown",
                ..
            }
        ));
    }
}
