//! Progressive delivery of a new plugin version to the instances of a bound kind, decided as
//! data: which digest serves each instance ([`serves_candidate`]), and, from the binding's
//! rollout state, its policy and what the instances' statuses say, the next state
//! ([`step`]). The host keeps the state in the binding's status (never only in memory), so a
//! host killed mid-rollout resumes where it was: the same state and the same instances give the
//! same answer.
//!
//! A rollout goes through these phases:
//! 1. `Shadow`: the new digest (the candidate) plans every instance in dry run, beside the
//!    digest serving it (the stable one); one plan the guard rejects, one call that fails, one
//!    object the stable version keeps that the candidate would delete, and the rollout stops
//!    there, no instance moved ([`judge`] says which);
//! 2. `Canary`: a count, a percentage or the selected instances move; they must be on the
//!    candidate, Ready, for the soak time; one that turns `Degraded` (its health, or a failing
//!    call) rolls every moved instance back, and the digest is marked bad for the source;
//! 3. `Batches`: the rest, a percentage at a time, each step gated the same way; then the
//!    candidate is the stable digest.
//!
//! Which instances move is a threshold on a hash of the instance's key and the candidate's
//! digest ([`rank`]): a step only raises it, so an instance never moves back but on a rollback,
//! and the state is one number whatever the instance count.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{
    conditions::{DEGRADED, READY},
    decision::{Decision, ObjectKey, Requeue},
    status::bounded,
};

/// Digests marked bad per source, remembered so that a poll of the same bad tag starts no new
/// rollout; the oldest is forgotten first.
pub const MAX_BAD: usize = 8;
/// Digests a binding remembers having served (what an instance may pin).
pub const MAX_KNOWN: usize = 8;
/// Instances named in a status message (the first ones, by key): enough to act on, bounded.
pub const MAX_NAMED: usize = 5;

/// How a binding delivers a new digest of its plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Which instances move first.
    pub canary: Canary,
    /// Each step after the canaries moves this percentage (1-100) of the instances.
    pub batch_percent: u32,
    /// How long a step's instances must be Ready on the candidate before the next step.
    pub soak: Duration,
    /// How long a step may take to get its instances Ready on the candidate before the
    /// rollout is rolled back.
    pub progress_deadline: Duration,
    /// Whether the rollout holds where it is.
    pub paused: bool,
}

/// Which instances a rollout moves first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// This many (at least one, while there is an instance).
    Count(u32),
    /// This percentage, rounded up.
    Percent(u32),
    /// Those the binding's label selector selects ([`Instance::selected`]).
    Selected,
}

/// Where a rollout is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// No rollout in progress: every instance that pins nothing is on the stable digest.
    #[default]
    Stable,
    /// The candidate plans every instance in dry run; none has moved.
    Shadow,
    /// The canaries are on the candidate, under analysis.
    Canary,
    /// The rest move a batch at a time.
    Batches,
    /// The candidate was stopped by its shadow plans, before any instance moved.
    Stopped,
    /// The candidate was rolled back: every instance is on the stable digest again.
    RolledBack,
}

impl Phase {
    /// As written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stable => "Stable",
            Self::Shadow => "Shadow",
            Self::Canary => "Canary",
            Self::Batches => "Batches",
            Self::Stopped => "Stopped",
            Self::RolledBack => "RolledBack",
        }
    }

    /// Whether instances may be on the candidate.
    fn moving(self) -> bool {
        matches!(self, Self::Canary | Self::Batches)
    }
}

/// A rollout's state, as the binding's `status.rollout` holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// Where the rollout is.
    #[serde(default)]
    pub phase: Phase,
    /// The digest serving every instance not moved (nor pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<String>,
    /// The digest being rolled out, while one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// The step: 0 the canaries, then each batch.
    #[serde(default)]
    pub step: u32,
    /// Instances whose rank ([`rank`]) is below this (hexadecimal) are on the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<String>,
    /// How many instances the step moves, in all (canaries and batches so far).
    #[serde(default)]
    pub target: u32,
    /// When the step began (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started: Option<String>,
    /// When every instance of the step was first seen Ready on the candidate (RFC 3339): the
    /// soak counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_started: Option<String>,
    /// Digests rolled back or stopped for this source: none of them is rolled out again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad: Vec<String>,
    /// Digests the binding's plugin has served, newest last: what an instance may pin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known: Vec<String>,
    /// The shadow plans of the candidate (or of the last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowSummary>,
    /// Why the rollout is where it is, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The rollout's own salt of [`rank`] (hexadecimal), drawn when it starts: which instances
    /// move first cannot be foreseen from their names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// When the rollout was paused (RFC 3339), while it is: the step's clock starts again on
    /// resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<String>,
    /// Whether the step is past its deadline (and was said to be, once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stalled: bool,
}

impl State {
    /// The threshold as a number (0: no instance moved).
    pub fn threshold(&self) -> u64 {
        self.threshold
            .as_deref()
            .and_then(|t| u64::from_str_radix(t, 16).ok())
            .unwrap_or(0)
    }

    fn set_threshold(&mut self, threshold: u64) {
        self.threshold = (threshold > 0).then(|| format!("{threshold:016x}"));
    }

    fn remember_known(&mut self, digest: &str) {
        self.known.retain(|d| d != digest);
        self.known.push(digest.to_string());
        if self.known.len() > MAX_KNOWN {
            self.known.remove(0);
        }
    }

    fn mark_bad(&mut self, digest: &str) {
        self.bad.retain(|d| d != digest);
        self.bad.push(digest.to_string());
        if self.bad.len() > MAX_BAD {
            self.bad.remove(0);
        }
    }

    /// Ends the rollout in `phase`, every instance back on the stable digest.
    fn end(&mut self, phase: Phase, message: String) {
        if let Some(candidate) = self.candidate.take() {
            self.mark_bad(&candidate);
        }
        self.phase = phase;
        self.clear_steps();
        self.message = Some(bounded(message));
    }

    /// Forgets the steps of a rollout: none moves an instance any more.
    fn clear_steps(&mut self) {
        self.step = 0;
        self.target = 0;
        self.threshold = None;
        self.step_started = None;
        self.soak_started = None;
        self.seed = None;
        self.paused_at = None;
        self.stalled = false;
    }

    /// The rank salt.
    fn salt(&self) -> u64 {
        self.seed
            .as_deref()
            .and_then(|t| u64::from_str_radix(t, 16).ok())
            .unwrap_or(0)
    }
}

/// What the candidate's dry-run plans found, in the binding's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowSummary {
    /// The digest planned.
    pub digest: String,
    /// Instances planned.
    pub planned: u32,
    /// Instances whose objects the candidate would write differently.
    pub changed: u32,
    /// Instances the candidate's plans stop on.
    pub refused: u32,
    /// The first of them: `namespace/name: reason: message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<String>,
}

/// One instance as a rollout sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instance {
    /// `namespace/name`.
    pub key: String,
    /// Pins a digest: left out of every rollout.
    pub pinned: bool,
    /// Selected by the binding's canary selector.
    pub selected: bool,
    /// `status.plugin.digest`: the digest its last reconcile ran.
    pub serving: Option<String>,
    /// Its status describes its current generation.
    pub current: bool,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// Its `Degraded` condition, when True: `reason: message`.
    pub degraded: Option<String>,
    /// The stable digest, deciding for it now, finds it as unwell (Degraded, or not Ready):
    /// its trouble is its own (its spec, its workload), not the candidate's.
    pub excused: bool,
}

impl Instance {
    /// Reads the instance from its status conditions (`type`, `status`, `reason`, `message`).
    pub fn from_conditions<'a>(
        key: String,
        serving: Option<String>,
        current: bool,
        conditions: impl IntoIterator<Item = (&'a str, &'a str, &'a str, &'a str)>,
    ) -> Self {
        let mut instance = Self {
            key,
            serving,
            current,
            ..Self::default()
        };
        for (type_, status, reason, message) in conditions {
            match (type_, status) {
                (READY, "True") => instance.ready = true,
                (DEGRADED, "True") => {
                    instance.degraded = Some(format!("{reason}: {message}"));
                }
                _ => {}
            }
        }
        instance
    }
}

/// What the shadow plans of a candidate found, instance by instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadow {
    /// The digest planned.
    pub digest: String,
    /// Per instance (`namespace/name`), what [`judge`] said.
    pub verdicts: Vec<(String, Verdict)>,
}

/// What the candidate's dry-run decision for one instance means for the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The candidate writes what the stable digest writes.
    Same,
    /// The candidate writes the instance's objects differently (a new version of them).
    Changes,
    /// The candidate's decision would stop the instance, or delete what the stable one keeps.
    Refused {
        /// CamelCase.
        reason: String,
        /// For people.
        message: String,
    },
}

/// Compares the candidate's dry-run decision for one instance with the stable digest's.
///
/// Refused: the candidate fails where the stable one does not (a plan the guard rejects, a
/// call that traps or runs out of time: the decision backs off with a `Degraded` reason), or
/// it would delete an owned object the stable one keeps (a prune: a claim, a Service).
/// A failure both share is the instance's, not the candidate's.
pub fn judge(stable: &Decision, candidate: &Decision) -> Verdict {
    let failure = |d: &Decision| {
        (d.requeue == Requeue::Backoff)
            .then(|| {
                d.status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == DEGRADED && c.status == "True")
                    .map(|c| (c.reason.clone(), c.message.clone()))
            })
            .flatten()
    };
    if let Some((reason, message)) = failure(candidate)
        && failure(stable).is_none()
    {
        return Verdict::Refused { reason, message };
    }
    let kept: Vec<&ObjectKey> = candidate
        .prune
        .iter()
        .filter(|k| !stable.prune.contains(k))
        .collect();
    if let Some(first) = kept.first() {
        let more = match kept.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        return Verdict::Refused {
            reason: "WouldDelete".into(),
            message: format!(
                "the new version would delete {first}{more}, which the version in service keeps"
            ),
        };
    }
    let mut theirs: Vec<String> = stable.apply.iter().map(fingerprint).collect();
    let mut ours: Vec<String> = candidate.apply.iter().map(fingerprint).collect();
    theirs.sort();
    ours.sort();
    match theirs == ours {
        true => Verdict::Same,
        false => Verdict::Changes,
    }
}

fn fingerprint(object: &crate::object::PluginObject) -> String {
    object.to_value().to_string()
}

/// Where instance `key` falls for `candidate` in the rollout salted with `seed`: a rollout moves
/// instances in this order, lowest first, the same in every host.
pub fn rank(key: &str, candidate: &str, seed: u64) -> u64 {
    let hash = Sha256::new()
        .chain_update(seed.to_be_bytes())
        .chain_update(candidate.as_bytes())
        .chain_update(b"\n")
        .chain_update(key.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(first)
}

/// Whether an instance that pins nothing (`key`, `selected` by the canary selector) is served
/// by the candidate of `state`; `false` when no rollout moves instances.
pub fn serves_candidate(state: &State, key: &str, selected: bool, policy: &Policy) -> bool {
    let Some(candidate) = &state.candidate else {
        return false;
    };
    if !state.phase.moving() {
        return false;
    }
    (selected && policy.canary == Canary::Selected)
        || rank(key, candidate, state.salt()) < state.threshold()
}

/// What a rollout's driver must do besides writing the new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Plan every instance with the candidate in dry run, and call [`step`] again with what was
    /// found.
    Shadow,
    /// Publish an Event on the binding.
    Event {
        /// Warning rather than Normal.
        warning: bool,
        /// CamelCase.
        reason: &'static str,
        /// For people.
        note: String,
    },
}

/// The next state of a rollout, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The state to write (written only if it differs).
    pub state: State,
    /// What to do.
    pub actions: Vec<Action>,
    /// When to look again if nothing changes before.
    pub recheck: Option<Duration>,
}

impl Step {
    /// `state`, and nothing to look at again before a change.
    fn settled(state: State, actions: Vec<Action>) -> Self {
        Self {
            state,
            actions,
            recheck: None,
        }
    }
}

/// An Event saying the state's message.
fn say(actions: &mut Vec<Action>, warning: bool, reason: &'static str, state: &State) {
    actions.push(Action::Event {
        warning,
        reason,
        note: state.message.clone().unwrap_or_default(),
    });
}

/// What a rollout's driver knows when it steps.
pub struct Inputs<'a> {
    /// The binding's rollout policy.
    pub policy: &'a Policy,
    /// The digest the source offers now (the newest the registry loaded), if any.
    pub offered: Option<&'a str>,
    /// Every instance of the kind.
    pub instances: &'a [Instance],
    /// The shadow plans of the candidate, once made.
    pub shadow: Option<&'a Shadow>,
    /// Whether someone asked to abort the rollout of this candidate (`wasmop rollout abort`).
    pub abort: bool,
    /// A random number: a rollout that starts takes it as its [`State::seed`].
    pub seed: u64,
    /// The clock.
    pub now: Timestamp,
}

/// The next state of the rollout in `state`.
pub fn step(state: &State, inputs: &Inputs) -> Step {
    let mut next = state.clone();
    let mut actions = Vec::new();
    // A new digest: the first one is stable at once, a later one starts a rollout (and
    // replaces one in progress: its moved instances go back until the newer one has passed).
    if let Some(offered) = inputs.offered
        && next.stable.as_deref() != Some(offered)
        && next.candidate.as_deref() != Some(offered)
        && !next.bad.iter().any(|b| b == offered)
    {
        match next.stable.clone() {
            None => {
                next.remember_known(offered);
                next.stable = Some(offered.to_string());
                next.phase = Phase::Stable;
                next.message = Some(bounded(format!("{} serves every instance", short(offered))));
            }
            Some(stable) => {
                let replaced = next.candidate.replace(offered.to_string());
                next.phase = Phase::Shadow;
                next.clear_steps();
                next.seed = Some(format!("{:016x}", inputs.seed));
                next.step_started = Some(inputs.now.to_string());
                next.shadow = None;
                next.message = Some(bounded(format!(
                    "planning every instance with {} in dry run, beside {}",
                    short(offered),
                    short(&stable)
                )));
                let note = match replaced {
                    Some(older) => format!(
                        "{} replaces {} before it finished rolling out; its instances are back \
                         on {}",
                        short(offered),
                        short(&older),
                        short(&stable)
                    ),
                    None => format!("rolling out {} (from {})", short(offered), short(&stable)),
                };
                actions.push(Action::Event {
                    warning: false,
                    reason: "RolloutStarted",
                    note,
                });
            }
        }
    }
    let Some(candidate) = next.candidate.clone() else {
        return Step::settled(next, actions);
    };
    // The source offers the stable digest again (its tag moved back): the rollout is withdrawn,
    // not failed, so the candidate is not marked bad.
    if inputs.offered.is_some() && inputs.offered == next.stable.as_deref() {
        let stable = next.stable.clone().unwrap_or_default();
        next.candidate = None;
        next.end(
            Phase::RolledBack,
            format!(
                "withdrawn: the source offers {} again; every instance is back on it",
                short(&stable)
            ),
        );
        say(&mut actions, false, "RolloutWithdrawn", &next);
        return Step::settled(next, actions);
    }
    if inputs.abort {
        next.end(
            Phase::RolledBack,
            format!(
                "aborted: {} is marked bad; every instance is back on {}",
                short(&candidate),
                next.stable.as_deref().map_or("-", short)
            ),
        );
        say(&mut actions, true, "RolloutAborted", &next);
        return Step::settled(next, actions);
    }
    match next.phase {
        Phase::Shadow => shadow_phase(&mut next, &mut actions, inputs, &candidate),
        Phase::Canary | Phase::Batches => {
            return moving_phase(next, actions, inputs, &candidate);
        }
        Phase::Stable | Phase::Stopped | Phase::RolledBack => {}
    }
    Step::settled(next, actions)
}

fn shadow_phase(next: &mut State, actions: &mut Vec<Action>, inputs: &Inputs, candidate: &str) {
    // The candidate's plans, judged once: kept in the state, so a pause or a restart after
    // them does not plan again.
    let judged = next
        .shadow
        .as_ref()
        .is_some_and(|s| s.digest == candidate && s.refused == 0);
    if !judged {
        let Some(shadow) = inputs.shadow.filter(|s| s.digest == candidate) else {
            actions.push(Action::Shadow);
            return;
        };
        let summary = summarize(shadow, candidate);
        next.shadow = Some(summary.clone());
        if summary.refused > 0 {
            let first = summary.refusals.first().cloned().unwrap_or_default();
            next.end(
                Phase::Stopped,
                format!(
                    "stopped by its shadow plans: {} of {} instances refuse {}, first {first}; \
                     no instance moved",
                    summary.refused,
                    summary.planned,
                    short(candidate)
                ),
            );
            say(actions, true, "RolloutStopped", next);
            return;
        }
    }
    let summary = next.shadow.clone().unwrap_or_default();
    if inputs.policy.paused {
        next.message = Some(bounded(format!(
            "shadow plans passed ({} instances, {} with changes); paused before the canaries",
            summary.planned, summary.changed
        )));
        return;
    }
    next.phase = Phase::Canary;
    next.step = 0;
    next.target = canary_count(inputs.policy, inputs.instances);
    next.set_threshold(threshold_for(
        next,
        inputs.instances,
        candidate,
        next.target,
    ));
    begin_step(next, inputs);
    next.message = Some(bounded(format!(
        "shadow plans passed ({} instances, {} with changes); {} canaries on {}",
        summary.planned,
        summary.changed,
        next.target,
        short(candidate)
    )));
    say(actions, false, "RolloutCanary", next);
}

/// The status's account of the shadow plans.
fn summarize(shadow: &Shadow, candidate: &str) -> ShadowSummary {
    let mut refusals: Vec<String> = shadow
        .verdicts
        .iter()
        .filter_map(|(key, v)| match v {
            Verdict::Refused { reason, message } => {
                Some(bounded(format!("{key}: {reason}: {message}")))
            }
            _ => None,
        })
        .collect();
    refusals.sort();
    let refused = u32::try_from(refusals.len()).unwrap_or(u32::MAX);
    refusals.truncate(MAX_NAMED);
    ShadowSummary {
        digest: candidate.to_string(),
        planned: u32::try_from(shadow.verdicts.len()).unwrap_or(u32::MAX),
        changed: u32::try_from(
            shadow
                .verdicts
                .iter()
                .filter(|(_, v)| *v == Verdict::Changes)
                .count(),
        )
        .unwrap_or(u32::MAX),
        refused,
        refusals,
    }
}

/// Starts the step `next` describes (its threshold set): its clock.
fn begin_step(next: &mut State, inputs: &Inputs) {
    next.step_started = Some(inputs.now.to_string());
    next.soak_started = None;
    next.stalled = false;
}

/// How many instances the canary step moves, selected ones aside.
fn canary_count(policy: &Policy, instances: &[Instance]) -> u32 {
    let eligible = u32::try_from(instances.iter().filter(|i| !i.pinned).count()).unwrap_or(0);
    let count = match policy.canary {
        Canary::Count(n) => n.max(1),
        Canary::Percent(p) => (u64::from(eligible) * u64::from(p.min(100))).div_ceil(100) as u32,
        Canary::Selected => 0,
    };
    count.min(eligible)
}

/// The lowest threshold that puts `target` of the unpinned instances (selected canaries
/// aside) below it, and never lowers `state`'s.
fn threshold_for(state: &State, instances: &[Instance], candidate: &str, target: u32) -> u64 {
    let seed = state.salt();
    let mut ranks: Vec<u64> = instances
        .iter()
        .filter(|i| !i.pinned)
        .map(|i| rank(&i.key, candidate, seed))
        .collect();
    ranks.sort_unstable();
    let target = target as usize;
    let wanted = match target {
        0 => 0,
        t if t >= ranks.len() => u64::MAX,
        t => ranks[t - 1].saturating_add(1),
    };
    wanted.max(state.threshold())
}

fn moving_phase(
    mut next: State,
    mut actions: Vec<Action>,
    inputs: &Inputs,
    candidate: &str,
) -> Step {
    let moved: Vec<&Instance> = inputs
        .instances
        .iter()
        .filter(|i| !i.pinned && serves_candidate(&next, &i.key, i.selected, inputs.policy))
        .collect();
    let on_candidate = |i: &&&Instance| i.current && i.serving.as_deref() == Some(candidate);
    // A moved instance Degraded on the candidate, where the stable digest would not find it
    // so (an instance broken by its own spec, or by its author once it moved, fails no
    // rollout): rolled back at once.
    let degraded: Vec<&&Instance> = moved
        .iter()
        .filter(on_candidate)
        .filter(|i| i.degraded.is_some() && !i.excused)
        .collect();
    if let Some(bad) = degraded.first() {
        let why = bad.degraded.clone().unwrap_or_default();
        let more = match degraded.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        next.end(
            Phase::RolledBack,
            format!(
                "rolled back: {}{more} is Degraded on {} ({why}); {} is marked bad and every \
                 instance is back on {}",
                bad.key,
                short(candidate),
                short(candidate),
                next.stable.as_deref().map_or("-", short)
            ),
        );
        say(&mut actions, true, "RolloutRolledBack", &next);
        return Step::settled(next, actions);
    }
    if inputs.policy.paused {
        // Noted once: the step's clock starts again on resume.
        if next.paused_at.is_none() {
            next.paused_at = Some(inputs.now.to_string());
        }
        next.message = Some(bounded(format!(
            "paused at step {} ({} of {} instances on {})",
            next.step,
            moved.len(),
            inputs.instances.len(),
            short(candidate)
        )));
        return Step::settled(next, actions);
    }
    // Resumed: a pause is not time the step took.
    if next.paused_at.take().is_some() {
        next.step_started = Some(inputs.now.to_string());
        next.soak_started = None;
        next.stalled = false;
    }
    let unready: Vec<&&Instance> = moved
        .iter()
        .filter(|i| !(i.excused || on_candidate(i) && i.ready))
        .collect();
    let settled = unready.is_empty();
    let started = parse(next.step_started.as_deref()).unwrap_or(inputs.now);
    if !settled {
        next.soak_started = None;
        let deadline = add(started, inputs.policy.progress_deadline);
        let waiting: Vec<&str> = unready
            .iter()
            .map(|i| i.key.as_str())
            .take(MAX_NAMED)
            .collect();
        if inputs.now >= deadline {
            // Held, not rolled back (Argo Rollouts' default too): a step that cannot get Ready
            // may be the instances', and one of them must not fail the rollout for all.
            next.message = Some(bounded(format!(
                "stalled: step {} not Ready on {} within {} s ({} not Ready: {}); fix them, or \
                 abort the rollout",
                next.step,
                short(candidate),
                inputs.policy.progress_deadline.as_secs(),
                unready.len(),
                waiting.join(", ")
            )));
            if !next.stalled {
                next.stalled = true;
                say(&mut actions, true, "RolloutStalled", &next);
            }
            return Step {
                state: next,
                actions,
                recheck: Some(Duration::from_secs(5)),
            };
        }
        next.message = Some(bounded(format!(
            "step {}: {} of {} moved instances Ready on {}",
            next.step,
            moved.len() - unready.len(),
            moved.len(),
            short(candidate)
        )));
        let left = Duration::try_from(deadline.duration_since(inputs.now)).unwrap_or_default();
        return Step {
            state: next,
            actions,
            recheck: Some(left.min(Duration::from_secs(5))),
        };
    }
    next.stalled = false;
    let soak_started = match parse(next.soak_started.as_deref()) {
        Some(t) => t,
        None => {
            next.soak_started = Some(inputs.now.to_string());
            inputs.now
        }
    };
    let soaked = add(soak_started, inputs.policy.soak);
    if inputs.now < soaked {
        next.message = Some(bounded(format!(
            "step {}: {} instances Ready on {}, soaking for {} s",
            next.step,
            moved.len() - unready.len(),
            short(candidate),
            inputs.policy.soak.as_secs()
        )));
        let left = Duration::try_from(soaked.duration_since(inputs.now)).unwrap_or_default();
        return Step {
            state: next,
            actions,
            recheck: Some(left),
        };
    }
    let eligible =
        u32::try_from(inputs.instances.iter().filter(|i| !i.pinned).count()).unwrap_or(u32::MAX);
    if moved.len() >= eligible as usize {
        let from = next.stable.replace(candidate.to_string());
        next.remember_known(candidate);
        next.candidate = None;
        next.phase = Phase::Stable;
        next.clear_steps();
        next.message = Some(bounded(format!(
            "{} serves every instance (rolled out from {})",
            short(candidate),
            from.as_deref().map_or("-", short)
        )));
        say(&mut actions, false, "RolloutComplete", &next);
        return Step::settled(next, actions);
    }
    // The next batch.
    let batch = (u64::from(eligible) * u64::from(inputs.policy.batch_percent.clamp(1, 100)))
        .div_ceil(100)
        .max(1) as u32;
    let seed = next.salt();
    let already = u32::try_from(
        inputs
            .instances
            .iter()
            .filter(|i| !i.pinned && rank(&i.key, candidate, seed) < next.threshold())
            .count(),
    )
    .unwrap_or(u32::MAX);
    next.phase = Phase::Batches;
    next.step += 1;
    next.target = already.saturating_add(batch).min(eligible);
    next.set_threshold(threshold_for(
        &next,
        inputs.instances,
        candidate,
        next.target,
    ));
    begin_step(&mut next, inputs);
    next.message = Some(bounded(format!(
        "step {}: moving {} more instances to {} ({} of {eligible})",
        next.step,
        next.target.saturating_sub(already),
        short(candidate),
        next.target
    )));
    say(&mut actions, false, "RolloutStep", &next);
    Step {
        state: next,
        actions,
        recheck: Some(Duration::from_secs(1)),
    }
}

fn parse(t: Option<&str>) -> Option<Timestamp> {
    t.and_then(|t| t.parse().ok())
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    k8s_openapi::jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(t)
}

/// `sha256:0123456789ab`: a digest as messages name it.
pub fn short(digest: &str) -> &str {
    let end = digest
        .char_indices()
        .nth("sha256:".len() + 12)
        .map_or(digest.len(), |(i, _)| i);
    &digest[..end]
}

#[cfg(test)]
mod tests;
