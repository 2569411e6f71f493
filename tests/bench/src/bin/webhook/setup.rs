//! What one run makes and unmakes: a namespace; two kinds `Greeting` of the same schema (the CRD
//! `wasmop plugin crd` prints for hello, versions `v1alpha1` and `v1`, stored as `v1`), each of a
//! group of its own, one bound to hello by a `PluginBinding` and so webhooked, the other plain;
//! hello pushed to the local registry; and a `wasmop run` serving the binding with its webhooks
//! on loopback, started with the binary under measurement.
//!
//! Every name carries the run's stamp. [`Fixture::cleanup`] deletes what the run made by name,
//! whatever got made before a failure: the instances while the host runs (their finalizer is
//! the host's), then the binding (which takes its webhook configuration and the CRD's conversion
//! with it), then the host, the namespace, the CRDs, the roles and the host's Secret.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail, ensure};
use k8s_openapi::{
    api::{
        admissionregistration::v1::ValidatingWebhookConfiguration,
        core::v1::{Namespace, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
};
use serde_json::json;
use wasmop_host::{binding::PluginBinding, plugin::source::oci::OciSource};

use crate::local::Local;

/// The label that selects this run's binding for its host.
const LABEL: &str = "bench.wasmop.dev/namespace";

/// The namespace the host keeps its webhook Secret in: a host outside a Pod's is `default`.
const HOST_NAMESPACE: &str = "default";

/// How long any one wait of the setup or the cleanup may take.
const WAIT: Duration = Duration::from_secs(180);

/// The names of one run.
pub struct Names {
    /// The run's stamp, in every name below.
    pub stamp: String,
    /// The namespace of the instances (and the dry-run creates).
    pub namespace: String,
    /// The group of the bound, webhooked kind.
    pub hooked_group: String,
    /// The group of the plain kind: the same CRD, no binding.
    pub plain_group: String,
    /// The PluginBinding (and `wasmop.<binding>`, its webhook configuration).
    pub binding: String,
    /// The host's webhook Secret, in [`HOST_NAMESPACE`].
    pub secret: String,
}

impl Names {
    /// Names unique to this run.
    pub fn fresh() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let stamp = format!("{:x}{:05x}", std::process::id() & 0xfff, nanos & 0xfffff);
        Self {
            namespace: format!("bench-webhooks-{stamp}"),
            hooked_group: format!("hooked-{stamp}.bench.example.com"),
            plain_group: format!("plain-{stamp}.bench.example.com"),
            binding: format!("bench-webhooks-{stamp}"),
            secret: format!("wasmop-webhook-tls-{stamp}"),
            stamp,
        }
    }

    /// The CRD of `group`'s `Greeting`.
    pub fn crd(group: &str) -> String {
        format!("greetings.{group}")
    }

    /// The `Greeting` instances of `group` in the run's namespace, served at `version`.
    pub fn greetings(&self, client: &Client, group: &str, version: &str) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, "Greeting"),
            "greetings",
        );
        Api::namespaced_with(client.clone(), &self.namespace, &resource)
    }
}

/// How the host is started.
pub struct HostOptions<'a> {
    /// The `wasmop` binary under measurement.
    pub binary: &'a Path,
    /// hello's component.
    pub plugin: &'a Path,
}

/// What a run made, for [`Fixture::cleanup`].
pub struct Fixture {
    /// The run's names.
    pub names: Names,
    /// The running host.
    pub host: Option<HostProcess>,
    /// Its compiled-plugin cache, removed at the end.
    cache_dir: PathBuf,
}

/// A `wasmop run` of the benchmark.
pub struct HostProcess {
    child: tokio::process::Child,
    /// Its probe and metrics port on 127.0.0.1.
    port: u16,
    /// Where its log goes.
    pub log: PathBuf,
}

impl HostProcess {
    /// `http://127.0.0.1:<port>/metrics`, as text.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        Ok(
            reqwest::get(format!("http://127.0.0.1:{}/metrics", self.port))
                .await?
                .error_for_status()?
                .text()
                .await?,
        )
    }

    /// `SIGTERM`, as the kubelet stops a Pod; `SIGKILL` if it has not exited 30 s later.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

impl Fixture {
    /// Nothing made yet.
    pub fn new(names: Names) -> Self {
        let cache_dir = std::env::temp_dir().join(format!("wasmop-webhook-bench-{}", names.stamp));
        Self {
            names,
            host: None,
            cache_dir,
        }
    }

    /// Makes everything and waits until the API server calls the host for the hooked kind:
    /// the binding Valid, its configuration there with a CA bundle, the CRD's conversion
    /// `Webhook`.
    pub async fn set_up(
        &mut self,
        local: &Local,
        client: &Client,
        options: &HostOptions<'_>,
    ) -> anyhow::Result<()> {
        let names = &self.names;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": names.namespace}}))?,
            )
            .await
            .with_context(|| format!("creating namespace {}", names.namespace))?;
        for group in [&names.hooked_group, &names.plain_group] {
            apply_kind(local, options, group, &names.stamp).await?;
        }

        let image = format!("{}/bench/webhooks-{}:1", local.registry, names.stamp);
        let component = std::fs::read(options.plugin)
            .with_context(|| format!("reading {}", options.plugin.display()))?;
        OciSource::new(None, vec![local.registry.clone()])?
            .push_unchecked(&image, &component)
            .await
            .with_context(|| format!("pushing {image}"))?;

        self.host = Some(self.start_host(local, options.binary).await?);
        let names = &self.names;
        let bindings: Api<PluginBinding> = Api::all(client.clone());
        let binding: PluginBinding = serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "PluginBinding",
            "metadata": {"name": names.binding, "labels": {LABEL: names.namespace}},
            "spec": {
                "kind": {"group": names.hooked_group, "version": "v1", "kind": "Greeting"},
                "plugin": {"image": image},
            },
        }))?;
        bindings.create(&PostParams::default(), &binding).await?;
        let (status, reason, message) = wait_for("the binding to be checked", || async {
            Ok(bindings.get(&names.binding).await?.status.and_then(|s| {
                s.conditions
                    .into_iter()
                    .find(|c| c.type_ == "Valid")
                    .map(|c| (c.status, c.reason, c.message))
            }))
        })
        .await?;
        ensure!(
            status == "True",
            "PluginBinding {} is not Valid: {reason}: {message}",
            names.binding
        );

        let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let config = format!("wasmop.{}", names.binding);
        wait_for("the webhook configuration", || async {
            Ok(configs.get_opt(&config).await?.filter(|c| {
                c.webhooks
                    .iter()
                    .flatten()
                    .all(|w| w.client_config.ca_bundle.is_some())
            }))
        })
        .await?;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let crd = Names::crd(&names.hooked_group);
        wait_for("the CRD's conversion webhook", || async {
            Ok(crds.get(&crd).await?.spec.conversion.filter(|c| {
                c.strategy == "Webhook"
                    && c.webhook
                        .as_ref()
                        .and_then(|w| w.client_config.as_ref())
                        .is_some_and(|c| c.ca_bundle.is_some())
            }))
        })
        .await?;
        Ok(())
    }

    async fn start_host(&self, local: &Local, binary: &Path) -> anyhow::Result<HostProcess> {
        let names = &self.names;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::env::temp_dir().join(format!("wasmop-webhook-bench-{}.log", names.stamp));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = tokio::process::Command::new(binary)
            .args(["run", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--namespace", &names.namespace])
            .args([
                "--binding-selector",
                &format!("{LABEL}={}", names.namespace),
            ])
            .args(["--webhook-listen", "127.0.0.1:0"])
            .args(["--webhook-secret", &names.secret])
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(["--insecure-registry", "127.0.0.1"])
            // The local registry is on loopback, a private address the host refuses unless told.
            .args(["--allow-private-registries", "127.0.0.0/8"])
            .args(["--log-format", "json"])
            .env("KUBECONFIG", &local.kubeconfig)
            .env("POD_NAME", format!("bench-webhooks-{}", names.stamp))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let host = HostProcess { child, port, log };
        let http = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}/readyz");
        wait_for("the host to be ready", || async {
            Ok(http
                .get(&url)
                .send()
                .await?
                .status()
                .is_success()
                .then_some(()))
        })
        .await
        .with_context(|| format!("see {}", host.log.display()))?;
        Ok(host)
    }

    /// Deletes everything the run made, by name; what fails is reported and skipped.
    pub async fn cleanup(mut self, local: &Local, client: &Client) {
        let names = &self.names;
        let step = |what: &str, result: anyhow::Result<()>| {
            if let Err(err) = result {
                eprintln!("[webhook-bench] cleanup: {what}: {err:#}");
            }
        };
        let hooked = names.greetings(client, &names.hooked_group, "v1");
        step(
            "the bound kind's instances",
            delete_instances(&hooked, self.host.is_some()).await,
        );
        let bindings: Api<PluginBinding> = Api::all(client.clone());
        step(
            "the binding",
            delete_released(&bindings, &names.binding, self.host.is_some()).await,
        );
        if let Some(host) = self.host.take() {
            host.stop().await;
        }
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        step(
            "the webhook configuration",
            gone(
                configs
                    .delete(
                        &format!("wasmop.{}", names.binding),
                        &DeleteParams::default(),
                    )
                    .await,
            ),
        );
        let namespaces: Api<Namespace> = Api::all(client.clone());
        step(
            "the namespace",
            gone(
                namespaces
                    .delete(&names.namespace, &DeleteParams::background())
                    .await,
            ),
        );
        for group in [&names.hooked_group, &names.plain_group] {
            let crd = Names::crd(group);
            step(
                &format!("CRD and role {crd}"),
                local
                    .kubectl([
                        "delete",
                        "--ignore-not-found",
                        "--wait=false",
                        &format!("customresourcedefinition/{crd}"),
                        &format!("clusterrole/wasmop-{crd}"),
                    ])
                    .await
                    .map(drop),
            );
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), HOST_NAMESPACE);
        step(
            "the host's Secret",
            gone(
                secrets
                    .delete(&names.secret, &DeleteParams::default())
                    .await,
            ),
        );
        let _ = std::fs::remove_dir_all(&self.cache_dir);
    }
}

/// `wasmop plugin crd` of hello for `group`'s `Greeting` (versions `v1alpha1` and `v1`, stored
/// as `v1`), applied server-side with `kubectl` as a team would; the CRD Established.
async fn apply_kind(
    local: &Local,
    options: &HostOptions<'_>,
    group: &str,
    stamp: &str,
) -> anyhow::Result<()> {
    let crd = Names::crd(group);
    let out = tokio::process::Command::new(options.binary)
        .args(["plugin", "crd"])
        .arg(options.plugin)
        .args(["--group", group, "--kind", "Greeting"])
        .args(["--version", "v1alpha1,v1", "--storage", "v1"])
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {} plugin crd", options.binary.display()))?;
    ensure!(
        out.status.success(),
        "wasmop plugin crd --group {group}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).context("wasmop plugin crd: not UTF-8")?;
    // The cleanup deletes these by name: they must be what was printed.
    for name in [crd.clone(), format!("wasmop-{crd}")] {
        ensure!(
            yaml.contains(&format!("name: {name}\n")),
            "wasmop plugin crd --group {group} printed no object named {name}"
        );
    }
    let file = std::env::temp_dir().join(format!("wasmop-webhook-bench-{stamp}-{group}.yaml"));
    std::fs::write(&file, yaml).with_context(|| format!("writing {}", file.display()))?;
    let applied = local
        .kubectl([
            "apply".as_ref(),
            "--server-side".as_ref(),
            "--field-manager=wasmop-bench".as_ref(),
            "-f".as_ref(),
            file.as_os_str(),
        ])
        .await;
    let _ = std::fs::remove_file(&file);
    applied?;
    local
        .kubectl([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("customresourcedefinition/{crd}"),
        ])
        .await?;
    Ok(())
}

/// Deletes every instance of `api` and sees them gone: finalized by the host when it runs (up to
/// [`WAIT`]), then released by removing the finalizers of those left.
async fn delete_instances(api: &Api<DynamicObject>, host_runs: bool) -> anyhow::Result<()> {
    match api
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
    {
        Ok(_) => {}
        // No such kind: the setup failed before its CRD.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(err) => return Err(err.into()),
    }
    if host_runs {
        let finalized = wait_for("the host to finalize the instances", || async {
            Ok(api
                .list_metadata(&ListParams::default())
                .await?
                .items
                .is_empty()
                .then_some(()))
        })
        .await;
        if finalized.is_ok() {
            return Ok(());
        }
    }
    for object in api.list_metadata(&ListParams::default()).await? {
        let _ = api
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    Ok(())
}

/// Deletes `name` and sees it gone: released by the host when it runs (up to [`WAIT`]), else
/// its finalizers removed.
async fn delete_released(
    api: &Api<PluginBinding>,
    name: &str,
    host_runs: bool,
) -> anyhow::Result<()> {
    gone(api.delete(name, &DeleteParams::background()).await)?;
    if host_runs {
        let released = wait_for("the host to release the binding", || async {
            Ok(api.get_opt(name).await?.is_none().then_some(()))
        })
        .await;
        if released.is_ok() {
            return Ok(());
        }
    }
    if api.get_opt(name).await?.is_some() {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    }
    Ok(())
}

/// A delete's result, a 404 (nothing to delete) being success.
fn gone<T>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Polls `probe` every 200 ms until it yields `Some`, failing with `what` and the last
/// observation after [`WAIT`].
pub async fn wait_for<T, F, Fut>(what: &str, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        let last = match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => "condition not met".to_string(),
            Err(err) => format!("{err:#}"),
        };
        if start.elapsed() > WAIT {
            bail!("timed out after {WAIT:?} waiting for {what}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
