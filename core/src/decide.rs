//! The decision core: from a [`Snapshot`] of one App (its spec and status, what the host
//! observed, the clock, the state of its plugin) and the plugin's answers, what the reconcile
//! should do. Pure: no API, no clock, no I/O but the plugin calls, so the host, `wasmop plugin
//! run` and the SDK's `Fixture` all run exactly this.
//!
//! The stages, in the order they run:
//! 1. plugin state: a refused namespace or source, a plugin still loading or broken, holds the
//!    App as it is and says why;
//! 2. upgrade: which version to render (asks `upgrade.gate` when `spec.version` moved);
//! 3. plan: `spec-diff.plan` at that version, checked whole by the [`PlanCheck`], and the
//!    claims the App would then hold counted against its limit ([`crate::claims`]);
//! 4. apply and prune: the planned objects stamped, those not already in place to apply, the
//!    owned objects no longer planned to delete;
//! 5. health: `health.check` at the rendered version: conditions, phase, whether the rollout
//!    finished (only then does `status.version` move);
//! 6. backup: `backup.schedule`: a Job for a new slot (never one at or before
//!    `status.lastBackup`), Jobs of expired slots to delete;
//! 7. status and events: conditions merged (`lastTransitionTime` moves only on a flip), one
//!    Event for all the flips of the reconcile (a first status is news only when the App starts
//!    out broken), and the requeue.
//!
//! A plugin call that fails, or a plan the check refuses, stops at that stage: nothing is
//! applied or deleted, the status keeps what it knew and adds `Degraded` with the reason, and
//! the App backs off. What the App already runs is then held to the rules in force now (a
//! policy may have tightened since it was applied): an owned object that breaks them makes the
//! reason `PolicyViolation`, naming it, and is deleted when the policy's enforcement is
//! `Remove` ([`PlanCheck::check_live`]).

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};

use crate::conditions::{
    AVAILABLE, DEGRADED, PLUGIN_READY, PROGRESSING, SUMMARY_TYPES, UPGRADE_GATED, reason,
};
use crate::{
    answers::GateDecision,
    backup::{self, ScheduleCall},
    calls::{Answer, Call, Failure, PlanCheck, PluginCalls},
    capability::Capability,
    decision::{Decision, Event, ObjectKey, Phase, Requeue},
    health::{self, CheckCall},
    observed::ObservedObject,
    stamp::{AppRef, in_place, mark_applied, stamp},
    status::{AppStatus, Cond, PluginStatus, UpgradeStatus, merge_conditions, transitions},
    upgrade::{self, GateCall, GateState},
};

/// When nothing else asks for a reconcile, check again this often (level-triggered safety net).
pub const RESYNC: Duration = Duration::from_secs(300);
/// While waiting for a plugin to load, look again this soon; also the shortest requeue a plugin
/// may ask for.
pub const SHORT_REQUEUE: Duration = Duration::from_secs(5);
/// While a rollout is in progress, look again this soon if nothing changes. Every change to
/// the App's objects (a Pod turning ready, a Deployment's or StatefulSet's status) reconciles it
/// anyway, through the watches; this is only the net under them. It was `SHORT_REQUEUE`: at
/// 11,000 Apps on 2 cores, where Apps waited many minutes for their Pods, those looks were 35
/// reconciles per App, each one calling the plugin against an unchanged cache (bench,
/// 2026-12-07-1855).
pub const ROLLOUT_RECHECK: Duration = Duration::from_secs(30);

/// A plugin cannot make the host reconcile its App in a tight loop, nor further apart than the
/// resync.
pub fn clamp_plugin_requeue(after: Duration) -> Duration {
    after.clamp(SHORT_REQUEUE, RESYNC)
}

/// What a reconcile knows about one App when it decides.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The App's identity: the parent, of any kind, whose apiVersion, kind and uid its objects'
    /// owner references name.
    pub app: AppRef,
    /// `spec.version`.
    pub desired_version: String,
    /// The App's status as read.
    pub previous: AppStatus,
    /// The App's objects, from the host's caches.
    pub observed: Vec<ObservedObject>,
    /// The clock.
    pub now: Timestamp,
    /// When the App was made (`metadata.creationTimestamp`), if known.
    pub created: Option<Timestamp>,
    /// Whether the App's plugin can be called.
    pub plugin: PluginState,
}

/// Whether the App's plugin can be called, and if not why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginState {
    /// The namespace's policy or the App's plugin reference rules the plugin out: it is never
    /// loaded. `reason` is `NamespaceRefused`, `InvalidSource` or `SourceRefused`.
    Refused {
        /// CamelCase.
        reason: &'static str,
        /// Why, naming the policy.
        message: String,
    },
    /// Being fetched and compiled (as after every host restart).
    Loading {
        /// Which plugin.
        message: String,
    },
    /// No version of the plugin could be loaded.
    Broken {
        /// The load error's reason.
        reason: &'static str,
        /// The load error.
        message: String,
    },
    /// A version serves the App.
    Serving {
        /// Names the plugin in messages: `name@version (digest)`.
        label: String,
        /// The plugin as `status.plugin` shows it.
        status: PluginStatus,
        /// Why a newer version was refused, when the last good one is kept.
        newer_refused: Option<String>,
        /// Why the host's plugin cache does not hold this version (a full or read-only disk):
        /// it serves all the same, and a restart fetches and compiles it again.
        uncached: Option<String>,
    },
}

/// `spec-diff.plan(current, target)`: the objects that should exist at `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanCall {
    /// The rolled-out version, if any.
    pub current: Option<String>,
    /// The version to render.
    pub target: String,
}

/// What the stages concluded, before it becomes a status.
struct Outcome {
    conditions: Vec<Cond>,
    version: Option<String>,
    upgrade: Option<UpgradeStatus>,
    last_backup: Option<crate::status::BackupStatus>,
    requeue: Requeue,
    /// `None` keeps the previous phase.
    phase: Option<Phase>,
    /// Keep the previous conditions of the types `conditions` does not set.
    carry_conditions: bool,
}

impl Outcome {
    /// Changes only the conditions it names: versions, upgrade and backup records and every
    /// other condition stay as they were, so a host restart (plugins still loading) or a
    /// passing plugin failure does not reset what is known about the App.
    fn holding(
        previous: &AppStatus,
        conditions: Vec<Cond>,
        requeue: Requeue,
        phase: Option<Phase>,
    ) -> Self {
        Self {
            conditions,
            version: previous.version.clone(),
            upgrade: previous.upgrade.clone(),
            last_backup: previous.last_backup.clone(),
            requeue,
            phase,
            carry_conditions: true,
        }
    }
}

/// Decides one reconcile of the App in `snapshot`, calling its plugin through `calls` and
/// checking the plan with `check`.
pub fn decide(snapshot: &Snapshot, calls: &mut dyn PluginCalls, check: &dyn PlanCheck) -> Decision {
    let previous = &snapshot.previous;
    let (status, label) = match &snapshot.plugin {
        PluginState::Refused { reason, message } => {
            let conditions = vec![Cond::new(PLUGIN_READY, false, reason, message.clone())];
            let outcome = Outcome::holding(
                previous,
                conditions,
                Requeue::After(RESYNC),
                Some(Phase::Failed),
            );
            return finish(snapshot, None, outcome, Vec::new(), Writes::default());
        }
        PluginState::Loading { message } => {
            // An App a plugin served keeps saying so while the plugin loads: after a host
            // restart every plugin loads again (from the compiled cache, in milliseconds), and
            // writing Loading and then Loaded back would cost two status writes per App. Not
            // after a spec change (perhaps to another plugin): then the status says Loading.
            let served = previous.observed_generation == snapshot.app.generation
                && previous
                    .conditions
                    .iter()
                    .any(|c| c.type_ == PLUGIN_READY && c.status == "True");
            let conditions = if served {
                Vec::new()
            } else {
                vec![Cond::new(
                    PLUGIN_READY,
                    false,
                    reason::LOADING,
                    message.clone(),
                )]
            };
            // Still loading: nothing is known to be wrong with the App.
            let outcome =
                Outcome::holding(previous, conditions, Requeue::After(SHORT_REQUEUE), None);
            return finish(snapshot, None, outcome, Vec::new(), Writes::default());
        }
        PluginState::Broken { reason, message } => {
            let conditions = vec![Cond::new(PLUGIN_READY, false, reason, message.clone())];
            let outcome = Outcome::holding(
                previous,
                conditions,
                Requeue::After(SHORT_REQUEUE),
                Some(Phase::Failed),
            );
            return finish(snapshot, None, outcome, Vec::new(), Writes::default());
        }
        PluginState::Serving { status, label, .. } => (status, label),
    };
    let plugin_ready = serving_condition(&snapshot.plugin);
    let mut events = Vec::new();
    let mut writes = Writes::default();
    let stages = stages(
        snapshot,
        label,
        calls,
        check,
        plugin_ready.clone(),
        &mut events,
        &mut writes,
    );
    match stages {
        Ok(outcome) => finish(snapshot, Some(status), outcome, events, writes),
        Err(mut failure) => {
            // Nothing of the plan will be applied: what the App already runs stays, so it must
            // still be within the rules (a policy may have tightened since it was applied).
            // Only when the plan itself is refused: a call that timed out or found no budget
            // says nothing about the rules, and must not delete anything.
            if !writes.plan_checked
                && failure.reason == reason::PLAN_REJECTED
                && let Some(violation) = live_violations(snapshot, check, &mut events, &mut writes)
            {
                failure = violation;
            }
            if failure.reason == reason::PLAN_REJECTED || failure.reason == reason::APPLY_REJECTED {
                events.push(Event::warning(failure.reason, failure.message.clone()));
            }
            // A failure before the plan was checked writes nothing; one after it (health,
            // backup) still applies and prunes the checked plan: a health check that fails
            // until its StatefulSet exists must not keep the StatefulSet from being created.
            // The backup Jobs of a failed stage are neither created nor expired.
            writes.backup_start = None;
            writes.backup_expire.clear();
            let outcome = failed_outcome(previous, plugin_ready, failure);
            finish(snapshot, Some(status), outcome, events, writes)
        }
    }
}

/// The decision when reading or performing failed in a way the App's author must hear about (a
/// kind the policy adds could not be listed, an apply the API server refused as invalid, an
/// object the App does not own): nothing more is written but the status, which says why (what
/// the executor wrote before the failure stays), and the App backs off.
pub fn failed(snapshot: &Snapshot, failure: Failure) -> Decision {
    let status = match &snapshot.plugin {
        PluginState::Serving { status, .. } => Some(status),
        _ => None,
    };
    let events = vec![Event::warning(failure.reason, failure.message.clone())];
    let outcome = failed_outcome(
        &snapshot.previous,
        serving_condition(&snapshot.plugin),
        failure,
    );
    finish(snapshot, status, outcome, events, Writes::default())
}

/// `PluginReady` of a serving plugin.
fn serving_condition(plugin: &PluginState) -> Cond {
    let PluginState::Serving {
        label,
        newer_refused,
        uncached,
        ..
    } = plugin
    else {
        return Cond::new(PLUGIN_READY, false, reason::LOADING, "");
    };
    let uncached = uncached
        .as_ref()
        .map(|why| format!("; not cached, so a host restart fetches and compiles it again: {why}"));
    match newer_refused {
        Some(err) => Cond::new(
            PLUGIN_READY,
            true,
            "LastGoodKept",
            // The cache note first: a long load error is what the 1024-byte cut takes.
            format!(
                "{label} serving{}; the newest version did not load: {err}",
                uncached.unwrap_or_default()
            ),
        ),
        None => match uncached {
            Some(uncached) => Cond::new(
                PLUGIN_READY,
                true,
                "LoadedUncached",
                format!("{label} serving{uncached}"),
            ),
            None => Cond::new(PLUGIN_READY, true, "Loaded", format!("{label} serving")),
        },
    }
}

fn failed_outcome(previous: &AppStatus, plugin_ready: Cond, failure: Failure) -> Outcome {
    let conditions = vec![
        plugin_ready,
        Cond::new(DEGRADED, true, failure.reason, failure.message),
    ];
    Outcome::holding(
        previous,
        conditions,
        Requeue::Backoff,
        Some(Phase::Degraded),
    )
}

/// When the plan is not applied: the objects the App owns that break the rules in force now,
/// as a `PolicyViolation` failure naming them; under a policy that removes violations, they are
/// also pruned (with a Warning event naming them).
fn live_violations(
    snapshot: &Snapshot,
    check: &dyn PlanCheck,
    events: &mut Vec<Event>,
    writes: &mut Writes,
) -> Option<Failure> {
    let found: Vec<(ObjectKey, String)> = snapshot
        .observed
        .iter()
        .filter(|o| o.owned)
        .filter_map(|o| {
            let why = check.check_live(o, &snapshot.observed)?;
            let key = ObjectKey {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            };
            Some((key, why))
        })
        .collect();
    let (first_key, first) = found.first()?;
    let more = match found.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    let message = if check.removes_violations() {
        let names: Vec<String> = found.iter().map(|(k, _)| k.to_string()).collect();
        events.push(Event::warning(
            "PolicyViolationRemoved",
            format!(
                "deleted {}: they break the rules in force now",
                names.join(", ")
            ),
        ));
        writes.prune = found.iter().map(|(k, _)| k.clone()).collect();
        format!("{first}{more}; deleted, as the policy's enforcement is Remove")
    } else {
        format!(
            "{first}{more}; {first_key} keeps running as applied under an earlier policy \
             (the policy's enforcement Remove would delete it)"
        )
    };
    Some(Failure::new(reason::POLICY_VIOLATION, message))
}

/// The writes the stages decided.
#[derive(Default)]
struct Writes {
    /// The plan passed every check (its objects are in `apply` or in place).
    plan_checked: bool,
    /// The App needs the cleanup finalizer ([`crate::deletion::needs_finalizer`]).
    finalizer: bool,
    adopt: Vec<ObjectKey>,
    apply: Vec<crate::object::PluginObject>,
    in_place: usize,
    prune: Vec<ObjectKey>,
    backup_start: Option<(String, crate::object::PluginObject)>,
    backup_expire: Vec<ObjectKey>,
}

fn stages(
    snapshot: &Snapshot,
    label: &str,
    calls: &mut dyn PluginCalls,
    check: &dyn PlanCheck,
    plugin_ready: Cond,
    events: &mut Vec<Event>,
    writes: &mut Writes,
) -> Result<Outcome, Failure> {
    let previous = &snapshot.previous;
    let observed = &snapshot.observed;
    let caps = calls.capabilities().clone();

    // upgrade: which version to render
    let desired = snapshot.desired_version.clone();
    let mut upgrade_record = None;
    let mut gate_cond = Cond::new(UPGRADE_GATED, false, "NoUpgrade", "");
    let render = match upgrade::step(
        &desired,
        previous.version.as_deref(),
        previous.upgrade.as_ref(),
    ) {
        upgrade::Step::Steady { version } => version,
        upgrade::Step::Rolling { from, to } => {
            gate_cond = Cond::new(
                UPGRADE_GATED,
                false,
                "Allowed",
                format!("rolling out {from} -> {to}"),
            );
            upgrade_record = previous.upgrade.clone();
            to
        }
        upgrade::Step::AskGate { from, to } => {
            let decision = if caps.contains(&Capability::Upgrade) {
                calls.answer(GateCall {
                    from: from.clone(),
                    to: to.clone(),
                })?
            } else {
                GateDecision::Allow
            };
            let (render, record) = upgrade::after_gate(&from, &to, &decision);
            gate_cond = match &decision {
                GateDecision::Allow => Cond::new(
                    UPGRADE_GATED,
                    false,
                    "Allowed",
                    format!("rolling out {from} -> {to}"),
                ),
                GateDecision::Wait(reason) => Cond::new(
                    UPGRADE_GATED,
                    true,
                    "Waiting",
                    format!("holding {from}: {reason}"),
                ),
                GateDecision::Deny(reason) => Cond::new(
                    UPGRADE_GATED,
                    true,
                    "Denied",
                    format!("{from} -> {to} refused: {reason}"),
                ),
            };
            if previous.upgrade.as_ref().map(|u| (&u.state, &u.to))
                != Some((&record.state, &record.to))
            {
                events.push(Event::normal(
                    "UpgradeGate",
                    format!("{from} -> {to}: {}", record.state),
                ));
            }
            upgrade_record = Some(record);
            render
        }
    };

    // plan
    if !caps.contains(&Capability::SpecDiff) {
        return Err(Failure::new(
            "CapabilityMissing",
            format!("{label} does not implement spec-diff; nothing to plan"),
        ));
    }
    let plan = calls.answer(PlanCall {
        current: previous.version.clone(),
        target: render.clone(),
    })?;
    let objects = check.check_plan(plan.objects)?;
    crate::claims::within_limit(&objects, observed, check.max_claims())?;
    writes.plan_checked = true;
    writes.finalizer = crate::deletion::needs_finalizer(&caps, &objects, observed);

    // apply, prune
    let ours: BTreeSet<(&str, &str, &str)> = observed
        .iter()
        .filter(|o| o.is_managed_by(&snapshot.app))
        .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str()))
        .collect();
    let mut planned = BTreeSet::new();
    for mut object in objects {
        let key = ObjectKey {
            api_version: object.api_version().to_string(),
            kind: object.kind().to_string(),
            name: object.name().to_string(),
        };
        stamp(&snapshot.app, &mut object);
        let digest = mark_applied(&mut object);
        let mine = ours.contains(&(
            key.api_version.as_str(),
            key.kind.as_str(),
            key.name.as_str(),
        ));
        let live = observed
            .iter()
            .find(|o| o.api_version == key.api_version && o.kind == key.kind && o.name == key.name);
        match live {
            Some(live) if mine && in_place(&object.to_value(), &digest, &live.json) => {
                writes.in_place += 1;
            }
            _ => {
                if !mine {
                    writes.adopt.push(key.clone());
                }
                writes.apply.push(object);
            }
        }
        planned.insert(key);
    }
    for object in observed {
        let key = ObjectKey {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            name: object.name.clone(),
        };
        let keep = !object.owned
            || object.backup_slot.is_some()
            || object.kind == "PersistentVolumeClaim"
            || planned.contains(&key)
            || !check.prunable(&object.api_version, &object.kind);
        if !keep {
            writes.prune.push(key);
        }
    }
    if !writes.prune.is_empty() {
        let names: Vec<String> = writes.prune.iter().map(ToString::to_string).collect();
        events.push(Event::normal(
            "Pruned",
            format!("deleted {}", names.join(", ")),
        ));
    }

    // health
    let report = if caps.contains(&Capability::Health) {
        Some(calls.answer(CheckCall {
            version: render.clone(),
        })?)
    } else {
        None
    };
    let upgrading = upgrade_record
        .as_ref()
        .is_some_and(|u| u.state == GateState::Allowed.as_str());
    let verdict = health::verdict(report, upgrading);
    let mut conditions = vec![plugin_ready];
    conditions.extend(verdict.conditions);
    let mut version = previous.version.clone();
    let mut requeue = plan.requeue_after.map_or(RESYNC, clamp_plugin_requeue);
    if verdict.rollout_complete {
        // A move from one version to another is news; a new App's first rollout is what its
        // Ready condition says, and nobody acts on it (issue 42: a converge of N Apps was an
        // Event per App).
        if version.is_some() && version.as_deref() != Some(render.as_str()) {
            events.push(Event::normal(
                "RolledOut",
                format!("version {render} rolled out"),
            ));
        }
        version = Some(render.clone());
    } else {
        requeue = requeue.min(ROLLOUT_RECHECK);
    }
    if version.as_deref() == Some(desired.as_str()) {
        upgrade_record = None;
        gate_cond = Cond::new(UPGRADE_GATED, false, "NoUpgrade", "");
    }
    conditions.push(gate_cond);

    // backup
    let mut last_backup = previous.last_backup.clone();
    if caps.contains(&Capability::Backup) {
        let last_completed = backup::last_completed_slot(observed);
        let decision = calls.answer(ScheduleCall {
            last_completed: last_completed.clone(),
        })?;
        // A slot at or before the last one started never runs again, even once its Job expired
        // or was deleted (the Job's name alone guards a slot only while the Job exists).
        if let Some((slot, job)) = decision
            .run
            .filter(|(slot, _)| backup::is_new_slot(previous.last_backup.as_ref(), slot))
        {
            // A backup Job is a pod like any planned one: the same policy holds, and its pods
            // may run as the ServiceAccounts the App's plan created.
            let accounts: BTreeSet<String> = observed
                .iter()
                .filter(|o| o.kind == "ServiceAccount" && o.owned)
                .map(|o| o.name.clone())
                .collect();
            // ... and mount the App's claims: those labelled with it (every claim observed is)
            // and those this reconcile's plan applies (a new App's first backup may be due
            // before its claim is observed).
            let claims: BTreeSet<String> = observed
                .iter()
                .filter(|o| o.kind == "PersistentVolumeClaim" && o.api_version == "v1")
                .map(|o| o.name.clone())
                .chain(
                    planned
                        .iter()
                        .filter(|k| k.kind == "PersistentVolumeClaim" && k.api_version == "v1")
                        .map(|k| k.name.clone()),
                )
                .collect();
            check
                .check_backup_job(&slot, &job, &accounts, &claims)
                .map_err(|f| {
                    Failure::new(f.reason, format!("backup of slot {slot}: {}", f.message))
                })?;
            let job = backup::prepare_job(&snapshot.app, &slot, job);
            events.push(Event::normal(
                "BackupStarted",
                format!("Job {} for slot {slot}", job.name()),
            ));
            last_backup = Some(crate::status::BackupStatus {
                slot: slot.clone(),
                job: job.name().to_string(),
                completed: false,
            });
            writes.backup_start = Some((slot, job));
        }
        if let Some(backup) = &mut last_backup {
            backup.completed =
                last_completed.as_deref() == Some(backup.slot.as_str()) || backup.completed;
        }
        writes.backup_expire = observed
            .iter()
            .filter(|o| o.kind == "Job" && o.owned)
            .filter(|o| {
                o.backup_slot
                    .as_ref()
                    .is_some_and(|s| decision.expire.contains(s))
            })
            .map(|o| ObjectKey {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
            .collect();
        if let Some(after) = decision.requeue_after {
            requeue = requeue.min(clamp_plugin_requeue(after));
        }
    }
    Ok(Outcome {
        conditions,
        version,
        upgrade: upgrade_record,
        last_backup,
        requeue: Requeue::After(requeue),
        phase: Some(verdict.phase),
        carry_conditions: false,
    })
}

/// The status, the events of its transitions, and the decision.
fn finish(
    snapshot: &Snapshot,
    plugin: Option<&PluginStatus>,
    outcome: Outcome,
    mut events: Vec<Event>,
    writes: Writes,
) -> Decision {
    let previous = &snapshot.previous;
    let mut conditions = merge_conditions(
        &previous.conditions,
        outcome.conditions,
        snapshot.app.generation,
        snapshot.now,
    );
    if outcome.carry_conditions {
        let kept: Vec<_> = previous
            .conditions
            .iter()
            .filter(|p| !conditions.iter().any(|c| c.type_ == p.type_))
            .cloned()
            .collect();
        conditions.extend(kept);
    }
    let mut plugin = plugin.cloned().or_else(|| previous.plugin.clone());
    if let (Some(old), Some(new)) = (&previous.plugin, &mut plugin) {
        if old.digest != new.digest {
            events.push(Event::normal(
                "PluginSwapped",
                format!("{} -> {}", old.digest, new.digest),
            ));
        } else if old.loaded_at.is_some() {
            // Like a condition's lastTransitionTime, `loadedAt` moves only when the digest
            // does: a host restart loads the same digest again, and rewriting the status of
            // every App for it would be a write per App per restart for no news.
            new.loaded_at.clone_from(&old.loaded_at);
        }
    }
    // The summary conditions are derived from the rest: dropped before the Event (which
    // names the conditions they come from) and made anew after it.
    conditions.retain(|c| !SUMMARY_TYPES.contains(&c.type_.as_str()));
    if let Some(event) = transitions_event(&previous.conditions, &conditions) {
        // Until its first rollout an App's good news is progress, not news, and so is its
        // arrival (its Ready condition says it). Bad news is always news. (A converge of N
        // Apps was two Events per App, the second an `Available=True` nobody acts on: issue
        // 42.)
        if event.warning || previous.version.is_some() {
            events.push(event);
        }
    }
    let summary = crate::kstatus::summary(&conditions);
    conditions.extend(merge_conditions(
        &previous.conditions,
        summary.into(),
        snapshot.app.generation,
        snapshot.now,
    ));
    let status = AppStatus {
        observed_generation: snapshot.app.generation,
        phase: outcome
            .phase
            .map(|p| p.as_str().to_string())
            .or_else(|| previous.phase.clone())
            .or_else(|| Some(Phase::Pending.as_str().to_string())),
        version: outcome.version,
        plugin,
        conditions,
        last_backup: outcome.last_backup,
        upgrade: outcome.upgrade,
    };
    let mut requeue = outcome.requeue;
    let status = match first_status_wait(snapshot, &status, &writes, &events) {
        Some(left) => {
            requeue = Requeue::After(left.min(SHORT_REQUEUE));
            previous.clone()
        }
        None => status,
    };
    // What workloads use goes first (see `Decision::first_wave`); a stable sort keeps each
    // wave in plan order.
    let mut apply = writes.apply;
    apply.sort_by_key(|o| !is_used_by_workloads(o));
    let first_wave = apply.iter().filter(|o| is_used_by_workloads(o)).count();
    Decision {
        finalizer: writes.finalizer,
        adopt: writes.adopt,
        apply,
        first_wave,
        in_place: writes.in_place,
        prune: writes.prune,
        backup_start: writes.backup_start,
        backup_expire: writes.backup_expire,
        status,
        events,
        requeue,
    }
}

/// How long a new App on its way may go without a status: its first is written when it is
/// Ready, when something is wrong, or once its first objects are this old, whichever comes
/// first...
pub const FIRST_STATUS_WAIT: Duration = Duration::from_secs(10);
/// ...and never later than this after the App was made, whatever keeps its objects young (a
/// Job that goes once done, an object someone keeps deleting).
pub const FIRST_STATUS_LIMIT: Duration = Duration::from_secs(60);

/// How long the first status of the App of `snapshot` is left unwritten, if it is: the App has
/// none yet, it is on its way (`Reconciling`, not `Stalled`, no news, no backup slot taken,
/// whose record is what keeps it from running twice), and its first objects (those it owns)
/// were made less than [`FIRST_STATUS_WAIT`] ago, or are being made now (an App with no
/// object to make gets its status at once), and the App itself less than
/// [`FIRST_STATUS_LIMIT`] ago. Then the status it
/// reaches on the way (Ready, often) is its first: one status write where nothing changed in
/// between, not a `Reconciling` one per progress step and then a `Ready` one (issue 42).
/// Until then the App has no status, which kstatus reads as in progress, as it is.
fn first_status_wait(
    snapshot: &Snapshot,
    status: &AppStatus,
    writes: &Writes,
    events: &[Event],
) -> Option<Duration> {
    let is_true = |type_: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    let on_its_way = snapshot.previous == AppStatus::default()
        && writes.backup_start.is_none()
        && events.is_empty()
        && is_true(crate::conditions::RECONCILING)
        && !is_true(crate::conditions::STALLED);
    if !on_its_way {
        return None;
    }
    // A time after `now` (a host clock behind the API server's) is no reason to wait.
    let age_of = |made: Timestamp| Duration::try_from(snapshot.now.duration_since(made)).ok();
    let limit = match snapshot.created {
        Some(created) => FIRST_STATUS_LIMIT.checked_sub(age_of(created)?)?,
        None => FIRST_STATUS_LIMIT,
    };
    let first_made = snapshot
        .observed
        .iter()
        .filter(|o| o.owned)
        .filter_map(|o| {
            o.json
                .pointer("/metadata/creationTimestamp")
                .and_then(serde_json::Value::as_str)
                .and_then(|t| t.parse::<Timestamp>().ok())
        })
        .min();
    let age = match first_made {
        Some(made) => age_of(made)?,
        // Being made now; an App with nothing to make has nothing to wait for.
        None if !writes.adopt.is_empty() => Duration::ZERO,
        None => return None,
    };
    FIRST_STATUS_WAIT
        .checked_sub(age)
        .map(|left| left.min(limit))
        .filter(|left| !left.is_zero())
}

/// Whether `object` is of a kind workloads use: applied in the first wave.
fn is_used_by_workloads(object: &crate::object::PluginObject) -> bool {
    object.api_version() == "v1"
        && matches!(
            object.kind(),
            "ConfigMap" | "Secret" | "ServiceAccount" | "Service" | "PersistentVolumeClaim"
        )
}

/// Whether a condition's status is bad news: `Degraded` and `UpgradeGated` when True,
/// `Progressing` never, every other condition (`Available`, `PluginReady`, a plugin's own) when
/// not True.
fn bad_news(c: &Condition) -> bool {
    match c.type_.as_str() {
        DEGRADED | UPGRADE_GATED => c.status == "True",
        PROGRESSING => false,
        _ => c.status != "True",
    }
}

/// Whether a condition seen for the first time is news: an App that starts out broken. Every
/// other first status (an App starting, a plugin loading, all well) is only the status.
fn news_at_first_sight(c: &Condition) -> bool {
    match c.type_.as_str() {
        DEGRADED => c.status == "True",
        PLUGIN_READY => c.status != "True" && c.reason != reason::LOADING,
        _ => false,
    }
}

/// Which condition names an Event that reports several: the most telling first.
fn priority(c: &Condition) -> usize {
    [DEGRADED, PLUGIN_READY, UPGRADE_GATED, AVAILABLE]
        .iter()
        .position(|t| *t == c.type_)
        .unwrap_or(4)
}

/// The one Event of a reconcile's condition changes, or none. A change is a condition whose
/// status flipped, a plugin that stopped loading without loading (`PluginReady` False from
/// `Loading` to another reason), or a first status that is news (see [`news_at_first_sight`]).
/// All of them go in one note, bad news first, by [`priority`]; the Event is a Warning when any
/// is bad news, and its reason is the first one's type. One Event per reconcile rather than one
/// per condition: a converge of a thousand Apps is not several thousand Events.
fn transitions_event(previous: &[Condition], next: &[Condition]) -> Option<Event> {
    let flipped = transitions(previous, next);
    let mut changed: Vec<&Condition> = next
        .iter()
        .filter(|c| match previous.iter().find(|p| p.type_ == c.type_) {
            Some(p) => {
                flipped.iter().any(|f| f.type_ == c.type_)
                    || (c.type_ == PLUGIN_READY
                        && p.reason == reason::LOADING
                        && c.reason != reason::LOADING)
            }
            None => news_at_first_sight(c),
        })
        .collect();
    changed.sort_by_key(|c| (!bad_news(c), priority(c)));
    let first = changed.first()?;
    let mut said: Vec<&str> = Vec::new();
    let note = changed
        .iter()
        .map(|c| {
            // Conditions set from one report share its message: say it once.
            if c.message.is_empty() || said.contains(&c.message.as_str()) {
                format!("{}={} ({})", c.type_, c.status, c.reason)
            } else {
                said.push(&c.message);
                format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(if bad_news(first) {
        Event::warning(&first.type_, note)
    } else {
        Event::normal(&first.type_, note)
    })
}

/// For a decision about an App whose plugin cannot be called ([`PluginState`] other than
/// `Serving`): no capabilities, every call refused, every plan refused.
pub struct NoPlugin;

impl PluginCalls for NoPlugin {
    fn capabilities(&self) -> &BTreeSet<Capability> {
        static NONE: BTreeSet<Capability> = BTreeSet::new();
        &NONE
    }
}

impl<C: Call> Answer<C> for NoPlugin {
    fn answer(&mut self, _: C) -> Result<C::Answer, Failure> {
        Err(no_plugin())
    }
}

impl PlanCheck for NoPlugin {
    fn check_plan(
        &self,
        _: Vec<crate::object::PluginObject>,
    ) -> Result<Vec<crate::object::PluginObject>, Failure> {
        Err(no_plugin())
    }

    fn check_backup_job(
        &self,
        _: &str,
        _: &crate::object::PluginObject,
        _: &BTreeSet<String>,
        _: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        Err(no_plugin())
    }

    fn prunable(&self, _: &str, _: &str) -> bool {
        false
    }
}

fn no_plugin() -> Failure {
    Failure::new("CapabilityMissing", "no plugin serves this App")
}

#[cfg(test)]
mod tests;
