//! Serves the PluginBindings: watches them and, after each change of one (its spec, labels,
//! finalizers or deletion; not its status, which hosts write) and every [`RECHECK`] besides (a
//! CRD or the host's RBAC can change without one), checks each: its kind bindable and bound
//! once ([`super::check`]), served by the API server as a namespaced kind with a status
//! subresource whose CRD opts in (discovery), and the host allowed to serve it
//! (SelfSubjectAccessReviews for every verb it uses, in every namespace scope it watches). The
//! kinds of the bindings that pass go to the controllers ([`crate::controller::bound`]); each
//! binding gets its status (`Valid`, the kind's resource, its instance count) and, while it is
//! in force, a finalizer that holds its deletion until no instance of its kind is left.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, GroupVersionKind, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde_json::json;

use super::{
    FINALIZER, PluginBinding, PluginBindingStatus,
    check::{self, Refusal},
};
use crate::{
    controller::bound::Bound,
    parent::{Binding, ParentKind},
    policy::view::condition,
    write::FIELD_MANAGER,
};

/// The reason of a check that could not be made (the API server unreachable, an RBAC review
/// that failed to evaluate): the binding is left as it was.
const CHECK_FAILED: &str = "CheckFailed";

/// Most kinds one host serves: each is a controller, a watch and a cache of its own.
pub const MAX_BOUND_KINDS: usize = 64;

/// How often every binding is checked again without a change of its own.
pub const RECHECK: Duration = Duration::from_secs(15);

/// How long the answer of the API server on what the host may do with a kind is reused: the
/// reviews are one request per verb and namespace scope, too many to repeat on every change.
const ACCESS_RECHECK: Duration = Duration::from_secs(45);

/// The category a CRD must carry for its kind to be bound (`wasmop plugin crd` writes it): a
/// kind of another operator, which the host would otherwise finalize and write the status of,
/// is never bound by mistake.
pub const CATEGORY: &str = "wasmop";

/// What the host does with an instance of a bound kind, as RBAC verbs on its resource or a
/// subresource: read and watch it, patch its finalizers and status, and set owner references
/// that block its deletion (`update` on `/finalizers`, which the OwnerReferencesPermission
/// admission plugin asks for).
const ACCESS: [(&str, Option<&str>); 6] = [
    ("get", None),
    ("list", None),
    ("watch", None),
    ("patch", None),
    ("patch", Some("status")),
    ("update", Some("finalizers")),
];

/// Starts serving the bindings (those `selector`'s labels select, if given; which binding
/// serves a kind is decided among all of them); sends the kinds to serve on `tx`, kept current.
/// `host_namespace` is the default `sourceNamespace`; `scopes` the namespaces the host watches
/// (`None`: all). Until `leading` turns true the host only watches: it sends the kinds of the
/// bindings the leader found valid ([`Serve::observe`]), so that a warm standby fills their
/// caches and loads their plugins, and writes nothing. `listed` turns true once the first kinds
/// are sent (the replica's warm-up waits for them).
pub(crate) fn start(
    client: Client,
    host_namespace: String,
    scopes: Vec<Option<String>>,
    selector: BTreeMap<String, String>,
    tx: tokio::sync::watch::Sender<Bound>,
    listed: tokio::sync::watch::Sender<bool>,
    mut leading: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (store, writer) = reflector::store();
        let api: Api<PluginBinding> = Api::all(client.clone());
        let mut events = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .boxed();
        let mut serve = Serve {
            client,
            host_namespace,
            scopes,
            selector,
            strikes: HashMap::new(),
            access: HashMap::new(),
        };
        // Nothing is served before the first listing: a binding not listed yet is no reason to
        // stop serving its kind. The watch is polled meanwhile: it is what fills the store.
        loop {
            tokio::select! {
                ready = store.wait_until_ready() => match ready {
                    Ok(()) => break,
                    Err(_) => return,
                },
                event = events.next() => match event {
                    None => return,
                    Some(Err(err)) => tracing::warn!(error = %err, "watching PluginBindings (can the host list them?)"),
                    Some(Ok(_)) => {}
                },
            }
        }
        let mut bound = Bound::new();
        // Whether `bound` is what a pass found (rather than what `observe` took on trust).
        let mut checked = false;
        loop {
            let bindings = store.state();
            let seen = fingerprint(&bindings);
            let leads = *leading.borrow_and_update();
            bound = match leads {
                // What `observe` found is not a verdict: the first pass gives none of it the
                // grace a kind in force gets (a refusal stops it at once).
                true => {
                    let last = if checked { bound } else { Bound::new() };
                    checked = true;
                    serve.pass(&bindings, &last).await
                }
                false => serve.observe(&bindings).await,
            };
            tx.send_if_modified(|current| {
                let changed = *current != bound;
                current.clone_from(&bound);
                changed
            });
            listed.send_if_modified(|listed| !std::mem::replace(listed, true));
            // The next change that matters, or the recheck; a burst of changes is one pass.
            // Status writes (ours, other hosts') change nothing that matters: two hosts that
            // judge a binding differently cannot wake each other without end.
            let next = tokio::time::sleep(RECHECK);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        None => return,
                        Some(Err(err)) => tracing::warn!(error = %err, "watching PluginBindings"),
                        Some(Ok(_)) => {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            while let Some(Some(_)) = futures::FutureExt::now_or_never(events.next()) {}
                            if fingerprint(&store.state()) != seen {
                                break;
                            }
                        }
                    },
                    () = &mut next => break,
                    // Leading now: check and serve at once, not at the next recheck.
                    Ok(()) = async { leading.wait_for(|leading| *leading).await.map(drop) }, if !leads => break,
                }
            }
        }
    })
}

/// What about the bindings calls for a pass: each one's name, generation, labels, finalizers
/// and deletion, not its status.
fn fingerprint(bindings: &[Arc<PluginBinding>]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut rows: Vec<_> = bindings
        .iter()
        .map(|b| {
            (
                b.name_any(),
                b.metadata.generation,
                b.labels().clone(),
                b.finalizers().to_vec(),
                b.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect();
    rows.sort();
    rows.hash(&mut hasher);
    hasher.finish()
}

struct Serve {
    client: Client,
    host_namespace: String,
    scopes: Vec<Option<String>>,
    selector: BTreeMap<String, String>,
    /// Bindings in force whose last check refused them once: a single refusal (a CRD update
    /// or an API server whose caches lag answering 404 for a moment) stops no controller.
    strikes: HashMap<String, u32>,
    /// When the API server last said the host may do all it does with each resource (group,
    /// plural).
    access: HashMap<(String, String), (Instant, Result<(), Refusal>)>,
}

impl Serve {
    /// Checks every binding this host serves, keeps its finalizer and writes its status;
    /// returns the kinds to serve. A binding whose check could not be made (the API server
    /// unreachable) stays as it was in `last`: an outage stops no controller and rewrites no
    /// status.
    async fn pass(&mut self, all: &[Arc<PluginBinding>], last: &Bound) -> Bound {
        // Which binding serves a kind is decided among all, selected or not: two hosts that
        // serve different bindings never both take a kind.
        let winners = check::winners(all.iter().map(AsRef::as_ref));
        let mut bound = Bound::new();
        let bindings = self.selected(all);
        self.strikes
            .retain(|name, _| bindings.iter().any(|b| b.name_any() == *name));
        for binding in &bindings {
            let name = binding.name_any();
            let verdict = if bound.len() >= MAX_BOUND_KINDS {
                Err(Refusal {
                    reason: "TooManyBindings",
                    message: format!(
                        "the host serves at most {MAX_BOUND_KINDS} bound kinds (each is a \
                         controller with its own watch and cache); this binding is newer than \
                         those in force"
                    ),
                })
            } else {
                self.verdict(binding, &winners).await
            };
            let held = last
                .iter()
                .find(|(_, k)| k.binding.as_ref().is_some_and(|b| b.name == name))
                .map(|(mark, kind)| (mark.clone(), kind.clone()));
            if held.is_none() {
                // Strikes count against a kind in force only.
                self.strikes.remove(&name);
            }
            if let Err(refusal) = &verdict {
                let unchecked = refusal.reason == CHECK_FAILED;
                let first_strike = held.is_some() && {
                    let strikes = self.strikes.entry(name.clone()).or_insert(0);
                    *strikes += 1;
                    *strikes < 2
                };
                if unchecked || first_strike {
                    tracing::debug!(binding = %name, reason = refusal.reason, error = %refusal.message, "binding left as it was");
                    if let Some((mark, kind)) = held {
                        bound.insert(mark, kind);
                    }
                    continue;
                }
            } else {
                self.strikes.remove(&name);
            }
            let instances = match &verdict {
                Ok(kind) => self.count(kind).await,
                Err(_) => None,
            };
            if let Ok(kind) = &verdict {
                bound.insert(kind.mark(), kind.clone());
            }
            // A binding just released is gone (or going): no status to write.
            if !self.keep_finalizer(binding, &verdict, instances).await {
                self.write_status(binding, &verdict, instances).await;
            }
        }
        bound
    }

    /// What a replica that does not lead serves once it does, as far as it can tell without
    /// writing: the bindings it selects whose status (the leader's) says `Valid` for their
    /// generation, and whose kind it finds as [`Self::pass`] would. The leader's status stands
    /// in for the access review: a review is a `create`, and a replica writes nothing before it
    /// leads (the write fence lets a replica that never led write, so this is where that is
    /// kept). [`Self::pass`] asks once it leads, and what it finds replaces this (equal kinds
    /// keep their controllers, and the caches those filled). Trusting the status buys reads
    /// only: a cache of the kind's instances and their plugin loaded, nothing reconciled.
    async fn observe(&mut self, all: &[Arc<PluginBinding>]) -> Bound {
        let winners = check::winners(all.iter().map(AsRef::as_ref));
        let mut bound = Bound::new();
        for binding in self.selected(all) {
            if bound.len() >= MAX_BOUND_KINDS {
                break;
            }
            let status = binding.status.as_ref();
            let valid = status.is_some_and(|s| {
                s.observed_generation == binding.metadata.generation
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Valid" && c.status == "True")
            });
            if !valid {
                continue;
            }
            if let Ok(kind) = self.verdict_with(&binding, &winners, false).await {
                bound.insert(kind.mark(), kind);
            }
        }
        bound
    }

    /// The bindings this host serves, oldest first: past the cap, the newest are the ones
    /// refused.
    fn selected(&self, all: &[Arc<PluginBinding>]) -> Vec<Arc<PluginBinding>> {
        let mut bindings: Vec<Arc<PluginBinding>> = all
            .iter()
            .filter(|b| {
                self.selector
                    .iter()
                    .all(|(k, v)| b.labels().get(k) == Some(v))
            })
            .cloned()
            .collect();
        bindings.sort_by_key(|b| {
            (
                b.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_millisecond()),
                b.name_any(),
            )
        });
        bindings
    }

    /// Whether `binding` is in force, and what it binds.
    async fn verdict(
        &mut self,
        binding: &PluginBinding,
        winners: &BTreeMap<(String, String), String>,
    ) -> Result<Arc<ParentKind>, Refusal> {
        self.verdict_with(binding, winners, true).await
    }

    /// [`Self::verdict`], asking the API server what the host may do with the kind only if
    /// `review_access`.
    async fn verdict_with(
        &mut self,
        binding: &PluginBinding,
        winners: &BTreeMap<(String, String), String>,
        review_access: bool,
    ) -> Result<Arc<ParentKind>, Refusal> {
        let spec = &binding.spec;
        check::bindable(&spec.kind)?;
        let version_path = check::version_path(spec.version_path.as_deref())?;
        if let Some(refusal) = check::already_bound(binding, winners) {
            return Err(refusal);
        }
        let source_namespace = spec
            .source_namespace
            .clone()
            .unwrap_or_else(|| self.host_namespace.clone());
        if !is_dns_label(&source_namespace) {
            return Err(Refusal {
                reason: "InvalidSourceNamespace",
                message: format!(
                    "spec.sourceNamespace {source_namespace:?} is not a namespace name"
                ),
            });
        }
        let resource = self.discover(binding).await?;
        if review_access {
            self.allowed(&resource).await?;
        }
        Ok(Arc::new(ParentKind {
            resource,
            binding: Some(Binding {
                name: binding.name_any(),
                plugin: spec.plugin.clone(),
                source_namespace,
                limits: spec.limits.clone(),
                version_path,
                deleting: binding.metadata.deletion_timestamp.is_some(),
                rollout: crate::rollout::Settings::of(spec.rollout.as_ref()),
            }),
        }))
    }

    /// The binding's kind as the API server serves it: namespaced, with a status subresource,
    /// from a CRD in the [`CATEGORY`].
    async fn discover(&self, binding: &PluginBinding) -> Result<ApiResource, Refusal> {
        let kind = &binding.spec.kind;
        let not_found = || Refusal {
            reason: "KindNotFound",
            message: format!(
                "the API server serves no {}/{} {}: apply its CRD first (`wasmop plugin crd` \
                 prints one)",
                kind.group, kind.version, kind.kind
            ),
        };
        let not_bindable = |why: String| Refusal {
            reason: "KindNotBindable",
            message: why,
        };
        let list = match self
            .client
            .list_api_group_resources(&format!("{}/{}", kind.group, kind.version))
            .await
        {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(not_found()),
            Err(err) => {
                return Err(Refusal {
                    reason: CHECK_FAILED,
                    message: format!("looking {kind} up: {err}"),
                });
            }
        };
        let found = list
            .resources
            .iter()
            .find(|r| r.kind == kind.kind && !r.name.contains('/'))
            .ok_or_else(not_found)?;
        if !found.namespaced {
            return Err(not_bindable(format!(
                "{kind} is cluster-scoped; only a namespaced kind can be bound (its instances' \
                 objects live in their namespace)"
            )));
        }
        let status = format!("{}/status", found.name);
        if !list.resources.iter().any(|r| r.name == status) {
            return Err(not_bindable(format!(
                "{kind}'s CRD has no status subresource (spec.versions[].subresources.status): \
                 the host writes each instance's status there"
            )));
        }
        if !found.categories.iter().flatten().any(|c| c == CATEGORY) {
            return Err(not_bindable(format!(
                "{kind}'s CRD does not opt in: its spec.names.categories must hold \
                 {CATEGORY:?}, as `wasmop plugin crd` writes it (so that another operator's \
                 kind is never bound by mistake)"
            )));
        }
        Ok(ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind),
            &found.name,
        ))
    }

    /// Whether the host may do all it does with instances of `resource`, in every scope it
    /// watches: asked of the API server, so RBAC decides as it will for the real requests. A
    /// yes is reused for [`ACCESS_RECHECK`]; a no is asked again at every pass, as it is what
    /// an admin is fixing.
    async fn allowed(&mut self, resource: &ApiResource) -> Result<(), Refusal> {
        let key = (resource.group.clone(), resource.plural.clone());
        if let Some((at, answer)) = self.access.get(&key)
            && at.elapsed() < ACCESS_RECHECK
        {
            return answer.clone();
        }
        let answer = self.review(resource).await;
        match &answer {
            Ok(()) => {
                self.access.insert(key, (Instant::now(), Ok(())));
            }
            Err(_) => {
                self.access.remove(&key);
            }
        }
        answer
    }

    async fn review(&self, resource: &ApiResource) -> Result<(), Refusal> {
        let reviews: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let mut denied = Vec::new();
        for scope in &self.scopes {
            for (verb, subresource) in ACCESS {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            group: Some(resource.group.clone()),
                            resource: Some(resource.plural.clone()),
                            subresource: subresource.map(str::to_string),
                            verb: Some(verb.to_string()),
                            namespace: scope.clone(),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let unchecked = |why: String| Refusal {
                    reason: CHECK_FAILED,
                    message: format!("asking the API server what the host may do: {why}"),
                };
                let answer = reviews
                    .create(&PostParams::default(), &review)
                    .await
                    .map_err(|err| unchecked(err.to_string()))?;
                let status = answer.status.unwrap_or_default();
                if !status.allowed {
                    // An authorizer that could not decide is no refusal.
                    if let Some(error) = status.evaluation_error.filter(|e| !e.is_empty()) {
                        return Err(unchecked(error));
                    }
                    let what = match subresource {
                        Some(sub) => format!("{verb} {}/{sub}", resource.plural),
                        None => format!("{verb} {}", resource.plural),
                    };
                    denied.push(match scope {
                        Some(ns) => format!("{what} in {ns}"),
                        None => what,
                    });
                }
            }
        }
        if denied.is_empty() {
            return Ok(());
        }
        Err(Refusal {
            reason: "Forbidden",
            message: format!(
                "the host may not {} of {}: apply the ClusterRole wasmop-{}.{} that `wasmop \
                 plugin crd` prints (labelled wasmop.dev/aggregate-to-host=true, which the \
                 host's ClusterRole aggregates)",
                denied.join(", "),
                resource.group,
                resource.plural,
                resource.group
            ),
        })
    }

    /// How many instances of `kind` the cluster holds, in every namespace (`None`: the host
    /// may not list them all, as a namespaced install, or the listing failed).
    async fn count(&self, kind: &ParentKind) -> Option<u32> {
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &kind.resource);
        // One item and the server's count of the rest: the count without the list.
        let page = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .ok()?;
        let rest = page
            .metadata
            .remaining_item_count
            .map_or(0, |n| u64::try_from(n).unwrap_or(0));
        Some(u32::try_from(page.items.len() as u64 + rest).unwrap_or(u32::MAX))
    }

    /// Whether no version of the binding's group and kind is served any more (its CRD deleted).
    async fn kind_gone(&self, binding: &PluginBinding) -> bool {
        let kind = &binding.spec.kind;
        match kube::discovery::group(&self.client, &kind.group).await {
            Ok(group) => !group.versions().any(|v| {
                group
                    .versioned_resources(v)
                    .iter()
                    .any(|(r, _)| r.kind == kind.kind)
            }),
            Err(kube::Error::Discovery(_)) => true,
            Err(kube::Error::Api(status)) => status.code == 404,
            Err(_) => false,
        }
    }

    /// Adds the finalizer to a binding in force, and removes it from one being deleted once no
    /// instance of its kind is left anywhere, or once its kind is gone (no version of it
    /// served: its CRD deleted), or when it never was in force (another binding serves its
    /// kind). Any other refusal (the host's RBAC, the CRD changed, the binding edited) releases
    /// nothing: instances may still wait for `finalize`. Only a host that can count every
    /// instance ([`Self::count`]) adds the finalizer: one that sees some namespaces only could
    /// not tell when the last is gone. Returns whether it released the binding.
    async fn keep_finalizer(
        &self,
        binding: &PluginBinding,
        verdict: &Result<Arc<ParentKind>, Refusal>,
        instances: Option<u32>,
    ) -> bool {
        let deleting = binding.metadata.deletion_timestamp.is_some();
        let has = binding.finalizers().iter().any(|f| f == FINALIZER);
        let release = deleting
            && has
            && match verdict {
                Ok(_) => instances == Some(0),
                Err(refusal) if refusal.reason == "AlreadyBound" => true,
                Err(refusal) if refusal.reason == "KindNotFound" => self.kind_gone(binding).await,
                Err(_) => false,
            };
        let finalizers: Vec<String> = if release {
            binding
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect()
        } else if !deleting && !has && verdict.is_ok() && instances.is_some() {
            let mut all = binding.finalizers().to_vec();
            all.push(FINALIZER.into());
            all
        } else {
            return false;
        };
        let api: Api<PluginBinding> = Api::all(self.client.clone());
        // With the resourceVersion read: a concurrent change fails this (409) rather than
        // losing others' finalizers; the next pass reads them again.
        let patch = json!({
            "metadata": {"finalizers": finalizers, "resourceVersion": binding.resource_version()},
        });
        match api
            .patch(
                &binding.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => release,
            Err(err) => {
                tracing::debug!(binding = %binding.name_any(), error = %err, "updating the finalizer");
                false
            }
        }
    }

    /// Writes the binding's status when it changed. A host that cannot count the instances
    /// ([`Self::count`]) writes under a field manager of its own and leaves `instances` to the
    /// hosts that can: under one manager its apply would remove the field theirs set.
    /// Removes `status.rollout` and `status.rolloutInstances`, whoever owns them (a merge
    /// patch: an apply of none of them would leave any another manager co-owns).
    async fn clear_rollout(&self, binding: &PluginBinding) {
        let api: Api<PluginBinding> = Api::all(self.client.clone());
        let patch = json!({"status": {"rollout": null, "rolloutInstances": null}});
        if let Err(err) = api
            .patch_status(
                &binding.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(binding = %binding.name_any(), error = %err, "clearing the rollout of a binding that rolls out at once");
        }
    }

    async fn write_status(
        &self,
        binding: &PluginBinding,
        verdict: &Result<Arc<ParentKind>, Refusal>,
        instances: Option<u32>,
    ) {
        let previous = binding.status.clone().unwrap_or_default();
        let valid = match verdict {
            Ok(kind) => condition(
                &previous.conditions,
                "Valid",
                true,
                "Bound",
                format!(
                    "every {} is served by this binding's plugin",
                    kind.resource.kind
                ),
            ),
            Err(refusal) => condition(
                &previous.conditions,
                "Valid",
                false,
                refusal.reason,
                refusal.message.clone(),
            ),
        };
        let status = PluginBindingStatus {
            observed_generation: binding.metadata.generation,
            resource: verdict.as_ref().ok().map(|k| k.resource.plural.clone()),
            instances: instances.or(previous.instances.filter(|_| verdict.is_ok())),
            conditions: vec![valid],
            // The rollout's driver writes these, under a field manager of its own.
            rollout: previous.rollout.clone(),
            rollout_instances: previous.rollout_instances.clone(),
        };
        // A binding that rolls out at once (again) has no rollout: its state, were it kept, would
        // serve every instance the stable digest of long ago once the binding is progressive again.
        let progressive = crate::rollout::Settings::of(binding.spec.rollout.as_ref()).is_some();
        if !progressive && (previous.rollout.is_some() || previous.rollout_instances.is_some()) {
            self.clear_rollout(binding).await;
        }
        if status == previous {
            return;
        }
        let manager = match instances {
            Some(_) => FIELD_MANAGER.to_string(),
            None => format!("{FIELD_MANAGER}-scoped"),
        };
        let mut body = serde_json::to_value(&status).unwrap_or_default();
        if let Some(map) = body.as_object_mut() {
            map.remove("rollout");
            map.remove("rolloutInstances");
            if instances.is_none() {
                map.remove("instances");
            }
        }
        let api: Api<PluginBinding> = Api::all(self.client.clone());
        let patch = json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
            "status": body,
        });
        if let Err(err) = api
            .patch_status(
                &binding.name_any(),
                &PatchParams::apply(&manager).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            tracing::warn!(binding = %binding.name_any(), error = %err, "writing PluginBinding status");
        }
    }
}

/// A namespace name: a DNS label.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}
