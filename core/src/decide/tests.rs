//! The decision core against a scripted plugin: each stage's rule, and idempotence (deciding
//! again on the outcome of a decision changes nothing).

use std::{collections::BTreeSet, time::Duration};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::{
    answers::{BackupDecision, CleanupDecision, HealthReport, HealthState, Plan},
    deletion::CleanupCall,
    object::PluginObject,
    observed::BACKUP_SLOT_LABEL,
    status::BackupStatus,
    test_support::Scripted,
};

/// A plugin whose answers the test sets, recording what it was asked.
#[derive(Default)]
struct Script {
    caps: BTreeSet<Capability>,
    objects: Vec<Value>,
    requeue: Option<Duration>,
    health: Option<(HealthState, bool)>,
    gate: Option<GateDecision>,
    backup: Option<(String, Value)>,
    expire: Vec<String>,
    fail_plan: bool,
    cleanup: CleanupDecision,
    asked: Vec<String>,
}

impl Script {
    fn new(objects: Vec<Value>) -> Self {
        Self {
            caps: [Capability::SpecDiff].into(),
            objects,
            ..Self::default()
        }
    }
}

impl PluginCalls for Script {
    fn capabilities(&self) -> &BTreeSet<Capability> {
        &self.caps
    }
}

impl<C: Call> Answer<C> for Script {
    fn answer(&mut self, call: C) -> Result<C::Answer, Failure> {
        Scripted::new(call)
            .on(|c| self.gate(c))
            .on(|c| self.plan(c))
            .on(|c| self.health(c))
            .on(|c| self.backup(c))
            .on(|c| self.finalize(c))
            .answer()
    }
}

impl Script {
    fn gate(&mut self, GateCall { from, to }: GateCall) -> Result<GateDecision, Failure> {
        self.asked.push(format!("gate {from}->{to}"));
        Ok(self.gate.clone().unwrap_or(GateDecision::Allow))
    }
    fn plan(&mut self, PlanCall { current, target }: PlanCall) -> Result<Plan, Failure> {
        self.asked.push(format!("plan {current:?}->{target}"));
        if self.fail_plan {
            return Err(Failure::new("PluginTrapped", "plugin p trapped: boom"));
        }
        Ok(Plan {
            objects: self
                .objects
                .iter()
                .map(|o| PluginObject::parse(&o.to_string()).expect("object"))
                .collect(),
            requeue_after: self.requeue,
        })
    }
    fn health(&mut self, CheckCall { version }: CheckCall) -> Result<HealthReport, Failure> {
        self.asked.push(format!("health {version}"));
        let (state, complete) = self.health.unwrap_or((HealthState::Healthy, true));
        Ok(HealthReport {
            state,
            conditions: Vec::new(),
            message: "ok".into(),
            rollout_complete: complete,
        })
    }
    fn backup(&mut self, call: ScheduleCall) -> Result<BackupDecision, Failure> {
        self.asked.push(format!("backup {:?}", call.last_completed));
        Ok(BackupDecision {
            run: self
                .backup
                .clone()
                .map(|(slot, job)| (slot, PluginObject::parse(&job.to_string()).expect("job"))),
            expire: self.expire.clone(),
            requeue_after: None,
        })
    }
    fn finalize(&mut self, _: CleanupCall) -> Result<CleanupDecision, Failure> {
        self.asked.push("finalize".into());
        if self.fail_plan {
            return Err(Failure::new("PluginTrapped", "plugin p trapped: boom"));
        }
        Ok(self.cleanup.clone())
    }
}

/// The default policy's shape: every object gets the App's namespace; ConfigMap and Job kinds
/// are prunable; a `reject-me` object is refused.
struct Check;

impl PlanCheck for Check {
    fn check_plan(&self, objects: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure> {
        objects
            .into_iter()
            .map(|mut o| {
                if o.name() == "reject-me" {
                    return Err(Failure::new(
                        "PlanRejected",
                        "plan rejected: ConfigMap/reject-me",
                    ));
                }
                o.metadata_mut(|m| {
                    m.insert("namespace".into(), json!("ns"));
                });
                Ok(o)
            })
            .collect()
    }
    fn check_backup_job(
        &self,
        _: &str,
        _: &PluginObject,
        _: &BTreeSet<String>,
        _: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        Ok(())
    }
    fn prunable(&self, _: &str, kind: &str) -> bool {
        kind != "Secret"
    }
}

fn cm(name: &str, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": data}})
}

fn snapshot(previous: AppStatus, observed: Vec<ObservedObject>) -> Snapshot {
    crate::test_support::snapshot_with(
        crate::test_support::serving(&["spec-diff"]),
        previous,
        observed,
    )
}

/// A minute after [`snapshot`]'s clock.
fn later() -> Timestamp {
    Timestamp::from_second(1_800_000_060).expect("time")
}

/// What the API server would hold after `decision` was performed on `before`: each applied
/// object as a live one (with fields the server adds), pruned and expired ones gone, the
/// backup Job created.
fn perform(before: &[ObservedObject], decision: &Decision) -> Vec<ObservedObject> {
    let gone: BTreeSet<&ObjectKey> = decision
        .prune
        .iter()
        .chain(&decision.backup_expire)
        .collect();
    let mut after: Vec<ObservedObject> = before
        .iter()
        .filter(|o| {
            !gone.contains(&ObjectKey {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
            })
        })
        .cloned()
        .collect();
    let created = decision
        .apply
        .iter()
        .chain(decision.backup_start.as_ref().map(|(_, j)| j));
    for object in created {
        let mut json = object.to_value();
        json["metadata"]["resourceVersion"] = json!("1");
        json["metadata"]["uid"] = json!(format!("uid-{}", object.name()));
        // Made at the first snapshot's clock (`later()` is a minute on).
        json["metadata"]["creationTimestamp"] = json!(
            Timestamp::from_second(1_800_000_000)
                .expect("time")
                .to_string()
        );
        after.retain(|o| !(o.kind == object.kind() && o.name == object.name()));
        after.push(ObservedObject {
            api_version: object.api_version().into(),
            kind: object.kind().into(),
            name: object.name().into(),
            owned: object.kind() != "PersistentVolumeClaim",
            create_owned: false,
            backup_slot: json
                .pointer(&format!(
                    "/metadata/labels/{}",
                    BACKUP_SLOT_LABEL.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .map(str::to_string),
            json,
        });
    }
    after
}

fn condition<'a>(status: &'a AppStatus, type_: &str) -> (&'a str, &'a str) {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
        .unwrap_or(("missing", ""))
}

#[test]
fn a_new_app_applies_its_plan_stamped_and_is_ready() {
    let mut plugin = Script::new(vec![cm("a", "1"), cm("b", "2")]);
    let d = decide(&snapshot(AppStatus::default(), vec![]), &mut plugin, &Check);
    assert_eq!(d.apply.len(), 2);
    assert_eq!(
        d.adopt.len(),
        2,
        "objects the App does not control yet are checked first"
    );
    let a = d.apply[0].to_value();
    assert_eq!(a["metadata"]["namespace"], "ns");
    assert_eq!(a["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert!(a["metadata"]["annotations"][crate::stamp::APPLIED_ANNOTATION].is_string());
    assert_eq!(d.status.phase.as_deref(), Some("Ready"));
    assert_eq!(d.status.version.as_deref(), Some("1.0"));
    assert_eq!(d.status.observed_generation, Some(3));
    assert_eq!(condition(&d.status, "PluginReady"), ("True", "Loaded"));
    // What kstatus and `kubectl wait --for=condition=Ready` read.
    assert_eq!(condition(&d.status, "Ready"), ("True", "Available"));
    assert_eq!(condition(&d.status, "Reconciling").0, "False");
    assert_eq!(condition(&d.status, "Stalled").0, "False");
    assert_eq!(d.requeue, Requeue::After(RESYNC));
    // Ready at once: the status says so, and a first rollout is no Event.
    assert!(
        !d.events.iter().any(|e| e.reason == "RolledOut"),
        "{:?}",
        d.events
    );
    assert!(
        d.events
            .iter()
            .all(|e| !e.note.contains("Ready=") && !e.note.contains("Stalled=")),
        "the summary conditions are not news of their own: {:?}",
        d.events
    );
}

#[test]
fn a_plugin_the_cache_could_not_keep_serves_and_says_so() {
    let mut snap = snapshot(AppStatus::default(), vec![]);
    if let PluginState::Serving { uncached, .. } = &mut snap.plugin {
        *uncached = Some("writing /cache/blobs/abc: No space left on device".into());
    }
    let d = decide(&snap, &mut Script::new(vec![cm("a", "1")]), &Check);
    assert_eq!(d.apply.len(), 1, "the plan is applied all the same");
    assert_eq!(d.status.phase.as_deref(), Some("Ready"));
    let ready = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "PluginReady")
        .expect("PluginReady");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "LoadedUncached")
    );
    assert!(
        ready.message.contains("No space left on device") && ready.message.contains("restart"),
        "{}",
        ready.message
    );
}

#[test]
fn deciding_again_on_the_outcome_changes_nothing() {
    let mut plugin = Script::new(vec![cm("a", "1"), cm("b", "2")]);
    let first = snapshot(AppStatus::default(), vec![]);
    let d1 = decide(&first, &mut plugin, &Check);
    let mut second = snapshot(d1.status.clone(), perform(&first.observed, &d1));
    second.now = later();
    let d2 = decide(&second, &mut plugin, &Check);
    assert!(d2.writes_nothing(), "{d2:#?}");
    assert_eq!(d2.in_place, 2);
    assert_eq!(d2.status, d1.status, "the status write is skipped");
    assert!(d2.events.is_empty(), "{:?}", d2.events);
}

#[test]
fn drift_and_plan_changes_are_applied_and_dropped_objects_pruned() {
    let mut plugin = Script::new(vec![cm("a", "1"), cm("b", "2")]);
    let first = snapshot(AppStatus::default(), vec![]);
    let d1 = decide(&first, &mut plugin, &Check);
    let mut live = perform(&first.observed, &d1);
    // Someone edits `a`; the plugin drops `b` and changes nothing else.
    live[0].json["data"]["k"] = json!("edited");
    plugin.objects = vec![cm("a", "1")];
    let d2 = decide(&snapshot(d1.status.clone(), live), &mut plugin, &Check);
    assert_eq!(
        d2.apply.iter().map(PluginObject::name).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(d2.adopt.is_empty(), "a is already the App's");
    assert_eq!(
        d2.prune.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    assert!(d2.events.iter().any(|e| e.reason == "Pruned"));
}

#[test]
fn claims_backup_jobs_foreign_and_unprunable_objects_are_never_pruned() {
    let observed = |kind: &str, name: &str, owned: bool, slot: Option<&str>| ObservedObject {
        api_version: if kind == "Job" { "batch/v1" } else { "v1" }.into(),
        kind: kind.into(),
        name: name.into(),
        owned,
        backup_slot: slot.map(str::to_string),
        create_owned: false,
        json: json!({}),
    };
    let live = vec![
        observed("PersistentVolumeClaim", "data", false, None),
        observed("Job", "kv-backup-1", true, Some("20261205-060000")),
        observed("ConfigMap", "users", false, None),
        observed("Secret", "kept", true, None),
        observed("ConfigMap", "old", true, None),
    ];
    let d = decide(
        &snapshot(AppStatus::default(), live),
        &mut Script::new(vec![]),
        &Check,
    );
    assert_eq!(
        d.prune.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["old"]
    );
}

/// An App and a KVStore named alike in one namespace, as the host's caches hold their objects:
/// each prunes only its own, stamps owner references to its own kind, and a plan naming the
/// other's object must adopt it (which the executor refuses) rather than take it as its own.
#[test]
fn parents_of_two_kinds_with_one_name_prune_and_own_only_their_own() {
    let object = |name: &str, uid: &str, kind: Option<&str>| {
        let mut labels = json!({"wasmop.dev/app": "cache"});
        if let Some(kind) = kind {
            labels["wasmop.dev/parent-kind"] = json!(kind);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name,
            "namespace": "ns", "labels": labels,
            "ownerReferences": [{"uid": uid, "controller": true}]}})
    };
    let cluster = [
        object("app-old", "app-uid", None),
        object("app-new", "app-uid", Some("App.wasmop.dev")),
        object("kv-only", "kv-uid", Some("KVStore.data.example.com")),
    ];
    let parent = |api_version: &str, kind: &str, uid: &str| {
        json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "cache", "namespace": "ns", "uid": uid},
            "spec": {"version": "1.0"}})
    };
    let now = Timestamp::from_second(1_800_000_000).expect("time");
    let decide_for = |parent: &Value, plan: Vec<Value>| {
        let snapshot = crate::snapshot::from_json(
            parent,
            cluster.clone(),
            now,
            crate::test_support::serving(&["spec-diff"]),
        )
        .expect("a parent");
        decide(&snapshot, &mut Script::new(plan), &Check)
    };
    let names = |keys: &[ObjectKey]| keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>();

    let app = parent("wasmop.dev/v1alpha1", "App", "app-uid");
    let kv = parent("data.example.com/v1", "KVStore", "kv-uid");
    assert_eq!(
        names(&decide_for(&app, vec![]).prune),
        ["app-old", "app-new"]
    );
    assert_eq!(names(&decide_for(&kv, vec![]).prune), ["kv-only"]);

    // The KVStore plans the App's ConfigMap: not its own, so it must be adopted.
    let d = decide_for(&kv, vec![cm("app-old", "x")]);
    assert_eq!(names(&d.adopt), ["app-old"]);
    let stamped = d.apply[0].to_value();
    let owner = &stamped["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["apiVersion"], &owner["kind"], &owner["uid"]),
        (
            &json!("data.example.com/v1"),
            &json!("KVStore"),
            &json!("kv-uid")
        )
    );
    assert_eq!(
        stamped["metadata"]["labels"]["wasmop.dev/parent-kind"],
        "KVStore.data.example.com"
    );
    // The App plans its own: already managed, nothing to adopt.
    assert!(decide_for(&app, vec![cm("app-old", "x")]).adopt.is_empty());
}

#[test]
fn a_zero_requeue_is_clamped() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    plugin.requeue = Some(Duration::ZERO);
    let d = decide(&snapshot(AppStatus::default(), vec![]), &mut plugin, &Check);
    assert_eq!(d.requeue, Requeue::After(SHORT_REQUEUE));
    assert_eq!(clamp_plugin_requeue(Duration::from_secs(86_400)), RESYNC);
}

#[test]
fn a_failing_plugin_or_a_rejected_plan_writes_nothing_and_keeps_what_was_known() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    let d1 = decide(&snapshot(AppStatus::default(), vec![]), &mut plugin, &Check);
    for script in [
        Script {
            fail_plan: true,
            ..Script::new(vec![])
        },
        Script::new(vec![cm("reject-me", "1")]),
    ] {
        let mut script = script;
        let d = decide(&snapshot(d1.status.clone(), vec![]), &mut script, &Check);
        assert!(
            d.writes_nothing() && d.prune.is_empty(),
            "a failed plan writes nothing"
        );
        assert_eq!(d.requeue, Requeue::Backoff);
        assert_eq!(d.status.phase.as_deref(), Some("Degraded"));
        assert_eq!(condition(&d.status, "Degraded").0, "True");
        assert_eq!(
            d.status.version.as_deref(),
            Some("1.0"),
            "the rolled-out version stays"
        );
        assert_eq!(
            condition(&d.status, "Available").0,
            "True",
            "other conditions stay"
        );
        // Not Ready, and not getting there without a change: kstatus' Failed.
        assert_eq!(condition(&d.status, "Ready").0, "False");
        assert_eq!(condition(&d.status, "Stalled").0, "True");
        assert_eq!(condition(&d.status, "Reconciling").0, "False");
    }
}

/// A plugin whose health check fails.
struct SickHealth(Script);

impl PluginCalls for SickHealth {
    fn capabilities(&self) -> &BTreeSet<Capability> {
        self.0.capabilities()
    }
}

impl<C: Call> Answer<C> for SickHealth {
    fn answer(&mut self, call: C) -> Result<C::Answer, Failure> {
        if C::CAPABILITY == Capability::Health {
            return Err(Failure::new(
                "PluginTrapped",
                "health trapped until its StatefulSet exists",
            ));
        }
        self.0.answer(call)
    }
}

#[test]
fn a_failing_health_check_still_applies_the_checked_plan() {
    let mut script = Script::new(vec![cm("a", "1")]);
    script.caps.insert(Capability::Health);
    let d = decide(
        &snapshot(AppStatus::default(), vec![]),
        &mut SickHealth(script),
        &Check,
    );
    assert_eq!(d.apply.len(), 1, "the plan is applied");
    assert_eq!(d.requeue, Requeue::Backoff);
    assert_eq!(condition(&d.status, "Degraded"), ("True", "PluginTrapped"));
}

#[test]
fn loading_or_refused_plugins_hold_the_status_and_call_nothing() {
    let d1 = decide(
        &snapshot(AppStatus::default(), vec![]),
        &mut Script::new(vec![]),
        &Check,
    );
    for (plugin, phase) in [
        (
            PluginState::Loading {
                message: "loading".into(),
            },
            "Ready",
        ),
        (
            PluginState::Refused {
                reason: "SourceRefused",
                message: "registry not allowed".into(),
            },
            "Failed",
        ),
    ] {
        let mut s = snapshot(d1.status.clone(), vec![]);
        s.plugin = plugin;
        let mut script = Script::new(vec![cm("a", "1")]);
        let d = decide(&s, &mut script, &Check);
        assert!(script.asked.is_empty());
        assert!(d.writes_nothing() && d.prune.is_empty());
        assert_eq!(d.status.phase.as_deref(), Some(phase));
        assert_eq!(
            d.status.plugin, d1.status.plugin,
            "the serving plugin stays on record"
        );
        assert_eq!(condition(&d.status, "Available").0, "True");
    }
}

#[test]
fn a_waiting_gate_renders_the_rolled_out_version() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    plugin.caps.insert(Capability::Upgrade);
    plugin.gate = Some(GateDecision::Wait("backup running".into()));
    let previous = AppStatus {
        version: Some("0.9".into()),
        ..AppStatus::default()
    };
    let d = decide(&snapshot(previous, vec![]), &mut plugin, &Check);
    assert_eq!(
        plugin.asked[..2],
        ["gate 0.9->1.0", "plan Some(\"0.9\")->0.9"]
    );
    assert_eq!(d.status.version.as_deref(), Some("0.9"));
    assert_eq!(condition(&d.status, "UpgradeGated"), ("True", "Waiting"));
    assert_eq!(
        d.status.upgrade.as_ref().map(|u| u.state.as_str()),
        Some("Waiting")
    );
}

#[test]
fn a_backup_slot_runs_once_and_never_again_once_recorded() {
    let job =
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {}});
    let mut plugin = Script::new(vec![]);
    plugin.caps.insert(Capability::Backup);
    plugin.backup = Some(("20261205-060000".into(), job));
    let first = snapshot(AppStatus::default(), vec![]);
    let d1 = decide(&first, &mut plugin, &Check);
    let (slot, job) = d1.backup_start.clone().expect("a backup starts");
    assert_eq!(slot, "20261205-060000");
    assert_eq!(job.name(), "kv-backup-20261205-060000");
    assert_eq!(
        d1.status.last_backup,
        Some(BackupStatus {
            slot: slot.clone(),
            job: job.name().into(),
            completed: false
        })
    );
    // The Job is gone (expired, TTL) and the plugin asks for the same slot again: refused.
    let d2 = decide(&snapshot(d1.status.clone(), vec![]), &mut plugin, &Check);
    assert!(d2.backup_start.is_none());
    assert_eq!(d2.status.last_backup, d1.status.last_backup);
}

proptest! {
    /// Idempotence over arbitrary plans: whatever the plugin plans (any names, any data, any
    /// number of objects, a backup or not), deciding again on the outcome writes nothing and
    /// leaves the status as it was.
    #[test]
    fn deciding_twice_is_a_fixed_point(
        objects in proptest::collection::btree_map("[a-z]{1,8}", "[ -~]{0,16}", 0..6),
        slot in proptest::option::of(0u32..5),
        healthy in any::<bool>(),
    ) {
        let mut plugin = Script::new(objects.iter().map(|(n, d)| cm(n, d)).collect());
        plugin.caps.extend([Capability::Health, Capability::Backup]);
        plugin.health = Some(if healthy { (HealthState::Healthy, true) } else { (HealthState::Progressing, false) });
        plugin.backup = slot.map(|s| (format!("20261205-0{s}0000"), json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}})));
        let first = snapshot(AppStatus::default(), vec![]);
        let d1 = decide(&first, &mut plugin, &Check);
        let mut second = snapshot(d1.status.clone(), perform(&first.observed, &d1));
        second.now = later();
        let d2 = decide(&second, &mut plugin, &Check);
        prop_assert!(d2.writes_nothing(), "{:#?}", d2);
        prop_assert!(d2.events.is_empty(), "{:?}", d2.events);
        // A first status left to the next reconcile (one on its way) is that reconcile's;
        // from then on the status stays.
        if d1.status == AppStatus::default() {
            prop_assert!(!healthy && slot.is_none() && !objects.is_empty());
            prop_assert_ne!(&d2.status, &d1.status, "the first status, a minute on");
            prop_assert_eq!(d1.requeue, Requeue::After(SHORT_REQUEUE));
            let mut third = snapshot(d2.status.clone(), perform(&second.observed, &d2));
            third.now = later();
            let d3 = decide(&third, &mut plugin, &Check);
            prop_assert!(d3.writes_nothing(), "{:#?}", d3);
            prop_assert_eq!(&d3.status, &d2.status);
            prop_assert!(d3.events.is_empty(), "{:?}", d3.events);
        } else {
            prop_assert_eq!(&d2.status, &d1.status);
        }
    }
}

/// A new App that comes up well is no Event (its status says it), not one per condition; a
/// reconcile that flips conditions publishes one Event naming them all, bad news first and as a
/// Warning.
#[test]
fn conditions_make_one_event_per_reconcile_and_a_good_start_is_not_news() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    plugin.caps.insert(Capability::Health);
    let first = snapshot(AppStatus::default(), vec![]);
    let d1 = decide(&first, &mut plugin, &Check);
    assert!(d1.events.is_empty(), "{:?}", d1.events);

    plugin.health = Some((HealthState::Degraded, false));
    let mut second = snapshot(d1.status.clone(), perform(&first.observed, &d1));
    second.now = later();
    let d2 = decide(&second, &mut plugin, &Check);
    assert_eq!(d2.events.len(), 1, "{:?}", d2.events);
    let event = &d2.events[0];
    assert!(event.warning);
    assert_eq!(
        event.reason, "Degraded",
        "the most telling first: {}",
        event.note
    );
    assert!(
        event.note.contains("Available=False") && event.note.contains("Degraded=True"),
        "{}",
        event.note
    );
}

/// A rollout in progress is looked at again after `ROLLOUT_RECHECK` if nothing changes (the
/// watches bring every change of the App's objects sooner), or sooner if the plugin asks; a
/// finished one at the resync.
#[test]
fn a_rollout_in_progress_is_looked_at_again_within_the_recheck() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    plugin.caps.insert(Capability::Health);
    plugin.health = Some((HealthState::Progressing, false));
    let first = snapshot(AppStatus::default(), vec![]);
    let d1 = decide(&first, &mut plugin, &Check);
    let mut second = snapshot(d1.status.clone(), perform(&first.observed, &d1));
    second.now = later();
    let d2 = decide(&second, &mut plugin, &Check);
    assert_eq!(
        condition(&d2.status, "Ready").0,
        "False",
        "{:#?}",
        d2.status
    );
    assert_eq!(d2.requeue, Requeue::After(ROLLOUT_RECHECK));

    plugin.requeue = Some(Duration::from_secs(7));
    let d2 = decide(&second, &mut plugin, &Check);
    assert_eq!(d2.requeue, Requeue::After(Duration::from_secs(7)));

    plugin.requeue = None;
    plugin.health = Some((HealthState::Healthy, true));
    let d2 = decide(&second, &mut plugin, &Check);
    assert_eq!(condition(&d2.status, "Ready").0, "True");
    assert_eq!(d2.requeue, Requeue::After(RESYNC));
}

/// An App that takes a few reconciles to come up is quiet on the way (its conditions' flips
/// are progress, its arrival is its Ready condition) and writes one status: the first
/// reconcile, which creates its objects, leaves the status to the next. After it, a recovery
/// from bad news is news again, and so is a rollout from one version to another.
#[test]
fn the_way_to_a_first_rollout_is_quiet_and_one_status_write() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    plugin.caps.insert(Capability::Health);
    plugin.health = Some((HealthState::Progressing, false));
    let first = snapshot(AppStatus::default(), vec![]);
    let d1 = decide(&first, &mut plugin, &Check);
    assert!(d1.events.is_empty(), "{:?}", d1.events);
    assert_eq!(d1.adopt.len(), 1, "creates the App's first object");
    assert_eq!(d1.status, AppStatus::default(), "no status yet");
    assert_eq!(d1.requeue, Requeue::After(SHORT_REQUEUE));

    plugin.health = Some((HealthState::Healthy, true));
    let mut second = snapshot(d1.status.clone(), perform(&first.observed, &d1));
    second.now = later();
    let d2 = decide(&second, &mut plugin, &Check);
    assert!(d2.events.is_empty(), "{:?}", d2.events);
    assert_eq!(condition(&d2.status, "Available").0, "True");
    assert_eq!(condition(&d2.status, "Ready").0, "True");

    plugin.health = Some((HealthState::Degraded, false));
    let mut third = snapshot(d2.status.clone(), perform(&second.observed, &d2));
    third.now = later();
    let d3 = decide(&third, &mut plugin, &Check);
    assert!(d3.events.iter().any(|e| e.warning), "{:?}", d3.events);

    plugin.health = Some((HealthState::Healthy, true));
    let mut fourth = snapshot(d3.status.clone(), perform(&third.observed, &d3));
    fourth.now = later();
    let d4 = decide(&fourth, &mut plugin, &Check);
    assert!(
        d4.events
            .iter()
            .any(|e| !e.warning && e.note.contains("Available=True")),
        "a recovery: {:?}",
        d4.events
    );

    let mut fifth = snapshot(d4.status.clone(), perform(&fourth.observed, &d4));
    fifth.now = later();
    let from = d4.status.version.clone().expect("rolled out");
    fifth.desired_version = format!("{from}.1");
    let d5 = decide(&fifth, &mut plugin, &Check);
    assert!(
        d5.events.iter().any(|e| e.reason == "RolledOut"),
        "an upgrade: {:?}",
        d5.events
    );
}

/// An App whose plugin is refused from the start says so in an Event: that first status is news.
#[test]
fn a_refused_plugin_at_the_first_reconcile_is_a_warning() {
    let mut start = snapshot(AppStatus::default(), vec![]);
    start.plugin = PluginState::Broken {
        reason: "SignatureInvalid",
        message: "no signature by a trusted key".into(),
    };
    let d = decide(&start, &mut NoPlugin, &Check);
    assert!(
        d.events
            .iter()
            .any(|e| e.warning && e.note.contains("PluginReady=False (SignatureInvalid)")),
        "{:?}",
        d.events
    );
}

/// A plugin that was loading and then is refused is news, though PluginReady stays False; a
/// plugin loading again for an App it served (a host restart) writes nothing.
#[test]
fn a_load_that_fails_is_news_and_a_reload_keeps_the_status() {
    let mut loading = snapshot(AppStatus::default(), vec![]);
    loading.plugin = PluginState::Loading {
        message: "loading plugin registry/kv:1".into(),
    };
    let d1 = decide(&loading, &mut NoPlugin, &Check);
    assert!(d1.events.is_empty(), "{:?}", d1.events);
    let mut refused = snapshot(d1.status.clone(), vec![]);
    refused.plugin = PluginState::Broken {
        reason: "SignatureInvalid",
        message: "no signature by a trusted key".into(),
    };
    let d2 = decide(&refused, &mut NoPlugin, &Check);
    assert!(
        d2.events
            .iter()
            .any(|e| e.warning && e.reason == "PluginReady"),
        "{:?}",
        d2.events
    );

    let mut plugin = Script::new(vec![cm("a", "1")]);
    let first = snapshot(AppStatus::default(), vec![]);
    let served = decide(&first, &mut plugin, &Check);
    let mut reload = snapshot(served.status.clone(), perform(&first.observed, &served));
    reload.plugin = PluginState::Loading {
        message: "loading plugin registry/kv:1".into(),
    };
    let held = decide(&reload, &mut NoPlugin, &Check);
    assert_eq!(
        held.status, served.status,
        "no status write while reloading"
    );
    assert!(held.events.is_empty(), "{:?}", held.events);

    // After a spec change the plugin being loaded may be another one: say Loading.
    reload.app.generation = Some(4);
    let changed = decide(&reload, &mut NoPlugin, &Check);
    assert_eq!(
        condition(&changed.status, "PluginReady"),
        ("False", "Loading")
    );
}

#[test]
fn loaded_at_moves_with_the_digest_and_not_with_a_reload() {
    let serving = |digest: &str, loaded_at: &str| PluginState::Serving {
        label: format!("kv@0.1.0 ({digest})"),
        status: PluginStatus {
            reference: "registry/kv:1".into(),
            digest: digest.into(),
            short_digest: digest.into(),
            capabilities: vec!["spec-diff".into()],
            loaded_at: Some(loaded_at.into()),
        },
        newer_refused: None,
        uncached: None,
    };
    let mut plugin = Script::new(vec![cm("a", "1")]);
    let mut first = snapshot(AppStatus::default(), vec![]);
    first.plugin = serving("sha256:abc", "2027-01-15T08:00:00+00:00");
    let d1 = decide(&first, &mut plugin, &Check);

    // The host restarted: the same digest, loaded again later.
    let mut restarted = snapshot(d1.status.clone(), perform(&first.observed, &d1));
    restarted.plugin = serving("sha256:abc", "2027-01-15T09:00:00+00:00");
    restarted.now = later();
    let d2 = decide(&restarted, &mut plugin, &Check);
    assert!(d2.writes_nothing(), "{d2:#?}");
    assert_eq!(d2.status, d1.status, "a reload writes no status");

    // A swap: the new digest's time.
    let mut swapped = snapshot(d2.status.clone(), perform(&restarted.observed, &d2));
    swapped.plugin = serving("sha256:def", "2027-01-15T10:00:00+00:00");
    let d3 = decide(&swapped, &mut plugin, &Check);
    let plugin_status = d3.status.plugin.expect("status.plugin");
    assert_eq!(
        plugin_status.loaded_at.as_deref(),
        Some("2027-01-15T10:00:00+00:00")
    );
    assert!(d3.events.iter().any(|e| e.reason == "PluginSwapped"));
}

/// A policy that has tightened: ConfigMaps whose data is `privileged` break it now, and the
/// plan (the same one as before) is refused.
struct Tightened {
    remove: bool,
}

impl PlanCheck for Tightened {
    fn check_plan(&self, _: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure> {
        Err(Failure::new(
            "PlanRejected",
            "plan rejected: ConfigMap/a: data.k",
        ))
    }
    fn check_backup_job(
        &self,
        _: &str,
        _: &PluginObject,
        _: &BTreeSet<String>,
        _: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        Ok(())
    }
    fn prunable(&self, _: &str, _: &str) -> bool {
        true
    }
    fn check_live(&self, object: &ObservedObject, _: &[ObservedObject]) -> Option<String> {
        (object.json.pointer("/data/k") == Some(&json!("privileged")))
            .then(|| format!("ConfigMap/{}: data.k: privileged (test/rule)", object.name))
    }
    fn removes_violations(&self) -> bool {
        self.remove
    }
}

#[test]
fn what_a_tightened_policy_forbids_is_reported_and_removed_only_when_it_says_so() {
    let mut plugin = Script::new(vec![cm("a", "privileged"), cm("b", "fine")]);
    let first = decide(&snapshot(AppStatus::default(), vec![]), &mut plugin, &Check);
    let live = perform(&[], &first);
    // Not owned, so not the App's to report or delete.
    let mut foreign =
        ObservedObject::from_value(cm("c", "privileged"), "someone-else").expect("an object");
    foreign.owned = false;
    let mut observed = live.clone();
    observed.push(foreign);

    let report = decide(
        &snapshot(first.status.clone(), observed.clone()),
        &mut plugin,
        &Tightened { remove: false },
    );
    assert_eq!(
        condition(&report.status, "Degraded"),
        ("True", "PolicyViolation")
    );
    let message = &report
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .expect("Degraded")
        .message;
    assert!(
        message.starts_with("ConfigMap/a: data.k: privileged (test/rule); "),
        "{message}"
    );
    assert!(message.contains("keeps running"), "{message}");
    assert!(
        report.apply.is_empty() && report.prune.is_empty(),
        "Report deletes nothing"
    );

    let remove = decide(
        &snapshot(first.status.clone(), observed),
        &mut plugin,
        &Tightened { remove: true },
    );
    let pruned: Vec<String> = remove.prune.iter().map(|k| k.name.clone()).collect();
    assert_eq!(pruned, ["a"], "only the owned object that breaks the rules");
    assert!(remove.apply.is_empty());
    assert!(
        remove.events.iter().any(|e| e.warning
            && e.reason == "PolicyViolationRemoved"
            && e.note.contains("deleted ConfigMap/a:")),
        "{:?}",
        remove.events
    );

    // With nothing left that breaks the rules, the refused plan is what the App reports.
    let after = perform(&live, &remove);
    let next = decide(
        &snapshot(remove.status.clone(), after),
        &mut plugin,
        &Tightened { remove: true },
    );
    assert_eq!(
        condition(&next.status, "Degraded"),
        ("True", "PlanRejected")
    );
    assert!(next.prune.is_empty());
}

/// Records the claims a backup Job was checked with.
#[derive(Default)]
struct ClaimsSeen(std::sync::Mutex<Vec<BTreeSet<String>>>);

impl PlanCheck for ClaimsSeen {
    fn check_plan(&self, objects: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure> {
        Check.check_plan(objects)
    }
    fn check_backup_job(
        &self,
        _: &str,
        _: &PluginObject,
        _: &BTreeSet<String>,
        claims: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        if let Ok(mut seen) = self.0.lock() {
            seen.push(claims.clone());
        }
        Ok(())
    }
    fn prunable(&self, _: &str, _: &str) -> bool {
        true
    }
}

#[test]
fn a_backup_job_may_mount_the_claims_observed_and_those_of_this_reconciles_plan() {
    let claim = |name: &str| json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}});
    let job =
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {}});
    let mut plugin = Script::new(vec![claim("kv-backups")]);
    plugin.caps.insert(Capability::Backup);
    plugin.backup = Some(("20261205-060000".into(), job));
    let mut data = claim("data-kv-0");
    data["metadata"]["labels"] = json!({"wasmop.dev/app": "kv"});
    let observed = vec![ObservedObject::from_value(data, "u-1").expect("a claim")];
    let check = ClaimsSeen::default();
    let decision = decide(
        &snapshot(AppStatus::default(), observed),
        &mut plugin,
        &check,
    );
    assert!(decision.backup_start.is_some());
    let seen = check.0.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [BTreeSet::from([
            "data-kv-0".to_string(),
            "kv-backups".to_string()
        ])]
    );
}

/// What workloads use is applied in the first wave, whatever the plan's order; each wave keeps
/// the plan's order.
#[test]
fn what_workloads_use_is_applied_first() {
    let deployment = |name: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"template": {"spec": {}}}})
    };
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}});
    let mut script = Script::new(vec![
        deployment("web"),
        cm("b", "1"),
        deployment("api"),
        account,
        cm("a", "1"),
    ]);
    let d = decide(&snapshot(AppStatus::default(), vec![]), &mut script, &Check);
    let waves: Vec<Vec<String>> = d
        .waves()
        .map(|wave| {
            wave.iter()
                .map(|o| format!("{}/{}", o.kind(), o.name()))
                .collect()
        })
        .collect();
    assert_eq!(
        waves,
        [
            vec!["ConfigMap/b", "ServiceAccount/sa", "ConfigMap/a"],
            vec!["Deployment/web", "Deployment/api"],
        ]
    );
    assert_eq!(d.first_wave, 3);
}

/// The cleanup finalizer only where deletion has something to do: a plugin that exports
/// `finalize`, a plan with claims (a claim, a StatefulSet's claim templates), or claims the App
/// already has; a plan of a ConfigMap alone needs none.
#[test]
fn only_finalize_or_claims_need_the_finalizer() {
    let first = snapshot(AppStatus::default(), vec![]);
    let mut plain = Script::new(vec![cm("a", "1")]);
    assert!(!decide(&first, &mut plain, &Check).finalizer);
    plain.caps.insert(Capability::Finalize);
    assert!(decide(&first, &mut plain, &Check).finalizer);

    let set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
    assert!(decide(&first, &mut Script::new(vec![set]), &Check).finalizer);
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "scratch"}});
    assert!(decide(&first, &mut Script::new(vec![claim]), &Check).finalizer);

    let kept = ObservedObject::from_value(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-db-0", "labels": {"wasmop.dev/app": "kv"}}}),
        "u-1",
    )
    .expect("a claim");
    let with_claim = snapshot(AppStatus::default(), vec![kept]);
    assert!(decide(&with_claim, &mut Script::new(vec![cm("a", "1")]), &Check).finalizer);
}

/// A new App on its way gets its first status once its first objects are 10 s old, and never
/// later than a minute after it was made, however young its objects stay.
#[test]
fn a_first_status_waits_ten_seconds_at_most_and_a_minute_for_ever_young_objects() {
    let mut plugin = Script::new(vec![cm("a", "1")]);
    plugin.caps.insert(Capability::Health);
    plugin.health = Some((HealthState::Progressing, false));
    let made = |secs_before: i64| {
        let mut object = ObservedObject::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a",
                "ownerReferences": [{"uid": "u-1", "controller": true}],
                "creationTimestamp": Timestamp::from_second(1_800_000_000 - secs_before)
                    .expect("time").to_string()}}),
            "u-1",
        )
        .expect("an object");
        object.owned = true;
        object
    };
    let young = snapshot(AppStatus::default(), vec![made(4)]);
    let d = decide(&young, &mut plugin, &Check);
    assert_eq!(d.status, AppStatus::default(), "4 s old: no status yet");
    assert_eq!(d.requeue, Requeue::After(SHORT_REQUEUE));
    let d = decide(
        &snapshot(AppStatus::default(), vec![made(8)]),
        &mut plugin,
        &Check,
    );
    assert_eq!(
        d.requeue,
        Requeue::After(Duration::from_secs(2)),
        "2 s left"
    );
    let d = decide(
        &snapshot(AppStatus::default(), vec![made(10)]),
        &mut plugin,
        &Check,
    );
    assert_eq!(
        condition(&d.status, "Reconciling").0,
        "True",
        "10 s old: written"
    );

    let mut old_app = snapshot(AppStatus::default(), vec![made(1)]);
    old_app.created = Timestamp::from_second(1_800_000_000 - 60).ok();
    let d = decide(&old_app, &mut plugin, &Check);
    assert_eq!(
        condition(&d.status, "Reconciling").0,
        "True",
        "a minute old: written"
    );

    // A host clock behind the API server's: objects made "later" than now are no reason to
    // wait.
    let skewed = snapshot(AppStatus::default(), vec![made(-30)]);
    let d = decide(&skewed, &mut plugin, &Check);
    assert_eq!(
        condition(&d.status, "Reconciling").0,
        "True",
        "skewed clock: written"
    );
}
