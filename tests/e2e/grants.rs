//! A plan cannot create a ServiceAccount whose name an RBAC binding already holds (issue 38):
//! RBAC grants by name, so the account would come with the binding's rights. The App says
//! which binding and how to grant on purpose; the binding's annotation for the App lets the
//! plan through at once, and taking it back reports the account the App still runs.

use std::time::{Duration, Instant};

use k8s_openapi::api::{core::v1::ServiceAccount, rbac::v1::RoleBinding};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    apps::{Abuse, abuse_beside_a_neighbour, condition, wait_app},
    harness::{Local, TestNamespace},
};

#[tokio::test]
async fn a_plan_cannot_create_an_account_a_binding_names_unless_granted_to_its_app()
-> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-grants").await?;
    // Written before its account exists, as RBAC allows: `edit` for `ci-deployer`.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns.name);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "ci-deployer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "name": "ci-deployer"}],
            }))?,
        )
        .await?;
    // A neighbour in another namespace (both plan the fault plugin's ConfigMap `fault`).
    let other = TestNamespace::create(&client, "e2e-grants-other").await?;
    let Abuse {
        apps,
        neighbours,
        host: _host,
    } = abuse_beside_a_neighbour(&local, &client, &ns.name, &other.name, "squat", "account")
        .await?;
    wait_app(
        &apps,
        "squat",
        "refused: a RoleBinding names its ServiceAccount",
        Duration::from_secs(60),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PlanRejected"
                    && c.2.contains(
                        "ServiceAccount/ci-deployer: RoleBinding ci-deployer names ServiceAccount \"ci-deployer\"",
                    )
                    && c.2.contains("wasmop.dev/grants-app")
            })
        },
    )
    .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        accounts.get_opt("ci-deployer").await?.is_none(),
        "the account was created into the binding's rights"
    );
    wait_app(
        &neighbours,
        "calm",
        "Available beside it",
        Duration::from_secs(30),
        |a| condition(a, "Available").is_some_and(|c| c.0 == "True"),
    )
    .await?;

    // The binding's author grants it to this App: the binding's change alone re-reconciles it.
    let grant = |value: Option<String>| json!({"metadata": {"annotations": {"wasmop.dev/grants-app": value}}});
    let granted = Instant::now();
    bindings
        .patch(
            "ci-deployer",
            &PatchParams::default(),
            &Patch::Merge(grant(Some(format!("{}/squat", ns.name)))),
        )
        .await?;
    wait_app(
        &apps,
        "squat",
        "Available once the binding grants to it",
        Duration::from_secs(20),
        |a| condition(a, "Degraded").is_some_and(|c| c.0 == "False"),
    )
    .await?;
    println!(
        "granted: Degraded False {:?} after the annotation",
        granted.elapsed()
    );
    assert!(accounts.get_opt("ci-deployer").await?.is_some());

    // Taken back: the account the App runs is reported, and stays (the default enforcement).
    bindings
        .patch(
            "ci-deployer",
            &PatchParams::default(),
            &Patch::Merge(grant(None)),
        )
        .await?;
    wait_app(
        &apps,
        "squat",
        "the live account reported",
        Duration::from_secs(20),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PolicyViolation"
                    && c.2
                        .starts_with("ServiceAccount/ci-deployer: RoleBinding ci-deployer names")
                    && c.2.contains("keeps running")
            })
        },
    )
    .await?;
    assert!(accounts.get_opt("ci-deployer").await?.is_some());
    other.delete().await?;
    ns.delete().await
}
