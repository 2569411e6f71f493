//! The Helm chart (`deploy/helm/wasmop`): `helm lint` passes with the defaults and with every
//! optional part switched on; with the defaults it renders the objects `kubectl kustomize deploy/`
//! does (less the Namespace, which Helm leaves to `--create-namespace`), object by object; the
//! webhooks' values switch what they should (cert-manager's certificate instead of the host's,
//! or no webhooks and none of their rights); and what it renders, with the defaults and with a
//! namespaced install, the real API server takes (`kubectl apply --dry-run=server`).

use std::{
    collections::BTreeMap,
    io::Write as _,
    process::{Command, Stdio},
};

use anyhow::Context as _;
use serde_json::Value;

use crate::harness::{Local, TestNamespace, tool};

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/helm/wasmop");
const KUSTOMIZE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");

fn helm(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(tool("HELM_BIN", "helm", "interop")?)
        .args(args)
        .output()
        .context("running helm")?;
    anyhow::ensure!(
        out.status.success(),
        "helm {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn kubectl(local: &Local, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let env = std::fs::read_to_string(local.kubeconfig.with_file_name("env"))?;
    let path = env
        .lines()
        .find_map(|l| l.strip_prefix("export WASMOP_KUBECTL="))
        .context("WASMOP_KUBECTL missing from the env file")?;
    let mut child = Command::new(path)
        .arg("--kubeconfig")
        .arg(&local.kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(text.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The labels Helm's conventions add to what the chart renders.
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// Cluster-scoped kinds that kustomize up to v5.8 gives the base's namespace anyway
/// (kubernetes-sigs/kustomize#6051); the API server drops it, and so does [`objects`].
const NAMESPACED_BY_KUSTOMIZE: [&str; 2] = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// Every object of a multi-document YAML text, keyed by `kind namespace/name`.
fn objects(text: &str) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut objects = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let mut value: Value = serde::Deserialize::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        if NAMESPACED_BY_KUSTOMIZE.contains(&value["kind"].as_str().unwrap_or_default())
            && let Some(metadata) = value["metadata"].as_object_mut()
        {
            metadata.remove("namespace");
        }
        let key = format!(
            "{} {}/{}",
            value["kind"].as_str().unwrap_or_default(),
            value["metadata"]["namespace"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or_default()
        );
        anyhow::ensure!(objects.insert(key.clone(), value).is_none(), "{key} twice");
    }
    Ok(objects)
}

/// `labels` (an object's or a Pod template's) of the chart's object, made comparable with the
/// kustomize one: Helm's own labels go, and the chart's `name`/`component` labels go where
/// kustomize's object lacks them (its RBAC objects carry none, or only wasmop-base's
/// aggregation label).
fn strip_helm_labels(chart: &mut Value, kustomize: &Value) {
    let Some(labels) = chart.as_object_mut() else {
        return;
    };
    for key in HELM_LABELS {
        labels.remove(key);
    }
    // The chart's own labels on every object, where the base has none of them (it may have
    // others: wasmop-base's aggregation label).
    for key in ["app.kubernetes.io/name", "app.kubernetes.io/component"] {
        if kustomize.get(key).is_none() {
            labels.remove(key);
        }
    }
    if labels.is_empty() {
        *chart = Value::Null;
    }
}

/// Without null fields, and with whole floats as integers: the checked-in CRDs say `0.0`
/// where kustomize prints `0`.
fn normalise(value: &mut Value) {
    if let Some(f) = value
        .as_f64()
        .filter(|f| f.fract() == 0.0 && value.is_f64())
    {
        *value = Value::from(f as i64);
    }
    if let Some(map) = value.as_object_mut() {
        map.retain(|_, v| !v.is_null());
        map.values_mut().for_each(normalise);
    } else if let Some(list) = value.as_array_mut() {
        list.iter_mut().for_each(normalise);
    }
}

#[test]
fn the_chart_lints_and_renders_what_kustomize_does() -> anyhow::Result<()> {
    helm(&["lint", "--strict", CHART])?;
    helm(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "pluginPolicy.create=true",
        "--set",
        "registryCredentials.secretName=regcred",
        "--set",
        "pollInterval=5s",
        "--set",
        "image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000",
        "--set",
        "allowPrivateRegistries={127.0.0.0/8}",
        "--set",
        "admissionPolicy.namespaceSelector.matchLabels.wasmop\\.dev/admission-policy=on",
        "--set",
        "webhooks.port=8443",
        "--set",
        "webhooks.certManager.enabled=true",
        "--set",
        "webhooks.certManager.issuerRef.name=internal-ca",
        "--set",
        "webhooks.certManager.issuerRef.kind=ClusterIssuer",
    ])?;
    helm(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "admissionPolicy.enabled=false",
        "--set",
        "webhooks.enabled=false",
    ])?;

    let local = Local::discover()?;
    let chart = objects(&helm(&[
        "template",
        "wasmop",
        CHART,
        "--namespace",
        "wasmop-system",
        "--include-crds",
    ])?)?;
    let mut kustomize = objects(&kubectl(&local, &["kustomize", KUSTOMIZE], None)?)?;
    kustomize.remove("Namespace /wasmop-system");
    let chart_keys: Vec<_> = chart.keys().collect();
    let kustomize_keys: Vec<_> = kustomize.keys().collect();
    assert_eq!(
        chart_keys, kustomize_keys,
        "the chart renders other objects"
    );
    for (key, mut rendered) in chart {
        let mut want = kustomize[&key].clone();
        let labels = want["metadata"]["labels"].clone();
        strip_helm_labels(&mut rendered["metadata"]["labels"], &labels);
        let template = want["spec"]["template"]["metadata"]["labels"].clone();
        if !template.is_null() {
            strip_helm_labels(
                &mut rendered["spec"]["template"]["metadata"]["labels"],
                &template,
            );
        }
        normalise(&mut rendered);
        normalise(&mut want);
        assert_eq!(
            rendered, want,
            "{key}: the chart (left) and kustomize (right) differ"
        );
    }
    Ok(())
}

/// The Deployment's container arguments in `objects`, as one JSON text.
fn args(objects: &BTreeMap<String, Value>) -> String {
    objects["Deployment wasmop-system/wasmop"]["spec"]["template"]["spec"]["containers"][0]["args"]
        .to_string()
}

#[test]
fn the_chart_switches_the_webhooks() -> anyhow::Result<()> {
    let render = |set: &[&str]| -> anyhow::Result<BTreeMap<String, Value>> {
        let mut command = vec!["template", "wasmop", CHART, "--namespace", "wasmop-system"];
        for value in set {
            command.extend(["--set", *value]);
        }
        objects(&helm(&command)?)
    };
    // The defaults (the same objects as kustomize's, see above): the host's own certificates,
    // in a Secret only it may create, get and update.
    let default = render(&[])?;
    assert!(default.contains_key("Service wasmop-system/wasmop-webhook"));
    assert!(default.contains_key("Role wasmop-system/wasmop-webhook-certificates"));
    assert!(!args(&default).contains("--webhook-cert-dir"));
    assert!(!default.keys().any(|k| k.starts_with("Certificate ")));

    // cert-manager: a CA of the chart's own and the serving certificate for the Service's names,
    // mounted for --webhook-cert-dir; the host makes no certificate and gets no Secret rights.
    let cert_manager = render(&["webhooks.certManager.enabled=true"])?;
    for key in [
        "Issuer wasmop-system/wasmop-webhook-selfsigned",
        "Certificate wasmop-system/wasmop-webhook-ca",
        "Issuer wasmop-system/wasmop-webhook-ca",
        "Certificate wasmop-system/wasmop-webhook",
    ] {
        assert!(cert_manager.contains_key(key), "no {key}");
    }
    assert!(!cert_manager.contains_key("Role wasmop-system/wasmop-webhook-certificates"));
    let certificate = &cert_manager["Certificate wasmop-system/wasmop-webhook"]["spec"];
    assert_eq!(certificate["secretName"], "wasmop-webhook-cert");
    assert_eq!(
        certificate["dnsNames"][0], "wasmop-webhook.wasmop-system.svc",
        "the name the API server calls the Service by"
    );
    assert_eq!(certificate["issuerRef"]["name"], "wasmop-webhook-ca");
    assert!(args(&cert_manager).contains("--webhook-cert-dir=/etc/wasmop/webhook-tls"));
    let pod = &cert_manager["Deployment wasmop-system/wasmop"]["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["secret"]["secretName"] == "wasmop-webhook-cert"),
        "{pod}"
    );
    // An issuer of the cluster's own instead of the chart's.
    let issued = render(&[
        "webhooks.certManager.enabled=true",
        "webhooks.certManager.issuerRef.name=internal-ca",
        "webhooks.certManager.issuerRef.kind=ClusterIssuer",
    ])?;
    assert!(!issued.contains_key("Issuer wasmop-system/wasmop-webhook-ca"));
    assert_eq!(
        issued["Certificate wasmop-system/wasmop-webhook"]["spec"]["issuerRef"],
        serde_json::json!({"name": "internal-ca", "kind": "ClusterIssuer"})
    );

    // Without webhooks: nothing served, and none of their rights.
    let off = render(&["webhooks.enabled=false"])?;
    for key in [
        "Service wasmop-system/wasmop-webhook",
        "Role wasmop-system/wasmop-webhook-certificates",
        "ClusterRole /wasmop-conversion",
        "ClusterRoleBinding /wasmop-conversion",
    ] {
        assert!(!off.contains_key(key), "{key} without webhooks");
    }
    assert!(!args(&off).contains("--webhook"), "{}", args(&off));
    let cluster = off["ClusterRole /wasmop-cluster"]["rules"].to_string();
    assert!(
        !cluster.contains("validatingwebhookconfigurations"),
        "{cluster}"
    );
    Ok(())
}

#[tokio::test]
async fn the_api_server_takes_what_the_chart_renders() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let watched = TestNamespace::create(&client, "e2e-helm").await?;
    let default = helm(&["template", "wasmop", CHART, "--namespace", "default"])?;
    let namespaced = helm(&[
        "template",
        "wasmop",
        CHART,
        "--namespace",
        "default",
        "--set",
        &format!("watchNamespaces={{{}}}", watched.name),
        "--set",
        "registryCredentials.secretName=regcred",
        "--set",
        "pollInterval=5s",
        "--set",
        "replicas=3",
        // The local registry is on loopback, as deploy/local/ allows it.
        "--set",
        "allowPrivateRegistries={127.0.0.0/8}",
        "--set",
        "admissionPolicy.namespaceSelector.matchLabels.wasmop\\.dev/admission-policy=on",
    ])?;
    for (what, rendered) in [("defaults", &default), ("namespaced", &namespaced)] {
        let out = kubectl(
            &local,
            &[
                "apply",
                "--dry-run=server",
                "--server-side",
                "--force-conflicts",
                "-f",
                "-",
            ],
            Some(rendered),
        )
        .with_context(|| format!("the chart with {what}"))?;
        assert!(out.contains("deployment.apps/wasmop"), "{what}: {out}");
    }
    let objects = objects(&namespaced)?;
    let rolebinding = format!("RoleBinding {}/wasmop", watched.name);
    assert!(objects.contains_key(&rolebinding), "no {rolebinding}");
    assert!(!objects.contains_key("ClusterRoleBinding /wasmop"));
    // The admission policy holds the release's ServiceAccount, in the namespaces selected.
    let condition =
        objects["ValidatingAdmissionPolicy /wasmop-host"]["spec"]["matchConditions"].to_string();
    assert!(
        condition.contains("system:serviceaccount:default:wasmop"),
        "{condition}"
    );
    assert_eq!(
        objects["ValidatingAdmissionPolicyBinding /wasmop-host"]["spec"]["matchResources"]["namespaceSelector"]
            ["matchLabels"]["wasmop.dev/admission-policy"],
        "on"
    );
    let args =
        objects["Deployment default/wasmop"]["spec"]["template"]["spec"]["containers"][0]["args"]
            .to_string();
    for arg in [
        format!("--namespace={}", watched.name),
        "--registry-config=/etc/wasmop/registry/.dockerconfigjson".into(),
        "--poll-interval=5s".into(),
        "--allow-private-registries=127.0.0.0/8".into(),
    ] {
        assert!(args.contains(&arg), "{arg} not in {args}");
    }
    watched.delete().await
}
