//! The plugin author's commands, as a user runs them: inspect, run (faults and guard violations
//! exit non-zero with the specific error), push and pull through the real registry.

use std::process::{Command, Output};

use crate::harness::{Local, unique, wasmop_binary};

fn wasmop(args: &[&str]) -> anyhow::Result<Output> {
    Ok(Command::new(wasmop_binary()?)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()?)
}

fn wasm(file: &str) -> anyhow::Result<String> {
    Ok(crate::harness::component_path(file)?.display().to_string())
}

fn app_file(config: &str) -> anyhow::Result<tempfile_path::Path> {
    tempfile_path::write(&format!(
        "apiVersion: wasmop.dev/v1alpha1\nkind: App\nmetadata: {{name: t, namespace: demo}}\nspec:\n  plugin: {{image: x}}\n  version: \"7.2.4\"\n  config: {config}\n"
    ))
}

/// A file in the temp dir, removed on drop.
mod tempfile_path {
    pub struct Path(pub std::path::PathBuf);
    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    pub fn write(text: &str) -> anyhow::Result<Path> {
        let path = std::env::temp_dir().join(crate::harness::unique("wasmop-cli-app") + ".yaml");
        std::fs::write(&path, text)?;
        Ok(Path(path))
    }
}

#[test]
fn inspect_reports_capabilities_and_digest() -> anyhow::Result<()> {
    let out = wasmop(&["plugin", "inspect", "--json", &wasm("kvstore.wasm")?])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(info["name"], "kvstore");
    assert_eq!(info["world"], "wasmop:plugin@0.3.0");
    assert_eq!(
        info["configSchema"]["properties"]["replicas"]["type"],
        "integer"
    );
    assert_eq!(info["capabilities"].as_array().map(Vec::len), Some(5));
    assert!(
        info["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );

    let out = wasmop(&["plugin", "inspect", &wasm("wrong-world.wasm")?])?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not export wasmop:plugin/metadata"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn run_prints_results_and_fails_on_faults_and_guard_violations() -> anyhow::Result<()> {
    let app = app_file("{replicas: 3}")?;
    let app_path = app.0.display().to_string();
    let out = wasmop(&[
        "plugin",
        "run",
        &wasm("kvstore.wasm")?,
        "--app",
        &app_path,
        "--capability",
        "plan",
        "--json",
        "--now",
        "2026-12-02T06:00:00Z",
    ])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let kinds: Vec<&str> = result["plan"]["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"StatefulSet") && kinds.contains(&"PodDisruptionBudget"),
        "{kinds:?}"
    );

    // The trust boundary (issue 21): each row is refused whole, naming object, field and rule.
    let d = "plan rejected: Deployment/evil: spec.template";
    for (config, expected) in [
        (
            "{fault: privileged}",
            &format!(
                "{d}.spec.containers[0].securityContext.privileged: privileged is not allowed under restricted"
            )[..],
        ),
        (
            "{fault: host-path}",
            &format!("{d}.spec.volumes[0].hostPath: ")[..],
        ),
        (
            "{fault: host-network}",
            &format!("{d}.spec.hostNetwork: ")[..],
        ),
        ("{fault: host-pid}", &format!("{d}.spec.hostPID: ")[..]),
        (
            "{fault: host-service-account}",
            &format!(
                "{d}.spec.serviceAccountName: ServiceAccount \"wasmop\" is not created by this plan"
            )[..],
        ),
        (
            "{fault: secret-volume}",
            &format!("{d}.spec.volumes[0].secret: ")[..],
        ),
        (
            "{fault: other-app}",
            &format!("{d}.metadata.labels[\"wasmop.dev/app\"]: ")[..],
        ),
        (
            "{fault: root-job}",
            "plan rejected: Job/evil: spec.template.spec.containers[0].securityContext.privileged: ",
        ),
        (
            "{fault: finalizers}",
            "plan rejected: ConfigMap/evil: metadata.finalizers: ",
        ),
        (
            "{fault: external-ips}",
            "plan rejected: Service/evil: spec.externalIPs: ",
        ),
        ("{fault: forbidden}", "plan rejected: ConfigMap/escape"),
        ("{fault: loop}", "exceeded its 100ms deadline"),
        ("{fault: panic}", "panics on purpose"),
    ] {
        let app = app_file(config)?;
        let out = wasmop(&[
            "plugin",
            "run",
            &wasm("fault_plugin.wasm")?,
            "--app",
            &app.0.display().to_string(),
        ])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config} must fail");
        assert!(stderr.contains(expected), "{config}: {stderr}");
        assert!(
            !stderr.contains("Stack backtrace"),
            "errors are for people: {stderr}"
        );
    }
    Ok(())
}

/// `plugin run --app` takes an instance of any kind: a `KVStore` whose config is its whole
/// `spec` (beside `version`) reconciles with kvstore unchanged, its objects owned by the
/// instance's own kind and marked with it (their templates too), and a config error names the
/// field where the kind has it.
#[test]
fn run_takes_an_instance_of_any_kind() -> anyhow::Result<()> {
    let instance = |spec: &str| {
        tempfile_path::write(&format!(
            "apiVersion: data.example.com/v1\nkind: KVStore\nmetadata: {{name: cache, namespace: demo, uid: kv-uid}}\nspec: {spec}\n"
        ))
    };
    let file = instance("{version: \"7.2.4\", replicas: 2}")?;
    let out = wasmop(&[
        "plugin",
        "run",
        &wasm("kvstore.wasm")?,
        "--app",
        &file.0.display().to_string(),
        "--json",
        "--now",
        "2026-12-02T06:00:00Z",
    ])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let applied = decision["apply"].as_array().cloned().unwrap_or_default();
    assert!(!applied.is_empty(), "{decision}");
    for object in &applied {
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["wasmop.dev/parent-kind"], "KVStore.data.example.com");
        assert_eq!(labels["wasmop.dev/app"], "cache");
        if object["kind"] != "PersistentVolumeClaim" {
            let owner = &object["metadata"]["ownerReferences"][0];
            assert_eq!(
                (&owner["apiVersion"], &owner["kind"], &owner["uid"]),
                (
                    &serde_json::json!("data.example.com/v1"),
                    &serde_json::json!("KVStore"),
                    &serde_json::json!("kv-uid")
                ),
                "{object}"
            );
        }
    }
    let set = applied
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .expect("a StatefulSet");
    assert_eq!(set["spec"]["replicas"], 2, "the config is the spec");
    assert_eq!(
        set["spec"]["template"]["metadata"]["labels"]["wasmop.dev/parent-kind"],
        "KVStore.data.example.com"
    );

    let bad = instance("{version: \"7.2.4\", replicas: three}")?;
    let out = wasmop(&[
        "plugin",
        "run",
        &wasm("kvstore.wasm")?,
        "--app",
        &bad.0.display().to_string(),
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("spec.replicas"), "{stderr}");
    Ok(())
}

#[test]
fn push_then_pull_round_trips_through_the_registry() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let reference = format!("{}/e2e/{}:1.0", local.registry, unique("cli"));
    let file = wasm("hello.wasm")?;
    let out = wasmop(&["plugin", "push", &file, &reference])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = String::from_utf8(out.stdout)?.trim().to_string();
    assert!(
        pinned.contains("@sha256:"),
        "push prints the digest reference: {pinned}"
    );

    let out = wasmop(&["plugin", "inspect", "--json", &reference])?;
    assert!(
        out.status.success(),
        "inspect REF: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(info["name"], "hello");

    let pulled = std::env::temp_dir().join(unique("pulled") + ".wasm");
    let out = wasmop(&[
        "plugin",
        "pull",
        &pinned,
        "-o",
        &pulled.display().to_string(),
    ])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&pulled)? == std::fs::read(&file)?,
        "pulled bytes differ"
    );
    let _ = std::fs::remove_file(&pulled);

    // Refused before it reaches the registry: the host would not load it.
    let out = wasmop(&["plugin", "push", &wasm("wrong-world.wasm")?, &reference])?;
    assert!(!out.status.success());
    Ok(())
}

/// `--policy` holds plans to a PluginPolicy manifest: a hostPath volume fails under the
/// default and under `baseline`, and passes under `privileged`.
#[test]
fn run_holds_plans_to_the_policy_given() -> anyhow::Result<()> {
    let app = app_file("{fault: host-path}")?;
    for (level, passes) in [("baseline", false), ("privileged", true)] {
        let policy = tempfile_path::write(&format!(
            "apiVersion: wasmop.dev/v1alpha1\nkind: PluginPolicy\nmetadata: {{name: p}}\nspec: {{podSecurity: {level}}}\n"
        ))?;
        let out = wasmop(&[
            "plugin",
            "run",
            &wasm("fault_plugin.wasm")?,
            "--app",
            &app.0.display().to_string(),
            "--policy",
            &policy.0.display().to_string(),
        ])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), passes, "{level}: {stderr}");
        if !passes {
            assert!(stderr.contains("volumes[0].hostPath"), "{level}: {stderr}");
        }
    }
    let bad = tempfile_path::write("kind: PluginPolicy\nspec: {podSecurity: lenient}\n")?;
    let out = wasmop(&[
        "plugin",
        "run",
        &wasm("fault_plugin.wasm")?,
        "--app",
        &app.0.display().to_string(),
        "--policy",
        &bad.0.display().to_string(),
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("is not a valid PluginPolicy"),
        "{stderr}"
    );
    Ok(())
}

/// `plugin run --live --diff` against an App the host reconciled: the same build changes no
/// object, a build that plans differently names the object and the field, and nothing is
/// written either way.
#[tokio::test]
async fn run_live_diff_shows_what_a_build_would_change_and_writes_nothing() -> anyhow::Result<()> {
    use k8s_openapi::api::{
        apps::v1::StatefulSet,
        core::v1::{ConfigMap, Service},
    };
    use kube::{
        Api, ResourceExt,
        api::{ListParams, PostParams},
    };
    use serde_json::json;
    use std::time::Duration;

    use crate::apps::{Host, app, push_kvstore, ready_at, wait_app};

    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = crate::harness::TestNamespace::create(&client, "e2e-diff").await?;
    let image = push_kvstore(&local).await?;
    let host = Host::start(&local, &ns.name).await?;
    let apps: Api<wasmop_host::app::App> = Api::namespaced(client.clone(), &ns.name);
    apps.create(
        &PostParams::default(),
        &app(
            "cache",
            json!({"image": image}),
            "7.2.4",
            json!({"replicas": 1}),
        )?,
    )
    .await?;
    wait_app(
        &apps,
        "cache",
        "Ready",
        Duration::from_secs(90),
        ready_at(1, "7.2.4"),
    )
    .await?;
    host.terminate().await?;

    // Every object of the App and the App itself: a write of any would move its
    // resourceVersion.
    let labelled = ListParams::default().labels("wasmop.dev/app=cache");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let versions = || async {
        let mut versions = Vec::new();
        for cm in cms.list(&labelled).await? {
            versions.push((cm.name_any(), cm.resource_version()));
        }
        for set in sets.list(&labelled).await? {
            versions.push((set.name_any(), set.resource_version()));
        }
        for service in services.list(&labelled).await? {
            versions.push((service.name_any(), service.resource_version()));
        }
        let app = apps.get("cache").await?;
        versions.push((app.name_any(), app.resource_version()));
        anyhow::ensure!(
            versions.len() >= 4,
            "the App's objects are missing: {versions:?}"
        );
        anyhow::Ok(versions)
    };
    let before = versions().await?;
    let target = format!("{}/cache", ns.name);
    let diff = |file: String| {
        let (target, kubeconfig) = (target.clone(), local.kubeconfig.clone());
        move || -> anyhow::Result<String> {
            let out = Command::new(wasmop_binary()?)
                .args(["plugin", "run", &file, "--live", &target, "--diff"])
                .env("KUBECONFIG", kubeconfig)
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "plugin run --diff: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let same = tokio::task::spawn_blocking(diff(wasm("kvstore.wasm")?)).await??;
    println!("diff with the same build:\n{same}");
    assert!(same.contains("already as planned"), "{same}");
    assert!(same.contains("= App status"), "{same}");
    assert!(
        !same
            .lines()
            .any(|l| l.starts_with("~ ") || l.starts_with("+ ")),
        "the same build changes something:\n{same}"
    );
    let other = tokio::task::spawn_blocking(diff(wasm("kvstore-v2.wasm")?)).await??;
    println!("diff with kvstore v2:\n{other}");
    assert!(
        other.contains("~ v1/ConfigMap cache-config"),
        "v2's ConfigMap change is not shown:\n{other}"
    );
    assert!(
        other.contains("metadata.annotations.kvstore.wasmop.dev/build: \"dev\" -> \"v2\""),
        "the changed field is not named:\n{other}"
    );
    assert!(
        other.contains("status.plugin.digest"),
        "the new digest is not shown:\n{other}"
    );
    assert_eq!(
        versions().await?,
        before,
        "a --diff run wrote to the cluster"
    );
    ns.delete().await
}
