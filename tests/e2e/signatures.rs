//! `PluginPolicy.verify` against the real cosign (built by `deploy/local/setup.sh cosign`) and
//! the local registry: a plugin signed with the policy's key loads; an unsigned one is refused
//! with `SignatureInvalid`; an unsigned or wrongly signed update is refused while the last good
//! version keeps serving; signing it with the right key lets the swap through; a ConfigMap
//! source is refused under such a policy.

use std::{path::Path, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;
use wasmop_host::{
    app::App,
    plugin::{Digest, source::oci::OciSource},
    policy::PluginPolicy,
};

use crate::{
    apps::{Host, app, condition, wait_app},
    harness::{Local, TestNamespace, component, plugin_configmap, tool, unique},
};

/// Runs cosign in `dir` with an empty key password, failing with its output.
async fn cosign(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let output = tokio::process::Command::new(tool("COSIGN_BIN", "cosign", "cosign")?)
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "cosign {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// `cosign sign` with `key`, offline (no transparency log), against the local registry.
async fn sign(dir: &Path, key: &str, image: &str) -> anyhow::Result<()> {
    cosign(
        dir,
        &[
            "sign",
            "--key",
            key,
            "--tlog-upload=false",
            "--allow-insecure-registry",
            "--yes",
            image,
        ],
    )
    .await
}

/// The digest the App's status says is serving.
fn serving(app: &App) -> Option<String> {
    Some(app.status.as_ref()?.plugin.as_ref()?.digest.clone())
}

#[tokio::test]
async fn only_plugins_signed_with_the_policys_key_load_and_swap() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let tenant = TestNamespace::create(&client, "e2e-signed").await?;
    let keys = std::env::temp_dir().join(unique("cosign-keys"));
    for name in ["release", "stranger"] {
        let dir = keys.join(name);
        std::fs::create_dir_all(&dir)?;
        cosign(&dir, &["generate-key-pair"]).await?;
    }
    let release_key = keys.join("release/cosign.key");
    let stranger_key = keys.join("stranger/cosign.key");
    let release_pub = std::fs::read_to_string(keys.join("release/cosign.pub"))?;

    // Started first: it installs the CRDs.
    let host = Host::start_with(&local, &tenant.name, &[], &unique("verify-host")).await?;
    let policies: Api<PluginPolicy> = Api::all(client.clone());
    let policy_name = unique("e2e-verify");
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginPolicy",
                "metadata": {"name": policy_name},
                "spec": {"namespaces": [tenant.name],
                         "verify": {"keys": [{"name": "release", "publicKey": release_pub}]}},
            }))?,
        )
        .await?;

    let (v1, v2) = (component("fault_plugin.wasm")?, component("hello.wasm")?);
    let pusher = OciSource::new(None, vec![])?;
    let repository = format!("{}/e2e/{}", local.registry, unique("signed"));
    let image = format!("{repository}:1");
    let first = format!("{repository}@{}", pusher.push_unchecked(&image, &v1).await?);
    sign(&keys, &release_key.to_string_lossy(), &first).await?;
    let unsigned = format!("{}/e2e/{}:1", local.registry, unique("unsigned"));
    pusher.push_unchecked(&unsigned, &v1).await?;
    Api::<ConfigMap>::namespaced(client.clone(), &tenant.name)
        .create(
            &PostParams::default(),
            &plugin_configmap("fault-plugin", "fault_plugin.wasm")?,
        )
        .await?;

    let apps: Api<App> = Api::namespaced(client.clone(), &tenant.name);
    let config = json!({"fault": "count"});
    for (name, plugin) in [
        ("signed", json!({"image": image})),
        ("unsigned", json!({"image": unsigned})),
        (
            "from-cm",
            json!({"configMap": {"name": "fault-plugin", "key": "plugin.wasm"}}),
        ),
    ] {
        apps.create(
            &PostParams::default(),
            &app(name, plugin, "1.0.0", config.clone())?,
        )
        .await?;
    }
    let (v1_digest, v2_digest) = (Digest::of(&v1).to_string(), Digest::of(&v2).to_string());
    let minute = Duration::from_secs(60);

    wait_app(&apps, "signed", "loaded, signed by release", minute, |a| {
        serving(a).as_deref() == Some(v1_digest.as_str())
            && condition(a, "PluginReady").is_some_and(|c| c.1 == "Loaded")
    })
    .await?;
    let refused = wait_app(&apps, "unsigned", "refused as unsigned", minute, |a| {
        condition(a, "PluginReady").is_some_and(|c| c.0 == "False" && c.1 == "SignatureInvalid")
    })
    .await?;
    let message = condition(&refused, "PluginReady").unwrap_or_default().2;
    assert!(message.contains("is not signed"), "{message}");
    assert_eq!(serving(&refused), None, "an unsigned plugin served");
    wait_app(&apps, "from-cm", "ConfigMap refused", minute, |a| {
        condition(a, "PluginReady")
            .is_some_and(|c| c.1 == "SourceRefused" && c.2.contains("spec.verify"))
    })
    .await?;

    // An unsigned update: refused, the signed version keeps serving.
    let second = format!("{repository}@{}", pusher.push_unchecked(&image, &v2).await?);
    let kept = wait_app(&apps, "signed", "unsigned update refused", minute, |a| {
        condition(a, "PluginReady")
            .is_some_and(|c| c.1 == "LastGoodKept" && c.2.contains("is not signed"))
    })
    .await?;
    assert_eq!(serving(&kept).as_deref(), Some(v1_digest.as_str()));

    // Signed, but with a key the policy does not list: still refused.
    sign(&keys, &stranger_key.to_string_lossy(), &second).await?;
    let kept = wait_app(
        &apps,
        "signed",
        "stranger's signature refused",
        minute,
        |a| {
            condition(a, "PluginReady").is_some_and(|c| {
                c.1 == "LastGoodKept" && c.2.contains("by none of the policy's keys (release)")
            })
        },
    )
    .await?;
    assert_eq!(serving(&kept).as_deref(), Some(v1_digest.as_str()));

    // Signed with the release key: the swap goes through, without a restart.
    sign(&keys, &release_key.to_string_lossy(), &second).await?;
    wait_app(
        &apps,
        "signed",
        "swapped to the re-signed version",
        minute,
        |a| {
            serving(a).as_deref() == Some(v2_digest.as_str())
                && condition(a, "PluginReady").is_some_and(|c| c.1 == "Loaded")
        },
    )
    .await?;

    // Deleting the refused App finalizes it without loading its plugin: deletion is no way
    // around the policy.
    apps.delete("from-cm", &DeleteParams::default()).await?;
    crate::harness::wait_for("from-cm to be gone", minute, || async {
        Ok(apps.get_opt("from-cm").await?.is_none().then_some(()))
    })
    .await?;
    let loaded = reqwest::get(host.url("/debug/plugins"))
        .await?
        .text()
        .await?;
    assert!(
        !loaded.contains("configmap:"),
        "the refused ConfigMap plugin was loaded: {loaded}"
    );

    policies
        .delete(&policy_name, &DeleteParams::default())
        .await?;
    let _ = std::fs::remove_dir_all(&keys);
    tenant.delete().await
}
