//! `spec.plugin.imagePullSecrets` on the real control plane and registry: a missing Secret and
//! a Secret of the wrong type are each a `FetchFailed` naming it; a
//! `kubernetes.io/dockerconfigjson` Secret in the App's namespace loads the plugin, as a
//! source of its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;
use wasmop_host::app::App;

use crate::{
    apps::{Host, app, condition, push_kvstore, wait_app},
    harness::{Local, TestNamespace, unique},
};

fn secret(type_: &str, key: &str, value: &str) -> anyhow::Result<Secret> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "regcred"},
        "type": type_,
        "stringData": {key: value},
    }))?)
}

#[tokio::test]
async fn pull_secrets_are_read_from_the_apps_namespace() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-pull").await?;
    let image = push_kvstore(&local).await?;
    let _host = Host::start_with(&local, &ns.name, &[], &unique("pull-host")).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let plugin = json!({"image": image, "imagePullSecrets": [{"name": "regcred"}]});
    apps.create(
        &PostParams::default(),
        &app("kv", plugin, "7.2.4", json!({"replicas": 1}))?,
    )
    .await?;
    let minute = Duration::from_secs(60);
    let fetch_failed = |words: String| {
        move |a: &App| {
            condition(a, "PluginReady")
                .is_some_and(|c| c.0 == "False" && c.1 == "FetchFailed" && c.2.contains(&words))
        }
    };
    wait_app(
        &apps,
        "kv",
        "the missing Secret named",
        minute,
        fetch_failed(format!(
            "imagePullSecret {}/regcred does not exist",
            ns.name
        )),
    )
    .await?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    secrets
        .create(
            &PostParams::default(),
            &secret("Opaque", "token", "hunter2")?,
        )
        .await?;
    let wrong = wait_app(
        &apps,
        "kv",
        "the wrong type named",
        minute,
        fetch_failed("is of type Opaque".into()),
    )
    .await?;
    let message = condition(&wrong, "PluginReady").unwrap_or_default().2;
    assert!(!message.contains("hunter2"), "{message}");

    secrets.delete("regcred", &DeleteParams::default()).await?;
    let config = json!({"auths": {local.registry.clone(): {"username": "u", "password": "p"}}});
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "kubernetes.io/dockerconfigjson",
                ".dockerconfigjson",
                &config.to_string(),
            )?,
        )
        .await?;
    let loaded = wait_app(&apps, "kv", "loaded with the pull secret", minute, |a| {
        condition(a, "PluginReady").is_some_and(|c| c.0 == "True")
    })
    .await?;
    let reference = loaded
        .status
        .as_ref()
        .and_then(|s| s.plugin.as_ref())
        .map(|p| p.reference.clone())
        .unwrap_or_default();
    assert!(reference.ends_with("(pull secrets regcred)"), "{reference}");
    ns.delete().await
}
