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
//! [`perform`] writes.
//!
//! An object is written again with a patch that changes nothing but asks for the
//! `resourceVersion` it was listed at: the API server stores it at the storage version (and writes
//! nothing for one stored there already, its bytes unchanged), and one changed since the list
//! (a conflict) has been stored at the storage version by that change. `storedVersions` is set
//! only after every object listed was written, from a list made after the storage version was the
//! one planned with: an object written since is stored at it too.
//!
//! The list is of the whole cluster, whatever namespaces the host watches: the conversion it
//! serves is the kind's in every namespace, and so is `storedVersions`. A host whose RBAC lets
//! it list the kind in some namespaces only fails the list, and migrates nothing (its log says
//! so, once).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    core::GroupVersionKind,
};
use serde_json::json;

/// A kind whose objects are stored at versions other than its storage version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The CRD's name (`greetings.example.com`).
    pub crd: String,
    /// The kind, at its storage version.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// `status.storedVersions` as the CRD had it, which the written status must still hold
    /// the storage version of and nothing new.
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
        resource: ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural),
        namespaced: crd.spec.scope == "Namespaced",
        stored,
    })
}

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// Objects written again (or found changed since the list, so stored anew).
    pub objects: usize,
    /// The versions no longer listed as stored.
    pub dropped: Vec<String>,
}

/// Writes every object of `migration`'s kind again, then sets the CRD's
/// `status.storedVersions` to its storage version. An error names the object or the CRD; the
/// next pass starts over (objects already stored anew cost a write of nothing).
pub async fn perform(client: &Client, migration: &Migration) -> Result<Migrated, String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &migration.resource);
    let kind = &migration.resource.kind;
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(|err| format!("listing the {kind}s of CRD {}: {err}", migration.crd))?;
    let mut objects = 0;
    for object in listed.items {
        let name = object.name_any();
        let namespaced: Api<DynamicObject> = match (migration.namespaced, object.namespace()) {
            (true, Some(ns)) => Api::namespaced_with(client.clone(), &ns, &migration.resource),
            _ => api.clone(),
        };
        let Some(resource_version) = object.resource_version() else {
            continue;
        };
        let nothing = json!({"metadata": {"resourceVersion": resource_version}});
        match namespaced
            .patch(&name, &PatchParams::default(), &Patch::Merge(&nothing))
            .await
        {
            Ok(_) => objects += 1,
            // Changed since the list (stored anew by that write) or gone.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => objects += 1,
            Err(err) => {
                let at = object
                    .namespace()
                    .map(|ns| format!("{ns}/{name}"))
                    .unwrap_or(name);
                return Err(format!(
                    "storing {kind} {at} at {} (CRD {}): {err}",
                    migration.storage(),
                    migration.crd
                ));
            }
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let status = json!({"status": {"storedVersions": [migration.storage()]}});
    crds.patch_status(
        &migration.crd,
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .map_err(|err| {
        format!(
            "setting status.storedVersions of CRD {} to [{}]: {err}",
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
            "metadata": {"name": "greetings.example.com"},
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
        assert_eq!(migration.storage(), "v1");
        assert_eq!(migration.resource.api_version, "example.com/v1");
        assert_eq!(migration.resource.plural, "greetings");
        assert!(migration.namespaced);
        // Stored at the old version only (storage moved, nothing written since): migrates too.
        assert!(plan(&crd("v1", &["v1alpha1"])?).is_some());
        Ok(())
    }
}
