//! The executor: performs a [`Decision`] against the API server, in one place. Adoption check,
//! server-side apply, prune, the backup Job and expired Jobs, then the status (only if it
//! changed), then the Events; a write the API server refuses as invalid, or an object the App
//! does not own, becomes the decision's failure (in the status) instead of an error loop.

use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::batch::v1::Job,
    apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    runtime::events::{Event as KubeEvent, EventType},
};
use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use wasmop_core::{
    Decision, Event, Failure, ObjectKey, Requeue, Snapshot,
    decide::{self, NoPlugin},
    guard::PlanPolicy,
    object::PluginObject,
    observed::{ObservedObject, labelled_for},
    stamp::AppRef,
};

use super::{Context, Error, Next, prepare::Prepared, status};
use crate::{
    controller::kinds::api_resource,
    parent::Parent,
    write::{FIELD_MANAGER, is_create_entry as is_create},
};

type Labels = Vec<(&'static str, String)>;

/// The reconcile loop's metrics, named after controller-runtime's (`wasmop_` prefixed).
#[derive(Clone)]
pub struct ReconcileMetrics {
    reconciles: Family<Labels, Counter>,
    duration: Histogram,
    writes: Family<Labels, Counter>,
    in_flight: Gauge,
    /// Reconcile requests waiting for a slot, by priority.
    pub queued: crate::controller::priority::Depth,
    /// The size of the caches the reconciles read.
    pub cache: crate::controller::cache::CacheMetrics,
}

impl ReconcileMetrics {
    /// Creates the families and registers them in `registry` (prefix it with `wasmop`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            duration: Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            writes: Family::default(),
            in_flight: Gauge::default(),
            queued: crate::controller::priority::Depth::default(),
            cache: crate::controller::cache::CacheMetrics::register(registry),
        };
        registry.register(
            "reconcile_queued",
            "Reconcile requests waiting for a slot, by priority (urgent: a parent's own change, \
             its plugin's or its policy's; routine: a change to its objects)",
            metrics.queued.family(),
        );
        registry.register(
            "reconcile",
            "Reconciles by result (success, backoff: the decision was a failure, error) and the \
             parent's kind (App.wasmop.dev, or a bound kind as <Kind>.<group>)",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_time_seconds",
            "Duration of one reconcile, from the policy lookup to the status write",
            metrics.duration.clone(),
        );
        registry.register(
            "api_writes",
            "Writes to the API server for Apps, by verb (create, apply, patch: a create's fields \
             handed over to apply, delete, status) and kind",
            metrics.writes.clone(),
        );
        registry.register(
            "reconcile_active",
            "Reconciles in flight",
            metrics.in_flight.clone(),
        );
        metrics
    }

    /// Metrics counted but exported nowhere (tests).
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    /// Counts a reconcile of a parent of kind mark `kind` that ended with `result`.
    pub fn reconciled(&self, result: &'static str, kind: &str, started: Instant) {
        self.reconciles
            .get_or_create(&vec![
                ("result", result.to_string()),
                ("kind", kind.to_string()),
            ])
            .inc();
        self.duration.observe(started.elapsed().as_secs_f64());
    }

    /// Marks a reconcile in flight until the guard drops.
    pub fn active(&self) -> impl Drop + use<> {
        struct Active(Gauge);
        impl Drop for Active {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.in_flight.inc();
        Active(self.in_flight.clone())
    }

    fn wrote(&self, verb: &'static str, kind: &str) {
        self.writes
            .get_or_create(&vec![
                ("verb", verb.to_string()),
                ("kind", kind.to_string()),
            ])
            .inc();
    }
}

/// Decides the reconcile `prepared` describes and performs it.
pub async fn decide_and_execute(
    app: &Parent,
    ctx: &Context,
    prepared: Prepared,
) -> Result<Next, Error> {
    let Some((snapshot, decision, rules)) = decide_prepared(app, prepared).await? else {
        return Ok(Next::After(super::prepare::POLICY_WAIT));
    };
    execute(app, ctx, &snapshot, decision, rules.as_ref()).await
}

/// What the decision core decides of `prepared`, writing nothing (`None`: the policy is not
/// known yet): what [`decide_and_execute`] performs, and what a rollout's shadow plans compare.
pub async fn decide_prepared(
    app: &Parent,
    prepared: Prepared,
) -> Result<Option<(Snapshot, Decision, Option<PlanPolicy>)>, Error> {
    Ok(Some(match prepared {
        Prepared::PolicyUnknown => return Ok(None),
        Prepared::Holding(snapshot) => {
            let decision = decide::decide(&snapshot, &mut NoPlugin, &NoPlugin);
            (snapshot, decision, None)
        }
        Prepared::ObserveFailed(snapshot, failure) => {
            let decision = decide::failed(&snapshot, failure);
            (snapshot, decision, None)
        }
        Prepared::Serving {
            snapshot,
            mut calls,
            check,
        } => {
            // The plugin calls block (each waits for its sandbox thread): decide on a blocking
            // thread so the runtime's workers stay free.
            tokio::task::spawn_blocking(move || {
                let decision = decide::decide(&snapshot, calls.as_mut(), check.as_ref());
                (snapshot, decision, Some(check.policy))
            })
            .await
            .map_err(|err| Error::Internal {
                app: app.describe(),
                message: format!("the decision did not finish: {err}"),
            })?
        }
    }))
}

/// Why writing a decision's objects stopped.
enum WriteError {
    /// The App's author must fix something: the status says what.
    Refused(Failure),
    /// The API call failed; retried with backoff.
    Kube { what: String, source: kube::Error },
    /// An object changed between the host's look at it and its write (a precondition failed):
    /// its watch event is on the way, and a reconcile soon reads it again. Not a failure.
    Changed,
}

/// How soon a reconcile whose write found its object changed looks again...
const CHANGED_RETRY: std::time::Duration = std::time::Duration::from_millis(200);
/// ...so many times in a row; then with the failures' backoff.
const CHANGED_RETRIES: u32 = 5;

/// Performs `decision`; returns when to look again.
pub async fn execute(
    app: &Parent,
    ctx: &Context,
    snapshot: &Snapshot,
    decision: Decision,
    rules: Option<&PlanPolicy>,
) -> Result<Next, Error> {
    if decision.finalizer && !app.app.finalizers().iter().any(|f| f == super::FINALIZER) {
        match add_finalizer(app, ctx).await {
            Ok(()) => {}
            // The parent changed since the cache saw it: its watch event is on the way, and
            // the retry reads the finalizers again. Not a failure (no backoff, no warning).
            Err(kube::Error::Api(status)) if status.code == 409 => {
                return Ok(Next::After(CHANGED_RETRY));
            }
            Err(source) => {
                return Err(Error::Kube {
                    app: app.describe(),
                    what: "adding the finalizer".into(),
                    source,
                });
            }
        }
    }
    // The claims the host knows are the App's (labelled with it, from the claim cache).
    let claims = snapshot
        .observed
        .iter()
        .filter(|o| o.api_version == "v1" && o.kind == "PersistentVolumeClaim")
        .map(|o| o.name.as_str())
        .collect();
    let writer = Writer {
        app,
        parent: &snapshot.app,
        ctx,
        rules,
        claims,
    };
    let written = write_objects(&writer, snapshot, &decision).await;
    if !matches!(written, Err(WriteError::Changed)) {
        ctx.changes.succeeded(&app.key());
    }
    let decision = match written {
        Ok(()) => decision,
        Err(WriteError::Refused(failure)) => decide::failed(snapshot, failure),
        Err(WriteError::Kube { what, source }) => {
            return Err(Error::Kube {
                app: app.describe(),
                what,
                source,
            });
        }
        Err(WriteError::Changed) => {
            let key = app.key();
            if ctx.changes.count(&key) <= CHANGED_RETRIES {
                return Ok(Next::After(CHANGED_RETRY));
            }
            tracing::warn!(
                parent = %key,
                "objects keep changing between the host's look and its write; is a cache behind?"
            );
            let after = ctx.failures.failed(&key);
            ctx.health
                .reconcile_due(key, std::time::Instant::now() + after);
            return Ok(Next::After(after));
        }
    };
    let wrote = status::write(&ctx.client, app, &decision.status)
        .await
        .map_err(|source| Error::Kube {
            app: app.describe(),
            what: "writing status".into(),
            source,
        })?;
    if wrote {
        ctx.metrics.wrote("status", &app.kind.resource.kind);
    }
    for event in &decision.events {
        publish(ctx, app, event).await;
    }
    let key = app.key();
    let after = match decision.requeue {
        Requeue::Backoff => ctx.failures.failed(&key),
        Requeue::After(after) => {
            ctx.failures.succeeded(&key);
            after
        }
    };
    ctx.health
        .reconcile_due(key, std::time::Instant::now() + after);
    Ok(Next::After(after))
}

/// Adds the cleanup finalizer to `app` before anything the decision writes, so that deleting
/// it waits for its cleanup. The patch carries the `resourceVersion` it was computed from, so
/// a concurrent change fails it (409) rather than overwriting others' finalizers.
async fn add_finalizer(app: &Parent, ctx: &Context) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &app.namespace(), &app.kind.resource);
    let mut finalizers = app.app.finalizers().to_vec();
    finalizers.push(super::FINALIZER.to_string());
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": app.app.resource_version()},
    });
    api.patch(
        &app.app.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// How the API server is reached for `key`'s kind: one of the policy's kinds (the guard passed
/// every planned object and prunes only such kinds, so every kind a decision names is there).
fn api_for(w: &Writer<'_>, key: &ObjectKey) -> Result<Api<DynamicObject>, WriteError> {
    let Some(kind) = w
        .rules
        .and_then(|rules| rules.kind(&key.api_version, &key.kind))
    else {
        return Err(WriteError::Refused(Failure::new(
            wasmop_core::conditions::reason::PLAN_REJECTED,
            format!("{key}: {} is not a kind the policy allows", key.api_version),
        )));
    };
    Ok(Api::namespaced_with(
        w.ctx.client.clone(),
        &w.app.namespace(),
        &api_resource(kind),
    ))
}

/// Requests one reconcile has in flight at once (creates, applies): with the
/// reconciles in flight, what the host asks of the API server at a time.
const IN_FLIGHT: usize = 4;

/// What every write of one decision needs.
struct Writer<'a> {
    app: &'a Parent,
    /// The App's identity: the parent its objects are stamped with.
    parent: &'a AppRef,
    ctx: &'a Context,
    /// The namespace's rules (kinds), `None` for a decision without a plugin (no writes).
    rules: Option<&'a PlanPolicy>,
    /// Names of the claims labelled with the App.
    claims: std::collections::BTreeSet<&'a str>,
}

async fn write_objects(
    w: &Writer<'_>,
    snapshot: &Snapshot,
    decision: &Decision,
) -> Result<(), WriteError> {
    claims_of_statefulsets(w, decision).await?;
    // Wave by wave as the decision orders them, each wave in parallel. (Collected first: a
    // stream over a closure's futures trips the compiler's proof that the reconcile future is
    // Send.)
    for wave in decision.waves() {
        let writes: Vec<_> = wave
            .iter()
            .map(|object| {
                let key = key_of(object);
                let adopt = decision.adopt.contains(&key);
                // The object the decision found the App's, by uid: the apply must reach that
                // one, not one made since under the same name.
                let observed = snapshot
                    .observed
                    .iter()
                    .find(|o| {
                        (o.api_version.as_str(), o.kind.as_str(), o.name.as_str())
                            == (
                                key.api_version.as_str(),
                                key.kind.as_str(),
                                key.name.as_str(),
                            )
                    })
                    .filter(|_| !adopt);
                let uid = observed
                    .and_then(|o| o.json.pointer("/metadata/uid"))
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string);
                let create_owned = observed.is_some_and(|o| o.create_owned);
                write_object(w, key, object, adopt, uid, create_owned)
            })
            .collect();
        futures::stream::iter(writes)
            .buffered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
    }
    for key in &decision.prune {
        delete(w, key, "pruning").await?;
    }
    if let Some((slot, job)) = &decision.backup_start {
        create_backup(w, slot, job).await?;
    }
    for key in &decision.backup_expire {
        delete(w, key, "expiring backup").await?;
    }
    Ok(())
}

fn key_of(object: &PluginObject) -> ObjectKey {
    ObjectKey {
        api_version: object.api_version().to_string(),
        kind: object.kind().to_string(),
        name: object.name().to_string(),
    }
}

/// Writes one planned object. One the App does not manage yet (`adopt`) is created, which
/// fails if the object exists: a new App's objects cost one request each, not a read and an
/// apply. Ours means controlled by this App (owner reference with its uid): a label anyone in
/// the namespace (or a plugin) can write proves nothing; claims carry no owner reference (they
/// outlive the App), so for them the label is all there is. An existing object is read and
/// refused unless it is the App's; then, as every object the App manages, it is applied, on
/// condition of the uid the host checked (`uid`, or the one just read). A refused object stops
/// the decision, but objects created before it in the same or an earlier wave stay (they are
/// the App's, and pruned or collected with it as any other).
///
/// The host's create leaves the object's fields to an `Update` entry of its field manager in
/// `managedFields`, and server-side apply never removes a field only another entry owns: such
/// an object (`create_owned`, as the cache has it) has that entry handed over to the apply
/// entry ([`hand_over`]) before it is applied, so a field the plan dropped goes; a failure
/// leaves it unapplied, for the next reconcile to do again. One the cache did not show so (a
/// cache behind) is found by the apply's answer, handed over and applied once more.
async fn write_object(
    w: &Writer<'_>,
    key: ObjectKey,
    object: &PluginObject,
    adopt: bool,
    uid: Option<String>,
    create_owned: bool,
) -> Result<(), WriteError> {
    let api = api_for(w, &key)?;
    let uid = if adopt {
        let existing = match create(w, &api, &key, object).await? {
            Created::New => return Ok(()),
            Created::Exists(existing) => existing,
        };
        if !is_managed_by(&existing, &key, w.parent) {
            return Err(WriteError::Refused(Failure::new(
                wasmop_core::conditions::reason::PLAN_REJECTED,
                format!(
                    "plan rejected: {key} already exists and is not managed by this {}",
                    w.parent.kind
                ),
            )));
        }
        hand_over(w, &api, &key, &existing).await?;
        existing.uid()
    } else {
        if create_owned {
            let existing = read(&api, &key).await?.ok_or(WriteError::Changed)?;
            if uid.is_some() && existing.uid() != uid {
                return Err(WriteError::Changed);
            }
            hand_over(w, &api, &key, &existing).await?;
        }
        uid
    };
    let applied = apply(w, &api, &key, object, uid.as_deref()).await?;
    if hand_over(w, &api, &key, &applied).await? {
        apply(w, &api, &key, object, uid.as_deref()).await?;
    }
    Ok(())
}

/// What a create found.
enum Created {
    /// The object is new, as planned.
    New,
    /// An object of that name exists: as the API server has it now.
    Exists(Box<DynamicObject>),
}

/// Creates `object` as the host's field manager; reads the object that is in the way if there
/// is one. A create is checked by the API server as an apply is (admission, validation), so a
/// refusal reads the same.
async fn create(
    w: &Writer<'_>,
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    object: &PluginObject,
) -> Result<Created, WriteError> {
    let body: DynamicObject = serde_json::from_value(object.to_value()).map_err(|err| {
        WriteError::Refused(Failure::new(
            wasmop_core::conditions::reason::PLAN_REJECTED,
            format!("{key}: not a Kubernetes object: {err}"),
        ))
    })?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match api.create(&params, &body).await {
        Ok(_) => {
            w.ctx.metrics.wrote("create", &key.kind);
            Ok(Created::New)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            match api.get_opt(&key.name).await {
                Ok(Some(existing)) => Ok(Created::Exists(Box::new(existing))),
                // Gone since (a deletion finished): a reconcile soon creates it.
                Ok(None) => Err(WriteError::Changed),
                Err(source) => Err(WriteError::Kube {
                    what: format!("reading {key}, which exists"),
                    source,
                }),
            }
        }
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
            Err(WriteError::Refused(Failure::new(
                wasmop_core::conditions::reason::APPLY_REJECTED,
                format!("creating {key}: {}", status.message),
            )))
        }
        Err(source) => Err(WriteError::Kube {
            what: format!("creating {key}"),
            source,
        }),
    }
}

/// `key` as the API server has it now, if it exists.
async fn read(
    api: &Api<DynamicObject>,
    key: &ObjectKey,
) -> Result<Option<DynamicObject>, WriteError> {
    api.get_opt(&key.name)
        .await
        .map_err(|source| WriteError::Kube {
            what: format!("reading {key}"),
            source,
        })
}

/// How many times a hand-over is tried against an object its controller keeps writing (a
/// Deployment's revision and status, just after a change).
const HAND_OVER_ATTEMPTS: usize = 4;

/// Hands the fields of the host's create (its `Update` entry in `managedFields`) over to its
/// server-side apply entry, as kubectl's client-side to server-side apply upgrade does
/// (`k8s.io/client-go/util/csaupgrade`): a field only the create's entry owned would survive
/// every later apply that leaves it out. One patch of `managedFields`, on condition of the
/// object's `resourceVersion`, read again and tried again when the object was written in
/// between (still the object of the same uid); whether there was such an entry to hand over.
async fn hand_over(
    w: &Writer<'_>,
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    existing: &DynamicObject,
) -> Result<bool, WriteError> {
    let mut current = std::borrow::Cow::Borrowed(existing);
    for _ in 0..HAND_OVER_ATTEMPTS {
        let Some(entries) = handed_over(current.managed_fields()) else {
            return Ok(false);
        };
        let patch = serde_json::json!({
            "metadata": {
                "managedFields": entries,
                "resourceVersion": current.resource_version(),
            },
        });
        match api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                w.ctx.metrics.wrote("patch", &key.kind);
                return Ok(true);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let again = read(api, key).await?.ok_or(WriteError::Changed)?;
                if again.uid() != existing.uid() {
                    return Err(WriteError::Changed);
                }
                current = std::borrow::Cow::Owned(again);
            }
            Err(source) => {
                return Err(WriteError::Kube {
                    what: format!("handing the fields of {key} over to server-side apply"),
                    source,
                });
            }
        }
    }
    Err(WriteError::Changed)
}

/// `entries` with the host's create entries merged into its apply entry (made from the first
/// of them if there is none), or `None` if there is no create entry. The create's entry also
/// holds the fields the API server defaulted on that create; the apply entry owns them from
/// then on, which only matters to another server-side applier setting one of them (a
/// conflict, which the host's forced apply wins anyway).
fn handed_over(entries: &[ManagedFieldsEntry]) -> Option<Vec<ManagedFieldsEntry>> {
    let is_apply = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref().is_none_or(str::is_empty)
    };
    if !entries.iter().any(is_create) {
        return None;
    }
    let (created, mut kept): (Vec<_>, Vec<_>) = entries.iter().cloned().partition(is_create);
    let mut created = created.into_iter();
    let first = created.next()?;
    let index = match kept.iter().position(is_apply) {
        Some(index) => index,
        None => {
            kept.push(ManagedFieldsEntry {
                operation: Some("Apply".into()),
                ..first.clone()
            });
            kept.len() - 1
        }
    };
    let apply = &mut kept[index];
    let mut fields = apply
        .fields_v1
        .take()
        .map_or_else(|| serde_json::json!({}), |f| f.0);
    for entry in std::iter::once(first).chain(created) {
        if let Some(more) = entry.fields_v1 {
            union(&mut fields, more.0);
        }
    }
    apply.fields_v1 = Some(FieldsV1(fields));
    Some(kept)
}

/// Adds the field set `more` to `fields` (both in the `FieldsV1` trie format: objects keyed
/// by `f:`, `k:`, `v:`, `i:` and `.`, empty objects at the leaves).
fn union(fields: &mut serde_json::Value, more: serde_json::Value) {
    match (fields, more) {
        (serde_json::Value::Object(fields), serde_json::Value::Object(more)) => {
            for (key, value) in more {
                match fields.get_mut(&key) {
                    Some(existing) => union(existing, value),
                    None => {
                        fields.insert(key, value);
                    }
                }
            }
        }
        (fields, more) => *fields = more,
    }
}

/// Refuses a decision whose StatefulSets would take over a claim that is not the App's. The
/// StatefulSet controller names its claims `<template>-<set>-<ordinal>` and adopts an existing
/// claim of that name, whoever made it, so a plan could reach another App's data by naming a
/// set and template that spell one of its claims (`data-billing-db-0` is also template
/// `data-billing` of a set `db`). Only names not already known as the App's claims cost a read,
/// and only for StatefulSets being applied (a steady App reads nothing); the decision core has
/// bounded how many there are ([`wasmop_core::claims`]).
async fn claims_of_statefulsets(w: &Writer<'_>, decision: &Decision) -> Result<(), WriteError> {
    use wasmop_core::claims::StatefulSetClaims;
    let names: Vec<(String, String)> = decision
        .apply
        .iter()
        .filter(|o| o.api_version() == "apps/v1" && o.kind() == "StatefulSet")
        .flat_map(|set| {
            let claims = StatefulSetClaims::of(set);
            claims
                .names()
                .map(|claim| (set.name().to_string(), claim))
                .collect::<Vec<_>>()
        })
        .filter(|(_, claim)| !w.claims.contains(claim.as_str()))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(w.ctx.client.clone(), &w.app.namespace());
    let (app, mark) = (&w.parent.name, w.parent.kind_mark());
    let reads: Vec<_> = names
        .iter()
        .map(|(set, claim)| {
            let api = api.clone();
            async move { (set, claim, api.get_opt(claim).await) }
        })
        .collect();
    let mut reads = futures::stream::iter(reads).buffered(IN_FLIGHT);
    while let Some((set, claim, read)) = reads.next().await {
        match read {
            Ok(None) => {}
            Ok(Some(existing))
                if labelled_for(
                    |key| existing.labels().get(key).map(String::as_str),
                    app,
                    &mark,
                ) => {}
            Ok(Some(_)) => {
                return Err(WriteError::Refused(Failure::new(
                    wasmop_core::conditions::reason::PLAN_REJECTED,
                    format!(
                        "plan rejected: StatefulSet/{set} would take over \
                         PersistentVolumeClaim/{claim}, which exists and is not this {}'s \
                         (wasmop/claimSource)",
                        w.parent.kind
                    ),
                )));
            }
            Err(source) => {
                return Err(WriteError::Kube {
                    what: format!("reading PersistentVolumeClaim/{claim}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Whether `existing` (the object `key`) is `app`'s to update, by the decision core's
/// adoption rule ([`ObservedObject::is_managed_by`]).
pub fn is_managed_by(existing: &DynamicObject, key: &ObjectKey, app: &AppRef) -> bool {
    let Ok(mut json) = serde_json::to_value(existing) else {
        return false;
    };
    if let Some(map) = json.as_object_mut() {
        map.insert("apiVersion".into(), key.api_version.clone().into());
        map.insert("kind".into(), key.kind.clone().into());
    }
    ObservedObject::from_value(json, &app.uid).is_some_and(|o| o.is_managed_by(app))
}

/// Server-side applies `object` as the host's field manager; with `uid`, on condition that the
/// object is still the one of that uid (the API server refuses the apply otherwise, and one
/// that has gone since is not made again). Returns the object as applied.
async fn apply(
    w: &Writer<'_>,
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    object: &PluginObject,
    uid: Option<&str>,
) -> Result<DynamicObject, WriteError> {
    let mut object = object.clone();
    if let Some(uid) = uid {
        object.metadata_mut(|metadata| {
            metadata.insert("uid".into(), serde_json::Value::String(uid.to_string()));
        });
    }
    match api
        .patch(
            &key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
    {
        Ok(applied) => {
            w.ctx.metrics.wrote("apply", &key.kind);
            Ok(applied)
        }
        // Not the object of the uid the host checked: gone (409), or made again since (422, the
        // uid being immutable).
        Err(kube::Error::Api(status)) if status.code == 409 => Err(WriteError::Changed),
        Err(kube::Error::Api(status))
            if uid.is_some() && status.code == 422 && status.message.contains("metadata.uid") =>
        {
            Err(WriteError::Changed)
        }
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
            Err(WriteError::Refused(Failure::new(
                wasmop_core::conditions::reason::APPLY_REJECTED,
                format!("applying {key}: {}", status.message),
            )))
        }
        Err(source) => Err(WriteError::Kube {
            what: format!("applying {key}"),
            source,
        }),
    }
}

async fn delete(w: &Writer<'_>, key: &ObjectKey, what: &str) -> Result<(), WriteError> {
    let api = api_for(w, key)?;
    match api.delete(&key.name, &DeleteParams::background()).await {
        Ok(_) => {
            w.ctx.metrics.wrote("delete", &key.kind);
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(WriteError::Kube {
            what: format!("{what} {key}"),
            source,
        }),
    }
}

/// Creates the backup Job of `slot`; one that already exists (the API server's 409) is the same
/// slot's, left as it is, when the App owns it. Job names are `<app>-backup-<slot>` and a plugin
/// picks its slots, so App `db`'s slot `x-backup-y` names the Job of App `db-backup-x`'s slot
/// `y`: a Job of that name the App does not control (its controller owner reference) is
/// refused, not taken for its own backup.
async fn create_backup(w: &Writer<'_>, slot: &str, job: &PluginObject) -> Result<(), WriteError> {
    let what = || format!("starting the backup Job of slot {slot}");
    let job: Job = serde_json::to_value(job)
        .and_then(serde_json::from_value)
        .map_err(|err| {
            WriteError::Refused(Failure::new(
                wasmop_core::conditions::reason::PLAN_REJECTED,
                format!("backup of slot {slot}: the Job is not a valid batch/v1 Job: {err}"),
            ))
        })?;
    let api: Api<Job> = Api::namespaced(w.ctx.client.clone(), &w.app.namespace());
    match api.create(&PostParams::default(), &job).await {
        Ok(_) => {
            w.ctx.metrics.wrote("create", "Job");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let name = job.metadata.name.clone().unwrap_or_default();
            let existing = api.get(&name).await.map_err(|source| WriteError::Kube {
                what: what(),
                source,
            })?;
            let uid = w.app.app.metadata.uid.as_deref();
            let ours = existing
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && Some(r.uid.as_str()) == uid);
            if ours {
                Ok(())
            } else {
                Err(WriteError::Refused(Failure::new(
                    wasmop_core::conditions::reason::PLAN_REJECTED,
                    format!(
                        "backup of slot {slot}: Job {name} already exists and is not this {}'s",
                        w.parent.kind
                    ),
                )))
            }
        }
        Err(source) => Err(WriteError::Kube {
            what: what(),
            source,
        }),
    }
}

/// Publishes `event` on `app`; a failure is logged, never fatal.
pub async fn publish(ctx: &Context, app: &Parent, event: &Event) {
    let event = KubeEvent {
        type_: if event.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: event.reason.clone(),
        note: Some(event.note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &app.object_ref()).await {
        tracing::debug!(parent = %app.key(), error = %err, "publishing an event failed");
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use prometheus_client::{encoding::text::encode, registry::Registry};
    use serde_json::json;

    use super::{ReconcileMetrics, handed_over};

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: serde_json::Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(str::to_string),
            time: None,
        }
    }

    /// A create's entry becomes the apply entry; with an apply entry beside it, the two field
    /// sets are one; another manager's entries and the host's status entry are left alone.
    #[test]
    fn a_creates_fields_are_handed_over_to_the_apply_entry() {
        let created = entry(
            "wasmop",
            "Update",
            None,
            json!({"f:data": {"f:a": {}, "f:b": {}}}),
        );
        let theirs = entry(
            "kubectl-edit",
            "Update",
            None,
            json!({"f:data": {"f:c": {}}}),
        );
        let status = entry("wasmop", "Update", Some("status"), json!({"f:status": {}}));
        assert_eq!(handed_over(&[theirs.clone(), status.clone()]), None);

        let alone = handed_over(&[created.clone(), theirs.clone()]).expect("a create entry");
        assert_eq!(
            alone,
            [
                theirs.clone(),
                entry(
                    "wasmop",
                    "Apply",
                    None,
                    json!({"f:data": {"f:a": {}, "f:b": {}}})
                )
            ]
        );

        let applied = entry(
            "wasmop",
            "Apply",
            None,
            json!({"f:data": {"f:a": {}}, "f:metadata": {}}),
        );
        let merged = handed_over(&[applied, created, status.clone()]).expect("a create entry");
        assert_eq!(
            merged,
            [
                entry(
                    "wasmop",
                    "Apply",
                    None,
                    json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {}})
                ),
                status
            ]
        );
    }

    use crate::plugin::metrics::PluginMetrics;

    /// Every `wasmop_*` metric the shipped dashboard and the README name is one the host
    /// exports: renaming a metric fails here, not on someone's empty panel.
    #[test]
    fn the_dashboard_and_the_readme_name_only_exported_metrics() {
        let mut registry = Registry::with_prefix("wasmop");
        // A family shows in the text only once it has a series: record one of each.
        let reconcile = ReconcileMetrics::register(&mut registry);
        reconcile.reconciled("success", "App.wasmop.dev", std::time::Instant::now());
        reconcile.wrote("apply", "ConfigMap");
        reconcile
            .queued
            .family()
            .get_or_create(&vec![("priority", "urgent")])
            .set(0);
        let _cache = crate::controller::cache::Cache::new(&reconcile.cache, "configmaps");
        let rollouts = crate::rollout::RolloutMetrics::register(&mut registry);
        rollouts.observe(
            "b",
            &wasmop_core::rollout::State::default(),
            &crate::rollout::InstanceCounts::default(),
        );
        rollouts.ended("b", "complete");
        rollouts.shadowed("b", std::time::Duration::from_millis(5));
        let plugin = PluginMetrics::register(&mut registry);
        plugin.load("loaded", "");
        plugin.compiled(0.1, false);
        plugin.call("spec-diff", 0.001, Some("PluginTrapped"));
        let health = crate::api_health::ApiHealth::new(
            std::time::Duration::from_secs(10),
            std::time::Duration::from_secs(300),
        );
        health.register_metrics(&mut registry);
        health.count_relist_for_tests("configmaps");
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        let exported: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        for file in ["deploy/monitoring/wasmop-dashboard.json", "README.md"] {
            let body = std::fs::read_to_string(format!("{root}/{file}")).expect(file);
            let mut named = 0;
            for word in body.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let Some(rest) = word.strip_prefix("wasmop_") else {
                    continue;
                };
                if rest.is_empty()
                    || rest == "sdk"
                    || rest == "host"
                    || rest == "core"
                    || rest == "e2e"
                {
                    continue;
                }
                let base = ["_bucket", "_count", "_sum", "_total"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(word);
                assert!(
                    exported.contains(&base),
                    "{file} names {word}, which is not exported: {exported:?}"
                );
                named += 1;
            }
            assert!(named > 0, "{file} names no metric");
        }
    }
}
