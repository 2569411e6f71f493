//! The admission policy `deploy/` and the chart ship (`deploy/base/admission-policy.yaml`) on the
//! real API server: impersonating the host's ServiceAccount, writes of pods that break a rule of
//! Pod Security Standards `baseline` (privileged and host-level pods, and each of the other rules
//! alone), writes in the protected namespaces, and writes of CRDs and webhook configurations
//! beyond what the host's webhooks need are refused by the API server itself, with the policy's
//! message naming the field, while a hardened workload, what `baseline` allows next to each rule,
//! the host's own Leases and Events, the CRD conversions and webhook configurations the host
//! makes, and every other identity's writes are admitted.
//! (That the chart's copy of the policy is the same object is `helm.rs`'s
//! `the_chart_lints_and_renders_what_kustomize_does`.)
//!
//! The policy and its binding are cluster-scoped, so the test installs a renamed copy that holds
//! an identity of its own (a ServiceAccount's name in a throw-away namespace, impersonated):
//! concurrent tests, and an installed host, are never held by it. Every probe is a dry run (the API server runs admission
//! for dry runs too), so nothing is left behind but what the test deletes.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use k8s_openapi::{
    api::{
        admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
            ValidatingWebhookConfiguration,
        },
        coordination::v1::Lease,
        core::v1::{Pod, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Config,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

use wasmop_host::{
    app::App,
    binding::PluginBinding,
    webhook::configs::{
        CONVERSION_MANAGER, Endpoint, Wanted, desired_conversion, desired_validating,
    },
};

use crate::{
    apps::{Host, create_one_replica_app, push_kvstore},
    harness::{Local, TestNamespace, unique, wait_for},
};

const POLICY_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/base/admission-policy.yaml"
);

/// The identity the shipped policy holds (the base installs the host in `wasmop-system`).
const HOST: &str = "system:serviceaccount:wasmop-system:wasmop";

/// How long a new policy and binding may take to hold (the API server's informers).
const ACTIVE_WITHIN: Duration = Duration::from_secs(30);

/// A client for the local cluster that acts as `user` (impersonation; the local admin is in
/// `system:masters`, which may impersonate anyone). It reads the kubeconfig `Local::client`
/// checked for the test's admin client, so it reaches the same local API server.
async fn client_as(local: &Local, user: &str) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(&local.kubeconfig)
        .with_context(|| format!("reading {}", local.kubeconfig.display()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("building a client config from the local kubeconfig")?;
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).context("building an impersonating client")
}

/// The policy and binding of `deploy/base/admission-policy.yaml`, named `name` and holding
/// `identity` instead of the host's ServiceAccount.
fn rendered_policy(
    name: &str,
    identity: &str,
) -> anyhow::Result<(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding)> {
    let text = std::fs::read_to_string(POLICY_FILE)?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    let [mut policy, mut binding] = <[Value; 2]>::try_from(docs)
        .map_err(|docs| anyhow::anyhow!("{POLICY_FILE}: {} objects, not 2", docs.len()))?;
    anyhow::ensure!(policy["kind"] == "ValidatingAdmissionPolicy", "{policy}");
    anyhow::ensure!(
        binding["kind"] == "ValidatingAdmissionPolicyBinding",
        "{binding}"
    );
    anyhow::ensure!(binding["spec"]["policyName"] == policy["metadata"]["name"]);
    let mut held = 0;
    for condition in policy["spec"]["matchConditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let expression = condition["expression"].as_str().unwrap_or_default();
        if expression.contains(HOST) {
            condition["expression"] = json!(expression.replace(HOST, identity));
            held += 1;
        }
    }
    anyhow::ensure!(held == 1, "{POLICY_FILE}: no matchCondition names {HOST}");
    policy["metadata"]["name"] = json!(name);
    binding["metadata"]["name"] = json!(name);
    binding["spec"]["policyName"] = json!(name);
    Ok((
        serde_json::from_value(policy)?,
        serde_json::from_value(binding)?,
    ))
}

/// What the API server answered a dry-run create (or, with `delete`, a dry-run delete) of
/// `object` (in its namespace, if it names one): `None` when admitted, the message when the
/// admission policy refused it; any other error is the test's.
async fn dry_run(client: &Client, object: &Value, delete: bool) -> anyhow::Result<Option<String>> {
    let object: DynamicObject = serde_json::from_value(object.clone())?;
    let types = object.types.clone().context("apiVersion and kind")?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", types.api_version.as_str()),
    };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().context("a name")?;
    let api: Api<DynamicObject> = if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), &namespace, &resource)
    };
    let result = if delete {
        let params = DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        };
        api.delete(&name, &params).await.map(|_| ())
    } else {
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        api.create(&params, &object).await.map(|_| ())
    };
    refusal(result, &format!("{} {namespace}/{name}", types.kind))
}

/// `None` for success, the message of a refusal by a ValidatingAdmissionPolicy, or the error.
fn refusal(result: Result<(), kube::Error>, what: &str) -> anyhow::Result<Option<String>> {
    match result {
        Ok(()) => Ok(None),
        Err(kube::Error::Api(status)) if status.message.contains("ValidatingAdmissionPolicy") => {
            anyhow::ensure!(status.code == 403, "{what}: {status:?}");
            Ok(Some(status.message))
        }
        Err(err) => Err(err).with_context(|| format!("{what}: neither admitted nor refused")),
    }
}

/// Each of `refused` is refused to `client` (a dry-run create), with a message that contains
/// the object's expected text.
async fn expect_refused(client: &Client, refused: &[(Value, &str)]) -> anyhow::Result<()> {
    for (object, want) in refused {
        let what = format!("{} {}", object["kind"], object["metadata"]["name"]);
        let message = dry_run(client, object, false)
            .await?
            .with_context(|| format!("{what} was admitted"))?;
        println!("refused: {message}");
        assert!(message.contains(want), "{what}: {message}");
    }
    Ok(())
}

/// Each of `admitted` is admitted for `client` (a dry-run create).
async fn expect_admitted(client: &Client, admitted: &[Value]) -> anyhow::Result<()> {
    for object in admitted {
        let what = format!("{} {}", object["kind"], object["metadata"]["name"]);
        if let Some(message) = dry_run(client, object, false).await? {
            anyhow::bail!("{what} was refused: {message}");
        }
    }
    Ok(())
}

/// What the API server answers `host` adding an ephemeral container `debug` with
/// `security_context` (a dry run) to a running hardened Pod the admin creates in `ns`: `None`
/// when admitted, the policy's message when refused.
async fn ephemeral_container(
    admin: &Client,
    host: &Client,
    ns: &str,
    security_context: Value,
) -> anyhow::Result<Option<String>> {
    ephemeral_container_in(admin, host, ns, hardened_pod(), security_context).await
}

/// [`ephemeral_container`], added to a Pod the admin creates in `ns` with the pod spec `spec`.
async fn ephemeral_container_in(
    admin: &Client,
    host: &Client,
    ns: &str,
    spec: Value,
    security_context: Value,
) -> anyhow::Result<Option<String>> {
    let name = unique("running");
    let running: Pod = serde_json::from_value(pod(ns, &name, spec))?;
    Api::<Pod>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &running)
        .await?;
    let debug = json!({"spec": {"ephemeralContainers": [{
        "name": "debug", "image": "registry.k8s.io/pause:3.10",
        "securityContext": security_context,
    }]}});
    let params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let result = Api::<Pod>::namespaced(host.clone(), ns)
        .patch_subresource(
            "ephemeralcontainers",
            &name,
            &params,
            &Patch::Strategic(&debug),
        )
        .await
        .map(|_| ());
    refusal(result, &format!("Pod {name}/ephemeralcontainers"))
}

/// A pod spec that passes the policy (and `restricted`), with `hostUsers: false`, the safe
/// setting, and `NET_BIND_SERVICE`, a capability of the runtimes' default set.
fn hardened_pod() -> Value {
    json!({
        "hostUsers": false,
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10",
            "securityContext": {
                "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            },
        }],
    })
}

/// [`hardened_pod`] with `change` made to it, less what the API server's own validation forbids
/// next to the attacks (`hostUsers: false` with host namespaces, `allowPrivilegeEscalation:
/// false` with `privileged` or `SYS_ADMIN`), so that the policy is what refuses them.
fn attacking_pod(change: impl FnOnce(&mut Value)) -> Value {
    let mut pod = hardened_pod();
    pod.as_object_mut().map(|p| p.remove("hostUsers"));
    pod["containers"][0]["securityContext"]
        .as_object_mut()
        .map(|sc| sc.remove("allowPrivilegeEscalation"));
    change(&mut pod);
    pod
}

fn deployment(ns: &str, name: &str, pod: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    })
}

fn statefulset(ns: &str, name: &str, pod: Value) -> Value {
    let mut object = deployment(ns, name, pod);
    object["kind"] = json!("StatefulSet");
    object["spec"]["serviceName"] = json!(name);
    object
}

fn cronjob(ns: &str, name: &str, mut pod: Value) -> Value {
    pod["restartPolicy"] = json!("Never");
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {"spec": pod}}}},
    })
}

fn pod(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    })
}

/// The kinds that carry a pod spec, each with the path to it.
const CARRIERS: [(&str, &str); 8] = [
    ("Pod", "spec"),
    ("Deployment", "spec.template.spec"),
    ("StatefulSet", "spec.template.spec"),
    ("DaemonSet", "spec.template.spec"),
    ("ReplicaSet", "spec.template.spec"),
    ("ReplicationController", "spec.template.spec"),
    ("Job", "spec.template.spec"),
    ("CronJob", "spec.jobTemplate.spec.template.spec"),
];

/// An object of `kind` (one of [`CARRIERS`]) named `name` in `ns`, carrying `pod`.
fn carrier(kind: &str, ns: &str, name: &str, mut pod: Value) -> Value {
    match kind {
        "Pod" => self::pod(ns, name, pod),
        "Deployment" => deployment(ns, name, pod),
        "StatefulSet" => statefulset(ns, name, pod),
        "CronJob" => cronjob(ns, name, pod),
        "DaemonSet" | "ReplicaSet" => {
            let mut object = deployment(ns, name, pod);
            object["kind"] = json!(kind);
            object["spec"].as_object_mut().map(|s| s.remove("replicas"));
            object
        }
        "ReplicationController" => json!({
            "apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns},
            "spec": {
                "selector": {"app": name},
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
            },
        }),
        _ => {
            pod["restartPolicy"] = json!("Never");
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"template": {"spec": pod}},
            })
        }
    }
}

/// A Deployment in `ns` with a privileged container, the policy's first refusal.
fn privileged_deployment(ns: &str) -> Value {
    deployment(
        ns,
        "privileged",
        attacking_pod(|p| p["containers"][0]["securityContext"]["privileged"] = json!(true)),
    )
}

/// Installs the renamed policy and binding holding `identity`, and waits until the API server
/// refuses `identity` the `privileged` probe (once it has seen policy, binding and RBAC); returns
/// a client acting as `identity`, and the refusal's message.
async fn install_policy(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    privileged: &Value,
) -> anyhow::Result<(Client, String)> {
    let (policy, binding) = rendered_policy(name, identity)?;
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .context("the API server takes the policy")?;
    Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .context("the API server takes the binding")?;
    let host = client_as(local, identity).await?;
    let message = wait_for("the admission policy to hold", ACTIVE_WITHIN, || async {
        dry_run(&host, privileged, false).await
    })
    .await?;
    Ok((host, message))
}

/// Gives the host's ServiceAccount (`wasmop` in `system`) [`probe_rights`] and installs the
/// renamed policy holding `identity` (see [`install_policy`]): a client acting as `identity`,
/// and the message of its first refusal (a privileged Deployment in `ns`).
async fn held_host(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    system: &str,
    ns: &str,
) -> anyhow::Result<(Client, String)> {
    let (role, role_binding) = probe_rights(name, system, "wasmop")?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &role_binding)
        .await?;
    install_policy(local, admin, name, identity, &privileged_deployment(ns)).await
}

/// Rights for `account` (a ServiceAccount `namespace/name`) to make every request the test
/// probes, so that what refuses them is the policy, not RBAC.
fn probe_rights(
    name: &str,
    namespace: &str,
    account: &str,
) -> anyhow::Result<(ClusterRole, ClusterRoleBinding)> {
    let role = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
                "verbs": ["create"],
            },
            {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods", "replicationcontrollers"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "delete"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["create"]},
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "verbs": ["create", "patch", "delete"],
            },
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions/status"],
                "verbs": ["patch"],
            },
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                "verbs": ["create", "patch", "delete"],
            },
        ],
    }))?;
    let binding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }))?;
    Ok((role, binding))
}

/// The cluster-scoped objects one run creates, deleted whatever the outcome (they hold or grant
/// rights to an identity only this run uses, or are the webhook test's kind and configurations,
/// but should not pile up).
struct ClusterObjects {
    client: Client,
    name: String,
}

impl ClusterObjects {
    async fn delete(&self) {
        let params = DeleteParams::default();
        let _ = Api::<CustomResourceDefinition>::all(self.client.clone())
            .delete(&format!("widgets.{}", widget_group(&self.name)), &params)
            .await;
        let _ = Api::<CustomResourceDefinition>::all(self.client.clone())
            .delete(&format!("sprockets.{}", widget_group(&self.name)), &params)
            .await;
        for config in [format!("wasmop.{}", self.name), self.name.clone()] {
            let _ = Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
                .delete(&config, &params)
                .await;
        }
        let _ = Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &params)
            .await;
        let _ = Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .delete(&self.name, &params)
            .await;
        let _ = Api::<ClusterRoleBinding>::all(self.client.clone())
            .delete(&self.name, &params)
            .await;
        let _ = Api::<ClusterRole>::all(self.client.clone())
            .delete(&self.name, &params)
            .await;
    }
}

/// Runs `test` with the policy's scaffolding: the host's namespace (its ServiceAccount,
/// Leases) and an App's namespace it writes in, the identity of the host's ServiceAccount, and
/// a name for the policy's renamed cluster-scoped objects, which are deleted whatever `test`
/// returns (the namespaces only when it passed, to look at otherwise).
async fn under_the_policy<F, Fut>(test: F) -> anyhow::Result<()>
where
    F: FnOnce(Local, Client, Scaffold) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let local = Local::discover()?;
    let admin = local.client().await?;
    let system = TestNamespace::create(&admin, "e2e-vap-host").await?;
    let apps = TestNamespace::create(&admin, "e2e-vap").await?;
    let objects = ClusterObjects {
        client: admin.clone(),
        name: unique("e2e-wasmop-host"),
    };
    let scaffold = Scaffold {
        name: objects.name.clone(),
        identity: format!("system:serviceaccount:{}:wasmop", system.name),
        system: system.name.clone(),
        ns: apps.name.clone(),
    };
    let outcome = test(local, admin, scaffold).await;
    objects.delete().await;
    outcome?;
    apps.delete().await?;
    system.delete().await
}

/// What [`under_the_policy`] made for a test.
struct Scaffold {
    /// The name of the renamed policy and binding.
    name: String,
    /// The host's ServiceAccount, as a username.
    identity: String,
    /// The host's namespace.
    system: String,
    /// An App's namespace.
    ns: String,
}

#[tokio::test]
async fn the_api_server_refuses_the_hosts_privileged_and_protected_writes() -> anyhow::Result<()> {
    under_the_policy(|local, admin, s| async move {
        refusals(&local, &admin, &s.name, &s.identity, &s.system, &s.ns).await
    })
    .await
}

/// The test proper: installs the renamed policy, probes it as `identity`, writing in `ns` (an
/// App's namespace) and `system` (the host's own).
async fn refusals(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    system: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let (host, message) = held_host(local, admin, name, identity, system, ns).await?;
    println!("refused: {message}");
    assert!(
        message.contains(&format!("ValidatingAdmissionPolicy '{name}'")),
        "{message}"
    );
    assert!(
        message.contains(
            "privileged pod: spec.template.spec.containers[app].securityContext.privileged=true"
        ),
        "{message}"
    );

    // The policy compiled cleanly: its status reports no expression warnings.
    let status = Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .get(name)
        .await?
        .status;
    let warnings = status
        .as_ref()
        .and_then(|s| s.type_checking.as_ref())
        .and_then(|t| t.expression_warnings.clone())
        .unwrap_or_default();
    assert!(warnings.is_empty(), "type checking: {warnings:?}");

    // A privileged container in every kind that carries a pod, found at the kind's path.
    for (kind, path) in CARRIERS {
        let name = format!("privileged-{}", kind.to_lowercase());
        let privileged = attacking_pod(|p| {
            p["containers"][0]["securityContext"]["privileged"] = json!(true);
        });
        let message = dry_run(&host, &carrier(kind, ns, &name, privileged), false)
            .await?
            .with_context(|| format!("{kind} {name} was admitted"))?;
        let want =
            format!("privileged pod: {path}.containers[app].securityContext.privileged=true");
        assert!(message.contains(&want), "{kind}: {message}");
    }

    // Each rule, on one kind or another, names the field it refuses.
    let refused = [
        (
            pod(
                ns,
                "host-path",
                attacking_pod(|p| {
                    p["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
                }),
            ),
            "hostPath volume: spec.volumes[root].hostPath",
        ),
        (
            cronjob(
                ns,
                "host-network",
                attacking_pod(|p| p["hostNetwork"] = json!(true)),
            ),
            "host namespaces: spec.jobTemplate.spec.template.spec.hostNetwork=true",
        ),
        (
            deployment(
                ns,
                "host-pid-ipc",
                attacking_pod(|p| {
                    p["hostPID"] = json!(true);
                    p["hostIPC"] = json!(true);
                }),
            ),
            "host namespaces: spec.template.spec.hostPID=true, spec.template.spec.hostIPC=true",
        ),
        (
            statefulset(
                ns,
                "sys-admin",
                attacking_pod(|p| {
                    p["initContainers"] = json!([{
                        "name": "init", "image": "registry.k8s.io/pause:3.10",
                        "securityContext": {"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}},
                    }]);
                }),
            ),
            "capabilities beyond the runtime default set: \
             spec.template.spec.initContainers[init].securityContext.capabilities.add: SYS_ADMIN",
        ),
        (
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "wasmop-was-here", "namespace": "kube-system"},
            }),
            "protected namespace: the wasmop host may not CREATE configmaps in namespace kube-system",
        ),
    ];
    expect_refused(&host, &refused).await?;
    // Deleting in kube-system too (an object that exists; the dry run deletes nothing).
    let kube_system = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
    });
    let message = dry_run(&host, &kube_system, true)
        .await?
        .context("a delete in kube-system was admitted")?;
    assert!(
        message.contains("may not DELETE configmaps in namespace kube-system"),
        "{message}"
    );

    // Ephemeral containers reach a running Pod through a subresource: held the same way.
    let message = ephemeral_container(admin, &host, ns, json!({"privileged": true}))
        .await?
        .context("a privileged ephemeral container was admitted")?;
    assert!(
        message.contains(
            "privileged pod: spec.ephemeralContainers[debug].securityContext.privileged=true"
        ),
        "{message}"
    );

    // What the host does write passes: a hardened workload, a Lease in its own namespace, an
    // Event in the App's, and a cluster-scoped object (the host writes PluginPolicies' status),
    // whose request has no namespace at all.
    let admitted = [
        deployment(ns, "hardened", hardened_pod()),
        cronjob(ns, "hardened-backup", hardened_pod()),
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "wasmop-leader", "namespace": system},
            "spec": {"holderIdentity": "wasmop-0", "leaseDurationSeconds": 15},
        }),
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "hardened.1", "namespace": ns},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "wasmop.dev/host",
            "reportingInstance": "wasmop-0", "action": "Reconcile", "reason": "Applied",
            "type": "Normal", "regarding": {"kind": "Deployment", "namespace": ns, "name": "hardened"},
        }),
        json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": 0,
        }),
    ];
    expect_admitted(&host, &admitted).await?;

    // Another identity is not held: the admin may create the privileged Deployment.
    if let Some(message) = dry_run(admin, &privileged_deployment(ns), false).await? {
        anyhow::bail!("the admin was refused: {message}");
    }
    Ok(())
}

/// The rest of Pod Security Standards' `baseline` (upstream `pod-security-admission` v0.36.3,
/// the local API server's): host ports, SELinux options, sysctls, AppArmor (fields and the
/// deprecated annotations), seccomp, probe and lifecycle hosts, each refused alone on a pod
/// otherwise clean under `baseline`; what `baseline` allows next to each passes.
#[tokio::test]
async fn the_api_server_refuses_the_hosts_other_baseline_faults() -> anyhow::Result<()> {
    under_the_policy(|local, admin, s| async move {
        baseline_refusals(&local, &admin, &s.name, &s.identity, &s.system, &s.ns).await
    })
    .await
}

/// The third test proper: installs the renamed policy, probes it as `identity` in `ns`.
async fn baseline_refusals(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    system: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let (host, _) = held_host(local, admin, name, identity, system, ns).await?;
    let unconfined = json!({"container.apparmor.security.beta.kubernetes.io/app": "unconfined"});
    let refused = [
        (
            deployment(
                ns,
                "host-port",
                attacking_pod(|p| {
                    p["containers"][0]["ports"] = json!([
                        {"containerPort": 8080, "hostPort": 8080},
                        {"containerPort": 8081, "hostPort": 0},
                        {"containerPort": 8082},
                    ]);
                }),
            ),
            "host ports: spec.template.spec.containers[app].ports.hostPort: 8080",
        ),
        (
            pod(
                ns,
                "selinux-type",
                attacking_pod(|p| {
                    p["securityContext"]["seLinuxOptions"] = json!({"type": "spc_t"});
                }),
            ),
            "SELinux options: spec.securityContext.seLinuxOptions.type=spc_t",
        ),
        (
            deployment(
                ns,
                "selinux-user-role",
                attacking_pod(|p| {
                    p["containers"][0]["securityContext"]["seLinuxOptions"] =
                        json!({"type": "container_t", "user": "system_u", "role": "system_r"});
                }),
            ),
            "SELinux options: \
             spec.template.spec.containers[app].securityContext.seLinuxOptions.user=system_u, \
             spec.template.spec.containers[app].securityContext.seLinuxOptions.role=system_r",
        ),
        (
            deployment(
                ns,
                "sysctls",
                attacking_pod(|p| {
                    p["securityContext"]["sysctls"] = json!([
                        {"name": "net.ipv4.tcp_wmem", "value": "4096 16384 4194304"},
                        {"name": "kernel.msgmax", "value": "65536"},
                    ]);
                }),
            ),
            "sysctls outside the safe set: spec.template.spec.securityContext.sysctls[kernel.msgmax]",
        ),
        (
            pod(
                ns,
                "apparmor-pod-field",
                attacking_pod(|p| {
                    p["securityContext"]["appArmorProfile"] = json!({"type": "Unconfined"});
                }),
            ),
            "AppArmor profile: spec.securityContext.appArmorProfile.type=Unconfined",
        ),
        (
            statefulset(
                ns,
                "apparmor-field",
                attacking_pod(|p| {
                    p["containers"][0]["securityContext"]["appArmorProfile"] =
                        json!({"type": "Unconfined"});
                }),
            ),
            "AppArmor profile: \
             spec.template.spec.containers[app].securityContext.appArmorProfile.type=Unconfined",
        ),
        (
            annotated(
                pod(ns, "apparmor-annotation", attacking_pod(|_| {})),
                &unconfined,
            ),
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]=unconfined",
        ),
        (
            annotated(
                deployment(ns, "apparmor-annotation", attacking_pod(|_| {})),
                &unconfined,
            ),
            "AppArmor profile: spec.template.metadata.annotations\
             [container.apparmor.security.beta.kubernetes.io/app]=unconfined",
        ),
        (
            annotated(
                cronjob(ns, "apparmor-annotation", attacking_pod(|_| {})),
                &unconfined,
            ),
            "AppArmor profile: spec.jobTemplate.spec.template.metadata.annotations\
             [container.apparmor.security.beta.kubernetes.io/app]=unconfined",
        ),
        (
            deployment(
                ns,
                "seccomp-pod",
                attacking_pod(|p| {
                    p["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"});
                }),
            ),
            "seccomp profile: spec.template.spec.securityContext.seccompProfile.type=Unconfined",
        ),
        (
            cronjob(
                ns,
                "seccomp-container",
                attacking_pod(|p| {
                    p["containers"][0]["securityContext"]["seccompProfile"] =
                        json!({"type": "Unconfined"});
                }),
            ),
            "seccomp profile: spec.jobTemplate.spec.template.spec.containers[app]\
             .securityContext.seccompProfile.type=Unconfined",
        ),
        (
            deployment(
                ns,
                "probe-host",
                attacking_pod(|p| {
                    p["containers"][0]["readinessProbe"] =
                        json!({"httpGet": {"host": "10.0.0.1", "port": 8080}});
                }),
            ),
            "probe or lifecycle host: \
             spec.template.spec.containers[app].readinessProbe.httpGet.host=10.0.0.1",
        ),
        (
            pod(
                ns,
                "probe-host",
                attacking_pod(|p| {
                    p["containers"][0]["livenessProbe"] =
                        json!({"tcpSocket": {"host": "10.0.0.1", "port": 8080}});
                }),
            ),
            "probe or lifecycle host: spec.containers[app].livenessProbe.tcpSocket.host=10.0.0.1",
        ),
        (
            statefulset(
                ns,
                "lifecycle-host",
                attacking_pod(|p| {
                    p["containers"][0]["lifecycle"] =
                        json!({"preStop": {"httpGet": {"host": "example.com", "port": 80}}});
                }),
            ),
            "probe or lifecycle host: \
             spec.template.spec.containers[app].lifecycle.preStop.httpGet.host=example.com",
        ),
    ];
    expect_refused(&host, &refused).await?;

    // An ephemeral container is one of the pod's containers for these rules too.
    let message = ephemeral_container(
        admin,
        &host,
        ns,
        json!({"seccompProfile": {"type": "Unconfined"}}),
    )
    .await?
    .context("an unconfined ephemeral container was admitted")?;
    assert!(
        message.contains(
            "seccomp profile: \
             spec.ephemeralContainers[debug].securityContext.seccompProfile.type=Unconfined"
        ),
        "{message}"
    );

    // procMount: since 1.35 `baseline` lets a pod in a user namespace (`hostUsers: false`) unmask
    // /proc, and the API server itself takes `Unmasked` only there, so the policy's refusal of
    // it elsewhere cannot be reached on this API server: its own validation comes first.
    let unmasked = |p: &mut Value| {
        p["containers"][0]["securityContext"]["procMount"] = json!("Unmasked");
    };
    let err = dry_run(&host, &pod(ns, "unmasked", attacking_pod(unmasked)), false)
        .await
        .err()
        .context("Unmasked /proc outside a user namespace was admitted")?;
    assert!(
        format!("{err:#}").contains("`hostUsers` must be false to use `Unmasked`"),
        "{err:#}"
    );

    // What `baseline` allows next to each rule passes.
    let mut clean = hardened_pod();
    clean["securityContext"]["seLinuxOptions"] =
        json!({"type": "container_engine_t", "level": "s0:c123,c456"});
    clean["securityContext"]["sysctls"] = json!([
        {"name": "kernel.shm_rmid_forced", "value": "1"},
        {"name": "net.ipv4.ip_local_port_range", "value": "32768 60999"},
        {"name": "net.ipv4.tcp_syncookies", "value": "1"},
        {"name": "net.ipv4.ping_group_range", "value": "0 0"},
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "1024"},
        {"name": "net.ipv4.ip_local_reserved_ports", "value": "40000"},
        {"name": "net.ipv4.tcp_keepalive_time", "value": "600"},
        {"name": "net.ipv4.tcp_fin_timeout", "value": "30"},
        {"name": "net.ipv4.tcp_keepalive_intvl", "value": "30"},
        {"name": "net.ipv4.tcp_keepalive_probes", "value": "5"},
        {"name": "net.ipv4.tcp_rmem", "value": "4096 131072 6291456"},
        {"name": "net.ipv4.tcp_wmem", "value": "4096 16384 4194304"},
    ]);
    clean["securityContext"]["appArmorProfile"] =
        json!({"type": "Localhost", "localhostProfile": "k8s-apparmor-example"});
    let app = &mut clean["containers"][0];
    app["ports"] = json!([{"containerPort": 8080}, {"containerPort": 8081, "hostPort": 0}]);
    app["readinessProbe"] = json!({"httpGet": {"port": 8080, "path": "/ready"}});
    app["lifecycle"] = json!({"preStop": {"httpGet": {"port": 8080, "path": "/stop"}}});
    let sc = &mut app["securityContext"];
    sc["procMount"] = json!("Default");
    sc["seLinuxOptions"] = json!({"type": "container_t"});
    sc["appArmorProfile"] = json!({"type": "RuntimeDefault"});
    sc["seccompProfile"] = json!({"type": "Localhost", "localhostProfile": "profiles/audit.json"});
    // The API server wants a container's annotation and field to agree.
    let mut localhost = clean.clone();
    localhost["containers"][0]["securityContext"]["appArmorProfile"] =
        json!({"type": "Localhost", "localhostProfile": "k8s-apparmor-example"});
    let admitted = [
        annotated(
            deployment(ns, "baseline-clean", clean),
            &json!({"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"}),
        ),
        annotated(
            cronjob(ns, "baseline-clean", localhost),
            &json!({"container.apparmor.security.beta.kubernetes.io/app": "localhost/k8s-apparmor-example"}),
        ),
        // `hardened_pod` runs in a user namespace.
        pod(ns, "unmasked-in-user-namespace", {
            let mut p = hardened_pod();
            unmasked(&mut p);
            p
        }),
    ];
    expect_admitted(&host, &admitted).await
}

/// The host's own ServiceAccount stays out of workloads: in the host's namespace, a workload that
/// runs as it (by either field, in any kind that carries a pod) is refused, and so is an
/// ephemeral container added to a Pod that runs as it (the host's own); another ServiceAccount
/// there, and an account of the same name in an App's namespace, pass. And the host may create
/// no ServiceAccount token Secret, in an App's namespace or its own, while other Secrets pass.
#[tokio::test]
async fn the_api_server_keeps_the_hosts_own_account_and_tokens_from_the_host() -> anyhow::Result<()>
{
    under_the_policy(|local, admin, s| async move {
        own_account_refusals(&local, &admin, &s.name, &s.identity, &s.system, &s.ns).await
    })
    .await
}

/// The fourth test proper: installs the renamed policy, probes it as `identity` in `system` (the
/// host's namespace, whose ServiceAccount `wasmop` `identity` is) and `ns`.
async fn own_account_refusals(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    system: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let (host, _) = held_host(local, admin, name, identity, system, ns).await?;
    // The account exists, as the host's does (the API server refuses a Pod of a missing one).
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "wasmop"}}))?;
    match Api::<ServiceAccount>::namespaced(admin.clone(), system)
        .create(&PostParams::default(), &account)
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        created => {
            created?;
        }
    }
    let running_as = |field: &str, account: &str| {
        let mut pod = hardened_pod();
        pod[field] = json!(account);
        pod
    };
    let own = |path: &str| format!("the host's own ServiceAccount: {path} in namespace {system}");
    let token = |ns: &str, name: &str, account: &str| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns,
                "annotations": {"kubernetes.io/service-account.name": account}},
            "type": "kubernetes.io/service-account-token",
        })
    };
    let mut refused = Vec::new();
    for (kind, path) in CARRIERS {
        let object = carrier(
            kind,
            system,
            &format!("as-host-{}", kind.to_lowercase()),
            running_as("serviceAccountName", "wasmop"),
        );
        refused.push((object, own(&format!("{path}.serviceAccountName=wasmop"))));
    }
    refused.extend([
        (
            deployment(
                system,
                "as-host-deprecated",
                running_as("serviceAccount", "wasmop"),
            ),
            // The API server copies the deprecated field to serviceAccountName, which the
            // refusal may name instead.
            own("spec.template.spec.serviceAccount")
                .replace(&format!(" in namespace {system}"), ""),
        ),
        (
            token(ns, "app-token", "default"),
            format!(
                "ServiceAccount token Secret: the wasmop host may not CREATE secrets of type \
                 kubernetes.io/service-account-token ({ns}/app-token, for ServiceAccount default)"
            ),
        ),
        (
            token(system, "host-token", "wasmop"),
            format!("({system}/host-token, for ServiceAccount wasmop)"),
        ),
    ]);
    let refused: Vec<(Value, &str)> = refused
        .iter()
        .map(|(object, want)| (object.clone(), want.as_str()))
        .collect();
    expect_refused(&host, &refused).await?;

    // The host's own Pod: an ephemeral container added to it would run with the host's token.
    let message = ephemeral_container_in(
        admin,
        &host,
        system,
        running_as("serviceAccountName", "wasmop"),
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
    )
    .await?
    .context("an ephemeral container in a Pod running as the host was admitted")?;
    assert!(
        message.contains(&own("spec.serviceAccountName=wasmop")),
        "{message}"
    );

    // Another ServiceAccount in the host's namespace, the default one, an App's own account
    // that happens to share the name, and Secrets of other types pass.
    let admitted = [
        deployment(
            system,
            "as-other",
            running_as("serviceAccountName", "other"),
        ),
        cronjob(system, "as-default", hardened_pod()),
        deployment(ns, "as-wasmop", running_as("serviceAccountName", "wasmop")),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "opaque", "namespace": ns},
            "type": "Opaque", "stringData": {"k": "v"},
        }),
    ];
    expect_admitted(&host, &admitted).await
}

/// The API group of the webhook test's kind, `widgets.<group>` (its CRD's name), for the
/// cluster-scoped objects of the run named `name`.
fn widget_group(name: &str) -> String {
    format!("{name}.example.com")
}

/// What the API server answered `client`'s dry run of `patch` (with `params`) to the
/// cluster-scoped object `kind` `name` of `api_version`: `None` when admitted, the policy's
/// message when refused.
async fn dry_run_patch(
    client: &Client,
    api_version: &str,
    kind: &str,
    name: &str,
    patch: &Patch<Value>,
    params: PatchParams,
) -> anyhow::Result<Option<String>> {
    let (group, version) = api_version.split_once('/').context("a group/version")?;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let params = PatchParams {
        dry_run: true,
        ..params
    };
    let result = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .patch(name, &params, patch)
        .await
        .map(|_| ());
    refusal(result, &format!("{kind} {name}"))
}

/// `status.storedVersions` of a kind the host converts (a CRD of `group` in the wasmop category,
/// its conversion the Service `wasmop-webhook` of `system`, storing v1 after v1alpha1): the
/// host may drop v1alpha1 (as it does once every object is stored at v1), not the storage
/// version, not any other field of the status, and nothing once the conversion is not its own.
async fn stored_versions_refusals(
    admin: &Client,
    host: &Client,
    group: &str,
    system: &str,
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let name = format!("sprockets.{group}");
    let version = |v: &str, storage: bool| {
        json!({
            "name": v, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true,
            }},
        })
    };
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {
                "plural": "sprockets", "singular": "sprocket", "kind": "Sprocket",
                "categories": ["wasmop"],
            },
            "versions": [version("v1alpha1", true), version("v1", false)],
        },
    });
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd.clone())?,
    )
    .await?;
    // The storage version moves to v1, the conversion through the host's Service.
    crd["spec"]["versions"] = json!([version("v1alpha1", false), version("v1", true)]);
    crd["spec"]["conversion"] = json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {
                "namespace": system, "name": "wasmop-webhook", "path": format!("/convert/{name}"),
            }},
        },
    });
    crds.patch(
        &name,
        &PatchParams::apply("wasmop-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let stored = crds
        .get(&name)
        .await?
        .status
        .and_then(|s| s.stored_versions);
    assert_eq!(stored, Some(vec!["v1alpha1".into(), "v1".into()]));

    if let Some(message) =
        dry_run_patch_crd_status(host, &name, json!({"storedVersions": ["v1"]})).await?
    {
        anyhow::bail!("the host's drop of v1alpha1 from storedVersions was refused: {message}");
    }
    let message = dry_run_patch_crd_status(host, &name, json!({"storedVersions": ["v1alpha1"]}))
        .await?
        .context("the host's drop of the storage version from storedVersions was admitted")?;
    assert!(
        message.contains(&format!(
            "CustomResourceDefinition {name}: the wasmop host may only drop versions from \
             status.storedVersions of a kind in the wasmop category that it converts, keeping the \
             storage version, not set [v1alpha1, v1] to [v1alpha1]"
        )),
        "{message}"
    );
    let accepted = json!({"acceptedNames": {"plural": "sprockets", "kind": "Cog"}});
    let message = dry_run_patch_crd_status(host, &name, accepted)
        .await?
        .context("the host's change of status.acceptedNames was admitted")?;
    assert!(message.contains("not status.acceptedNames"), "{message}");
    // The conversion no longer the host's: its stored versions are not the host's either.
    crd["spec"]["conversion"] = json!({"strategy": "None"});
    crds.patch(
        &name,
        &PatchParams::apply("wasmop-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let refused = dry_run_patch_crd_status(host, &name, json!({"storedVersions": ["v1"]})).await?;
    let _ = crds.delete(&name, &Default::default()).await;
    let message =
        refused.context("the host's drop of a stored version of a kind it does not convert")?;
    assert!(message.contains("may only drop versions"), "{message}");
    Ok(())
}

/// [`dry_run_patch`] of the status of a CRD.
async fn dry_run_patch_crd_status(
    client: &Client,
    name: &str,
    status: Value,
) -> anyhow::Result<Option<String>> {
    let params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let result = Api::<CustomResourceDefinition>::all(client.clone())
        .patch_status(name, &params, &Patch::Merge(json!({"status": status})))
        .await
        .map(|_| ());
    refusal(result, &format!("CustomResourceDefinition {name}"))
}

/// [`dry_run_patch`] of a server-side apply of `object` (cluster-scoped, named in it) as the
/// host applies it: as field manager `manager`, forced.
async fn dry_run_apply(
    client: &Client,
    object: &Value,
    manager: &str,
) -> anyhow::Result<Option<String>> {
    let api_version = object["apiVersion"].as_str().context("an apiVersion")?;
    let kind = object["kind"].as_str().context("a kind")?;
    let name = object["metadata"]["name"].as_str().context("a name")?;
    let patch = Patch::Apply(object.clone());
    let params = PatchParams::apply(manager).force();
    dry_run_patch(client, api_version, kind, name, &patch, params).await
}

/// The webhooks' objects: a CRD's conversion and a binding's ValidatingWebhookConfiguration, as
/// the leader writes them (`wasmop_host::webhook::configs` makes them here too), pass: the
/// conversion set to the host's Service and back to `None`, the configuration created, applied
/// over an existing one and deleted. Refused: a CRD created or deleted, or changed beyond its
/// conversion and its `wasmop.dev/` labels and annotations (its names, its schema, another's
/// label or kubectl's annotation, an owner reference); a configuration not named `wasmop.*`
/// (created or deleted), one whose webhook calls a URL or a Service in another namespace, or
/// is asked about Kubernetes' groups or every resource; any MutatingWebhookConfiguration.
#[tokio::test]
async fn the_api_server_holds_the_hosts_webhooks_to_its_own() -> anyhow::Result<()> {
    under_the_policy(|local, admin, s| async move {
        webhook_refusals(&local, &admin, &s.name, &s.identity, &s.system, &s.ns).await
    })
    .await
}

/// The fifth test proper: installs the renamed policy, probes it as `identity` (the
/// ServiceAccount `wasmop` of `system`, whose Service `wasmop-webhook` the webhooks may call).
async fn webhook_refusals(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    system: &str,
    ns: &str,
) -> anyhow::Result<()> {
    let (host, _) = held_host(local, admin, name, identity, system, ns).await?;
    let crds = "apiextensions.k8s.io/v1";
    let webhooks = "admissionregistration.k8s.io/v1";
    // A team's kind, its CRD the admin's (deleted by `ClusterObjects`).
    let group = widget_group(name);
    let crd_name = format!("widgets.{group}");
    let crd = json!({
        "apiVersion": crds, "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name, "labels": {"team": "data"}},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {
                "plural": "widgets", "singular": "widget", "kind": "Widget",
                "categories": ["wasmop"],
            },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    });
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(crd.clone())?,
        )
        .await?;
    let endpoint = Endpoint::Service {
        namespace: system.to_string(),
        name: "wasmop-webhook".into(),
        port: 443,
    };

    // The leader's conversion of the kind, through the host's Service, and back to None.
    for convert in [true, false] {
        let desired = desired_conversion(&crd_name, name, convert, &endpoint, None);
        if let Some(message) = dry_run_apply(&host, &desired, CONVERSION_MANAGER).await? {
            anyhow::bail!("the host's conversion (convert: {convert}) was refused: {message}");
        }
    }
    // Its conversion through anything but the host's own Service: refused.
    let elsewhere = Endpoint::Url("https://attacker.example".into());
    let desired = desired_conversion(&crd_name, name, true, &elsewhere, None);
    let message = dry_run_apply(&host, &desired, CONVERSION_MANAGER)
        .await?
        .context("the host's conversion through a URL was admitted")?;
    assert!(
        message.contains("may set the conversion only of a kind in the wasmop category"),
        "{message}"
    );
    // The conversion of a kind outside the wasmop category (another operator's): refused.
    let foreign_name = format!("things.{group}");
    let mut foreign = crd.clone();
    foreign["metadata"]["name"] = json!(foreign_name);
    foreign["spec"]["names"] = json!({"plural": "things", "singular": "thing", "kind": "Thing"});
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(foreign)?)
        .await?;
    let desired = desired_conversion(&foreign_name, name, true, &endpoint, None);
    let refused = dry_run_apply(&host, &desired, CONVERSION_MANAGER).await?;
    let _ = Api::<CustomResourceDefinition>::all(admin.clone())
        .delete(&foreign_name, &Default::default())
        .await;
    let message =
        refused.context("the host's conversion of another category's kind was admitted")?;
    assert!(
        message.contains(&format!("CustomResourceDefinition {foreign_name}: the wasmop host may set the conversion only of a kind in the wasmop category")),
        "{message}"
    );
    // Anything else of a CRD: refused, naming what would change (the host's own label passes).
    let changes = [
        (
            json!({
                "metadata": {"labels": {"wasmop.dev/conversion": name}},
                "spec": {"names": {"shortNames": ["wdg"]}},
            }),
            "not spec.names",
        ),
        (
            json!({"spec": {"versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "description": "the host's",
                }},
            }]}}),
            "not spec.versions",
        ),
        (
            json!({"metadata": {
                "labels": {"team": "host"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            }}),
            "not metadata.labels[team], \
             metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
        ),
        (
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "Namespace", "name": ns,
                "uid": "00000000-0000-0000-0000-000000000000",
            }]}}),
            "not metadata.ownerReferences",
        ),
    ];
    for (change, want) in changes {
        let message = dry_run_patch(
            &host,
            crds,
            "CustomResourceDefinition",
            &crd_name,
            &Patch::Merge(change.clone()),
            PatchParams::default(),
        )
        .await?
        .with_context(|| format!("the host's change {change} to CRD {crd_name} was admitted"))?;
        println!("refused: {message}");
        assert!(
            message.contains(&format!(
                "CustomResourceDefinition {crd_name}: the wasmop host may change only \
                 spec.conversion, status.storedVersions and wasmop.dev/ labels and annotations, \
                 {want}"
            )),
            "{message}"
        );
        assert!(!message.contains("wasmop.dev/conversion"), "{message}");
    }
    stored_versions_refusals(admin, &host, &group, system).await?;
    let mut another = crd.clone();
    another["metadata"]["name"] = json!(format!("gadgets.{group}"));
    another["spec"]["names"] = json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget"});
    let created = format!(
        "CustomResourceDefinition gadgets.{group}: the wasmop host may not CREATE \
         CustomResourceDefinitions"
    );
    expect_refused(&host, &[(another, created.as_str())]).await?;
    let message = dry_run(&host, &crd, true)
        .await?
        .context("a CRD deleted by the host was admitted")?;
    assert!(
        message.contains(&format!(
            "CustomResourceDefinition {crd_name}: the wasmop host may not DELETE"
        )),
        "{message}"
    );

    // The binding's ValidatingWebhookConfiguration as the leader makes it: created, it passes.
    let binding: PluginBinding = serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
        "metadata": {"name": name, "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {
            "kind": {"group": group, "version": "v1", "kind": "Widget"},
            "plugin": {"image": "registry.example.com/plugins/widgets:1.0"},
        },
    }))?;
    let wanted = Wanted {
        binding: Arc::new(binding),
        resource: "widgets".into(),
        validate: Some(true),
        convert: Some(false),
    };
    let desired = desired_validating(&wanted, &endpoint, None, &[]);
    let config = format!("wasmop.{name}");
    assert_eq!(desired["metadata"]["name"], config.as_str());
    let hook = desired["webhooks"][0]["name"]
        .as_str()
        .context("a webhook")?
        .to_string();
    expect_admitted(&host, std::slice::from_ref(&desired)).await?;
    // Refused: another name, a URL, another namespace's Service, Kubernetes' groups, every
    // resource, and a mutating configuration.
    let changed = |change: &dyn Fn(&mut Value)| {
        let mut object = desired.clone();
        change(&mut object);
        object
    };
    let refused = [
        (
            changed(&|c| c["metadata"]["name"] = json!(name)),
            format!(
                "ValidatingWebhookConfiguration {name}: the wasmop host may not CREATE \
                 ValidatingWebhookConfigurations not named wasmop.*"
            ),
        ),
        (
            changed(&|c| {
                c["webhooks"][0]["clientConfig"] =
                    json!({"url": "https://webhook.example.com/validate"});
            }),
            format!("webhooks[{hook}].clientConfig.url=https://webhook.example.com/validate"),
        ),
        (
            changed(&|c| c["webhooks"][0]["clientConfig"]["service"]["namespace"] = json!(ns)),
            format!("webhooks[{hook}].clientConfig.service={ns}/wasmop-webhook"),
        ),
        (
            changed(&|c| {
                c["webhooks"][0]["rules"][0]["apiGroups"] =
                    json!(["", "apps", "networking.k8s.io"]);
                c["webhooks"][0]["rules"][0]["resources"] = json!(["secrets"]);
            }),
            format!(
                "webhooks[{hook}].rules.apiGroups: '', webhooks[{hook}].rules.apiGroups: 'apps', \
                 webhooks[{hook}].rules.apiGroups: 'networking.k8s.io'"
            ),
        ),
        (
            changed(&|c| c["webhooks"][0]["rules"][0]["resources"] = json!(["*"])),
            format!("webhooks[{hook}].rules.resources: '*'"),
        ),
        (
            json!({
                "apiVersion": webhooks, "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": config},
            }),
            format!(
                "MutatingWebhookConfiguration {config}: the wasmop host may not CREATE \
                 MutatingWebhookConfigurations"
            ),
        ),
    ];
    let refused: Vec<(Value, &str)> = refused
        .iter()
        .map(|(object, want)| (object.clone(), want.as_str()))
        .collect();
    expect_refused(&host, &refused).await?;

    // Over configurations that exist (the admin's, empty): the leader's apply of its own passes,
    // a URL in it does not; deleting its own passes, another's does not.
    for existing in [config.as_str(), name] {
        let empty: ValidatingWebhookConfiguration =
            serde_json::from_value(json!({"metadata": {"name": existing}}))?;
        Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .create(&PostParams::default(), &empty)
            .await?;
    }
    // The host's field manager is `wasmop`.
    if let Some(message) = dry_run_apply(&host, &desired, "wasmop").await? {
        anyhow::bail!("the host's apply of {config} was refused: {message}");
    }
    let with_url = changed(&|c| {
        c["webhooks"][0]["clientConfig"] = json!({"url": "https://webhook.example.com/validate"});
    });
    let message = dry_run_apply(&host, &with_url, "wasmop")
        .await?
        .context("a URL applied over the host's configuration was admitted")?;
    assert!(
        message.contains(&format!("webhooks[{hook}].clientConfig.url=")),
        "{message}"
    );
    let reference = |name: &str| {
        json!({
            "apiVersion": webhooks, "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
        })
    };
    if let Some(message) = dry_run(&host, &reference(&config), true).await? {
        anyhow::bail!("the host's delete of {config} was refused: {message}");
    }
    let message = dry_run(&host, &reference(name), true)
        .await?
        .context("the host's delete of another's configuration was admitted")?;
    assert!(
        message.contains(&format!(
            "ValidatingWebhookConfiguration {name}: the wasmop host may not DELETE"
        )),
        "{message}"
    );
    Ok(())
}

/// `object` (a Pod, or a kind whose pod template is at `spec.template` or, for a CronJob,
/// `spec.jobTemplate.spec.template`) with `annotations` on its pod's metadata.
fn annotated(mut object: Value, annotations: &Value) -> Value {
    let metadata = match object["kind"].as_str() {
        Some("Pod") => &mut object["metadata"],
        Some("CronJob") => &mut object["spec"]["jobTemplate"]["spec"]["template"]["metadata"],
        _ => &mut object["spec"]["template"]["metadata"],
    };
    metadata["annotations"] = annotations.clone();
    object
}

/// A copy of the local kubeconfig whose user acts as `user` (`as:`), for a process that reads a
/// kubeconfig file (the host).
fn impersonating_kubeconfig(local: &Local, user: &str) -> anyhow::Result<std::path::PathBuf> {
    let mut config: Value = serde_yaml::from_str(&std::fs::read_to_string(&local.kubeconfig)?)?;
    let users = config["users"]
        .as_array_mut()
        .context("no users in the local kubeconfig")?;
    for entry in users {
        entry["user"]["as"] = json!(user);
    }
    let path = std::env::temp_dir().join(unique("wasmop-vap-kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&config)?)?;
    Ok(path)
}

/// The host's own traffic passes the policy: the host, acting as an identity the policy holds,
/// reconciles a kvstore App to Ready (its CRDs, server-side applies of a StatefulSet, Services,
/// a PodDisruptionBudget and ConfigMaps, the App's status and finalizer, Events, its Lease in its
/// own namespace) and finalizes it on delete, and the API server refuses it nothing on the way.
/// The admin applies the host's CRDs first, so that the host's own apply at start-up is the one a
/// restarted host makes, which changes nothing: the policy refuses the host any CRD create and
/// any change but a conversion.
#[tokio::test]
async fn the_hosts_own_writes_pass_the_policy() -> anyhow::Result<()> {
    under_the_policy(|local, admin, s| async move {
        host_under_policy(&local, &admin, &s.name, &s.identity, &s.system, &s.ns).await
    })
    .await
}

/// The second test proper: the host as `identity`, serving `ns`, its Lease in `system`.
async fn host_under_policy(
    local: &Local,
    admin: &Client,
    name: &str,
    identity: &str,
    system: &str,
    ns: &str,
) -> anyhow::Result<()> {
    // Every right, so that only the policy could refuse the host (deploy.rs checks its RBAC).
    let rights: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "wasmop", "namespace": system}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &rights)
        .await?;
    install_policy(local, admin, name, identity, &privileged_deployment(ns)).await?;
    wasmop_host::crd_install::ensure_crds(admin).await?;

    let kubeconfig = impersonating_kubeconfig(local, identity)?;
    // The kubeconfig the host reads does act as the held identity.
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let through = Client::try_from(config)?;
    anyhow::ensure!(
        dry_run(&through, &privileged_deployment(ns), false)
            .await?
            .is_some(),
        "{} does not act as {identity}",
        kubeconfig.display()
    );
    let image = push_kvstore(local).await?;
    let pod = unique("vap-host");
    let host = Host::start_as(
        &kubeconfig,
        ns,
        &["--leader-elect", "--lease-namespace", system],
        &pod,
    )
    .await?;
    let apps: Api<App> = Api::namespaced(admin.clone(), ns);
    create_one_replica_app(
        &apps,
        "kv",
        &image,
        "Ready with the policy holding the host",
    )
    .await?;
    let leases = Api::<Lease>::namespaced(admin.clone(), system)
        .list(&Default::default())
        .await?;
    anyhow::ensure!(
        leases.items.iter().any(
            |l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(pod.as_str())
        ),
        "no Lease in {system} held by {pod}"
    );
    apps.delete("kv", &DeleteParams::default()).await?;
    wait_for(
        "App kv to be finalized",
        Duration::from_secs(60),
        || async { Ok(apps.get_opt("kv").await?.is_none().then_some(())) },
    )
    .await?;
    drop(host);

    let log_path = std::env::temp_dir().join(format!("{pod}-host.log"));
    let log = std::fs::read_to_string(&log_path)?;
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ValidatingAdmissionPolicy"))
        .collect();
    anyhow::ensure!(
        refused.is_empty(),
        "the API server refused the host: {refused:#?}"
    );
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(())
}
