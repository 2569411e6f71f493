//! `deploy/` installs on the real cluster with the image `deploy/local/image.sh` built and
//! pushed, and its RBAC is enough: the binary out of that image, run with the Deployment's
//! arguments and a token of its ServiceAccount, reconciles an App to Ready and, as the leader
//! serving the webhooks, keeps their certificates in the Secret its Role names.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context as _;
use serde_json::Value;
use sha2::Digest as _;

use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, api::PostParams};
use serde_json::json;
use wasmop_host::app::App;

use crate::{
    apps::{Host, app, create_one_replica_app, push_kvstore, ready_at, wait_app},
    harness::{Local, TestNamespace, free_port, kubectl, unique, wait_for},
};

/// A copy of the local kubeconfig that acts as `account` (`--as`), so that a host started with it
/// has that account's rights and nothing else.
fn impersonating_kubeconfig(local: &Local, account: &str) -> anyhow::Result<std::path::PathBuf> {
    let text = std::fs::read_to_string(&local.kubeconfig)?;
    let impersonating = text.replace(
        "    client-key:",
        &format!("    as: {account}\n    client-key:"),
    );
    anyhow::ensure!(
        impersonating != text,
        "could not add impersonation to the kubeconfig"
    );
    let path = std::env::temp_dir().join(unique("wasmop-impersonating-kubeconfig"));
    std::fs::write(&path, impersonating)?;
    Ok(path)
}

/// The image deploy/local/image.sh pushed and deploy/local/kustomization.yaml installs.
const IMAGE_REPOSITORY: &str = "wasmop/wasmop";

/// A kubeconfig that authenticates with a token the API server issued for the ServiceAccount
/// `namespace/account` (TokenRequest), as a Pod's projected token does.
pub(crate) fn token_kubeconfig(
    local: &Local,
    namespace: &str,
    account: &str,
) -> anyhow::Result<PathBuf> {
    let out = kubectl(local)?
        .args(["-n", namespace, "create", "token", account, "--duration=1h"])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)?.trim().to_string();
    let text = std::fs::read_to_string(&local.kubeconfig)?;
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(str::trim))
            .map(str::to_string)
            .with_context(|| format!("no {key} in the local kubeconfig"))
    };
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\nusers:\n- name: {account}\n  user:\n    token: {token}\n\
         contexts:\n- name: sa\n  context: {{cluster: local, user: {account}}}\ncurrent-context: sa\n",
        line("server:")?,
        line("certificate-authority:")?,
    );
    let path = std::env::temp_dir().join(unique("wasmop-token-kubeconfig"));
    std::fs::write(&path, config)?;
    Ok(path)
}

/// The host's binary out of the image in the local registry: the manifest and config are
/// checked as a runtime reads them, the layer's digest verified, and the binary extracted.
async fn binary_from_image(local: &Local, reference: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let tag = reference.rsplit(':').next().unwrap_or("latest");
    let base = format!("http://{}/v2/{IMAGE_REPOSITORY}", local.registry);
    let http = reqwest::Client::new();
    let manifest: Value = http
        .get(format!("{base}/manifests/{tag}"))
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await?
        .error_for_status()
        .with_context(|| format!("{reference}: run deploy/local/image.sh"))?
        .json()
        .await?;
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let blob = |descriptor: &Value| {
        let url = format!(
            "{base}/blobs/{}",
            descriptor["digest"].as_str().unwrap_or_default()
        );
        let (http, want) = (http.clone(), descriptor["digest"].clone());
        async move {
            let bytes = http
                .get(url)
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await?;
            let digest = format!("sha256:{:x}", sha2::Sha256::digest(&bytes));
            anyhow::ensure!(want == digest.as_str(), "blob {want} has digest {digest}");
            anyhow::Ok(bytes)
        }
    };
    let config: Value = serde_json::from_slice(&blob(&manifest["config"]).await?)?;
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["config"]["User"], "65532:65532", "runs as nonroot");
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/usr/local/bin/wasmop"])
    );
    let labels = &config["config"]["Labels"];
    for key in ["source", "version", "revision"] {
        let label = labels[format!("org.opencontainers.image.{key}")].as_str();
        assert!(
            label.is_some_and(|l| !l.is_empty()),
            "label {key} in {labels}"
        );
    }
    let [layer] = manifest["layers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    else {
        anyhow::bail!("the image has other than one layer: {manifest}");
    };
    assert_eq!(
        layer["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    println!(
        "image {reference}: layer {} bytes compressed",
        layer["size"].as_u64().unwrap_or_default()
    );
    let tarball = dir.join("layer.tar.gz");
    std::fs::write(&tarball, blob(layer).await?)?;
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .args([
            "usr/local/bin/wasmop",
            "etc/passwd",
            "etc/ssl/certs/ca-certificates.crt",
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(dir.join("usr/local/bin/wasmop"))
}

#[tokio::test]
async fn the_kustomize_install_runs_the_image_with_only_its_service_accounts_rights()
-> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    // deploy/ with the image from the local registry (deploy/local/kustomization.yaml).
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/local");
    let out = kubectl(&local)?
        .args(["apply", "--server-side", "--force-conflicts", "-k", deploy])
        .output()?;
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/local/: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "wasmop-system");
    wait_for(
        "2 available wasmop replicas",
        Duration::from_secs(60),
        || async {
            let d = deployments.get("wasmop").await?;
            Ok((d.status.and_then(|s| s.available_replicas) == Some(2)).then_some(()))
        },
    )
    .await?;
    let pod = &deployments.get("wasmop").await?.spec.template;
    let container = &pod
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default()[0];
    let security = container.security_context.clone().unwrap_or_default();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert!(
        container
            .args
            .iter()
            .flatten()
            .any(|a| a == "--leader-elect")
    );

    // The host with the ServiceAccount's permissions and nothing else.
    let kubeconfig =
        impersonating_kubeconfig(&local, "system:serviceaccount:wasmop-system:wasmop")?;
    // The impersonation is real: the ServiceAccount may not read Secrets.
    let sa = local.with_kubeconfig(kubeconfig.clone());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(sa.client().await?);
    match secrets.list(&Default::default()).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => anyhow::bail!(
            "the ServiceAccount should be refused Secrets, got {:?}",
            other.map(|l| l.items.len())
        ),
    }

    let ns = TestNamespace::create(&client, "e2e-rbac").await?;
    // What the ServiceAccount may do, and what it may not, verb by verb (kubectl auth can-i).
    let can = |verb: &str, resource: &str, subresource: Option<&str>| -> anyhow::Result<bool> {
        let mut command = kubectl(&local)?;
        command.args([
            "auth",
            "can-i",
            verb,
            resource,
            "--as=system:serviceaccount:wasmop-system:wasmop",
            "-n",
            &ns.name,
        ]);
        if let Some(sub) = subresource {
            command.arg(format!("--subresource={sub}"));
        }
        let out = command.output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim() == "yes")
    };
    let expected = [
        ("create", "statefulsets.apps", None, true),
        ("delete", "deployments.apps", None, true),
        ("patch", "configmaps", None, true),
        ("watch", "pods", None, true),
        ("update", "apps.wasmop.dev", Some("finalizers"), true),
        ("patch", "apps.wasmop.dev", Some("status"), true),
        ("patch", "pluginpolicies.wasmop.dev", Some("status"), true),
        ("create", "events.events.k8s.io", None, true),
        (
            "watch",
            "rolebindings.rbac.authorization.k8s.io",
            None,
            true,
        ),
        (
            "list",
            "clusterrolebindings.rbac.authorization.k8s.io",
            None,
            true,
        ),
        // The webhooks: the bindings' ValidatingWebhookConfigurations (written, listed, deleted;
        // never watched) and the conversion of bound kinds' CRDs (patched and listed, by
        // wasmop-conversion).
        (
            "create",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
            true,
        ),
        (
            "patch",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
            true,
        ),
        (
            "delete",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
            true,
        ),
        (
            "list",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
            true,
        ),
        (
            "watch",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
            false,
        ),
        (
            "patch",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            true,
        ),
        (
            "list",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            true,
        ),
        // Never: creating, replacing or deleting CRDs, mutating webhooks, admission policies
        // (which no policy can hold), Secrets, RBAC, pods, other namespaces' objects' owners,
        // the policies.
        (
            "create",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            false,
        ),
        (
            "update",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            false,
        ),
        (
            "delete",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            false,
        ),
        (
            "create",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
            false,
        ),
        (
            "delete",
            "validatingadmissionpolicies.admissionregistration.k8s.io",
            None,
            false,
        ),
        (
            "delete",
            "validatingadmissionpolicybindings.admissionregistration.k8s.io",
            None,
            false,
        ),
        ("get", "secrets", None, false),
        ("list", "secrets", None, false),
        (
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            None,
            false,
        ),
        ("create", "pods", None, false),
        ("delete", "pods", None, false),
        ("create", "apps.wasmop.dev", None, false),
        ("delete", "apps.wasmop.dev", None, false),
        ("patch", "pluginpolicies.wasmop.dev", None, false),
        ("create", "pluginpolicies.wasmop.dev", None, false),
        ("create", "networkpolicies.networking.k8s.io", None, false),
        ("patch", "namespaces", None, false),
    ];
    for (verb, resource, subresource, allowed) in expected {
        anyhow::ensure!(
            can(verb, resource, subresource)? == allowed,
            "the ServiceAccount {} {verb} {resource}{}",
            if allowed { "may not" } else { "may" },
            subresource.map(|s| format!("/{s}")).unwrap_or_default()
        );
    }

    // A namespace whose admin lets its Apps use their own pull secrets, with the README's
    // command: the host may then get (not list) Secrets there, and still nowhere else.
    let bound = kubectl(&local)?
        .args([
            "-n",
            &ns.name,
            "create",
            "rolebinding",
            "wasmop-pull-secrets",
            "--clusterrole=wasmop-pull-secrets",
            "--serviceaccount=wasmop-system:wasmop",
        ])
        .output()?;
    anyhow::ensure!(
        bound.status.success(),
        "binding wasmop-pull-secrets: {}",
        String::from_utf8_lossy(&bound.stderr)
    );
    wait_for(
        "get secrets after the RoleBinding",
        Duration::from_secs(10),
        || async { Ok(can("get", "secrets", None)?.then_some(())) },
    )
    .await?;
    anyhow::ensure!(
        !can("list", "secrets", None)?,
        "the pull-secrets role lets the host list Secrets"
    );
    let elsewhere = kubectl(&local)?
        .args([
            "auth",
            "can-i",
            "get",
            "secrets",
            "--as=system:serviceaccount:wasmop-system:wasmop",
            "-n",
            "default",
        ])
        .output()?;
    anyhow::ensure!(
        String::from_utf8_lossy(&elsewhere.stdout).trim() == "no",
        "the host may get Secrets in a namespace that bound nothing"
    );

    // In its own namespace, the webhooks' certificate Secret: created (RBAC cannot narrow a
    // create by name), then read and rotated by its name only; no other Secret there.
    let in_host_namespace = |verb: &str, resource: &str| -> anyhow::Result<bool> {
        let out = kubectl(&local)?
            .args([
                "auth",
                "can-i",
                verb,
                resource,
                "--as=system:serviceaccount:wasmop-system:wasmop",
                "-n",
                "wasmop-system",
            ])
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim() == "yes")
    };
    let host_namespace = [
        ("create", "secrets", true),
        ("get", "secrets/wasmop-webhook-tls", true),
        ("update", "secrets/wasmop-webhook-tls", true),
        ("get", "secrets", false),
        ("list", "secrets", false),
        ("watch", "secrets", false),
        ("get", "secrets/wasmop-cache-key", false),
        ("update", "secrets/wasmop-cache-key", false),
        ("delete", "secrets/wasmop-webhook-tls", false),
        ("patch", "secrets/wasmop-webhook-tls", false),
    ];
    for (verb, resource, allowed) in host_namespace {
        anyhow::ensure!(
            in_host_namespace(verb, resource)? == allowed,
            "the ServiceAccount {} {verb} {resource} in wasmop-system",
            if allowed { "may not" } else { "may" },
        );
    }

    // The image's binary, run as the Deployment runs it: its exact arguments (the paths and
    // the listen addresses moved to this machine, and --namespace added so that it reconciles
    // only this test's namespace), a token of the ServiceAccount, the Pod's environment.
    let reference = container.image.clone().unwrap_or_default();
    assert_eq!(
        reference,
        format!(
            "127.0.0.1:15000/{IMAGE_REPOSITORY}:{}",
            env!("CARGO_PKG_VERSION")
        ),
        "deploy/local/ installs the locally pushed image"
    );
    let dir = std::env::temp_dir().join(unique("wasmop-image"));
    std::fs::create_dir_all(&dir)?;
    let binary = binary_from_image(&local, &reference, &dir).await?;
    let version = Command::new(&binary).arg("--version").output()?;
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "the image's wasmop --version: {version}"
    );
    let port = free_port()?;
    let webhook_port = free_port()?;
    let key = dir.join("cache-key");
    std::fs::write(&key, "0123456789abcdef".repeat(4))?;
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    for arg in container.args.iter().flatten() {
        args.push(match arg.split_once('=') {
            Some(("--listen", _)) => format!("--listen=127.0.0.1:{port}").into(),
            Some(("--webhook-listen", _)) => {
                format!("--webhook-listen=127.0.0.1:{webhook_port}").into()
            }
            Some(("--cache-dir", _)) => {
                format!("--cache-dir={}", dir.join("cache").display()).into()
            }
            Some(("--cache-key-file", _)) => format!("--cache-key-file={}", key.display()).into(),
            _ => arg.into(),
        });
    }
    args.extend(["--namespace".into(), ns.name.clone().into()]);
    // Other tests' PluginBindings are theirs (see `apps::Host`).
    args.extend([
        "--binding-selector".into(),
        format!("{}={}", crate::apps::BINDING_LABEL, ns.name).into(),
    ]);
    let token = token_kubeconfig(&local, "wasmop-system", "wasmop")?;
    let identity = unique("image-host");
    // The installed replicas are kwok Pods that never run, so they never hold the lease.
    let host = Host::spawn(
        &binary,
        &args,
        &token,
        &[
            ("POD_NAME", identity.as_str()),
            ("POD_NAMESPACE", "wasmop-system"),
        ],
        &identity,
        port,
    )
    .await?;
    let image = push_kvstore(&local).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let config = json!({"replicas": 1, "backup": {"schedule": "* * * * *", "retain": 1}, "retention": "Delete"});
    apps.create(
        &PostParams::default(),
        &app("rbac", json!({"image": image}), "7.2.4", config)?,
    )
    .await?;
    wait_app(
        &apps,
        "rbac",
        "Ready with only the ServiceAccount's rights",
        Duration::from_secs(90),
        ready_at(1, "7.2.4"),
    )
    .await?;
    // It leads, and serves the webhooks (the Deployment's --webhook-listen, moved to this
    // machine): it made, or read and kept, their certificates in the Secret its Role names.
    let tls: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "wasmop-system");
    wait_for(
        "the webhooks' certificates in Secret wasmop-system/wasmop-webhook-tls",
        Duration::from_secs(30),
        || async {
            let secret = tls.get_opt("wasmop-webhook-tls").await?;
            Ok(secret
                .filter(|s| {
                    s.type_.as_deref() == Some("kubernetes.io/tls")
                        && s.data.as_ref().is_some_and(|d| {
                            ["tls.crt", "tls.key", "ca.crt"]
                                .iter()
                                .all(|k| d.contains_key(*k))
                        })
                })
                .map(drop))
        },
    )
    .await?;
    drop(host);
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(&token);
    let _ = std::fs::remove_dir_all(&dir);
    ns.delete().await
}

/// `deploy/namespaced/`'s RBAC, renamed for this test (its own ServiceAccount, roles and
/// namespaces, so that it cannot touch the base install other tests use): rights in the watched
/// namespace only, and enough for the host watching just that namespace to reconcile an App.
#[tokio::test]
async fn the_namespaced_install_grants_rights_only_where_it_watches() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crds");
    let overlay = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/namespaced");
    let out = kubectl(&local)?
        .args(["apply", "--server-side", "--force-conflicts", "-k", crds])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(&local)?
        .args(["create", "--dry-run=client", "-o", "json", "-k", overlay])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "rendering deploy/namespaced: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One JSON document per object.
    let rendered: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter()
        .collect::<Result<_, _>>()?;

    let system = TestNamespace::create(&client, "e2e-nsi-system").await?;
    let watched = TestNamespace::create(&client, "e2e-nsi-watched").await?;
    let other = TestNamespace::create(&client, "e2e-nsi-other").await?;
    let suffix = unique("nsi");
    let renamed = |name: &str| format!("{name}-{suffix}");
    let namespace_for = |ns: &str| match ns {
        "wasmop-system" => system.name.clone(),
        // The overlay's example namespaces: the first is watched here, the second left out.
        "team-a" => watched.name.clone(),
        _ => other.name.clone(),
    };
    let mut items = Vec::new();
    for item in &rendered {
        let kind = item["kind"].as_str().unwrap_or_default();
        if !matches!(
            kind,
            "ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
        ) {
            continue;
        }
        let mut item = item.clone();
        let name = item["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        item["metadata"]["name"] = json!(renamed(&name));
        if let Some(ns) = item["metadata"]["namespace"].as_str().map(str::to_string) {
            if ns == "team-b" {
                continue;
            }
            item["metadata"]["namespace"] = json!(namespace_for(&ns));
        }
        if let Some(role) = item["roleRef"]["name"].as_str().map(str::to_string) {
            item["roleRef"]["name"] = json!(renamed(&role));
        }
        for subject in item["subjects"].as_array_mut().into_iter().flatten() {
            let name = subject["name"].as_str().unwrap_or_default().to_string();
            subject["name"] = json!(renamed(&name));
            subject["namespace"] = json!(system.name);
        }
        items.push(item);
    }
    anyhow::ensure!(
        !items
            .iter()
            .any(|i| i["kind"] == "ClusterRoleBinding" && i["roleRef"]["name"] == renamed("wasmop")),
        "the namespaced overlay still binds the namespaced rights cluster-wide"
    );
    let file = std::env::temp_dir().join(format!("{suffix}.json"));
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items}))?,
    )?;
    let out = kubectl(&local)?.args(["apply", "-f"]).arg(&file).output()?;
    anyhow::ensure!(
        out.status.success(),
        "applying the namespaced RBAC: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let account = format!(
        "system:serviceaccount:{}:{}",
        system.name,
        renamed("wasmop")
    );
    let can = |verb: &str, resource: &str, ns: &str| -> anyhow::Result<bool> {
        let out = kubectl(&local)?
            .args(["auth", "can-i", verb, resource, "--as", &account, "-n", ns])
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim() == "yes")
    };
    wait_for(
        "the RoleBinding to take",
        Duration::from_secs(10),
        || async { Ok(can("create", "statefulsets.apps", &watched.name)?.then_some(())) },
    )
    .await?;
    let expected = [
        ("patch", "apps.wasmop.dev", &watched.name, true),
        ("create", "jobs.batch", &watched.name, true),
        ("list", "pluginpolicies.wasmop.dev", &watched.name, true),
        ("list", "namespaces", &watched.name, true),
        (
            "list",
            "rolebindings.rbac.authorization.k8s.io",
            &other.name,
            true,
        ),
        (
            "patch",
            "rolebindings.rbac.authorization.k8s.io",
            &watched.name,
            false,
        ),
        ("create", "statefulsets.apps", &other.name, false),
        ("list", "apps.wasmop.dev", &other.name, false),
        ("list", "configmaps", &other.name, false),
        ("create", "events.events.k8s.io", &other.name, false),
        ("get", "secrets", &watched.name, false),
        // The webhooks' objects are cluster-scoped, so their rights stay cluster-wide here too;
        // their certificates' Secret is in the host's own namespace, by name.
        (
            "create",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            &other.name,
            true,
        ),
        (
            "patch",
            "customresourcedefinitions.apiextensions.k8s.io",
            &other.name,
            true,
        ),
        (
            "delete",
            "customresourcedefinitions.apiextensions.k8s.io",
            &other.name,
            false,
        ),
        ("create", "secrets", &system.name, true),
        ("update", "secrets/wasmop-webhook-tls", &system.name, true),
        ("get", "secrets", &system.name, false),
        ("create", "secrets", &watched.name, false),
    ];
    for (verb, resource, ns, allowed) in expected {
        anyhow::ensure!(
            can(verb, resource, ns)? == allowed,
            "the namespaced ServiceAccount {} {verb} {resource} in {ns}",
            if allowed { "may not" } else { "may" },
        );
    }

    // The host with exactly those rights, watching the one namespace, reconciles an App.
    let kubeconfig = impersonating_kubeconfig(&local, &account)?;
    let image = push_kvstore(&local).await?;
    let args = [
        "--leader-elect",
        "--lease-namespace",
        system.name.as_str(),
        "--skip-crd-install",
    ];
    let host = Host::start_as(&kubeconfig, &watched.name, &args, &unique("nsi-host")).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &watched.name);
    create_one_replica_app(
        &apps,
        "nsi",
        &image,
        "Ready with only the namespaced rights",
    )
    .await?;
    drop(host);
    let _ = kubectl(&local)?.args(["delete", "-f"]).arg(&file).output();
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&kubeconfig);
    other.delete().await?;
    watched.delete().await?;
    system.delete().await
}
