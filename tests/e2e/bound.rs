//! Your own kinds, served (issue 40): a team's kind, its CRD and ClusterRole printed by
//! `wasmop plugin crd`, bound to the kvstore plugin by a `PluginBinding`. The binding is checked
//! (Valid; a second binding of the kind and a binding of a kind with no CRD are refused, saying
//! why); an instance whose author wrote only `spec` becomes Ready (`kubectl wait`), its objects
//! stamped with its own kind; a change of its spec rolls out; a push of the plugin reaches it
//! live; deleting the binding waits for the last instance, whose deletion still runs the
//! plugin's `finalize`.
//!
//! Group and binding names are unique per run. The hosts of other tests running meanwhile
//! (each watching its own namespace) see the bindings too: they check them and write the same
//! status, and serve no instance here.

use std::{process::Command, time::Duration};

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, PersistentVolumeClaim},
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
};
use serde::Deserialize as _;
use serde_json::json;
use wasmop_host::{app::App, binding::PluginBinding, plugin::source::oci::OciSource};

use crate::{
    apps::{BINDING_LABEL, Host, app, push_kvstore, ready_at, wait_app},
    harness::{
        Local, TestNamespace, component, kubectl, kubectl_ok, metric_sum, plugin_configmap, unique,
        wait_for, wasmop_binary,
    },
};

/// Deletes what the test made outside its namespace when dropped, even when it failed: the
/// bindings (their finalizer first: no host may be left to release it), the CRD and the role.
pub(crate) struct Cleanup {
    local: Local,
    bindings: Vec<String>,
    crd: String,
    role: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for binding in &self.bindings {
            if let Ok(mut patch) = kubectl(&self.local) {
                let _ = patch
                    .args(["patch", "pluginbinding", binding, "--type=merge", "-p"])
                    .arg(r#"{"metadata":{"finalizers":null}}"#)
                    .output();
            }
            if let Ok(mut delete) = kubectl(&self.local) {
                let _ = delete
                    .args([
                        "delete",
                        "--ignore-not-found",
                        "--wait=false",
                        "pluginbinding",
                    ])
                    .arg(binding)
                    .output();
            }
        }
        if let Ok(mut delete) = kubectl(&self.local) {
            let _ = delete
                .args(["delete", "--ignore-not-found", "--wait=false"])
                .arg(format!("customresourcedefinition/{}", self.crd))
                .arg(format!("clusterrole/{}", self.role))
                .output();
        }
    }
}

/// The `Valid` condition of binding `name` once it has one: status, reason, message.
pub(crate) async fn valid(
    api: &Api<PluginBinding>,
    name: &str,
) -> anyhow::Result<(String, String, String)> {
    wait_for(
        &format!("PluginBinding {name} to be checked"),
        Duration::from_secs(60),
        || async {
            let binding = api.get(name).await?;
            Ok(binding.status.and_then(|s| {
                s.conditions
                    .into_iter()
                    .find(|c| c.type_ == "Valid")
                    .map(|c| (c.status, c.reason, c.message))
            }))
        },
    )
    .await
}

/// A binding of `group`'s `KVStore` to `image`, for the host of namespace `ns`.
pub(crate) fn binding(
    name: &str,
    ns: &str,
    group: &str,
    image: &str,
) -> anyhow::Result<PluginBinding> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
        "metadata": {"name": name, "labels": {BINDING_LABEL: ns}},
        "spec": {
            "kind": {"group": group, "version": "v1", "kind": "KVStore"},
            "plugin": {"image": image},
        },
    }))?)
}

/// `kubectl wait --for=condition=Ready` of `resource` (`<plural>.<group>/<name>`) in
/// `namespace`, for up to 120 s.
pub(crate) async fn wait_ready(
    local: &Local,
    namespace: &str,
    resource: &str,
) -> anyhow::Result<()> {
    kubectl_ok(
        local,
        &[
            "wait",
            "-n",
            namespace,
            "--for=condition=Ready",
            "--timeout=120s",
            resource,
        ],
    )
    .await
    .map(drop)
}

/// The condition `type_` of the instance `object`, whole (`null` when it has none).
fn condition_json(object: &DynamicObject, type_: &str) -> serde_json::Value {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_default()
}

/// A condition of the instance `object`: status, reason.
fn condition(object: &DynamicObject, type_: &str) -> Option<(String, String)> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// This run's own `KVStore` kind (in the group `<id>.e2e.example.com`) for the kvstore plugin
/// ([`bound_kind`]).
pub(crate) async fn kvstore_kind(
    local: &Local,
    id: &str,
    bindings: &[&str],
) -> anyhow::Result<(String, Cleanup)> {
    bound_kind(local, id, "kvstore.wasm", "KVStore", bindings).await
}

/// This run's own kind `kind` (in the group `<id>.e2e.example.com`) for the plugin `component`:
/// its CRD and the host's role for it applied as `wasmop plugin crd` prints them, the CRD
/// Established. The cleanup deletes both, and the named bindings, when dropped.
async fn bound_kind(
    local: &Local,
    id: &str,
    component: &str,
    kind: &str,
    bindings: &[&str],
) -> anyhow::Result<(String, Cleanup)> {
    bound_kind_with(local, id, component, kind, bindings, &[]).await
}

/// [`bound_kind`], with `extra` arguments for `wasmop plugin crd` (`--version v1alpha1,v1`).
pub(crate) async fn bound_kind_with(
    local: &Local,
    id: &str,
    component: &str,
    kind: &str,
    bindings: &[&str],
    extra: &[&str],
) -> anyhow::Result<(String, Cleanup)> {
    let group = format!("{id}.e2e.example.com");
    let crd_name = format!("{}s.{group}", kind.to_ascii_lowercase());
    let cleanup = Cleanup {
        local: Local::discover()?,
        bindings: bindings.iter().map(|b| b.to_string()).collect(),
        crd: crd_name.clone(),
        role: format!("wasmop-{crd_name}"),
    };
    apply_crd(local, id, component, kind, extra).await?;
    Ok((group, cleanup))
}

/// `wasmop plugin crd COMPONENT --group <id>.e2e.example.com --kind KIND EXTRA...` applied
/// (server-side, as `wasmop-e2e`), and the CRD Established: the first time, or again with other
/// versions.
pub(crate) async fn apply_crd(
    local: &Local,
    id: &str,
    component: &str,
    kind: &str,
    extra: &[&str],
) -> anyhow::Result<()> {
    let group = format!("{id}.e2e.example.com");
    let crd_name = format!("{}s.{group}", kind.to_ascii_lowercase());
    let plugin = crate::harness::component_path(component)?;
    let out = Command::new(wasmop_binary()?)
        .args(["plugin", "crd"])
        .arg(&plugin)
        .args(["--group", &group, "--kind", kind])
        .args(extra)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "wasmop plugin crd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::env::temp_dir().join(format!("{id}.yaml"));
    std::fs::write(&file, &out.stdout)?;
    let applied = kubectl_ok(
        local,
        &["apply", "--server-side", "--field-manager=wasmop-e2e", "-f"]
            .into_iter()
            .chain([file.to_str().context("a UTF-8 path")?])
            .collect::<Vec<_>>(),
    )
    .await;
    let _ = std::fs::remove_file(&file);
    applied?;
    kubectl_ok(
        local,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("customresourcedefinition/{crd_name}"),
        ],
    )
    .await?;
    Ok(())
}

/// The API of `group`'s `KVStore` instances in `namespace`.
pub(crate) fn instances_in(client: &Client, namespace: &str, group: &str) -> Api<DynamicObject> {
    instances_of(client, namespace, group, "KVStore")
}

/// The API of `group`'s `kind` instances in `namespace`.
pub(crate) fn instances_of(
    client: &Client,
    namespace: &str,
    group: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, "v1", kind),
        &format!("{}s", kind.to_ascii_lowercase()),
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Creates the instance `cache` of `group`'s `KVStore` (one replica, claims deleted with it) in
/// `namespace` and waits until `kubectl wait` sees it Ready.
async fn create_cache(
    local: &Local,
    instances: &Api<DynamicObject>,
    namespace: &str,
    group: &str,
) -> anyhow::Result<()> {
    let instance: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "KVStore",
        "metadata": {"name": "cache"},
        "spec": {"version": "7.2.4", "replicas": 1, "retention": "Delete"},
    }))?;
    instances.create(&PostParams::default(), &instance).await?;
    wait_ready(local, namespace, &format!("kvstores.{group}/cache")).await
}

/// Sets the instance `cache` to two replicas and waits for its StatefulSet to follow (`what`
/// says under whom).
async fn scale_cache(
    instances: &Api<DynamicObject>,
    sets: &Api<StatefulSet>,
    what: &str,
) -> anyhow::Result<()> {
    instances
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 2}})),
        )
        .await?;
    wait_for(what, Duration::from_secs(60), || async {
        let set = sets.get("cache").await?;
        Ok((set.spec.replicas == Some(2)).then_some(()))
    })
    .await
}

#[tokio::test]
async fn a_kind_bound_to_a_plugin_is_served_like_an_app() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-bound").await?;
    let id = unique("bound");
    let (again_name, nothing_name) = (format!("{id}-again"), format!("{id}-nothing"));
    let (group, mut cleanup) =
        kvstore_kind(&local, &id, &[&id, &again_name, &nothing_name]).await?;

    let image = push_kvstore(&local).await?;
    let host = Host::start(&local, &ns.name).await?;
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &binding(&id, &ns.name, &group, &image)?,
        )
        .await?;
    let (status, reason, message) = valid(&bindings, &id).await?;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Bound"),
        "{message}"
    );
    let held = bindings.get(&id).await?;
    assert_eq!(
        held.status.as_ref().and_then(|s| s.resource.as_deref()),
        Some("kvstores")
    );

    // A second binding of the kind (another version) takes nothing over; a kind without a CRD
    // cannot be bound. Both say so.
    let mut again = binding(&format!("{id}-again"), &ns.name, &group, &image)?;
    again.spec.kind.version = "v2".into();
    bindings.create(&PostParams::default(), &again).await?;
    let (status, reason, message) = valid(&bindings, &format!("{id}-again")).await?;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AlreadyBound")
    );
    assert!(
        message.contains(&format!("PluginBinding {id}")),
        "{message}"
    );
    let nothing = binding(
        &format!("{id}-nothing"),
        &ns.name,
        &format!("no-{group}"),
        &image,
    )?;
    bindings.create(&PostParams::default(), &nothing).await?;
    let (status, reason, message) = valid(&bindings, &format!("{id}-nothing")).await?;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "KindNotFound")
    );
    assert!(message.contains("wasmop plugin crd"), "{message}");
    for name in [format!("{id}-again"), format!("{id}-nothing")] {
        bindings.delete(&name, &DeleteParams::default()).await?;
    }
    // The first still serves its kind.
    assert_eq!(valid(&bindings, &id).await?.0, "True");

    // An instance: its author writes the version and the configuration, nothing else.
    let instances = instances_in(&client, &ns.name, &group);
    create_cache(&local, &instances, &ns.name, &group).await?;
    let served = instances.get("cache").await?;
    let status = &served.data["status"];
    assert_eq!(status["version"], "7.2.4", "{status}");
    assert_eq!(
        status["observedGeneration"].as_i64(),
        served.metadata.generation
    );
    assert_eq!(
        condition(&served, "Stalled"),
        Some(("False".to_string(), "Available".to_string())),
        "{status}"
    );
    let first_digest = status["plugin"]["digest"].clone();
    assert!(first_digest.is_string(), "{status}");
    assert!(
        finalizers(&served).contains(&"wasmop.dev/cleanup".to_string()),
        "{:?}",
        served.metadata.finalizers
    );

    // Its objects are its own: owned by the KVStore and labelled with its kind.
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let set = sets.get("cache").await?;
    let owner = set
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .context("the StatefulSet has a controller")?;
    assert_eq!(
        (owner.api_version.as_str(), owner.kind.as_str()),
        (format!("{group}/v1").as_str(), "KVStore")
    );
    assert_eq!(
        set.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("wasmop.dev/parent-kind"))
            .map(String::as_str),
        Some(format!("KVStore.{group}").as_str())
    );
    let listed = kubectl_ok(
        &local,
        &["get", "-n", &ns.name, &format!("kvstores.{group}")],
    )
    .await?;
    let row = listed
        .lines()
        .find(|l| l.starts_with("cache"))
        .with_context(|| format!("kubectl get lists the instance: {listed}"))?;
    assert!(
        row.contains("True") && row.contains("7.2.4"),
        "Ready and Version columns: {listed}"
    );

    // A change of its spec rolls out.
    scale_cache(&instances, &sets, "the StatefulSet to follow spec.replicas").await?;

    // A push of the binding's plugin reaches the instance live.
    OciSource::new(None, vec![])?
        .push_unchecked(&image, &component("kvstore-v2.wasm")?)
        .await?;
    wait_for(
        "the instance to be served by v2",
        Duration::from_secs(90),
        || async {
            let served = instances.get("cache").await?;
            let digest = served.data["status"]["plugin"]["digest"].clone();
            Ok((digest.is_string() && digest != first_digest).then_some(()))
        },
    )
    .await?;

    // Deleting the binding waits for the instance; the instance's deletion still runs the
    // plugin's finalize (its claims go with `retention: Delete`), then the binding goes.
    bindings.delete(&id, &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = bindings.get(&id).await?;
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(finalizers_of(&waiting), ["wasmop.dev/instances"]);
    instances.delete("cache", &DeleteParams::default()).await?;
    wait_for(
        "the instance to be finalized",
        Duration::from_secs(90),
        || async { Ok(instances.get_opt("cache").await?.is_none().then_some(())) },
    )
    .await?;
    wait_for("the binding to go", Duration::from_secs(60), || async {
        Ok(bindings.get_opt(&id).await?.is_none().then_some(()))
    })
    .await?;
    let events = kubectl_ok(
        &local,
        &[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "involvedObject.kind=KVStore,involvedObject.name=cache",
            "-o",
            "jsonpath={.items[*].reason}",
        ],
    )
    .await?;
    assert!(
        events.contains("Finalized"),
        "events on the instance: {events}"
    );

    // With the binding gone, the kind is served no more: a new instance gets no finalizer and
    // no status (its controller stopped; the host runs on).
    instances
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": format!("{group}/v1"), "kind": "KVStore",
                "metadata": {"name": "late"},
                "spec": {"version": "7.2.4", "replicas": 1},
            }))?,
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let late = instances.get("late").await?;
    assert!(
        finalizers(&late).is_empty(),
        "{:?}",
        late.metadata.finalizers
    );
    assert!(
        late.data.get("status").is_none(),
        "{:?}",
        late.data.get("status")
    );
    instances.delete("late", &DeleteParams::default()).await?;

    drop(host);
    cleanup.bindings.clear();
    drop(cleanup);
    ns.delete().await
}

/// An App and a KVStore of one name in one namespace, the same plugin behind both: the
/// second to plan a StatefulSet of that name is refused (not this KVStore's), never takes the
/// App's objects over, and its deletion (`retention: Delete`) leaves the App's claims alone:
/// the parent-kind label keeps them apart. Instances of another name are served beside them.
#[tokio::test]
async fn an_app_and_an_instance_of_one_name_keep_apart() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-twins").await?;
    let id = unique("twins");
    let (group, mut cleanup) = kvstore_kind(&local, &id, &[&id]).await?;
    let image = push_kvstore(&local).await?;
    let host = Host::start(&local, &ns.name).await?;
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &binding(&id, &ns.name, &group, &image)?,
        )
        .await?;
    assert_eq!(valid(&bindings, &id).await?.0, "True");

    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let config = json!({"replicas": 1, "retention": "Delete"});
    apps.create(
        &PostParams::default(),
        &app("twin", json!({"image": image}), "7.2.4", config)?,
    )
    .await?;
    wait_app(
        &apps,
        "twin",
        "Ready",
        Duration::from_secs(120),
        ready_at(1, "7.2.4"),
    )
    .await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the App's claim", Duration::from_secs(60), || async {
        Ok((pvcs.get_opt("data-twin-0").await?).map(|_| ()))
    })
    .await?;

    let instances = instances_in(&client, &ns.name, &group);
    for name in ["twin", "other"] {
        let instance: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "KVStore",
            "metadata": {"name": name},
            "spec": {"version": "7.2.4", "replicas": 1, "retention": "Delete"},
        }))?;
        instances.create(&PostParams::default(), &instance).await?;
    }
    let refused = wait_for(
        "the twin KVStore to be refused",
        Duration::from_secs(60),
        || async {
            let twin = instances.get("twin").await?;
            Ok(condition(&twin, "Stalled")
                .filter(|c| c.0 == "True")
                .map(|_| twin))
        },
    )
    .await?;
    let ready = condition_json(&refused, "Ready");
    let message = ready["message"].as_str().unwrap_or_default();
    assert_eq!(ready["reason"], "PlanRejected", "{ready}");
    // The claim its StatefulSet would take is checked first (a read, before anything is
    // written); the App's objects the plan names would be refused next.
    assert!(
        message.contains("not managed by this KVStore")
            || message.contains("which exists and is not this KVStore's"),
        "{message}"
    );
    wait_ready(&local, &ns.name, &format!("kvstores.{group}/other")).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let owner_kind = |set: &StatefulSet| {
        set.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.kind.clone())
    };
    assert_eq!(owner_kind(&sets.get("twin").await?).as_deref(), Some("App"));
    assert_eq!(
        owner_kind(&sets.get("other").await?).as_deref(),
        Some("KVStore")
    );

    // The twin KVStore's deletion runs its finalize, which decides about its own claims
    // (none): the App's claim and objects stay, and the App stays Ready.
    instances.delete("twin", &DeleteParams::default()).await?;
    wait_for(
        "the twin KVStore to go",
        Duration::from_secs(60),
        || async { Ok(instances.get_opt("twin").await?.is_none().then_some(())) },
    )
    .await?;
    assert!(
        pvcs.get_opt("data-twin-0").await?.is_some(),
        "the App's claim was deleted"
    );
    assert_eq!(owner_kind(&sets.get("twin").await?).as_deref(), Some("App"));
    let app = apps.get("twin").await?;
    assert!(ready_at(1, "7.2.4")(&app), "{:?}", app.status);

    instances.delete("other", &DeleteParams::default()).await?;
    apps.delete("twin", &DeleteParams::default()).await?;
    wait_for(
        "the instances and the App to go",
        Duration::from_secs(90),
        || async {
            let left = instances.list(&Default::default()).await?.items.len()
                + apps.list(&Default::default()).await?.items.len();
            Ok((left == 0).then_some(()))
        },
    )
    .await?;
    bindings.delete(&id, &DeleteParams::default()).await?;
    wait_for("the binding to go", Duration::from_secs(60), || async {
        Ok(bindings.get_opt(&id).await?.is_none().then_some(()))
    })
    .await?;
    drop(host);
    cleanup.bindings.clear();
    drop(cleanup);
    ns.delete().await
}

/// A host that may not serve the kind says so on the binding (`Forbidden`, naming the verbs
/// and the role to apply), and serves it once the role is bound, without a restart. The host
/// runs as a ServiceAccount with the install's rights (`wasmop-base` and `wasmop-cluster`, as
/// `deploy/base/rbac.yaml` has them) and nothing on the kind.
#[tokio::test]
async fn a_host_without_rights_on_the_kind_says_so_until_it_has_them() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-bound-rbac").await?;
    let id = unique("bound-rbac");
    let (group, mut cleanup) = kvstore_kind(&local, &id, &[&id]).await?;
    let account = "host";
    let roles = Rights {
        local: Local::discover()?,
        names: vec![format!("{id}-host"), format!("{id}-kind")],
    };
    kubectl_ok(
        &local,
        &["-n", &ns.name, "create", "serviceaccount", account],
    )
    .await?;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/base/rbac.yaml"
    ))?;
    let mut rules: Vec<serde_json::Value> = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_json::Value::deserialize(doc)?;
        if doc["kind"] == "ClusterRole"
            && ["wasmop-base", "wasmop-cluster"]
                .contains(&doc["metadata"]["name"].as_str().unwrap_or_default())
        {
            rules.extend(doc["rules"].as_array().cloned().unwrap_or_default());
        }
    }
    anyhow::ensure!(
        !rules.is_empty(),
        "no rules read from deploy/base/rbac.yaml"
    );
    let subject = json!([{"kind": "ServiceAccount", "name": account, "namespace": ns.name}]);
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": format!("{id}-host")}, "rules": rules,
    }))?;
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await?;
    let role_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    role_bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{id}-host")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{id}-host")},
                "subjects": subject,
            }))?,
        )
        .await?;
    let kubeconfig = crate::deploy::token_kubeconfig(&local, &ns.name, account)?;
    let host = Host::start_as(&kubeconfig, &ns.name, &["--skip-crd-install"], &id).await?;

    let image = push_kvstore(&local).await?;
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &binding(&id, &ns.name, &group, &image)?,
        )
        .await?;
    let (status, reason, message) = valid(&bindings, &id).await?;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Forbidden"),
        "{message}"
    );
    assert!(
        message.contains("list kvstores") && message.contains(&format!("wasmop-kvstores.{group}")),
        "{message}"
    );

    // The role `wasmop plugin crd` printed, bound: served at the next check.
    role_bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{id}-kind")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("wasmop-kvstores.{group}")},
                "subjects": subject,
            }))?,
        )
        .await?;
    wait_for(
        // RBAC changes are not watched: a refused binding is checked again at every recheck
        // (15 s).
        "the binding to be valid",
        Duration::from_secs(120),
        || async {
            let (status, ..) = valid(&bindings, &id).await?;
            Ok((status == "True").then_some(()))
        },
    )
    .await?;
    let instances = instances_in(&client, &ns.name, &group);
    let instance: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "KVStore",
        "metadata": {"name": "cache"},
        "spec": {"version": "7.2.4", "replicas": 1},
    }))?;
    instances.create(&PostParams::default(), &instance).await?;
    wait_ready(&local, &ns.name, &format!("kvstores.{group}/cache")).await?;
    instances.delete("cache", &DeleteParams::default()).await?;
    wait_for("the instance to go", Duration::from_secs(60), || async {
        Ok(instances.get_opt("cache").await?.is_none().then_some(()))
    })
    .await?;
    bindings.delete(&id, &DeleteParams::default()).await?;
    wait_for("the binding to go", Duration::from_secs(60), || async {
        Ok(bindings.get_opt(&id).await?.is_none().then_some(()))
    })
    .await?;
    drop(host);
    let _ = std::fs::remove_file(&kubeconfig);
    cleanup.bindings.clear();
    drop(cleanup);
    drop(roles);
    ns.delete().await
}

/// A bound kind's plans meet the guard under the namespace's policy as an App's do: an
/// instance whose plan reaches into kube-system is Stalled with the rule's reason, and nothing
/// of it is applied. The binding's plugin comes from a ConfigMap in its `sourceNamespace`, a
/// namespace of its own; the instance's namespace holds a ConfigMap of the same name and key
/// with another plugin, which is never read. A second kind, bound to hello, is served beside it.
#[tokio::test]
async fn a_bound_kinds_plans_meet_the_guard() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-bound-guard").await?;
    let source = TestNamespace::create(&client, "e2e-bound-source").await?;
    let id = unique("bound-guard");
    let greet = format!("{id}-greet");
    let (group, mut cleanup) =
        bound_kind(&local, &id, "fault_plugin.wasm", "Fault", &[&id]).await?;
    let (greet_group, mut greet_cleanup) =
        bound_kind(&local, &greet, "hello.wasm", "Greeting", &[&greet]).await?;
    Api::<ConfigMap>::namespaced(client.clone(), &source.name)
        .create(
            &PostParams::default(),
            &plugin_configmap("plugin", "fault_plugin.wasm")?,
        )
        .await?;
    // The instances' author's own ConfigMap of that name: never the code that runs.
    Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &plugin_configmap("plugin", "hello.wasm")?,
        )
        .await?;
    let host = Host::start(&local, &ns.name).await?;
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    let mut faulty = binding(&id, &ns.name, &group, "unused")?;
    faulty.spec.kind.kind = "Fault".into();
    faulty.spec.plugin =
        serde_json::from_value(json!({"configMap": {"name": "plugin", "key": "plugin.wasm"}}))?;
    faulty.spec.source_namespace = Some(source.name.clone());
    bindings.create(&PostParams::default(), &faulty).await?;
    let image = format!("{}/e2e/{}:1.0", local.registry, unique("hello"));
    OciSource::new(None, vec![])?
        .push_unchecked(&image, &component("hello.wasm")?)
        .await?;
    let mut greeting = binding(&greet, &ns.name, &greet_group, &image)?;
    greeting.spec.kind.kind = "Greeting".into();
    bindings.create(&PostParams::default(), &greeting).await?;
    for name in [&id, &greet] {
        let (status, _, message) = valid(&bindings, name).await?;
        assert_eq!(status, "True", "{name}: {message}");
    }

    let faulties = instances_of(&client, &ns.name, &group, "Fault");
    faulties
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": format!("{group}/v1"), "kind": "Fault",
                "metadata": {"name": "bad"},
                "spec": {"version": "1.0.0", "fault": "forbidden"},
            }))?,
        )
        .await?;
    let stalled = wait_for(
        "the instance to be Stalled",
        Duration::from_secs(60),
        || async {
            let bad = faulties.get("bad").await?;
            Ok(condition(&bad, "Stalled")
                .filter(|c| c.0 == "True")
                .map(|_| bad))
        },
    )
    .await?;
    let ready = condition_json(&stalled, "Ready");
    assert_eq!(ready["reason"], "PlanRejected", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("kube-system"),
        "{ready}"
    );
    // The fault plugin's digest, not hello's: the binding's ConfigMap was read.
    let plugin = &stalled.data["status"]["plugin"];
    let fault_digest = format!(
        "sha256:{}",
        sha256_hex(&crate::harness::component("fault_plugin.wasm")?)
    );
    assert_eq!(plugin["digest"], fault_digest.as_str(), "{plugin}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        cms.get_opt("fault").await?.is_none(),
        "a refused plan applied its ConfigMap"
    );

    let greetings = instances_of(&client, &ns.name, &greet_group, "Greeting");
    greetings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": format!("{greet_group}/v1"), "kind": "Greeting",
                "metadata": {"name": "hi"},
                "spec": {"version": "1.0.0"},
            }))?,
        )
        .await?;
    wait_ready(&local, &ns.name, &format!("greetings.{greet_group}/hi")).await?;

    for (api, name) in [(&faulties, "bad"), (&greetings, "hi")] {
        api.delete(name, &DeleteParams::default()).await?;
    }
    wait_for("the instances to go", Duration::from_secs(60), || async {
        let left = faulties.list(&Default::default()).await?.items.len()
            + greetings.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    for name in [&id, &greet] {
        bindings.delete(name, &DeleteParams::default()).await?;
    }
    wait_for("the bindings to go", Duration::from_secs(60), || async {
        let left =
            bindings.get_opt(&id).await?.is_some() || bindings.get_opt(&greet).await?.is_some();
        Ok((!left).then_some(()))
    })
    .await?;
    drop(host);
    cleanup.bindings.clear();
    greet_cleanup.bindings.clear();
    drop(cleanup);
    drop(greet_cleanup);
    source.delete().await?;
    ns.delete().await
}

/// Warm standby for bound kinds (issue 42): a standby knows the bound kinds from the bindings'
/// status the leader wrote, fills the caches of their instances and loads their plugin while it
/// waits, and reports ready only then, reconciling and writing nothing. Once it leads, it
/// serves the instances with what it loaded as a standby: no load after taking the lease, and a
/// change of an instance's spec rolls out.
#[tokio::test]
async fn a_standby_is_warm_for_bound_kinds_too() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;

    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-bound-warm").await?;
    let id = unique("warm");
    let (group, _cleanup) = kvstore_kind(&local, &id, &[&id]).await?;
    let image = push_kvstore(&local).await?;
    let args = ["--leader-elect", "--lease-namespace", ns.name.as_str()];
    let first = Host::start_with(&local, &ns.name, &args, &format!("{}-a", ns.name)).await?;
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &binding(&id, &ns.name, &group, &image)?,
        )
        .await?;
    let (status, _, message) = valid(&bindings, &id).await?;
    assert_eq!(status, "True", "{message}");
    let instances = instances_in(&client, &ns.name, &group);
    create_cache(&local, &instances, &ns.name, &group).await?;

    // Ready means warm: the standby loaded the binding's plugin (from the registry, its cache
    // being its own) before /readyz answered, and did nothing else.
    let second = Host::start_with(&local, &ns.name, &args, &format!("{}-b", ns.name)).await?;
    let metrics = second.url("/metrics");
    let loads = metric_sum(&metrics, "wasmop_plugin_loads_total").await?;
    assert!(
        loads > 0.0,
        "a standby reports ready once the plugin of the bound kind is loaded"
    );
    assert_eq!(metric_sum(&metrics, "wasmop_reconcile_total").await?, 0.0);
    assert_eq!(metric_sum(&metrics, "wasmop_api_writes_total").await?, 0.0);

    // The leader killed, the standby takes the lease once it runs out, and reconciles the
    // instance with the plugin it holds.
    first.kill().await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let next = format!("{}-b", ns.name);
    wait_for(
        "the standby to take the killed leader's lease",
        Duration::from_secs(40),
        || async {
            let holder = leases
                .get_opt("wasmop-leader")
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity);
            Ok(holder.filter(|h| *h == next).map(|_| ()))
        },
    )
    .await?;
    wait_for(
        "the new leader to reconcile the instance",
        Duration::from_secs(20),
        || async {
            Ok((metric_sum(&metrics, "wasmop_reconcile_total").await? > 0.0).then_some(()))
        },
    )
    .await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    scale_cache(
        &instances,
        &sets,
        "the StatefulSet to follow spec.replicas under the new leader",
    )
    .await?;
    assert_eq!(
        metric_sum(&metrics, "wasmop_plugin_loads_total").await?,
        loads,
        "the new leader serves with the plugin it loaded as a standby"
    );
    // Deleted under the new leader: its `finalize` runs there.
    instances.delete("cache", &DeleteParams::default()).await?;
    wait_for(
        "the instance to be deleted under the new leader",
        Duration::from_secs(60),
        || async { Ok(instances.get_opt("cache").await?.is_none().then_some(())) },
    )
    .await?;
    drop(second);
    ns.delete().await
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Deletes the named ClusterRoles and ClusterRoleBindings when dropped.
struct Rights {
    local: Local,
    names: Vec<String>,
}

impl Drop for Rights {
    fn drop(&mut self) {
        for name in &self.names {
            if let Ok(mut delete) = kubectl(&self.local) {
                let _ = delete
                    .args(["delete", "--ignore-not-found", "--wait=false"])
                    .arg(format!("clusterrole/{name}"))
                    .arg(format!("clusterrolebinding/{name}"))
                    .output();
            }
        }
    }
}

fn finalizers(object: &DynamicObject) -> Vec<String> {
    object.metadata.finalizers.clone().unwrap_or_default()
}

fn finalizers_of(binding: &PluginBinding) -> Vec<String> {
    binding.metadata.finalizers.clone().unwrap_or_default()
}
