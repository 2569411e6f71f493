//! Deletion, decided as data: the finalizer half of an App's lifecycle. Owned objects go with
//! the App through their owner references; claims outlive it (they hold data) unless the
//! plugin's `finalize` says to delete them. [`decide_deletion`] computes, from the same
//! [`Snapshot`] a reconcile reads, what one pass of deletion does; the host's executor performs
//! it behind the [`FINALIZER`], and the SDK's `Fixture::delete` shows it.
//!
//! Order matters. A StatefulSet recreates a claim it lost for as long as it runs (a pod it is
//! still creating gets its claim again), so claims deleted while their StatefulSet lives can
//! come back owned by nobody. Before `finalize` is asked, every StatefulSet of the App that
//! makes claims (`volumeClaimTemplates`) is deleted, in the foreground, and deletion waits until
//! it is gone: the StatefulSet controller stops acting on a set that is being deleted, and a
//! foreground deletion ends only once the set's pods are gone. Only then is the set of claims
//! final, and `finalize` decides about all of them. Pods' ephemeral claims are owned by their
//! pods and go with them; Kubernetes' own `persistentVolumeClaimRetentionPolicy` on a
//! StatefulSet works as before (the set's deletion applies it).

use crate::{
    calls::{Failure, PluginCalls},
    capability::Capability,
    decide::{PluginState, Snapshot},
    decision::{Event, ObjectKey},
    observed::ObservedObject,
};

/// The finalizer the host puts on every App it serves: deletion waits for it until the
/// deletion's decision is carried out.
pub const FINALIZER: &str = "wasmop.dev/cleanup";

/// Whether the App must carry the [`FINALIZER`] before the writes of a decision: its plugin
/// exports `finalize` (deletion must ask it), or the App has claims, planned (a claim, a
/// StatefulSet's claim templates) or observed, which outlive it and which deletion reports as
/// kept. Any other App's objects go with it through their owner references, so it is deleted
/// at once, without a finalizer patch on its way in or out. A finalizer once added stays: a
/// later plan without claims does not make the claims made earlier go away.
pub fn needs_finalizer(
    capabilities: &std::collections::BTreeSet<Capability>,
    planned: &[crate::object::PluginObject],
    observed: &[ObservedObject],
) -> bool {
    capabilities.contains(&Capability::Finalize)
        || planned.iter().any(|o| {
            (o.api_version() == "v1" && o.kind() == "PersistentVolumeClaim")
                || (o.api_version() == "apps/v1"
                    && o.kind() == "StatefulSet"
                    && crate::claims::StatefulSetClaims::of(o).makes_claims())
        })
        || observed
            .iter()
            .any(|o| o.api_version == "v1" && o.kind == "PersistentVolumeClaim")
}

/// How long a StatefulSet may take to go before deletion says on the App that it waits.
const STUCK: std::time::Duration = std::time::Duration::from_secs(300);

/// `finalize.cleanup(retained)`: which of the App's retained objects to delete. The caller
/// prepared them as the call's input: the App's claims, as [`decide_deletion`] is shown them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupCall;

/// What one pass of deleting an App does, in the order the executor performs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// Workloads that make claims, to delete (in the foreground) before any claim is decided.
    pub stop: Vec<ObjectKey>,
    /// Claims to delete: what `finalize` chose among those it was shown.
    pub delete: Vec<ObjectKey>,
    /// Events to publish once the deletions succeeded.
    pub events: Vec<Event>,
    /// What becomes of the finalizer.
    pub finalizer: Finalizer,
}

/// What becomes of the App's finalizer after a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalizer {
    /// Done: the finalizer goes, and the App with it.
    Release,
    /// Not yet, and nothing is wrong: look again soon (a workload stopping, a plugin loading).
    Wait(String),
    /// Not yet, because something failed: look again after the App's backoff.
    Retry(String),
}

/// What deleting the App of `snapshot` does now. `snapshot.observed` must hold the App's claims
/// as listed just now (a claim the cache has not seen yet would be left out of `finalize`) and
/// its owned workloads; `calls` is the App's plugin, asked only when it serves and exports
/// `finalize`.
pub fn decide_deletion(snapshot: &Snapshot, calls: &mut dyn PluginCalls) -> Deletion {
    let claims: Vec<&ObservedObject> = snapshot
        .observed
        .iter()
        .filter(|o| o.api_version == "v1" && o.kind == "PersistentVolumeClaim")
        .collect();
    let kept_all = |why: String| Deletion {
        stop: Vec::new(),
        delete: Vec::new(),
        events: vec![Event::normal(
            "Finalized",
            format!("kept {} retained objects {why}", claims.len()),
        )],
        finalizer: Finalizer::Release,
    };
    let waiting = |why: String, event: Option<Event>| Deletion {
        stop: Vec::new(),
        delete: Vec::new(),
        events: event.into_iter().collect(),
        finalizer: Finalizer::Wait(why),
    };
    match &snapshot.plugin {
        // A refused namespace or source never loads the plugin, and deleting the App must not
        // be a way to load it.
        PluginState::Refused { message, .. } => {
            return kept_all(format!("without calling the plugin: {message}"));
        }
        // The plugin decides what deletion does: until it is loaded (as after every restart)
        // or while its source fails, deletion waits rather than skip `finalize`.
        PluginState::Loading { message } => return waiting(message.clone(), None),
        PluginState::Broken { reason, message } => {
            let why = format!(
                "the plugin cannot be loaded ({reason}): {message}; remove the finalizer \
                 {FINALIZER} to delete without it"
            );
            return waiting(why.clone(), Some(Event::warning("FinalizeWaiting", why)));
        }
        PluginState::Serving { .. } => {}
    }
    if !calls.capabilities().contains(&Capability::Finalize) {
        // Losing data needs an explicit decision.
        return kept_all("(no finalize decision)".into());
    }

    let makers: Vec<&ObservedObject> = snapshot
        .observed
        .iter()
        .filter(|o| o.owned && makes_claims(o))
        .collect();
    if !makers.is_empty() {
        let stop: Vec<ObjectKey> = makers
            .iter()
            .filter(|o| o.json.pointer("/metadata/deletionTimestamp").is_none())
            .map(|o| key(o))
            .collect();
        let names: Vec<String> = makers.iter().map(|o| key(o).to_string()).collect();
        // A set that does not go (a pod on a node that is gone, a finalizer of someone
        // else's) holds the App: say so on the App, with the way out.
        let stuck = makers.iter().any(|o| {
            o.json
                .pointer("/metadata/deletionTimestamp")
                .and_then(serde_json::Value::as_str)
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .is_some_and(|since| {
                    snapshot.now.duration_since(since).as_secs() >= STUCK.as_secs() as i64
                })
        });
        let waiting = format!(
            "waiting for {} to stop before its claims are decided (remove the finalizer \
             {FINALIZER} to delete without finalize)",
            names.join(", ")
        );
        let mut events = match stop.is_empty() {
            true => Vec::new(),
            false => vec![Event::normal(
                "Finalizing",
                format!(
                    "deleting {} before deciding about its claims",
                    stop.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )],
        };
        if stuck {
            events.push(Event::warning(
                "FinalizeWaiting",
                format!(
                    "{waiting}; still there {} minutes after its deletion",
                    STUCK.as_secs() / 60
                ),
            ));
        }
        return Deletion {
            stop,
            delete: Vec::new(),
            events,
            finalizer: Finalizer::Wait(waiting),
        };
    }

    let decision = match calls.answer(CleanupCall) {
        Ok(decision) => decision,
        Err(Failure { message, .. }) => {
            // Deleting data on a plugin fault would be worse than waiting.
            let note = format!(
                "{message}; deletion waits for finalize (raise spec.limits if it needs more \
                 time, or remove the finalizer {FINALIZER} to delete without it)"
            );
            return Deletion {
                stop: Vec::new(),
                delete: Vec::new(),
                events: vec![Event::warning("FinalizeFailed", note)],
                finalizer: Finalizer::Retry(message),
            };
        }
    };
    // Only what the plugin was shown: a decision cannot reach another App's or a user's claims.
    let delete: Vec<ObjectKey> = decision
        .delete
        .iter()
        .filter(|o| o.api_version == "v1" && o.kind == "PersistentVolumeClaim")
        .filter(|o| claims.iter().any(|c| c.name == o.name))
        .map(|o| ObjectKey {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let kept = claims.len().saturating_sub(delete.len());
    let note = format!(
        "deleted claims [{}], kept {kept}",
        delete
            .iter()
            .map(|k| k.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Deletion {
        stop: Vec::new(),
        delete,
        events: vec![Event::normal("Finalized", note)],
        finalizer: Finalizer::Release,
    }
}

/// Whether `object` is a workload that makes claims while it runs: a StatefulSet with claim
/// templates.
fn makes_claims(object: &ObservedObject) -> bool {
    object.api_version == "apps/v1"
        && object.kind == "StatefulSet"
        && object
            .json
            .pointer("/spec/volumeClaimTemplates")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|t| !t.is_empty())
}

fn key(object: &ObservedObject) -> ObjectKey {
    ObjectKey {
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
        name: object.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value, json};

    use super::*;
    use crate::{
        answers::{CleanupDecision, ObjectRef},
        calls::{Answer, Call},
        status::AppStatus,
        test_support::answer_as,
    };

    /// A plugin whose `finalize` answers as the test says, counting the calls.
    struct Finalizing {
        caps: BTreeSet<Capability>,
        answer: Result<CleanupDecision, Failure>,
        asked: usize,
    }

    impl Finalizing {
        fn deleting(names: &[&str]) -> Self {
            let objects = names
                .iter()
                .map(|n| ObjectRef {
                    api_version: "v1".into(),
                    kind: "PersistentVolumeClaim".into(),
                    name: (*n).into(),
                })
                .collect();
            Self {
                caps: [Capability::SpecDiff, Capability::Finalize].into(),
                answer: Ok(CleanupDecision {
                    delete: objects,
                    keep: Vec::new(),
                }),
                asked: 0,
            }
        }
    }

    impl<C: Call> Answer<C> for Finalizing {
        fn answer(&mut self, _: C) -> Result<C::Answer, Failure> {
            assert_eq!(
                C::CAPABILITY,
                Capability::Finalize,
                "deletion asks only finalize"
            );
            self.asked += 1;
            self.answer.clone().map(answer_as::<C, _>)
        }
    }

    impl PluginCalls for Finalizing {
        fn capabilities(&self) -> &BTreeSet<Capability> {
            &self.caps
        }
    }

    fn observed(json: Value) -> ObservedObject {
        ObservedObject::from_value(json, "u-1").expect("an object")
    }

    fn claim(name: &str) -> ObservedObject {
        observed(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": {"wasmop.dev/app": "kv"}}}))
    }

    fn set(name: &str, deleting: bool) -> ObservedObject {
        let mut metadata = json!({"name": name,
            "ownerReferences": [{"uid": "u-1", "controller": true}]});
        if deleting {
            metadata["deletionTimestamp"] = json!("2027-01-15T08:00:00Z");
        }
        observed(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata,
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
        )
    }

    fn snapshot(plugin: PluginState, observed: Vec<ObservedObject>) -> Snapshot {
        crate::test_support::snapshot_with(plugin, AppStatus::default(), observed)
    }

    fn serving() -> PluginState {
        crate::test_support::serving(&["spec-diff", "finalize"])
    }

    fn pvc(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "PersistentVolumeClaim".into(),
            name: name.into(),
        }
    }

    /// Issue 46: a StatefulSet that makes claims stops (and is gone) before `finalize` is
    /// asked, so no claim it recreates outlives the decision.
    #[test]
    fn workloads_that_make_claims_stop_before_finalize_is_asked() {
        let mut plugin = Finalizing::deleting(&["data-kv-0"]);
        let running = snapshot(serving(), vec![claim("data-kv-0"), set("kv", false)]);
        let first = decide_deletion(&running, &mut plugin);
        assert_eq!(first.stop.len(), 1);
        assert_eq!(first.stop[0].to_string(), "StatefulSet/kv");
        assert!(first.delete.is_empty());
        assert!(matches!(first.finalizer, Finalizer::Wait(_)));
        assert_eq!(plugin.asked, 0, "finalize asked while the set runs");

        // Being deleted: nothing more to do but wait.
        let stopping = snapshot(serving(), vec![claim("data-kv-0"), set("kv", true)]);
        let waiting = decide_deletion(&stopping, &mut plugin);
        assert!(waiting.stop.is_empty() && waiting.events.is_empty());
        assert!(
            matches!(&waiting.finalizer, Finalizer::Wait(why) if why.contains("StatefulSet/kv")),
            "{waiting:?}"
        );
        assert_eq!(plugin.asked, 0);
        // Still there five minutes on: the App hears it, with the way out.
        let mut later = stopping.clone();
        later.now += std::time::Duration::from_secs(301);
        let stuck = decide_deletion(&later, &mut plugin);
        assert_eq!(stuck.events.len(), 1);
        assert!(stuck.events[0].warning && stuck.events[0].note.contains(FINALIZER));

        // Gone: finalize decides about every claim there is now.
        let gone = snapshot(serving(), vec![claim("data-kv-0"), claim("data-kv-1")]);
        let done = decide_deletion(&gone, &mut plugin);
        assert_eq!(plugin.asked, 1);
        assert_eq!(done.delete, vec![pvc("data-kv-0")]);
        assert_eq!(done.finalizer, Finalizer::Release);
        assert_eq!(done.events[0].note, "deleted claims [data-kv-0], kept 1");
    }

    /// A decision reaches only the claims it was shown, each once.
    #[test]
    fn finalize_deletes_only_claims_it_was_shown() {
        let mut plugin = Finalizing::deleting(&["data-kv-0", "data-kv-0", "other-app-data"]);
        if let Ok(decision) = &mut plugin.answer {
            decision.delete.push(ObjectRef {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: "billing".into(),
            });
        }
        let d = decide_deletion(&snapshot(serving(), vec![claim("data-kv-0")]), &mut plugin);
        assert_eq!(d.delete, vec![pvc("data-kv-0")]);
        assert_eq!(d.events[0].note, "deleted claims [data-kv-0], kept 0");
    }

    /// Without a finalize decision nothing retained is deleted, and nothing waits on a
    /// workload; a plugin that cannot be loaded holds the finalizer; a failing one retries.
    #[test]
    fn without_a_decision_claims_are_kept_or_deletion_waits() {
        let claims = || vec![claim("data-kv-0"), set("kv", false)];
        let mut no_finalize = Finalizing::deleting(&["data-kv-0"]);
        no_finalize.caps.remove(&Capability::Finalize);
        let kept = decide_deletion(&snapshot(serving(), claims()), &mut no_finalize);
        assert_eq!(kept.finalizer, Finalizer::Release);
        assert!(kept.stop.is_empty() && kept.delete.is_empty());
        assert_eq!(
            kept.events[0].note,
            "kept 1 retained objects (no finalize decision)"
        );

        let refused = PluginState::Refused {
            reason: "SourceRefused",
            message: "registry evil.example is not allowed".into(),
        };
        let mut plugin = Finalizing::deleting(&["data-kv-0"]);
        let d = decide_deletion(&snapshot(refused, claims()), &mut plugin);
        assert_eq!(d.finalizer, Finalizer::Release);
        assert!(d.events[0].note.contains("without calling the plugin"));
        assert_eq!(plugin.asked, 0);

        let loading = PluginState::Loading {
            message: "loading plugin registry/kv:1".into(),
        };
        let d = decide_deletion(&snapshot(loading, claims()), &mut plugin);
        assert_eq!(
            d.finalizer,
            Finalizer::Wait("loading plugin registry/kv:1".into())
        );
        assert!(d.events.is_empty());

        let broken = PluginState::Broken {
            reason: "FetchFailed",
            message: "registry unreachable".into(),
        };
        let d = decide_deletion(&snapshot(broken, claims()), &mut plugin);
        assert!(matches!(d.finalizer, Finalizer::Wait(_)));
        assert!(d.events[0].warning && d.events[0].note.contains(FINALIZER));

        let mut failing = Finalizing::deleting(&[]);
        failing.answer = Err(Failure::new("PluginTrapped", "plugin kv trapped: boom"));
        let d = decide_deletion(&snapshot(serving(), vec![claim("data-kv-0")]), &mut failing);
        assert_eq!(
            d.finalizer,
            Finalizer::Retry("plugin kv trapped: boom".into())
        );
        assert!(d.delete.is_empty());
        assert_eq!(d.events[0].reason, "FinalizeFailed");
    }

    /// An App and a KVStore named alike in one namespace: deleting either decides only about
    /// its own claims (the App's include those labelled before the parent-kind label, and
    /// those its claim templates made), whatever `finalize` names.
    #[test]
    fn deleting_one_of_two_parents_named_alike_reaches_only_its_own_claims() {
        let claim = |name: &str, kind: Option<&str>| {
            let mut labels = json!({"wasmop.dev/app": "kv"});
            if let Some(kind) = kind {
                labels["wasmop.dev/parent-kind"] = json!(kind);
            }
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": "ns", "labels": labels}})
        };
        let cluster = [
            claim("data-app-0", None),
            claim("backups-app", Some("App.wasmop.dev")),
            claim("data-kvstore-0", Some("KVStore.data.example.com")),
        ];
        let every = ["data-app-0", "backups-app", "data-kvstore-0"];
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time");
        for (api_version, kind, own) in [
            (
                "wasmop.dev/v1alpha1",
                "App",
                &["data-app-0", "backups-app"][..],
            ),
            ("data.example.com/v1", "KVStore", &["data-kvstore-0"][..]),
        ] {
            let parent = json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": "kv", "namespace": "ns", "uid": kind}});
            let snapshot = crate::snapshot::from_json(&parent, cluster.clone(), now, serving())
                .expect("a parent");
            let mut plugin = Finalizing::deleting(&every);
            let d = decide_deletion(&snapshot, &mut plugin);
            let mut deleted: Vec<&str> = d.delete.iter().map(|k| k.name.as_str()).collect();
            deleted.sort_unstable();
            let mut own = own.to_vec();
            own.sort_unstable();
            assert_eq!(deleted, own, "{kind}");
        }
    }
}
