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
    assert_eq!(info["world"], "wasmop:plugin@0.1.0");
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
