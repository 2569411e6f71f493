//! The local control plane is real: a StatefulSet with volume claims gets scheduled, its claims
//! bind and its Pods become Ready.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::PersistentVolumeClaim};
use kube::{
    Api,
    api::{ListParams, PostParams},
};

use crate::harness::{Local, TestNamespace, wait_for};

#[tokio::test]
async fn statefulset_gets_ready_pods_and_bound_claims() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-sts").await?;
    let sts: StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    }))?;
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &sts).await?;

    let ready = wait_for(
        "3 ready replicas of StatefulSet web",
        Duration::from_secs(60),
        || async {
            let sts = api.get("web").await?;
            let ready = sts.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            Ok((ready == 3).then_some(ready))
        },
    )
    .await?;
    assert_eq!(ready, 3);

    // The PV controller binds a claim on its own schedule: under kwok a Pod can be Ready before
    // its claim is Bound (seen in CI, 2026-12-08: Bound, Bound, Pending right after Ready).
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let phases = wait_for(
        "the 3 claims of StatefulSet web to be Bound",
        Duration::from_secs(60),
        || async {
            let phases: Vec<String> = pvcs
                .list(&ListParams::default())
                .await?
                .into_iter()
                .filter_map(|pvc| pvc.status.and_then(|s| s.phase))
                .collect();
            Ok((phases.len() == 3 && phases.iter().all(|p| p == "Bound")).then_some(phases))
        },
    )
    .await?;
    assert_eq!(
        phases,
        ["Bound", "Bound", "Bound"],
        "claims of StatefulSet web"
    );
    ns.delete().await
}
