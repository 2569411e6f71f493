use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::{
    decision::{Decision, ObjectKey, Requeue},
    status::AppStatus,
};

const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const NEW: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const NEWER: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";

fn policy() -> Policy {
    Policy {
        canary: Canary::Count(2),
        batch_percent: 25,
        soak: Duration::from_secs(10),
        progress_deadline: Duration::from_secs(120),
        paused: false,
    }
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("a valid time")
}

/// `n` instances, all Ready on `serving`.
fn instances(n: usize, serving: &str) -> Vec<Instance> {
    (0..n)
        .map(|i| Instance {
            key: format!("team/kv-{i:02}"),
            serving: Some(serving.into()),
            current: true,
            ready: true,
            ..Instance::default()
        })
        .collect()
}

fn stable_on(digest: &str) -> State {
    State {
        stable: Some(digest.into()),
        known: vec![digest.into()],
        ..State::default()
    }
}

fn inputs<'a>(
    policy: &'a Policy,
    offered: Option<&'a str>,
    instances: &'a [Instance],
    shadow: Option<&'a Shadow>,
    now: Timestamp,
) -> Inputs<'a> {
    Inputs {
        policy,
        offered,
        instances,
        shadow,
        abort: false,
        seed: 42,
        now,
    }
}

fn moved(state: &State, instances: &[Instance], policy: &Policy) -> Vec<String> {
    instances
        .iter()
        .filter(|i| !i.pinned && serves_candidate(state, &i.key, i.selected, policy))
        .map(|i| i.key.clone())
        .collect()
}

/// The instances as their reconciles leave them under `state`: each on the digest that
/// serves it, Ready, or Degraded when `degraded_on` serves it.
fn reconciled(state: &State, all: &mut [Instance], policy: &Policy, degraded_on: Option<&str>) {
    for i in all.iter_mut() {
        let digest = match serves_candidate(state, &i.key, i.selected, policy) {
            true => state.candidate.clone(),
            false => state.stable.clone(),
        };
        i.degraded = (digest.is_some() && digest.as_deref() == degraded_on)
            .then(|| "Unhealthy: the service is down".to_string());
        i.ready = i.degraded.is_none();
        i.serving = digest;
        i.current = true;
    }
}

fn all_same(digest: &str, all: &[Instance]) -> Shadow {
    Shadow {
        digest: digest.into(),
        verdicts: all.iter().map(|i| (i.key.clone(), Verdict::Same)).collect(),
    }
}

/// From the stable digest `OLD`, `new` offered at 0 s: its shadow phase.
fn shadowing_of(policy: &Policy, all: &[Instance], new: &str) -> State {
    step(
        &stable_on(OLD),
        &inputs(policy, Some(new), all, None, at(0)),
    )
    .state
}

/// Then its shadow plans, all the same as the stable digest's, at 1 s: its canaries.
fn canaries_of(policy: &Policy, all: &[Instance], new: &str) -> State {
    let shadowing = shadowing_of(policy, all, new);
    step(
        &shadowing,
        &inputs(policy, Some(new), all, Some(&all_same(new, all)), at(1)),
    )
    .state
}

#[test]
fn the_first_digest_serves_at_once() {
    let policy = policy();
    let all = instances(3, OLD);
    let step = step(
        &State::default(),
        &inputs(&policy, Some(OLD), &all, None, at(0)),
    );
    assert_eq!(step.state.phase, Phase::Stable);
    assert_eq!(step.state.stable.as_deref(), Some(OLD));
    assert_eq!(step.state.known, [OLD]);
    assert_eq!(step.state.seed, None, "no rollout, no seed");
    assert!(step.actions.is_empty());
}

#[test]
fn a_new_digest_is_shadow_planned_before_any_instance_moves() {
    let policy = policy();
    let all = instances(20, OLD);
    let step = step(
        &stable_on(OLD),
        &inputs(&policy, Some(NEW), &all, None, at(0)),
    );
    assert_eq!(step.state.phase, Phase::Shadow);
    assert_eq!(step.state.candidate.as_deref(), Some(NEW));
    assert!(step.actions.contains(&Action::Shadow));
    assert!(moved(&step.state, &all, &policy).is_empty());
}

#[test]
fn a_refused_shadow_plan_stops_the_rollout_and_marks_the_digest_bad() {
    let policy = policy();
    let all = instances(20, OLD);
    let shadowing = shadowing_of(&policy, &all, NEW);
    let mut shadow = all_same(NEW, &all);
    for (key, verdict) in shadow.verdicts.iter_mut().take(3) {
        *verdict = Verdict::Refused {
            reason: "PlanRejected".into(),
            message: format!("{key}: privileged container"),
        };
    }
    let stopped = step(
        &shadowing,
        &inputs(&policy, Some(NEW), &all, Some(&shadow), at(5)),
    );
    assert_eq!(stopped.state.phase, Phase::Stopped);
    assert_eq!(stopped.state.candidate, None);
    assert_eq!(stopped.state.stable.as_deref(), Some(OLD));
    assert_eq!(stopped.state.bad, [NEW]);
    let summary = stopped.state.shadow.clone().expect("a shadow summary");
    assert_eq!((summary.planned, summary.refused), (20, 3));
    assert!(summary.refusals[0].starts_with("team/kv-00: PlanRejected"));
    let message = stopped.state.message.clone().unwrap_or_default();
    assert!(message.contains("3 of 20"), "{message}");
    assert!(moved(&stopped.state, &all, &policy).is_empty());
    // The same bad digest, polled again, starts nothing.
    let again = step(
        &stopped.state,
        &inputs(&policy, Some(NEW), &all, None, at(60)),
    );
    assert_eq!(again.state, stopped.state);
    assert!(again.actions.is_empty());
}

#[test]
fn a_canary_that_degrades_rolls_back_and_the_rest_never_move() {
    let policy = policy();
    let mut all = instances(20, OLD);
    let shadowing = shadowing_of(&policy, &all, NEW);
    let canary = step(
        &shadowing,
        &inputs(&policy, Some(NEW), &all, Some(&all_same(NEW, &all)), at(1)),
    )
    .state;
    assert_eq!(canary.phase, Phase::Canary);
    let canaries = moved(&canary, &all, &policy);
    assert_eq!(canaries.len(), 2, "exactly the canary count moves");
    reconciled(&canary, &mut all, &policy, Some(NEW));
    let rolled = step(&canary, &inputs(&policy, Some(NEW), &all, None, at(3)));
    assert_eq!(rolled.state.phase, Phase::RolledBack);
    assert_eq!(rolled.state.bad, [NEW]);
    assert_eq!(rolled.state.stable.as_deref(), Some(OLD));
    assert!(moved(&rolled.state, &all, &policy).is_empty());
    assert!(rolled.actions.iter().any(|a| matches!(
        a,
        Action::Event {
            warning: true,
            reason: "RolloutRolledBack",
            ..
        }
    )));
    let message = rolled.state.message.unwrap_or_default();
    assert!(message.contains(&canaries[0]) || message.contains(&canaries[1]));
}

#[test]
fn a_good_digest_goes_canary_then_batches_never_more_than_a_batch_in_flight() {
    let policy = policy();
    let mut all = instances(20, OLD);
    let mut state = shadowing_of(&policy, &all, NEW);
    let shadow = all_same(NEW, &all);
    let mut now = 1;
    let mut steps = Vec::new();
    while state.phase != Phase::Stable {
        let before = moved(&state, &all, &policy).len();
        let next = step(
            &state,
            &inputs(&policy, Some(NEW), &all, Some(&shadow), at(now)),
        );
        let after = moved(&next.state, &all, &policy).len();
        // Done: the candidate is the stable digest, and `moved` counts none.
        assert!(
            after >= before || next.state.phase == Phase::Stable,
            "an instance moved back"
        );
        // At most the canaries, or one batch (25% of 20), not yet Ready on the candidate.
        assert!(after <= before + 5, "{before} -> {after}");
        if next.state.step != state.step || next.state.phase != state.phase {
            steps.push((next.state.phase, after));
        }
        state = next.state;
        reconciled(&state, &mut all, &policy, None);
        now += 1;
        assert!(now < 1000, "the rollout never finished: {state:?}");
    }
    assert_eq!(state.stable.as_deref(), Some(NEW));
    assert_eq!(state.candidate, None);
    assert_eq!(
        steps,
        [
            (Phase::Canary, 2),
            (Phase::Batches, 7),
            (Phase::Batches, 12),
            (Phase::Batches, 17),
            (Phase::Batches, 20),
            (Phase::Stable, 0),
        ]
    );
}

#[test]
fn each_step_soaks_and_a_step_stuck_past_its_deadline_rolls_back() {
    let policy = policy();
    let mut all = instances(20, OLD);
    let shadowing = shadowing_of(&policy, &all, NEW);
    let canary = step(
        &shadowing,
        &inputs(&policy, Some(NEW), &all, Some(&all_same(NEW, &all)), at(0)),
    )
    .state;
    reconciled(&canary, &mut all, &policy, None);
    let soaking = step(&canary, &inputs(&policy, Some(NEW), &all, None, at(1))).state;
    assert_eq!(soaking.phase, Phase::Canary);
    assert!(soaking.soak_started.is_some());
    let still = step(&soaking, &inputs(&policy, Some(NEW), &all, None, at(10))).state;
    assert_eq!(still.phase, Phase::Canary, "the soak is 10 s from 1");
    let batch = step(&still, &inputs(&policy, Some(NEW), &all, None, at(11))).state;
    assert_eq!(batch.phase, Phase::Batches);
    // The batch's instances never get Ready: past the deadline the rollout holds and says
    // so once, rather than failing the digest for what may be the instances' own trouble.
    let waiting = step(&batch, &inputs(&policy, Some(NEW), &all, None, at(100))).state;
    assert_eq!(waiting.phase, Phase::Batches);
    let stalled = step(&waiting, &inputs(&policy, Some(NEW), &all, None, at(132)));
    assert_eq!(stalled.state.phase, Phase::Batches);
    assert!(stalled.state.stalled);
    assert!(
        stalled
            .state
            .message
            .clone()
            .unwrap_or_default()
            .starts_with("stalled")
    );
    assert!(stalled.actions.iter().any(|a| matches!(
        a,
        Action::Event {
            reason: "RolloutStalled",
            ..
        }
    )));
    let again = step(
        &stalled.state,
        &inputs(&policy, Some(NEW), &all, None, at(140)),
    );
    assert!(again.actions.is_empty(), "said once");
    assert!(again.state.bad.is_empty());
    // Once they are Ready, it goes on.
    reconciled(&again.state, &mut all, &policy, None);
    let soaking = step(
        &again.state,
        &inputs(&policy, Some(NEW), &all, None, at(141)),
    )
    .state;
    assert!(!soaking.stalled && soaking.soak_started.is_some());
}

#[test]
fn an_instance_the_stable_digest_finds_as_unwell_fails_no_rollout() {
    let policy = policy();
    let mut all = instances(20, OLD);
    let canary = canaries_of(&policy, &all, NEW);
    // The canaries are on the candidate, Degraded and not Ready, as the stable digest would
    // find them too (their own spec, say): not the candidate's doing.
    for i in all.iter_mut() {
        if serves_candidate(&canary, &i.key, false, &policy) {
            i.serving = Some(NEW.into());
            i.degraded = Some("Unhealthy: its own config".into());
            i.ready = false;
            i.excused = true;
        }
    }
    let held = step(&canary, &inputs(&policy, Some(NEW), &all, None, at(2))).state;
    assert_eq!(held.phase, Phase::Canary);
    assert!(held.soak_started.is_some(), "settled without them");
    // One the stable digest finds well is the candidate's: rolled back.
    let blamed = all.iter_mut().find(|i| i.excused).expect("a canary");
    blamed.excused = false;
    let rolled = step(&held, &inputs(&policy, Some(NEW), &all, None, at(3))).state;
    assert_eq!(rolled.phase, Phase::RolledBack);
}

#[test]
fn pinned_instances_never_move_and_selected_canaries_go_first() {
    let mut policy = policy();
    policy.canary = Canary::Selected;
    let mut all = instances(6, OLD);
    all[0].pinned = true;
    all[1].selected = true;
    let mut state = shadowing_of(&policy, &all, NEW);
    state = step(
        &state,
        &inputs(&policy, Some(NEW), &all, Some(&all_same(NEW, &all)), at(0)),
    )
    .state;
    assert_eq!(moved(&state, &all, &policy), ["team/kv-01"]);
    let mut now = 1;
    while state.phase != Phase::Stable {
        reconciled(&state, &mut all, &policy, None);
        all[0].serving = Some(OLD.into());
        state = step(&state, &inputs(&policy, Some(NEW), &all, None, at(now))).state;
        assert!(!serves_candidate(&state, &all[0].key, false, &policy) || all[0].pinned);
        now += 1;
        assert!(now < 1000);
    }
    assert_eq!(state.stable.as_deref(), Some(NEW));
}

#[test]
fn a_newer_digest_restarts_the_rollout_and_abort_rolls_back() {
    let policy = policy();
    let all = instances(20, OLD);
    let state = canaries_of(&policy, &all, NEW);
    assert_eq!(state.phase, Phase::Canary);
    let restarted = step(&state, &inputs(&policy, Some(NEWER), &all, None, at(2)));
    assert_eq!(restarted.state.phase, Phase::Shadow);
    assert_eq!(restarted.state.candidate.as_deref(), Some(NEWER));
    assert!(moved(&restarted.state, &all, &policy).is_empty());
    let mut abort = inputs(&policy, Some(NEWER), &all, None, at(3));
    abort.abort = true;
    let aborted = step(&restarted.state, &abort).state;
    assert_eq!(aborted.phase, Phase::RolledBack);
    assert_eq!(aborted.bad, [NEWER]);
    assert_eq!(aborted.stable.as_deref(), Some(OLD));
}

#[test]
fn a_source_that_offers_the_stable_digest_again_withdraws_the_rollout() {
    let policy = policy();
    let all = instances(20, OLD);
    let state = canaries_of(&policy, &all, NEW);
    assert_eq!(moved(&state, &all, &policy).len(), 2);
    let withdrawn = step(&state, &inputs(&policy, Some(OLD), &all, None, at(2))).state;
    assert_eq!(withdrawn.phase, Phase::RolledBack);
    assert_eq!(withdrawn.candidate, None);
    assert!(withdrawn.bad.is_empty(), "withdrawn is not bad");
    assert!(moved(&withdrawn, &all, &policy).is_empty());
    // Offered again later, it is rolled out again.
    let again = step(&withdrawn, &inputs(&policy, Some(NEW), &all, None, at(3))).state;
    assert_eq!(again.phase, Phase::Shadow);
}

#[test]
fn stepping_is_deterministic_from_the_stored_state() {
    let policy = policy();
    let all = instances(50, OLD);
    let state = shadowing_of(&policy, &all, NEW);
    let shadow = all_same(NEW, &all);
    let a = step(
        &state,
        &inputs(&policy, Some(NEW), &all, Some(&shadow), at(1)),
    );
    // What a host that restarted reads back from the binding's status.
    let stored: State =
        serde_json::from_value(serde_json::to_value(&state).expect("serializes")).expect("reads");
    let b = step(
        &stored,
        &inputs(&policy, Some(NEW), &all, Some(&shadow), at(1)),
    );
    assert_eq!(a, b);
    assert_eq!(moved(&a.state, &all, &policy).len(), 2);
}

fn decision(prune: &[&str], failing: bool) -> Decision {
    let mut status = AppStatus::default();
    if failing {
        status.conditions.push(
            serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>(
                serde_json::json!({
                    "type": "Degraded", "status": "True", "reason": "PlanRejected",
                    "message": "privileged", "lastTransitionTime": "2026-01-01T00:00:00Z",
                }),
            )
            .expect("a condition"),
        );
    }
    Decision {
        adopt: Vec::new(),
        finalizer: false,
        apply: Vec::new(),
        first_wave: 0,
        in_place: 0,
        prune: prune
            .iter()
            .map(|name| ObjectKey {
                api_version: "v1".into(),
                kind: "PersistentVolumeClaim".into(),
                name: (*name).into(),
            })
            .collect(),
        backup_start: None,
        backup_expire: Vec::new(),
        status,
        events: Vec::new(),
        requeue: match failing {
            true => Requeue::Backoff,
            false => Requeue::After(Duration::from_secs(300)),
        },
    }
}

#[test]
fn judge_refuses_new_failures_and_deletions_only() {
    assert_eq!(
        judge(&decision(&[], false), &decision(&[], false)),
        Verdict::Same
    );
    assert!(matches!(
        judge(&decision(&[], false), &decision(&[], true)),
        Verdict::Refused { reason, .. } if reason == "PlanRejected"
    ));
    assert_eq!(
        judge(&decision(&[], true), &decision(&[], true)),
        Verdict::Same,
        "a failure both versions share is the instance's"
    );
    let deletes = judge(&decision(&[], false), &decision(&["data-kv-0"], false));
    assert!(matches!(
        &deletes,
        Verdict::Refused { reason, message }
            if reason == "WouldDelete" && message.contains("PersistentVolumeClaim/data-kv-0")
    ));
    assert_eq!(
        judge(&decision(&["old"], false), &decision(&["old"], false)),
        Verdict::Same
    );
}

#[test]
fn ranks_spread_and_short_digests_read_well() {
    assert_ne!(rank("team/a", NEW, 1), rank("team/a", NEWER, 1));
    assert_ne!(rank("team/a", NEW, 1), rank("team/a", NEW, 2), "salted");
    assert_eq!(rank("team/a", NEW, 1), rank("team/a", NEW, 1));
    assert_eq!(short(NEW), "sha256:222222222222");
    assert_eq!(short("abc"), "abc");
}

#[test]
fn what_a_plugin_writes_reaches_the_status_bounded() {
    let policy = policy();
    let mut all = instances(4, OLD);
    let mut state = shadowing_of(&policy, &all, NEW);
    let mut shadow = all_same(NEW, &all);
    shadow.verdicts[0].1 = Verdict::Refused {
        reason: "PlanRejected".into(),
        message: "x".repeat(100_000),
    };
    let stopped = step(
        &state,
        &inputs(&policy, Some(NEW), &all, Some(&shadow), at(1)),
    )
    .state;
    let summary = stopped.shadow.expect("a summary");
    assert!(summary.refusals[0].len() <= 1100);
    assert!(stopped.message.expect("a message").len() <= 1100);
    // A canary whose health message is huge.
    state = step(
        &State {
            bad: Vec::new(),
            ..stable_on(OLD)
        },
        &inputs(&policy, Some(NEWER), &all, None, at(2)),
    )
    .state;
    state = step(
        &state,
        &inputs(
            &policy,
            Some(NEWER),
            &all,
            Some(&all_same(NEWER, &all)),
            at(3),
        ),
    )
    .state;
    reconciled(&state, &mut all, &policy, Some(NEWER));
    for i in &mut all {
        if let Some(d) = &mut i.degraded {
            d.push_str(&"y".repeat(100_000));
        }
    }
    let rolled = step(&state, &inputs(&policy, Some(NEWER), &all, None, at(4))).state;
    assert_eq!(rolled.phase, Phase::RolledBack);
    assert!(rolled.message.expect("a message").len() <= 1100);
}

#[test]
fn a_pause_holds_before_the_canaries_and_its_time_is_not_the_steps() {
    let mut policy = policy();
    let mut all = instances(20, OLD);
    let shadowing = shadowing_of(&policy, &all, NEW);
    policy.paused = true;
    let paused = step(
        &shadowing,
        &inputs(&policy, Some(NEW), &all, Some(&all_same(NEW, &all)), at(1)),
    );
    assert_eq!(paused.state.phase, Phase::Shadow);
    assert!(moved(&paused.state, &all, &policy).is_empty());
    // Judged once: no second shadow pass while paused, nor on resume.
    let still = step(
        &paused.state,
        &inputs(&policy, Some(NEW), &all, None, at(500)),
    );
    assert!(!still.actions.contains(&Action::Shadow));
    policy.paused = false;
    let canary = step(
        &still.state,
        &inputs(&policy, Some(NEW), &all, None, at(501)),
    )
    .state;
    assert_eq!(canary.phase, Phase::Canary);
    // Paused mid-step past the deadline: resumed, the step has its whole deadline again. The
    // pause is noted once: a paused rollout writes nothing more.
    policy.paused = true;
    let held = step(&canary, &inputs(&policy, Some(NEW), &all, None, at(1000))).state;
    let later = step(&held, &inputs(&policy, Some(NEW), &all, None, at(1010))).state;
    assert_eq!(later, held);
    policy.paused = false;
    let resumed = step(&held, &inputs(&policy, Some(NEW), &all, None, at(1001))).state;
    assert!(!resumed.stalled, "{resumed:?}");
    reconciled(&resumed, &mut all, &policy, None);
    assert_eq!(
        step(&resumed, &inputs(&policy, Some(NEW), &all, None, at(1002)))
            .state
            .phase,
        Phase::Canary
    );
}

#[test]
fn only_digests_that_served_every_instance_may_be_pinned() {
    let policy = policy();
    let mut all = instances(4, OLD);
    let mut state = shadowing_of(&policy, &all, NEW);
    assert_eq!(state.known, [OLD], "a candidate is not known yet");
    let mut now = 1;
    while state.phase != Phase::Stable {
        state = step(
            &state,
            &inputs(
                &policy,
                Some(NEW),
                &all,
                Some(&all_same(NEW, &all)),
                at(now),
            ),
        )
        .state;
        reconciled(&state, &mut all, &policy, None);
        now += 1;
        assert!(now < 1000);
    }
    assert_eq!(state.known, [OLD, NEW]);
}
