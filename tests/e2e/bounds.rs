//! State a plugin cannot grow without bound (issue 38): a plugin that names a new claim on
//! every reconcile is stopped at its App's claim limit (claims are never pruned), with the
//! count in its status, while an App beside it stays Ready; and a StatefulSet cannot take over
//! another App's claim by spelling its name.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;
use wasmop_host::{app::App, policy::PluginPolicy};

use crate::{
    apps::{
        Abuse, Host, abuse_beside_a_neighbour, app, condition, fault_plugin_in, live_claims,
        wait_app,
    },
    harness::{Local, TestNamespace, unique},
};

#[tokio::test]
async fn a_plugin_naming_new_claims_stops_at_the_limit_and_its_neighbour_stays_ready()
-> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-bounds").await?;
    let other = TestNamespace::create(&client, "e2e-bounds-other").await?;
    // A small limit keeps the test short: 3 claims.
    let policies: Api<PluginPolicy> = Api::all(client.clone());
    let name = unique("e2e-bounds");
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginPolicy",
                "metadata": {"name": name},
                "spec": {"namespaces": [ns.name], "maxClaims": 3},
            }))?,
        )
        .await?;
    let Abuse {
        apps,
        neighbours,
        host: _host,
    } = abuse_beside_a_neighbour(
        &local,
        &client,
        &ns.name,
        &other.name,
        "flood",
        "claim-flood",
    )
    .await?;

    let refused = wait_app(
        &apps,
        "flood",
        "refused at its claim limit",
        Duration::from_secs(90),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PlanRejected" && c.2.contains("PersistentVolumeClaims, over its limit of 3")
            })
        },
    )
    .await?;
    let message = condition(&refused, "Degraded").unwrap_or_default().2;
    assert!(message.contains("would hold 4 "), "{message}");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    // Refused plans apply nothing: the count stays where the limit stopped it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(live_claims(&pvcs, "flood").await?, 3);
    wait_app(
        &neighbours,
        "calm",
        "Available beside the flood",
        Duration::from_secs(30),
        |a| {
            condition(a, "Available").is_some_and(|c| c.0 == "True")
                && condition(a, "Degraded").is_some_and(|c| c.0 == "False")
        },
    )
    .await?;

    policies.delete(&name, &DeleteParams::default()).await?;
    other.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn a_statefulset_cannot_take_over_another_apps_claim_by_its_name() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-takeover").await?;
    // App billing's claim of its StatefulSet `billing-db`'s template `data`.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    pvcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "data-billing-db-0", "labels": {"wasmop.dev/app": "billing"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
        }))?,
    )
    .await?;
    let from_cm = fault_plugin_in(&client, &ns.name).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    apps.create(
        &PostParams::default(),
        &app(
            "thief",
            from_cm,
            "1.0.0",
            json!({"fault": "claim-takeover"}),
        )?,
    )
    .await?;
    wait_app(
        &apps,
        "thief",
        "refused: its StatefulSet would take over billing's claim",
        Duration::from_secs(60),
        |a| {
            condition(a, "Degraded").is_some_and(|c| {
                c.1 == "PlanRejected"
                    && c.2.contains(
                        "StatefulSet/db would take over PersistentVolumeClaim/data-billing-db-0",
                    )
            })
        },
    )
    .await?;
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), &ns.name);
    assert!(
        sets.get_opt("db").await?.is_none(),
        "the StatefulSet was applied"
    );
    ns.delete().await
}
