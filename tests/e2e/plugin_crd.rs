//! `wasmop plugin crd` against the real API server (issue 40): the CRD it prints for the kvstore
//! component is accepted and Established, `kubectl explain` shows the plugin's own field docs,
//! the API server refuses an instance that breaks the plugin's schema at `kubectl apply`, naming
//! the field, and accepts (and defaults) a valid one; `kubectl get` shows the columns. The
//! ClusterRole printed beside it is accepted too. No host runs: this is the API server's part.
//!
//! Group and kind are unique per run, so parallel runs (and other tests binding a `KVStore`)
//! never share a CRD; both objects are deleted at the end, even when the test fails.

use std::{process::Command, time::Duration};

use anyhow::Context;

use crate::harness::{
    Local, TestNamespace, kubectl, kubectl_ok, run, unique, wait_for, wasmop_binary,
};

/// `kubectl apply -f -` of `yaml` in `namespace`: whether the API server accepted it, and what
/// kubectl said.
async fn apply(local: &Local, namespace: &str, yaml: &str) -> anyhow::Result<(bool, String)> {
    let path = std::env::temp_dir().join(format!("{}.yaml", unique("wasmop-crd-instance")));
    std::fs::write(&path, yaml)?;
    let mut command = kubectl(local)?;
    command.args(["apply", "-n", namespace, "-f"]).arg(&path);
    let result = run(command).await;
    let _ = std::fs::remove_file(&path);
    result
}

/// Deletes the CRD and the ClusterRole when dropped: cluster-scoped objects outlive the test's
/// namespace, and a stray CRD would serve its kind to every later run.
struct Cleanup {
    delete: Option<Command>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut command) = self.delete.take() {
            let _ = command.output();
        }
    }
}

#[tokio::test]
async fn the_crd_of_a_plugin_validates_and_documents_its_instances() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-crd").await?;

    // A kind of this run's own: `KVStoreX1a2b3` in `crd-1a2b3.e2e.example.com`.
    let id = unique("crd");
    let suffix = id.trim_start_matches("crd-");
    let group = format!("{id}.e2e.example.com");
    let kind = format!("KVStoreX{suffix}");
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let crd_name = format!("{plural}.{group}");
    let role_name = format!("wasmop-{crd_name}");
    let short = format!("kv{suffix}");
    let kvstore = crate::harness::component_path("kvstore.wasm")?;

    let out = Command::new(wasmop_binary()?)
        .args(["plugin", "crd"])
        .arg(&kvstore)
        .args(["--group", &group, "--kind", &kind, "--short-name", &short])
        .env_remove("RUST_BACKTRACE")
        .output()?;
    assert!(
        out.status.success(),
        "wasmop plugin crd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).context("the CRD is UTF-8")?;
    let documents: Vec<&str> = yaml.split("\n---\n").collect();
    assert_eq!(documents.len(), 2, "a CRD, then a ClusterRole: {yaml}");
    assert!(
        documents[0].contains("kind: CustomResourceDefinition"),
        "{yaml}"
    );
    assert!(documents[1].contains("kind: ClusterRole"), "{yaml}");

    // A bad flag is refused before anything is read, naming the flag.
    let refused = Command::new(wasmop_binary()?)
        .args(["plugin", "crd"])
        .arg(&kvstore)
        .args(["--group", "apps", "--kind", &kind])
        .output()?;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--group \"apps\""), "{said}");

    let mut delete = kubectl(&local)?;
    delete.args([
        "delete",
        "--ignore-not-found",
        "--wait=false",
        &format!("customresourcedefinition/{crd_name}"),
        &format!("clusterrole/{role_name}"),
    ]);
    let _cleanup = Cleanup {
        delete: Some(delete),
    };
    let file = std::env::temp_dir().join(format!("{id}.yaml"));
    std::fs::write(&file, &yaml)?;
    let applied = kubectl_ok(
        &local,
        &[
            "apply",
            "--server-side",
            "--field-manager=wasmop-e2e",
            "-f",
            &file.display().to_string(),
        ],
    )
    .await;
    let _ = std::fs::remove_file(&file);
    applied?;
    kubectl_ok(
        &local,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("customresourcedefinition/{crd_name}"),
        ],
    )
    .await?;

    // The plugin's doc comment, as `kubectl explain` reads it from the published OpenAPI
    // (which follows the CRD within seconds).
    let explained = wait_for(
        "kubectl explain to show the plugin's docs",
        Duration::from_secs(60),
        || {
            let command = kubectl(&local).map(|mut command| {
                command.args(["explain", &format!("{plural}.spec.replicas")]);
                command
            });
            async move {
                let (ok, said) = run(command?).await?;
                Ok((ok && said.contains("Number of Valkey Pods")).then_some(said))
            }
        },
    )
    .await?;
    assert!(explained.contains("integer"), "{explained}");

    let instance = |name: &str, spec: &str| {
        format!("apiVersion: {group}/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n")
    };
    // A typo of type: refused at apply, the field named.
    let (accepted, said) = apply(
        &local,
        &ns.name,
        &instance("bad", r#"{version: "7.2.4", replicas: "three"}"#),
    )
    .await?;
    assert!(!accepted, "replicas: \"three\" was accepted: {said}");
    assert!(said.contains("spec.replicas"), "{said}");
    // Out of the plugin's range (`#[schemars(range(max = 15))]`): refused too.
    let (accepted, said) = apply(
        &local,
        &ns.name,
        &instance("many", r#"{version: "7.2.4", replicas: 16}"#),
    )
    .await?;
    assert!(!accepted, "replicas: 16 was accepted: {said}");
    assert!(said.contains("spec.replicas"), "{said}");
    // Without the required version.
    let (accepted, said) = apply(&local, &ns.name, &instance("nover", "{replicas: 3}")).await?;
    assert!(!accepted, "a spec without version was accepted: {said}");
    assert!(said.contains("spec.version"), "{said}");

    // A valid one is accepted, with the plugin's defaults filled in by the API server.
    let (accepted, said) = apply(
        &local,
        &ns.name,
        &instance(
            "cache",
            r#"{version: "7.2.4", replicas: 3, backup: {schedule: "0 * * * *"}}"#,
        ),
    )
    .await?;
    assert!(accepted, "a valid instance was refused: {said}");
    let policy = kubectl_ok(
        &local,
        &[
            "get",
            "-n",
            &ns.name,
            &format!("{plural}.{group}/cache"),
            "-o",
            "jsonpath={.spec.maxmemoryPolicy} {.spec.backup.retain}",
        ],
    )
    .await?;
    assert_eq!(policy.trim(), "noeviction 5", "the schema's defaults");

    // `kubectl get` by the short name, with the host's and the plugin's columns.
    let listed = kubectl_ok(&local, &["get", "-n", &ns.name, &short]).await?;
    let header = listed.lines().next().unwrap_or_default();
    for column in ["NAME", "READY", "VERSION", "REPLICAS", "BACKUPS", "AGE"] {
        assert!(header.contains(column), "{column} in {listed}");
    }
    assert!(listed.contains("0 * * * *"), "{listed}");

    kubectl_ok(
        &local,
        &["get", &format!("clusterrole/{role_name}"), "-o", "name"],
    )
    .await?;
    ns.delete().await?;
    Ok(())
}
