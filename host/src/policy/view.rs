//! The host's live view of PluginPolicies and namespace labels, shared by every App controller:
//! [`PolicyView::resolve`] says which rules govern a namespace, [`PolicyView::subscribe`] ticks
//! whenever a policy or a namespace's labels change (the controllers re-reconcile the Apps
//! whose resolution changed), and [`PolicyView::run`] keeps the caches and every policy's
//! status up to date. Beside the policies it holds what else bounds a plan from outside the
//! App: the RBAC bindings that name ServiceAccounts ([`PolicyView::bound`], the guard's
//! `grants` rule).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        core::v1::Namespace,
        rbac::v1::{ClusterRoleBinding, RoleBinding},
    },
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde_json::json;
use tokio::sync::watch;
use wasmop_core::guard::{Bound, GRANTS_APP};

use super::{
    PluginPolicy, PluginPolicyStatus, Resolution, STATUS_NAMESPACES, candidates, is_protected,
    resolve, selector,
};
use crate::{controller::watch_backoff::WatchBackoff, write::FIELD_MANAGER};

/// Policies and namespace labels, from reflectors.
pub struct PolicyView {
    policies: Store<PluginPolicy>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    role_bindings: Store<RoleBinding>,
    cluster_role_bindings: Store<ClusterRoleBinding>,
    /// For each binding watch (RoleBindings, ClusterRoleBindings) that has failed since it last
    /// answered: since when, and its latest failure.
    bindings_failing: std::sync::Mutex<[Option<(std::time::Instant, std::time::Instant)>; 2]>,
    host_namespace: Option<String>,
    synced: AtomicBool,
    changes: watch::Sender<u64>,
}

impl PolicyView {
    /// An empty view: nothing resolves until [`PolicyView::run`] has synced both caches.
    /// `host_namespace` (the host's own) is refused to Apps like kube-system.
    pub fn new(host_namespace: Option<String>) -> (Arc<Self>, Writers) {
        let (policies, policy_writer) = reflector::store();
        let (namespaces, namespace_writer) = reflector::store();
        let (role_bindings, role_binding_writer) = reflector::store();
        let (cluster_role_bindings, cluster_role_binding_writer) = reflector::store();
        let view = Arc::new(Self {
            policies,
            namespaces,
            role_bindings,
            cluster_role_bindings,
            bindings_failing: std::sync::Mutex::new([None, None]),
            host_namespace,
            synced: AtomicBool::new(false),
            changes: watch::channel(0).0,
        });
        (
            view,
            Writers {
                policies: policy_writer,
                namespaces: namespace_writer,
                role_bindings: role_binding_writer,
                cluster_role_bindings: cluster_role_binding_writer,
            },
        )
    }

    /// The rules governing `namespace`; `None` until the caches have synced or while the
    /// namespace is not in the cache yet (the caller waits rather than guess).
    pub fn resolve(&self, namespace: &str) -> Option<Resolution> {
        if !self.synced.load(Ordering::Acquire) {
            return None;
        }
        let meta = self.namespaces.get(&ObjectRef::new(namespace))?;
        let policies = self.policies.state();
        Some(resolve(
            policies.iter().map(Arc::as_ref),
            namespace,
            &meta.labels().clone(),
            self.host_namespace.as_deref(),
        ))
    }

    /// The ServiceAccounts of `namespace` that RBAC bindings name, but for those granted to the
    /// App `app` on purpose; `None` until the caches have synced.
    /// Also `None` while a binding watch has been failing for longer than [`BINDINGS_STALE`]:
    /// a binding made meanwhile would be missed, so plans wait rather than pass on an old list.
    pub fn bound(&self, namespace: &str, app: &str) -> Option<Bound> {
        if !self.synced.load(Ordering::Acquire) {
            return None;
        }
        let failing = *self
            .bindings_failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if failing.iter().flatten().any(|(since, last)| {
            since.elapsed() > BINDINGS_STALE && last.elapsed() < BINDINGS_STILL_FAILING
        }) {
            return None;
        }
        let role_bindings = self.role_bindings.state();
        let cluster_role_bindings = self.cluster_role_bindings.state();
        Some(Bound::of(
            role_bindings.iter().map(Arc::as_ref),
            cluster_role_bindings.iter().map(Arc::as_ref),
            namespace,
            app,
        ))
    }

    /// Records how binding watch `which` (0: RoleBindings, 1: ClusterRoleBindings) answered.
    fn bindings_seen(&self, which: usize, ok: bool) {
        let mut failing = self
            .bindings_failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        match (ok, failing[which]) {
            (true, _) => failing[which] = None,
            // A failure after a quiet spell starts a new count: a watch that resumed without
            // an event (a reconnect from its last resourceVersion yields none) was not failing.
            (false, Some((since, last))) if last.elapsed() < BINDINGS_STILL_FAILING => {
                failing[which] = Some((since, now));
                if since.elapsed() > BINDINGS_STALE {
                    tracing::warn!(
                        failing_s = since.elapsed().as_secs(),
                        "an RBAC binding watch keeps failing; plans wait until it answers (can the host list and watch rolebindings and clusterrolebindings?)"
                    );
                }
            }
            (false, _) => failing[which] = Some((now, now)),
        }
    }

    /// Ticks after every change of a policy, of a namespace's labels or of an RBAC binding.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Runs the policy and namespace watches, and writes policy statuses once `leading` is
    /// true (a standby reads the policies, for the webhooks it answers, and writes nothing),
    /// until dropped.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        writers: Writers,
        leading: watch::Receiver<bool>,
    ) {
        let policies = reflector::reflector(
            writers.policies,
            watcher(
                Api::<PluginPolicy>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .backoff(WatchBackoff::default())
        .touched_objects()
        .map(|event| event.is_ok());
        let namespaces = reflector::reflector(
            writers.namespaces,
            watcher(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .backoff(WatchBackoff::default())
        .touched_objects()
        .map(|event| event.is_ok());
        // Every binding of the cluster (one of another namespace may name an account of the
        // App's), holding only what the rule reads.
        let role_bindings = reflector::reflector(
            writers.role_bindings,
            watcher(
                Api::<RoleBinding>::all(client.clone()),
                watcher::Config::default(),
            )
            .modify(|b: &mut RoleBinding| slim_binding(&mut b.metadata)),
        )
        .backoff(WatchBackoff::default())
        .map({
            let view = Arc::clone(&self);
            move |event| {
                view.bindings_seen(0, event.is_ok());
                event.is_ok()
            }
        });
        let cluster_role_bindings = reflector::reflector(
            writers.cluster_role_bindings,
            watcher(
                Api::<ClusterRoleBinding>::all(client.clone()),
                watcher::Config::default(),
            )
            .modify(|b: &mut ClusterRoleBinding| slim_binding(&mut b.metadata)),
        )
        .backoff(WatchBackoff::default())
        .map({
            let view = Arc::clone(&self);
            move |event| {
                view.bindings_seen(1, event.is_ok());
                event.is_ok()
            }
        });
        let mut events = std::pin::pin!(futures::stream::select_all([
            policies.boxed(),
            namespaces.boxed(),
            role_bindings.boxed(),
            cluster_role_bindings.boxed(),
        ]));
        let status = tokio::spawn(Arc::clone(&self).write_statuses(client, leading));
        while let Some(ok) = events.next().await {
            if !ok {
                continue;
            }
            if !self.synced.load(Ordering::Acquire) {
                // `touched_objects` yields nothing for an empty list, so readiness is polled
                // on every event and on a timer (below) rather than awaited.
                self.check_synced();
            }
            self.changed();
        }
        status.abort();
    }

    fn check_synced(&self) -> bool {
        let ready = self.unsynced().is_empty();
        if ready && !self.synced.swap(true, Ordering::AcqRel) {
            tracing::info!(
                policies = self.policies.state().len(),
                namespaces = self.namespaces.state().len(),
                role_bindings = self.role_bindings.state().len(),
                cluster_role_bindings = self.cluster_role_bindings.state().len(),
                "policy caches synced"
            );
            self.changed();
        }
        ready
    }

    /// The caches that have not synced yet, by resource.
    fn unsynced(&self) -> Vec<&'static str> {
        use futures::FutureExt;
        [
            ("pluginpolicies", self.policies.wait_until_ready().boxed()),
            ("namespaces", self.namespaces.wait_until_ready().boxed()),
            (
                "rolebindings",
                self.role_bindings.wait_until_ready().boxed(),
            ),
            (
                "clusterrolebindings",
                self.cluster_role_bindings.wait_until_ready().boxed(),
            ),
        ]
        .into_iter()
        .filter_map(|(what, wait)| {
            wait.now_or_never()
                .is_none_or(|r| r.is_err())
                .then_some(what)
        })
        .collect()
    }

    /// Writes each policy's status after changes, coalescing bursts.
    async fn write_statuses(self: Arc<Self>, client: Client, mut leading: watch::Receiver<bool>) {
        let mut changes = self.subscribe();
        let api: Api<PluginPolicy> = Api::all(client);
        let started = std::time::Instant::now();
        let mut warned = Duration::ZERO;
        loop {
            if !self.synced.load(Ordering::Acquire) {
                if !self.check_synced() && started.elapsed() >= warned + Duration::from_secs(60) {
                    // Until they sync no App is reconciled: say which, once a minute.
                    warned = started.elapsed();
                    tracing::warn!(
                        caches = ?self.unsynced(),
                        waited_s = warned.as_secs(),
                        "policy caches have not synced; no App is reconciled until they have (can the host list and watch them?)"
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            if !*leading.borrow_and_update() {
                if leading.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let policies = self.policies.state();
            let namespaces: Vec<(String, BTreeMap<String, String>)> = self
                .namespaces
                .state()
                .iter()
                .map(|ns| (ns.name_any(), ns.labels().clone()))
                .collect();
            for policy in &policies {
                let status = status_of(
                    policy,
                    policies.iter().map(Arc::as_ref),
                    &namespaces,
                    self.host_namespace.as_deref(),
                );
                if same_status(policy.status.as_ref(), &status) {
                    continue;
                }
                let name = policy.name_any();
                let patch = json!({
                    "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginPolicy",
                    "status": status,
                });
                if let Err(err) = api
                    .patch_status(
                        &name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&patch),
                    )
                    .await
                {
                    tracing::warn!(policy = %name, error = %err, "writing PluginPolicy status");
                }
            }
            if changes.changed().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            changes.borrow_and_update();
        }
    }
}

/// How long a binding watch may fail before [`PolicyView::bound`] stops answering: longer than
/// the watch's own retries take to reach the API server again after a restart.
const BINDINGS_STALE: Duration = Duration::from_secs(60);
/// A watch whose latest failure is older than this has recovered: while it fails it retries
/// at least every 4 s (`WatchBackoff`'s longest wait), and a resumed watch may say nothing.
const BINDINGS_STILL_FAILING: Duration = Duration::from_secs(15);

/// The reflector writers [`PolicyView::run`] fills.
pub struct Writers {
    policies: reflector::store::Writer<PluginPolicy>,
    namespaces: reflector::store::Writer<PartialObjectMeta<Namespace>>,
    role_bindings: reflector::store::Writer<RoleBinding>,
    cluster_role_bindings: reflector::store::Writer<ClusterRoleBinding>,
}

/// Keeps of a binding's metadata what [`Bound::of`] reads: its name, namespace and the
/// [`GRANTS_APP`] annotation.
fn slim_binding(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| key == GRANTS_APP);
    }
}

/// Equal up to condition timestamps, so that an unchanged status is never written again.
fn same_status(old: Option<&PluginPolicyStatus>, new: &PluginPolicyStatus) -> bool {
    let Some(old) = old else { return false };
    let key = |s: &PluginPolicyStatus| {
        (
            s.observed_generation,
            s.namespace_count,
            s.namespaces.clone(),
            s.conditions
                .iter()
                .map(|c| {
                    (
                        c.type_.clone(),
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    key(old) == key(new)
}

/// What `policy`'s status should say, given every policy and every namespace's labels.
pub fn status_of<'a>(
    policy: &PluginPolicy,
    policies: impl Iterator<Item = &'a PluginPolicy> + Clone,
    namespaces: &[(String, BTreeMap<String, String>)],
    host_namespace: Option<&str>,
) -> PluginPolicyStatus {
    let name = policy.name_any();
    let mut governed = BTreeSet::new();
    let mut shadowed = Vec::new();
    for (namespace, labels) in namespaces {
        let protected = is_protected(namespace, host_namespace);
        let found = candidates(policies.clone(), namespace, labels, protected);
        match found.iter().position(|p| p.name_any() == name) {
            Some(0) => {
                governed.insert(namespace.clone());
            }
            Some(_) => shadowed.push(format!("{namespace} (governed by {})", found[0].name_any())),
            None => {}
        }
    }
    let previous = policy
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let invalid = policy
        .spec
        .namespace_selector
        .as_ref()
        .and_then(|s| selector::matches(s, &BTreeMap::new()).err());
    let refused = policy.spec.refused_kinds();
    let bad_keys = policy.spec.refused_keys();
    let unchecked = unchecked_note(&policy.spec.unchecked_kinds());
    let mut valid = match &invalid {
        Some(err) => condition(
            previous,
            "Valid",
            false,
            "InvalidSelector",
            format!("spec.namespaceSelector.{err}: it selects no namespace"),
        ),
        // Fails closed: a key that does not parse verifies nothing, so plugins that only it
        // signed are refused until it is fixed.
        None if policy.spec.component_bytes().is_err() => condition(
            previous,
            "Valid",
            false,
            "InvalidSize",
            format!(
                "spec.maxComponentSize {}; the default 8Mi applies",
                policy.spec.component_bytes().err().unwrap_or_default()
            ),
        ),
        None if !bad_keys.is_empty() => condition(
            previous,
            "Valid",
            false,
            "KeyInvalid",
            format!("spec.{}", bad_keys.join("; spec.")),
        ),
        None if !refused.is_empty() => condition(
            previous,
            "Valid",
            false,
            "KindRefused",
            format!(
                "spec.{}; the rest of the policy applies",
                refused.join("; spec.")
            ),
        ),
        // Valid, but the admin should know what the policy hands out unchecked.
        None => match &unchecked {
            Some(note) => condition(previous, "Valid", true, "UncheckedKinds", note.clone()),
            None => condition(previous, "Valid", true, "Valid", String::new()),
        },
    };
    if valid.status == "False"
        && let Some(note) = &unchecked
    {
        valid.message = format!("{}; {note}", valid.message);
    }
    let overlapping = if shadowed.is_empty() {
        condition(previous, "Overlapping", false, "NoOverlap", String::new())
    } else {
        let more = shadowed.len().saturating_sub(5);
        shadowed.truncate(5);
        let mut message = format!(
            "selects namespaces another policy governs: {}",
            shadowed.join(", ")
        );
        if more > 0 {
            message.push_str(&format!(" and {more} more"));
        }
        condition(previous, "Overlapping", true, "Shadowed", message)
    };
    PluginPolicyStatus {
        observed_generation: policy.metadata.generation,
        namespace_count: u32::try_from(governed.len()).unwrap_or(u32::MAX),
        namespaces: governed.into_iter().take(STATUS_NAMESPACES).collect(),
        conditions: vec![valid, overlapping],
    }
}

/// What the `Valid` condition says of the extra kinds whose bodies the guard does not check
/// (`None`: there are none).
fn unchecked_note(kinds: &[String]) -> Option<String> {
    match kinds {
        [] => None,
        [kind] => Some(format!(
            "extraKinds {kind}: the host does not check its body; plans may set any field of it"
        )),
        kinds => Some(format!(
            "extraKinds {}: the host does not check their bodies; plans may set any field of them",
            kinds.join(", ")
        )),
    }
}

/// A condition that keeps its `lastTransitionTime` while its status does not flip.
pub(crate) fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(Timestamp::now()));
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
        last_transition_time: since,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(name: &str, spec: serde_json::Value) -> PluginPolicy {
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginPolicy",
            "metadata": {"name": name, "generation": 3}, "spec": spec,
        }))
        .expect("a PluginPolicy")
    }

    #[test]
    fn status_names_what_a_policy_governs_and_where_it_is_shadowed() {
        let broad = policy("broad", json!({"namespaceSelector": {}}));
        let team = policy(
            "team",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
        );
        let all = [broad.clone(), team.clone()];
        let namespaces = vec![
            (
                "a1".to_string(),
                BTreeMap::from([("team".to_string(), "a".to_string())]),
            ),
            ("b1".to_string(), BTreeMap::new()),
            ("kube-system".to_string(), BTreeMap::new()),
        ];
        let got = status_of(&broad, all.iter(), &namespaces, None);
        assert_eq!(got.namespaces, ["b1"]);
        assert_eq!(got.namespace_count, 1);
        assert_eq!(got.observed_generation, Some(3));
        let overlap = &got.conditions[1];
        assert_eq!(
            (overlap.type_.as_str(), overlap.status.as_str()),
            ("Overlapping", "True")
        );
        assert!(
            overlap.message.contains("a1 (governed by team)"),
            "{}",
            overlap.message
        );
        let got = status_of(&team, all.iter(), &namespaces, None);
        assert_eq!(got.namespaces, ["a1"]);
        assert_eq!(got.conditions[1].status, "False");
        assert!(same_status(
            Some(&got),
            &status_of(&team, all.iter(), &namespaces, None)
        ));
    }

    #[test]
    fn extra_kinds_whose_bodies_go_unchecked_are_named_in_valid() {
        let kinds = |kinds: serde_json::Value| {
            policy("p", json!({"namespaces": ["ns"], "extraKinds": kinds}))
        };
        let checked = kinds(json!([
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "resource": "ingresses"},
            {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "resource": "networkpolicies"},
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "resource": "servicemonitors"},
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "resource": "horizontalpodautoscalers"},
            {"apiVersion": "batch/v1", "kind": "CronJob", "resource": "cronjobs"},
            {"apiVersion": "v1", "kind": "Secret", "resource": "secrets"},
        ]));
        let valid = &status_of(&checked, [checked.clone()].iter(), &[], None).conditions[0];
        assert_eq!(
            (
                valid.status.as_str(),
                valid.reason.as_str(),
                valid.message.as_str()
            ),
            ("True", "Valid", "")
        );

        let one = kinds(json!([
            {"apiVersion": "example.com/v1", "kind": "Widget", "resource": "widgets"},
            {"apiVersion": "batch/v1", "kind": "CronJob", "resource": "cronjobs"},
        ]));
        let valid = &status_of(&one, [one.clone()].iter(), &[], None).conditions[0];
        assert_eq!(
            (
                valid.status.as_str(),
                valid.reason.as_str(),
                valid.message.as_str()
            ),
            (
                "True",
                "UncheckedKinds",
                "extraKinds example.com/v1/Widget: the host does not check its body; plans may \
                 set any field of it"
            )
        );

        // Refused kinds make the policy invalid; the unchecked ones are still named.
        let both = kinds(json!([
            {"apiVersion": "v1", "kind": "Endpoints", "resource": "endpoints"},
            {"apiVersion": "example.com/v1", "kind": "Widget", "resource": "widgets"},
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "Probe", "resource": "probes"},
        ]));
        let valid = &status_of(&both, [both.clone()].iter(), &[], None).conditions[0];
        assert_eq!(
            (valid.status.as_str(), valid.reason.as_str()),
            ("False", "KindRefused")
        );
        assert_eq!(
            valid.message,
            "spec.extraKinds[0] v1/Endpoints: never plannable; the rest of the policy applies; \
             extraKinds example.com/v1/Widget, monitoring.coreos.com/v1/Probe: the host does not \
             check their bodies; plans may set any field of them"
        );
    }

    #[test]
    fn a_malformed_selector_is_reported() {
        let bad = policy(
            "bad",
            json!({"namespaceSelector": {"matchExpressions": [{"key": "x", "operator": "Exists", "values": ["y"]}]}}),
        );
        let got = status_of(&bad, [bad.clone()].iter(), &[], None);
        assert_eq!(got.conditions[0].status, "False");
        assert!(
            got.conditions[0].message.contains("matchExpressions[0]"),
            "{:?}",
            got.conditions
        );
    }

    /// A binding watch that keeps failing past [`BINDINGS_STALE`] makes plans wait (`None`)
    /// rather than pass on an old list; one answer from it again and they go on.
    #[test]
    fn a_failing_binding_watch_holds_plans_until_it_answers() {
        let (view, _writers) = PolicyView::new(None);
        view.synced.store(true, Ordering::Release);
        assert_eq!(view.bound("ns", "kv"), Some(Bound::default()));
        view.bindings_seen(1, false);
        assert!(
            view.bound("ns", "kv").is_some(),
            "a fresh failure is the watch's to retry"
        );
        let long_ago = std::time::Instant::now()
            .checked_sub(BINDINGS_STALE + Duration::from_secs(1))
            .expect("the clock has run that long");
        let now = std::time::Instant::now();
        view.bindings_failing.lock().expect("not poisoned")[1] = Some((long_ago, now));
        assert_eq!(view.bound("ns", "kv"), None);
        view.bindings_seen(1, true);
        assert!(view.bound("ns", "kv").is_some());
        // Failing long ago but quiet since: the watch resumed without an event.
        view.bindings_failing.lock().expect("not poisoned")[1] = Some((long_ago, long_ago));
        assert!(
            view.bound("ns", "kv").is_some(),
            "a resumed watch holds nothing"
        );
    }
}
