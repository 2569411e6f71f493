//! The driver of one progressive binding's rollout, beside its kind's controller: reads the
//! binding's rollout state from its status, and, while the replica leads, steps it every
//! second ([`wasmop_core::rollout::step`]) from what the instances' statuses say and the digest
//! the source offers, runs the shadow plans when the step asks, writes the new state and the
//! instance counts to the binding's status, and requeues the instances when which digest
//! serves them may have changed. Before it leads it only mirrors the leader's status into
//! [`Rollouts`], so that the reconciles it takes over pick what the leader picked.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use wasmop_core::rollout::{self, Action, Instance, Phase, State};

use super::{ABORT_ANNOTATION, InstanceCounts, PIN_ANNOTATION, Rollouts, Settings, shadow};
use crate::{
    binding::PluginBinding,
    parent::{Binding, Parent, ParentKind},
    plugin::source::{OciRules, SourceRef},
    reconcile::{Context, prepare::governing},
};

/// The field manager of the binding's `status.rollout` and `status.rolloutInstances` (the
/// binding's other status fields are the binding server's).
const FIELD_MANAGER: &str = "wasmop-rollout";

/// How often the rollout is stepped when nothing asks sooner: a canary that turns Degraded is
/// rolled back within this of its status saying so.
const TICK: Duration = Duration::from_secs(1);

/// What one driver needs.
pub(crate) struct Driver {
    /// The API client.
    pub client: Client,
    /// What every reconcile needs (the plugins, the rollouts, the recorder).
    pub ctx: Arc<Context>,
    /// The bound kind, its binding progressive.
    pub kind: Arc<ParentKind>,
    /// The kind's instances.
    pub store: Store<DynamicObject>,
    /// Open while this replica leads and the kind's cache has synced.
    pub gate: watch::Receiver<bool>,
    /// Requeues instances (urgent: which digest serves them changed).
    pub requeue: mpsc::UnboundedSender<ObjectRef<DynamicObject>>,
    /// How many instances the shadow plans decide at once.
    pub concurrency: usize,
}

/// Drives the rollout of `driver.kind`'s binding until the task is aborted (the kind's
/// controller stops).
pub(crate) async fn drive(driver: Driver) {
    let Some(binding) = driver.kind.binding.clone() else {
        return;
    };
    let Some(settings) = binding.rollout.clone() else {
        return;
    };
    let name = binding.name.clone();
    let rollouts = driver.ctx.rollouts.clone();
    let api: Api<PluginBinding> = Api::all(driver.client.clone());
    let (bindings, writer) = reflector::store();
    let mut events = reflector::reflector(
        writer,
        watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        ),
    )
    .default_backoff()
    .boxed();
    let location = SourceRef::from_spec(
        &binding.source_namespace,
        &binding.plugin,
        &OciRules::default(),
    )
    .ok()
    .map(|s| s.location());
    let registry = driver.ctx.plugins.registry.clone();
    // The state as this driver last wrote it (while leading) or read it (before).
    let mut state: Option<State> = None;
    let mut counts: Option<InstanceCounts> = None;
    let mut shadow: Option<rollout::Shadow> = None;
    // Whether the stable digest finds an instance Degraded too, by instance and version.
    let mut excused: HashMap<(String, String), bool> = HashMap::new();
    let mut next = tokio::time::Instant::now();
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Err(err)) => {
                    tracing::debug!(binding = %name, error = %err, "watching the binding for its rollout");
                    continue;
                }
                Some(Ok(_)) => {}
            },
            () = tokio::time::sleep_until(next) => {}
        }
        next = tokio::time::Instant::now() + TICK;
        let Some(object) = bindings.get(&ObjectRef::new(&name)) else {
            continue;
        };
        let leads = *driver.gate.borrow();
        let stored = object.status.as_ref().and_then(|s| s.rollout.clone());
        if !leads || state.is_none() {
            // Before leading, the leader's word; on taking over, it is where this one starts.
            let read = stored.clone().unwrap_or_default();
            if state.as_ref() != Some(&read) {
                rollouts.set(&name, read.clone());
            }
            counts = object
                .status
                .as_ref()
                .and_then(|s| s.rollout_instances.clone());
            state = Some(read);
            if !leads {
                continue;
            }
        }
        let current = state.clone().unwrap_or_default();
        let objects = driver.store.state();
        let offered = offered(&driver.ctx, &sources(&driver.ctx, &binding, &objects));
        let mut instances: Vec<Instance> = objects.iter().map(|o| instance(o, &settings)).collect();
        if let (Some(stable), Some(candidate)) = (&current.stable, &current.candidate) {
            excuse(
                &driver,
                &objects,
                &mut instances,
                stable,
                candidate,
                &mut excused,
            )
            .await;
        }
        let abort = object
            .annotations()
            .get(ABORT_ANNOTATION)
            .is_some_and(|digest| current.candidate.as_deref() == Some(digest.as_str()));
        let now = Timestamp::now();
        let inputs = rollout::Inputs {
            policy: &settings.policy,
            offered: offered.as_deref(),
            instances: &instances,
            shadow: shadow.as_ref(),
            abort,
            // A fresh salt for a rollout that starts: which instances move first cannot be
            // foreseen from their names.
            seed: std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                std::time::Instant::now(),
            ),
            now,
        };
        let mut step = rollout::step(&current, &inputs);
        if step.actions.contains(&Action::Shadow)
            && let (Some(stable), Some(candidate)) = (&step.state.stable, &step.state.candidate)
        {
            // The shadow phase is written first: a host killed while planning plans again.
            if step.state != current {
                let counted = count(&step.state, &instances);
                if !write(&api, &name, &step.state, &counted).await {
                    continue;
                }
                rollouts.set(&name, step.state.clone());
                counts = Some(counted);
                state = Some(step.state.clone());
                publish(&driver.ctx, &object, &step.actions).await;
            }
            let started = std::time::Instant::now();
            let planned: Vec<Arc<DynamicObject>> = objects
                .iter()
                .filter(|o| !o.annotations().contains_key(PIN_ANNOTATION))
                .cloned()
                .collect();
            tracing::info!(binding = %name, %candidate, instances = planned.len(), "shadow plans of a new plugin version");
            let found = shadow::plan_all(
                &driver.ctx,
                &driver.kind,
                planned,
                stable,
                candidate,
                driver.concurrency,
            )
            .await;
            let took = started.elapsed();
            rollouts.metrics.shadowed(&name, took);
            tracing::info!(binding = %name, %candidate, took_ms = took.as_millis() as u64, "shadow plans done");
            let before = step.state.clone();
            step = rollout::step(
                &before,
                &rollout::Inputs {
                    shadow: Some(&found),
                    now: Timestamp::now(),
                    ..inputs
                },
            );
            shadow = Some(found);
        }
        let counted = count(&step.state, &instances);
        let state_changed = Some(&step.state) != state.as_ref();
        if state_changed || Some(&counted) != counts.as_ref() {
            if !write(&api, &name, &step.state, &counted).await {
                continue;
            }
            rollouts.set(&name, step.state.clone());
            rollouts.metrics.observe(&name, &step.state, &counted);
            if state_changed {
                ended(&rollouts, &name, state.as_ref(), &step.state, abort);
                publish(
                    &driver.ctx,
                    &object,
                    &step
                        .actions
                        .iter()
                        .filter(|a| **a != Action::Shadow)
                        .cloned()
                        .collect::<Vec<_>>(),
                )
                .await;
                let moves = |s: &State| {
                    (
                        s.phase,
                        s.candidate.clone(),
                        s.stable.clone(),
                        s.threshold.clone(),
                    )
                };
                if state.as_ref().map(moves) != Some(moves(&step.state)) {
                    // Which digest serves an instance may have changed: each looks again (those
                    // that did not move write nothing).
                    for object in objects.iter() {
                        let _ = driver.requeue.send(ObjectRef::from_obj_with(
                            object.as_ref(),
                            driver.kind.resource.clone(),
                        ));
                    }
                }
            }
            counts = Some(counted);
            state = Some(step.state.clone());
        }
        // What instances are on stays loaded, however often the tag moves.
        if let Some(location) = &location {
            let mut held: BTreeSet<String> = step
                .state
                .stable
                .iter()
                .chain(step.state.candidate.iter())
                .cloned()
                .collect();
            held.extend(
                objects
                    .iter()
                    .filter_map(|o| o.annotations().get(PIN_ANNOTATION))
                    .filter(|pin| step.state.known.contains(pin))
                    .cloned(),
            );
            registry.hold(&name, location, held);
        }
        if let Some(recheck) = step.recheck {
            next = next.min(tokio::time::Instant::now() + recheck);
        }
    }
}

/// Marks the moved instances that are unwell on the candidate but that the stable digest finds
/// Degraded too ([`shadow::degraded_on`]): their trouble is not the candidate's. Remembered
/// per instance version, so each is decided once.
async fn excuse(
    driver: &Driver,
    objects: &[Arc<DynamicObject>],
    instances: &mut [Instance],
    stable: &str,
    candidate: &str,
    known: &mut HashMap<(String, String), bool>,
) {
    let mut seen = BTreeSet::new();
    for (object, instance) in objects.iter().zip(instances.iter_mut()) {
        let unwell = instance.degraded.is_some() || !instance.ready;
        if !(instance.current && instance.serving.as_deref() == Some(candidate) && unwell) {
            continue;
        }
        let key = (
            instance.key.clone(),
            object.resource_version().unwrap_or_default(),
        );
        seen.insert(key.clone());
        let excused = match known.get(&key) {
            Some(excused) => *excused,
            None => {
                let parent = Parent::from_instance(object, driver.kind.clone());
                let excused = shadow::degraded_on(&driver.ctx, &parent, stable).await;
                known.insert(key, excused);
                excused
            }
        };
        instance.excused = excused;
    }
    known.retain(|key, _| seen.contains(key));
}

/// Counts a rollout's end in the metrics.
fn ended(rollouts: &Rollouts, binding: &str, before: Option<&State>, after: &State, abort: bool) {
    let was_rolling = before.is_some_and(|s| s.candidate.is_some());
    if !was_rolling || after.candidate.is_some() {
        return;
    }
    let outcome = match after.phase {
        Phase::Stable => "complete",
        Phase::Stopped => "stopped",
        Phase::RolledBack if abort => "aborted",
        Phase::RolledBack => "rolled_back",
        Phase::Shadow | Phase::Canary | Phase::Batches => return,
    };
    rollouts.metrics.ended(binding, outcome);
}

/// The binding's sources: its plugin reference under the rules of each namespace its instances
/// are in (a PluginPolicy may give a namespace registry credentials or signature keys, each a
/// registry entry of its own).
fn sources(ctx: &Context, binding: &Binding, objects: &[Arc<DynamicObject>]) -> Vec<SourceRef> {
    let namespaces: BTreeSet<String> = objects.iter().filter_map(|o| o.namespace()).collect();
    let mut sources: Vec<SourceRef> = namespaces
        .iter()
        .filter_map(|ns| match governing(ctx, ns) {
            Some(Ok(governing)) => SourceRef::from_spec(
                &binding.source_namespace,
                &binding.plugin,
                &governing.rules.source.oci,
            )
            .ok(),
            _ => None,
        })
        .collect();
    sources.sort();
    sources.dedup();
    sources
}

/// The digest the binding's sources offer: what the one that changed last holds (never an App's
/// entry for the same image, whose credentials are another's).
fn offered(ctx: &Context, sources: &[SourceRef]) -> Option<String> {
    let states: Vec<_> = sources
        .iter()
        .map(|s| ctx.plugins.registry.get(s))
        .filter(|state| state.current.is_some())
        .collect();
    // One whose polls answer says what the registry offers now; one serving from the cache
    // while its registry is down (its own credentials, say) may hold an older version.
    let answering: Vec<_> = states.iter().filter(|s| s.poll_failing.is_none()).collect();
    let pool: Vec<_> = match answering.is_empty() {
        true => states.iter().collect(),
        false => answering,
    };
    pool.into_iter()
        .filter_map(|state| Some((state.since?, state.current.clone()?)))
        .max_by_key(|(since, _)| *since)
        .map(|(_, loaded)| loaded.compiled.digest.to_string())
}

/// One instance as the rollout sees it.
fn instance(object: &DynamicObject, settings: &Settings) -> Instance {
    let status = &object.data["status"];
    let serving = status["plugin"]["digest"].as_str().map(str::to_string);
    let current = status["observedGeneration"].as_i64().is_some()
        && status["observedGeneration"].as_i64() == object.metadata.generation;
    let conditions = status["conditions"].as_array().into_iter().flatten();
    let field = |c: &'_ Value, f: &str| c[f].as_str().unwrap_or_default().to_string();
    let rows: Vec<(String, String, String, String)> = conditions
        .map(|c| {
            (
                field(c, "type"),
                field(c, "status"),
                field(c, "reason"),
                field(c, "message"),
            )
        })
        .collect();
    let mut instance = Instance::from_conditions(
        format!(
            "{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        ),
        serving,
        current,
        rows.iter()
            .map(|(t, s, r, m)| (t.as_str(), s.as_str(), r.as_str(), m.as_str())),
    );
    instance.pinned = object.annotations().contains_key(PIN_ANNOTATION);
    instance.selected = settings.selects(object.labels());
    instance
}

/// How many instances are on which digest.
fn count(state: &State, instances: &[Instance]) -> InstanceCounts {
    let mut counts = InstanceCounts::default();
    for i in instances {
        match i.serving.as_deref() {
            _ if i.pinned => counts.pinned += 1,
            Some(d) if state.candidate.as_deref() == Some(d) => counts.candidate += 1,
            Some(d) if state.stable.as_deref() == Some(d) => counts.stable += 1,
            _ => counts.other += 1,
        }
    }
    counts
}

/// Writes the rollout's part of the binding's status; `false` (logged) when it failed.
async fn write(
    api: &Api<PluginBinding>,
    name: &str,
    state: &State,
    counts: &InstanceCounts,
) -> bool {
    let patch = json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
        "status": {"rollout": state, "rolloutInstances": counts},
    });
    match api
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => true,
        Err(err) => {
            tracing::warn!(binding = %name, error = %err, "writing the binding's rollout status");
            false
        }
    }
}

/// Publishes the step's Events on the binding; a failure is logged, never fatal.
async fn publish(ctx: &Context, binding: &PluginBinding, actions: &[Action]) {
    for action in actions {
        let Action::Event {
            warning,
            reason,
            note,
        } = action
        else {
            continue;
        };
        let event = KubeEvent {
            type_: match warning {
                true => EventType::Warning,
                false => EventType::Normal,
            },
            reason: (*reason).to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: "Rollout".into(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&event, &binding.object_ref(&())).await {
            tracing::debug!(binding = %binding.name_any(), error = %err, "publishing a rollout event failed");
        }
    }
}
