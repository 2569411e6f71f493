//! The summary conditions the ecosystem reads (issue 40): `kubectl wait --for=condition=Ready`
//! returns only once an App is Ready, a failing App says `Stalled` (kstatus' `Failed`) rather
//! than passing for done, and `kubectl get` shows the `Ready` column.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, api::PostParams};
use serde_json::json;
use wasmop_host::app::App;

use crate::{
    apps::{Host, app, condition, push_kvstore, wait_app},
    harness::{Local, TestNamespace, kubectl, plugin_configmap},
};

/// Runs `kubectl wait --for=condition=<condition>` on App `name`, returning whether it was met
/// within `timeout` and what kubectl said.
async fn kubectl_wait(
    local: &Local,
    namespace: &str,
    name: &str,
    condition: &str,
    timeout: Duration,
) -> anyhow::Result<(bool, String)> {
    let mut command = kubectl(local)?;
    command.args([
        "wait",
        "-n",
        namespace,
        &format!("--for=condition={condition}"),
        &format!("--timeout={}s", timeout.as_secs()),
        &format!("apps.wasmop.dev/{name}"),
    ]);
    let out = tokio::task::spawn_blocking(move || command.output()).await??;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), said))
}

#[tokio::test]
async fn kubectl_wait_for_ready_returns_only_when_ready_and_a_failing_app_is_stalled()
-> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-kstatus").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.create(
        &PostParams::default(),
        &plugin_configmap("fault-plugin", "fault_plugin.wasm")?,
    )
    .await?;
    let image = push_kvstore(&local).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);

    // The wait starts before the App has a status: kubectl must not return on a status that
    // merely caught up with the generation (Available still False, pods starting).
    apps.create(
        &PostParams::default(),
        &app(
            "good",
            json!({"image": image}),
            "7.2.4",
            json!({"replicas": 1}),
        )?,
    )
    .await?;
    let (met, said) =
        kubectl_wait(&local, &ns.name, "good", "Ready", Duration::from_secs(120)).await?;
    assert!(met, "kubectl wait --for=condition=Ready: {said}");
    let good = apps.get("good").await?;
    let status = good.status.clone().unwrap_or_default();
    assert_eq!(status.observed_generation, good.metadata.generation);
    assert_eq!(status.version.as_deref(), Some("7.2.4"));
    for (type_, expected) in [
        ("Available", "True"),
        ("Degraded", "False"),
        ("Ready", "True"),
        ("Reconciling", "False"),
        ("Stalled", "False"),
    ] {
        assert_eq!(
            condition(&good, type_).map(|c| c.0).as_deref(),
            Some(expected),
            "{type_} of a Ready App: {:?}",
            status.conditions
        );
    }

    // A plan the guard refuses: the App is Stalled with the rule's reason, never Ready.
    apps.create(
        &PostParams::default(),
        &app(
            "bad",
            json!({"configMap": {"name": "fault-plugin", "key": "plugin.wasm"}}),
            "1.0.0",
            json!({"fault": "forbidden"}),
        )?,
    )
    .await?;
    let (met, said) =
        kubectl_wait(&local, &ns.name, "bad", "Stalled", Duration::from_secs(60)).await?;
    assert!(met, "kubectl wait --for=condition=Stalled: {said}");
    let bad = wait_app(&apps, "bad", "Stalled", Duration::from_secs(5), |a| {
        condition(a, "Stalled").is_some_and(|c| c.0 == "True")
    })
    .await?;
    let ready = condition(&bad, "Ready").unwrap_or_default();
    assert_eq!(
        (ready.0.as_str(), ready.1.as_str()),
        ("False", "PlanRejected"),
        "{ready:?}"
    );
    assert!(
        ready.2.contains("kube-system"),
        "Ready names the rule: {ready:?}"
    );
    assert_eq!(
        condition(&bad, "Reconciling").map(|c| c.0).as_deref(),
        Some("False")
    );
    let (met, said) =
        kubectl_wait(&local, &ns.name, "bad", "Ready", Duration::from_secs(3)).await?;
    assert!(!met, "a stalled App passed kubectl wait for Ready: {said}");

    // `kubectl get` shows Ready per App.
    let out = kubectl(&local)?
        .args(["get", "apps.wasmop.dev", "-n", &ns.name, "--no-headers"])
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string())
    };
    assert_eq!(row("good").as_deref(), Some("True"), "{table}");
    assert_eq!(row("bad").as_deref(), Some("False"), "{table}");
    ns.delete().await
}
