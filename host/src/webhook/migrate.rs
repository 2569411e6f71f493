//! Storage version migration of a kind the host converts.
//!
//! When a platform team moves its CRD's storage version (`wasmop plugin crd --version
//! v1alpha1,v1 --storage v1`, applied over a CRD that stored `v1alpha1`), the objects written
//! before stay stored as they were, and the CRD's `status.storedVersions` lists both versions:
//! the old one cannot leave the CRD until every object is stored anew. Kubernetes documents the
//! two steps ("Upgrade existing objects to a new stored version", in
//! <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definition-versioning/>):
//! write every object again, which stores it at the storage version, then set
//! `status.storedVersions` to the storage version alone. The leader does both for each kind whose
//! conversion it serves, since only it can convert what is stored: [`plan`] decides from the CRD,
//! [`Pacing`] decides when, [`perform`] writes.
//!
//! An object is written again with a patch that changes nothing but asks for the
//! `resourceVersion` it was listed at: the API server stores it at the storage version (and
//! writes nothing for one stored there already, its bytes unchanged). One changed since the
//! list is read again and written again at its new `resourceVersion` (a few times at most). The
//! status is written with the CRD's `resourceVersion` as [`plan`] read it, so a CRD changed
//! meanwhile (its storage version moved again) fails the write, and the next pass starts over.
//!
//! When: only once the CRD has stayed unchanged for [`SETTLE`] (an API server takes a moment to
//! serve a CRD's new storage version or conversion, and a migration through the old one would
//! store nothing anew, or store what the old conversion made), and after a failure only once its
//! backoff has run ([`Pacing`]).
//!
//! The list is of the whole cluster, whatever namespaces the host watches: the conversion it
//! serves is the kind's in every namespace, and so is `storedVersions`. A host whose RBAC lets
//! it list the kind in some namespaces only fails the list, and migrates nothing. One object
//! that cannot be stored anew (its conversion fails, an admission policy refuses the write)
//! holds up the whole kind's migration, by design: `storedVersions` may drop a version only
//! once nothing is stored at it.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    core::GroupVersionKind,
};
use serde_json::json;

/// How long a CRD must stay unchanged before its objects are migrated.
pub const SETTLE: Duration = Duration::from_secs(10);
/// The first wait after a failure; it doubles with each failure in a row, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest wait after failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// Objects per page of the list.
const PAGE: u32 = 500;
/// Writes of one object, when it keeps changing between a read and the write.
const ATTEMPTS: usize = 3;

/// A kind whose objects are stored at versions other than its storage version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The CRD's name (`greetings.example.com`).
    pub crd: String,
    /// The CRD's `resourceVersion` when planned: the status write requires it unchanged.
    pub crd_version: String,
    /// The kind, at its storage version.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// `status.storedVersions` as the CRD had it.
    pub stored: Vec<String>,
}

impl Migration {
    /// The storage version.
    pub fn storage(&self) -> &str {
        &self.resource.version
    }
}

/// The migration `crd` needs: `None` when every version it has stored is its storage version
/// (or it has none marked, which the API server does not admit).
pub fn plan(crd: &CustomResourceDefinition) -> Option<Migration> {
    let storage = crd.spec.versions.iter().find(|v| v.storage)?;
    let stored = crd.status.as_ref()?.stored_versions.clone()?;
    if stored.iter().all(|v| *v == storage.name) {
        return None;
    }
    let gvk = GroupVersionKind::gvk(&crd.spec.group, &storage.name, &crd.spec.names.kind);
    Some(Migration {
        crd: crd.name_any(),
        crd_version: crd.resource_version()?,
        resource: ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural),
        namespaced: crd.spec.scope == "Namespaced",
        stored,
    })
}

/// When each CRD may be migrated: once unchanged for [`SETTLE`], and after failures once their
/// backoff has run. Keyed by CRD name.
#[derive(Debug, Default)]
pub struct Pacing {
    /// The `resourceVersion` last seen, and since when.
    seen: BTreeMap<String, (String, Instant)>,
    /// Failures in a row, the last one's text, and when to try again.
    failed: BTreeMap<String, (u32, String, Instant)>,
    /// Why each CRD waits, as last logged.
    waiting: BTreeMap<String, String>,
}

impl Pacing {
    /// Whether `crd`, seen at `resource_version` at `now`, may be migrated now.
    pub fn due(&mut self, crd: &str, resource_version: &str, now: Instant) -> bool {
        let since = match self.seen.get(crd) {
            Some((version, since)) if version == resource_version => *since,
            _ => {
                self.seen
                    .insert(crd.to_string(), (resource_version.to_string(), now));
                now
            }
        };
        let backed_off = self
            .failed
            .get(crd)
            .is_some_and(|(_, _, retry)| now < *retry);
        now.duration_since(since) >= SETTLE && !backed_off
    }

    /// Records a failure of `crd`'s migration at `now`; whether it is news (a first failure, or
    /// another text than the last: worth a log line).
    pub fn failed(&mut self, crd: &str, error: &str, now: Instant) -> bool {
        let (count, last) = self
            .failed
            .get(crd)
            .map(|(count, last, _)| (*count, last.as_str()))
            .unwrap_or((0, ""));
        let news = count == 0 || last != error;
        let backoff = FIRST_BACKOFF
            .saturating_mul(2u32.saturating_pow(count))
            .min(MAX_BACKOFF);
        self.failed.insert(
            crd.to_string(),
            (count.saturating_add(1), error.to_string(), now + backoff),
        );
        news
    }

    /// Records that `crd` cannot be migrated for now, for a reason the host waits out rather
    /// than backs off from (its conversion not the host's yet); whether it is news. A later
    /// failure's backoff starts from the first.
    pub fn waiting(&mut self, crd: &str, why: &str) -> bool {
        let news = self.waiting.get(crd).is_none_or(|last| last != why);
        self.waiting.insert(crd.to_string(), why.to_string());
        news
    }

    /// Forgets `crd`'s failures (migrated, or nothing to migrate).
    pub fn succeeded(&mut self, crd: &str) {
        self.failed.remove(crd);
        self.waiting.remove(crd);
    }

    /// Forgets every CRD not in `kept` (their bindings gone).
    pub fn retain(&mut self, kept: &[String]) {
        self.seen.retain(|crd, _| kept.contains(crd));
        self.failed.retain(|crd, _| kept.contains(crd));
        self.waiting.retain(|crd, _| kept.contains(crd));
    }
}

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// Objects written again (or found gone).
    pub objects: usize,
    /// The versions no longer listed as stored.
    pub dropped: Vec<String>,
}

/// Writes every object of `migration`'s kind again, then sets the CRD's
/// `status.storedVersions` to its storage version. An error names the object or the CRD, and
/// leaves `storedVersions` as it was.
pub async fn perform(client: &Client, migration: &Migration) -> Result<Migrated, String> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &migration.resource);
    let kind = &migration.resource.kind;
    let mut objects = 0;
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = all
            .list(&params)
            .await
            .map_err(|err| format!("listing the {kind}s of CRD {}: {err}", migration.crd))?;
        for object in &page.items {
            store_anew(client, migration, object).await?;
            objects += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = params.continue_token(&next),
            None => break,
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let status = json!({
        "metadata": {"resourceVersion": migration.crd_version},
        "status": {"storedVersions": [migration.storage()]},
    });
    crds.patch_status(
        &migration.crd,
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .map_err(|err| {
        format!(
            "setting status.storedVersions of CRD {} to [{}] (a conflict: the CRD changed \
                 during the migration): {err}",
            migration.crd,
            migration.storage()
        )
    })?;
    Ok(Migrated {
        objects,
        dropped: migration
            .stored
            .iter()
            .filter(|v| *v != migration.storage())
            .cloned()
            .collect(),
    })
}

/// Writes `object` again at the `resourceVersion` it was read at; read again and retried when
/// it changed meanwhile. Gone (a read answering 404 for it) is done.
async fn store_anew(
    client: &Client,
    migration: &Migration,
    object: &DynamicObject,
) -> Result<(), String> {
    let name = object.name_any();
    let (api, at): (Api<DynamicObject>, String) = match (migration.namespaced, object.namespace()) {
        (true, Some(ns)) => (
            Api::namespaced_with(client.clone(), &ns, &migration.resource),
            format!("{ns}/{name}"),
        ),
        _ => (
            Api::all_with(client.clone(), &migration.resource),
            name.clone(),
        ),
    };
    let fail = |why: String| {
        format!(
            "storing {} {at} at {} (CRD {}): {why}",
            migration.resource.kind,
            migration.storage(),
            migration.crd
        )
    };
    let mut resource_version = object.resource_version();
    for _ in 0..ATTEMPTS {
        let rv = resource_version.ok_or_else(|| fail("it has no resourceVersion".into()))?;
        let nothing = json!({"metadata": {"resourceVersion": rv}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&nothing))
            .await
        {
            Ok(_) => return Ok(()),
            // Changed since it was read, or (by its name) gone: read it to tell, not taking an
            // answer's code on trust (another webhook's refusal may carry any code).
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                match api.get_opt(&name).await {
                    Ok(None) => return Ok(()),
                    Ok(Some(current)) if e.code == 409 => {
                        resource_version = current.resource_version();
                    }
                    Ok(Some(_)) => {
                        return Err(fail(format!("the write answered 404 but it exists: {e}")));
                    }
                    Err(err) => return Err(fail(format!("reading it again: {err}"))),
                }
            }
            Err(err) => return Err(fail(err.to_string())),
        }
    }
    Err(fail(format!("it changed under each of {ATTEMPTS} writes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(storage: &str, stored: &[&str]) -> anyhow::Result<CustomResourceDefinition> {
        let version = |name: &str| {
            json!({
                "name": name, "served": true, "storage": name == storage,
                "schema": {"openAPIV3Schema": {"type": "object"}},
            })
        };
        Ok(serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "greetings.example.com", "resourceVersion": "42"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "greetings", "singular": "greeting", "kind": "Greeting"},
                "versions": [version("v1alpha1"), version("v1")],
            },
            "status": {"storedVersions": stored},
        }))?)
    }

    #[test]
    fn a_kind_stored_at_its_storage_version_alone_needs_nothing() -> anyhow::Result<()> {
        assert_eq!(plan(&crd("v1", &["v1"])?), None);
        assert_eq!(plan(&crd("v1alpha1", &["v1alpha1"])?), None);
        Ok(())
    }

    #[test]
    fn a_kind_with_an_old_stored_version_migrates_to_its_storage_version() -> anyhow::Result<()> {
        let migration = plan(&crd("v1", &["v1alpha1", "v1"])?).ok_or(anyhow::anyhow!("none"))?;
        assert_eq!(migration.crd, "greetings.example.com");
        assert_eq!(migration.crd_version, "42");
        assert_eq!(migration.storage(), "v1");
        assert_eq!(migration.resource.api_version, "example.com/v1");
        assert_eq!(migration.resource.plural, "greetings");
        assert!(migration.namespaced);
        // Stored at the old version only (storage moved, nothing written since): migrates too.
        assert!(plan(&crd("v1", &["v1alpha1"])?).is_some());
        Ok(())
    }

    #[test]
    fn a_crd_is_due_once_unchanged_for_a_while_and_not_while_backing_off() {
        let mut pacing = Pacing::default();
        let t0 = Instant::now();
        assert!(!pacing.due("c", "1", t0), "just seen");
        assert!(!pacing.due("c", "1", t0 + SETTLE / 2));
        assert!(pacing.due("c", "1", t0 + SETTLE));
        // Changed: settles again.
        assert!(!pacing.due("c", "2", t0 + SETTLE));
        let t1 = t0 + SETTLE * 2;
        assert!(pacing.due("c", "2", t1));
        // Failures back off, doubling, up to the cap; the same error is news once.
        assert!(pacing.failed("c", "boom", t1));
        assert!(!pacing.due("c", "2", t1 + FIRST_BACKOFF / 2));
        assert!(pacing.due("c", "2", t1 + FIRST_BACKOFF));
        assert!(!pacing.failed("c", "boom", t1));
        assert!(!pacing.due("c", "2", t1 + FIRST_BACKOFF));
        assert!(pacing.due("c", "2", t1 + FIRST_BACKOFF * 2));
        assert!(pacing.failed("c", "another", t1));
        for _ in 0..20 {
            pacing.failed("c", "another", t1);
        }
        assert!(pacing.due("c", "2", t1 + MAX_BACKOFF));
        pacing.succeeded("c");
        assert!(pacing.due("c", "2", t1));
        // Waiting (not the host's conversion yet) is news once, and no backoff.
        assert!(pacing.waiting("c", "not ours"));
        assert!(!pacing.waiting("c", "not ours"));
        assert!(pacing.due("c", "2", t1));
        pacing.retain(&[]);
        assert!(!pacing.due("c", "2", t1), "forgotten: settles again");
    }
}
