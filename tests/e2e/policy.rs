//! PluginPolicy on the real control plane: a policy selected by namespace label relaxes the
//! pod security level live (a hostPath volume) (no App change), tightening it again reports
//! the live Deployment it now forbids and, with `enforcement: Remove`, deletes it, a protected
//! namespace (the host's own) refuses Apps until a policy names it, and each policy's status
//! says what it governs.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace},
    networking::v1::NetworkPolicy,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use wasmop_host::{app::App, policy::PluginPolicy};

use crate::{
    apps::{Host, app, condition, fault_plugin_in, wait_app},
    harness::{Local, TestNamespace, unique, wait_for},
};

fn policy(name: &str, spec: serde_json::Value) -> anyhow::Result<PluginPolicy> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginPolicy",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

#[tokio::test]
async fn policies_select_namespaces_and_apply_live() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let tenant = TestNamespace::create(&client, "e2e-policy").await?;
    let system = TestNamespace::create(&client, "e2e-policy-host").await?;
    // Only this test's namespace carries the label, so the policy touches no other test.
    let mark = unique("mark");
    Api::<Namespace>::all(client.clone())
        .patch(
            &tenant.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"wasmop.dev/e2e-policy": mark}}})),
        )
        .await?;
    let from_cm = fault_plugin_in(&client, &tenant.name).await?;
    fault_plugin_in(&client, &system.name).await?;
    let _host = Host::start_with(
        &local,
        &tenant.name,
        &[
            "--namespace",
            &system.name,
            "--host-namespace",
            &system.name,
        ],
        &unique("policy-host"),
    )
    .await?;
    let tenant_apps: Api<App> = Api::namespaced(client.clone(), &tenant.name);
    let system_apps: Api<App> = Api::namespaced(client.clone(), &system.name);
    tenant_apps
        .create(
            &PostParams::default(),
            &app(
                "wants-host-path",
                from_cm.clone(),
                "1.0.0",
                json!({"fault": "host-path"}),
            )?,
        )
        .await?;
    system_apps
        .create(
            &PostParams::default(),
            &app("in-host-ns", from_cm, "1.0.0", json!({"fault": "count"}))?,
        )
        .await?;

    // Without a policy: restricted, and the host's namespace refused.
    wait_app(
        &tenant_apps,
        "wants-host-path",
        "rejected by default",
        Duration::from_secs(60),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PlanRejected"
                    && c.2.contains("spec.template.spec.volumes[0].hostPath")
                    && c.2.contains("built-in default policy")
            })
        },
    )
    .await?;
    let refused = wait_app(
        &system_apps,
        "in-host-ns",
        "refused",
        Duration::from_secs(60),
        |a| condition(a, "PluginReady").is_some_and(|c| c.1 == "NamespaceRefused"),
    )
    .await?;
    let message = condition(&refused, "PluginReady").unwrap_or_default().2;
    assert!(message.contains("host's own"), "{message}");
    let system_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &system.name);
    assert!(
        system_cms.get_opt("fault").await?.is_none(),
        "a refused App planned"
    );

    // A policy selecting the tenant by label allows privileged pods, with no App change.
    let policies: Api<PluginPolicy> = Api::all(client.clone());
    let relaxed = unique("e2e-relaxed");
    policies
        .create(
            &PostParams::default(),
            &policy(
                &relaxed,
                json!({"namespaceSelector": {"matchLabels": {"wasmop.dev/e2e-policy": mark}},
                       "podSecurity": "privileged"}),
            )?,
        )
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &tenant.name);
    wait_for(
        "the host-path Deployment under the relaxed policy",
        Duration::from_secs(30),
        || async { Ok(deployments.get_opt("evil").await?) },
    )
    .await?;
    let status = wait_for("the policy's status", Duration::from_secs(30), || async {
        let p = policies.get(&relaxed).await?;
        Ok(p.status.filter(|s| s.namespace_count == 1))
    })
    .await?;
    assert_eq!(status.namespaces, std::slice::from_ref(&tenant.name));

    // A policy that names the host's namespace lets its App run.
    let named = unique("e2e-named");
    policies
        .create(
            &PostParams::default(),
            &policy(&named, json!({"namespaces": [system.name]}))?,
        )
        .await?;
    wait_for(
        "the App in the host's namespace to plan",
        Duration::from_secs(30),
        || async { Ok(system_cms.get_opt("fault").await?) },
    )
    .await?;

    // Tightening the policy: what the App already runs is now forbidden, and the App says so
    // (PolicyViolation, naming the live object, field and rule); by default it stays running.
    let before = deployments.get("evil").await?.resource_version();
    policies
        .patch(
            &relaxed,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"podSecurity": "baseline"}})),
        )
        .await?;
    wait_app(
        &tenant_apps,
        "wants-host-path",
        "a policy violation reported under baseline",
        Duration::from_secs(30),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PolicyViolation"
                    && c.2
                        .starts_with("Deployment/evil: spec.template.spec.volumes[0].hostPath")
                    && c.2.contains("baseline")
                    && c.2.contains(&format!("PluginPolicy {relaxed}"))
                    && c.2.contains("keeps running")
            })
        },
    )
    .await?;
    assert_eq!(deployments.get("evil").await?.resource_version(), before);

    // With `enforcement: Remove` the host deletes it; then the refused plan is what is left.
    policies
        .patch(
            &relaxed,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"enforcement": "Remove"}})),
        )
        .await?;
    wait_for(
        "the forbidden Deployment removed",
        Duration::from_secs(30),
        || async {
            Ok(match deployments.get_opt("evil").await? {
                None => Some(()),
                Some(d) if d.metadata.deletion_timestamp.is_some() => Some(()),
                Some(_) => None,
            })
        },
    )
    .await?;
    wait_app(
        &tenant_apps,
        "wants-host-path",
        "the plan rejected once nothing forbidden runs",
        Duration::from_secs(30),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PlanRejected" && c.2.contains("spec.template.spec.volumes[0].hostPath")
            })
        },
    )
    .await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &tenant.name);
    assert!(
        configmaps.get_opt("fault").await?.is_some(),
        "only the forbidden object was removed"
    );

    for name in [&relaxed, &named] {
        policies.delete(name, &DeleteParams::default()).await?;
    }
    tenant.delete().await?;
    system.delete().await
}

/// `extraKinds`: a NetworkPolicy is refused under the default policy, applied (owned by the
/// App) once a policy naming the namespace adds the kind, and pruned when the plan drops it;
/// a policy asking for an RBAC kind says in its status that it is refused; `configMapSources:
/// false` refuses the App's plugin source.
#[tokio::test]
async fn extra_kinds_are_planned_observed_and_pruned_only_where_a_policy_adds_them()
-> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-extra").await?;
    let from_cm = fault_plugin_in(&client, &ns.name).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    apps.create(
        &PostParams::default(),
        &app(
            "netpol",
            from_cm,
            "1.0.0",
            json!({"fault": "network-policy"}),
        )?,
    )
    .await?;
    wait_app(
        &apps,
        "netpol",
        "refused by default",
        Duration::from_secs(60),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PlanRejected"
                    && c.2
                        .contains("networking.k8s.io/v1/NetworkPolicy is not an allowed kind")
            })
        },
    )
    .await?;

    let policies: Api<PluginPolicy> = Api::all(client.clone());
    let name = unique("e2e-extra");
    policies
        .create(
            &PostParams::default(),
            &policy(
                &name,
                json!({"namespaces": [ns.name], "extraKinds": [
                    {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "resource": "networkpolicies"},
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "resource": "rolebindings"},
                ]}),
            )?,
        )
        .await?;
    let netpols: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns.name);
    let applied = wait_for(
        "the NetworkPolicy under the policy",
        Duration::from_secs(30),
        || async { Ok(netpols.get_opt("deny-ingress").await?) },
    )
    .await?;
    let owner = applied.owner_references();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "App" && o.name == "netpol" && o.controller == Some(true)),
        "{owner:?}"
    );
    let status = wait_for("the policy's status", Duration::from_secs(30), || async {
        Ok(policies
            .get(&name)
            .await?
            .status
            .filter(|s| !s.conditions.is_empty()))
    })
    .await?;
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Valid")
        .ok_or_else(|| anyhow::anyhow!("no Valid condition"))?;
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "KindRefused")
    );
    assert!(
        valid
            .message
            .contains("extraKinds[1] rbac.authorization.k8s.io/v1/RoleBinding"),
        "{}",
        valid.message
    );

    // The plan drops the NetworkPolicy: the host observed it (listed by label) and prunes it.
    apps.patch(
        "netpol",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"config": {"fault": "none"}}})),
    )
    .await?;
    wait_for(
        "the NetworkPolicy to be pruned",
        Duration::from_secs(30),
        || async {
            Ok(netpols
                .get_opt("deny-ingress")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;

    // A policy that no longer allows ConfigMap sources refuses the App's plugin.
    policies
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configMapSources": false}})),
        )
        .await?;
    wait_app(
        &apps,
        "netpol",
        "its ConfigMap source refused",
        Duration::from_secs(30),
        |a| {
            condition(a, "PluginReady").is_some_and(|c| {
                c.1 == "SourceRefused" && c.2.contains("does not allow plugins from ConfigMaps")
            })
        },
    )
    .await?;

    policies.delete(&name, &DeleteParams::default()).await?;
    ns.delete().await
}
