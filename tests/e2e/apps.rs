//! The App resource end to end on the real control plane with the kvstore plugin: objects with
//! owner references, Pods Ready, App Ready with observedGeneration; spec changes re-plan; a
//! forbidden plan is rejected whole while other Apps carry on; upgrades are held then allowed;
//! one backup Job per slot; deletion honours the retention policy.

use std::{collections::BTreeMap, process::Stdio, time::Duration};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    batch::v1::Job,
    core::v1::{ConfigMap, PersistentVolumeClaim},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use wasmop_host::{app::App, plugin::source::oci::OciSource};

use crate::harness::{
    Local, TestNamespace, component, free_port, metric_sum, plugin_configmap, unique, wait_for,
    wait_http_ok,
};

/// The label on a test's PluginBindings naming the namespace whose host serves them.
pub const BINDING_LABEL: &str = "e2e.wasmop.dev/namespace";

/// A `wasmop run` process watching one namespace, stopped when dropped.
pub struct Host {
    child: tokio::process::Child,
    /// The cache directory this Host made (removed on drop); none when the caller gave one.
    cache: Option<std::path::PathBuf>,
    /// Port of the probe server on 127.0.0.1.
    port: u16,
    /// Registers the namespaces it watches while it lives, for [`TestNamespace::delete`].
    _watching: crate::harness::Watching,
}

impl Host {
    /// Starts the host for `namespace` and waits for `/readyz`.
    pub async fn start(local: &Local, namespace: &str) -> anyhow::Result<Self> {
        Self::start_with(local, namespace, &[], namespace).await
    }

    /// Starts the host for `namespace` with `extra` arguments, as Pod `identity`.
    pub async fn start_with(
        local: &Local,
        namespace: &str,
        extra: &[&str],
        identity: &str,
    ) -> anyhow::Result<Self> {
        Self::start_as(&local.kubeconfig, namespace, extra, identity).await
    }

    /// Starts the host with the credentials of `kubeconfig`.
    pub async fn start_as(
        kubeconfig: &std::path::Path,
        namespace: &str,
        extra: &[&str],
        identity: &str,
    ) -> anyhow::Result<Self> {
        Self::start_env(kubeconfig, namespace, extra, identity, &[]).await
    }

    /// Starts the host with the credentials of `kubeconfig` and `env` besides, allowing the
    /// loopback registries of the tests (`--allow-private-registries 127.0.0.0/8`) unless
    /// `extra` says otherwise.
    pub async fn start_env(
        kubeconfig: &std::path::Path,
        namespace: &str,
        extra: &[&str],
        identity: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let port = free_port()?;
        // A caller that passes --cache-dir keeps its cache across Hosts (restart tests).
        let cache = (!extra.contains(&"--cache-dir"))
            .then(|| std::env::temp_dir().join(unique("wasmop-e2e-cache")));
        let mut args: Vec<std::ffi::OsString> = [
            "run",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--namespace",
            namespace,
            "--poll-interval",
            "1s",
        ]
        .iter()
        .map(Into::into)
        .collect();
        if let Some(cache) = &cache {
            args.extend(["--cache-dir".into(), cache.clone().into_os_string()]);
        }
        // The tests' registries are on loopback, a private address the host refuses unless
        // told; a caller that passes its own allowance gets only that.
        if !extra
            .iter()
            .any(|arg| arg.starts_with("--allow-private-registries"))
        {
            args.extend(["--allow-private-registries".into(), "127.0.0.0/8".into()]);
        }
        // Each test's host serves the PluginBindings of its own test only (labelled with its
        // namespace), not those other tests running meanwhile create.
        if !extra.contains(&"--binding-selector") {
            args.extend([
                "--binding-selector".into(),
                format!("{BINDING_LABEL}={namespace}").into(),
            ]);
        }
        args.extend(extra.iter().map(Into::into));
        let mut env = env.to_vec();
        env.push(("POD_NAME", identity));
        let mut host = Self::spawn(
            &crate::harness::wasmop_binary()?,
            &args,
            kubeconfig,
            &env,
            identity,
            port,
        )
        .await?;
        host.cache = cache;
        Ok(host)
    }

    /// Starts `binary` with exactly `args` (which must make it listen on 127.0.0.1:`port`),
    /// the credentials of `kubeconfig` and `env`, logging to `/tmp/<identity>-host.log`, and
    /// waits for `/readyz`.
    pub async fn spawn(
        binary: &std::path::Path,
        args: &[std::ffi::OsString],
        kubeconfig: &std::path::Path,
        env: &[(&str, &str)],
        identity: &str,
        port: u16,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(std::env::temp_dir().join(format!("{identity}-host.log")))?;
        let child = tokio::process::Command::new(binary)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,wasmop_host=debug")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let watching = crate::harness::Watching::from_args(args);
        let url = format!("http://127.0.0.1:{port}/readyz");
        wait_http_ok("the host to be ready", &url, Duration::from_secs(60)).await?;
        Ok(Self {
            child,
            cache: None,
            port,
            _watching: watching,
        })
    }
}

impl Host {
    /// `http://127.0.0.1:<port><path>` of the host's probe server.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The host's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the host as the kubelet does (SIGTERM) and waits for it to exit; returns its exit
    /// status.
    pub async fn terminate(mut self) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self
            .child
            .id()
            .ok_or_else(|| anyhow::anyhow!("the host already exited"))?;
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        anyhow::ensure!(sent.success(), "kill -TERM {pid} failed");
        Ok(tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await??)
    }

    /// Kills the host outright (SIGKILL, a crash) and waits for it to be gone.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await??;
        Ok(())
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(cache) = &self.cache {
            let _ = std::fs::remove_dir_all(cache);
        }
    }
}

pub async fn push_kvstore(local: &Local) -> anyhow::Result<String> {
    let reference = format!("{}/e2e/{}:1.0", local.registry, unique("kvstore"));
    OciSource::new(None, vec![])?
        .push_unchecked(&reference, &component("kvstore.wasm")?)
        .await?;
    Ok(reference)
}

/// Puts the fault test plugin into `namespace` as the ConfigMap `fault-plugin`; returns the
/// `spec.plugin` of an App that loads it.
pub async fn fault_plugin_in(client: &Client, namespace: &str) -> anyhow::Result<Value> {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &plugin_configmap("fault-plugin", "fault_plugin.wasm")?,
        )
        .await?;
    Ok(json!({"configMap": {"name": "fault-plugin", "key": "plugin.wasm"}}))
}

/// An abusive App and a calm neighbour, in two namespaces, both on the fault plugin, under one
/// host watching both: what every test that holds an abuse to its own App starts from.
pub struct Abuse {
    /// The abusive App's namespace.
    pub apps: Api<App>,
    /// The neighbour's namespace, where App `calm` plans only the fault plugin's ConfigMap.
    pub neighbours: Api<App>,
    /// The host; stopped when dropped.
    pub host: Host,
}

/// Starts [`Abuse`]: App `name` with fault `fault` in `ns`, App `calm` in `other`.
pub async fn abuse_beside_a_neighbour(
    local: &Local,
    client: &Client,
    ns: &str,
    other: &str,
    name: &str,
    fault: &str,
) -> anyhow::Result<Abuse> {
    let from_cm = fault_plugin_in(client, ns).await?;
    fault_plugin_in(client, other).await?;
    let host = Host::start_with(local, ns, &["--namespace", other], &unique("abuse-host")).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), ns);
    let neighbours: Api<App> = Api::namespaced(client.clone(), other);
    apps.create(
        &PostParams::default(),
        &app(name, from_cm.clone(), "1.0.0", json!({"fault": fault}))?,
    )
    .await?;
    neighbours
        .create(
            &PostParams::default(),
            &app("calm", from_cm, "1.0.0", json!({"fault": "none"}))?,
        )
        .await?;
    Ok(Abuse {
        apps,
        neighbours,
        host,
    })
}

pub fn app(name: &str, plugin: Value, version: &str, config: Value) -> anyhow::Result<App> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "App",
        "metadata": {"name": name},
        "spec": {"plugin": plugin, "version": version, "config": config},
    }))?)
}

pub fn condition(app: &App, type_: &str) -> Option<(String, String, String)> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub async fn wait_app(
    api: &Api<App>,
    name: &str,
    what: &str,
    timeout: Duration,
    ok: impl Fn(&App) -> bool,
) -> anyhow::Result<App> {
    let waited = wait_for(&format!("App {name}: {what}"), timeout, || async {
        let app = api.get(name).await?;
        Ok(ok(&app).then_some(app))
    })
    .await;
    // A timeout says what the App's conditions were, which is what the reader needs first.
    match waited {
        Ok(app) => Ok(app),
        Err(err) => {
            let conditions = match api.get(name).await {
                Ok(app) => app
                    .status
                    .map(|s| {
                        s.conditions
                            .iter()
                            .map(|c| {
                                format!("{} {} {}: {}", c.type_, c.status, c.reason, c.message)
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_else(|| "no status".into()),
                Err(read) => format!("unreadable: {read}"),
            };
            Err(err.context(format!("App {name}'s conditions: {conditions}")))
        }
    }
}

pub fn ready_at(generation: i64, version: &'static str) -> impl Fn(&App) -> bool {
    move |app: &App| {
        let status = app.status.as_ref();
        status.and_then(|s| s.observed_generation) == Some(generation)
            && status.and_then(|s| s.version.as_deref()) == Some(version)
            && condition(app, "Available").is_some_and(|c| c.0 == "True")
    }
}

async fn patch_spec(api: &Api<App>, name: &str, spec: Value) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn kvstore_app_reconciles_replans_upgrades_and_backs_up() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-app").await?;
    let image = push_kvstore(&local).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let config = json!({"replicas": 3, "backup": {"schedule": "* * * * *", "retain": 3}});
    apps.create(
        &PostParams::default(),
        &app("kv", json!({"image": image}), "7.2.4", config)?,
    )
    .await?;

    let ready = wait_app(
        &apps,
        "kv",
        "Ready at 7.2.4",
        Duration::from_secs(60),
        ready_at(1, "7.2.4"),
    )
    .await?;
    assert_eq!(
        condition(&ready, "PluginReady").map(|c| c.0).as_deref(),
        Some("True")
    );
    let uid = ready.uid().unwrap_or_default();

    // Everything planned carries the owner reference and the labels.
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let kv = sts.get("kv").await?;
    assert_eq!(kv.status.as_ref().and_then(|s| s.ready_replicas), Some(3));
    for (kind, owners, labels) in owned_metadata(&client, &ns.name).await? {
        assert!(
            owners.iter().any(|o| o == &uid),
            "{kind} is not owned by the App"
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("wasmop"),
            "{kind}"
        );
        assert_eq!(
            labels.get("wasmop.dev/app").map(String::as_str),
            Some("kv"),
            "{kind}"
        );
    }

    // A backup Job for the first minute tick after the App was created, exactly one per slot.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let backups = wait_for("a backup Job", Duration::from_secs(75), || async {
        let list = jobs
            .list(&ListParams::default().labels("wasmop.dev/backup-slot"))
            .await?;
        Ok((!list.items.is_empty()).then_some(list.items))
    })
    .await?;
    let mut slots: Vec<String> = backups
        .iter()
        .filter_map(|j| j.labels().get("wasmop.dev/backup-slot").cloned())
        .collect();
    let count = slots.len();
    slots.dedup();
    assert_eq!(slots.len(), count, "a slot ran twice: {slots:?}");
    for job in &backups {
        let slot = &job.labels()["wasmop.dev/backup-slot"];
        assert_eq!(job.name_any(), format!("kv-backup-{slot}"));
    }

    // A spec change re-plans.
    patch_spec(
        &apps,
        "kv",
        json!({"config": {"replicas": 2, "backup": {"schedule": "* * * * *", "retain": 3}}}),
    )
    .await?;
    wait_app(
        &apps,
        "kv",
        "observes generation 2",
        Duration::from_secs(30),
        ready_at(2, "7.2.4"),
    )
    .await?;
    wait_for(
        "StatefulSet kv to have 2 replicas",
        Duration::from_secs(30),
        || async { Ok((sts.get("kv").await?.spec.replicas == Some(2)).then_some(())) },
    )
    .await?;

    // Skipping a minor is refused and held at the rolled-out version.
    patch_spec(&apps, "kv", json!({"version": "7.4.0"})).await?;
    let held = wait_app(&apps, "kv", "UpgradeGated", Duration::from_secs(30), |a| {
        condition(a, "UpgradeGated").is_some_and(|c| c.0 == "True")
            && a.status.as_ref().and_then(|s| s.observed_generation) == Some(3)
    })
    .await?;
    let gate = condition(&held, "UpgradeGated").unwrap_or_default();
    assert_eq!(gate.1, "Denied", "{gate:?}");
    assert!(gate.2.contains("one minor at a time"), "{gate:?}");
    assert_eq!(
        held.status.as_ref().and_then(|s| s.version.as_deref()),
        Some("7.2.4")
    );
    assert_eq!(
        image_of(&sts.get("kv").await?)
            .as_deref()
            .map(|i| i.ends_with(":7.2.4")),
        Some(true),
        "held at 7.2.4"
    );

    // The next minor is allowed, rolled out, and recorded once health says it is complete.
    patch_spec(&apps, "kv", json!({"version": "7.3.0"})).await?;
    let upgraded = wait_app(
        &apps,
        "kv",
        "Ready at 7.3.0",
        Duration::from_secs(60),
        ready_at(4, "7.3.0"),
    )
    .await?;
    assert_eq!(
        condition(&upgraded, "UpgradeGated").map(|c| c.0).as_deref(),
        Some("False")
    );
    assert!(image_of(&sts.get("kv").await?).is_some_and(|i| i.ends_with(":7.3.0")));
    ns.delete().await
}

fn image_of(sts: &StatefulSet) -> Option<String> {
    sts.spec
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}

/// Kind, owner uids and labels of every object labelled `app.kubernetes.io/managed-by=wasmop`.
async fn owned_metadata(
    client: &Client,
    ns: &str,
) -> anyhow::Result<Vec<(String, Vec<String>, BTreeMap<String, String>)>> {
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=wasmop");
    let mut out = Vec::new();
    let mut add = |kind: &str, items: Vec<kube::api::ObjectMeta>| {
        for m in items {
            let owners = m
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .map(|o| o.uid)
                .collect();
            out.push((
                format!("{kind}/{}", m.name.unwrap_or_default()),
                owners,
                m.labels.unwrap_or_default(),
            ));
        }
    };
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    add(
        "StatefulSet",
        sts.list(&lp)
            .await?
            .items
            .into_iter()
            .map(|o| o.metadata)
            .collect(),
    );
    let svc: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), ns);
    let services: Vec<_> = svc
        .list(&lp)
        .await?
        .items
        .into_iter()
        .map(|o| o.metadata)
        .collect();
    anyhow::ensure!(services.len() >= 2, "expected headless and client Services");
    add("Service", services);
    let pdb: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), ns);
    add(
        "PodDisruptionBudget",
        pdb.list(&lp)
            .await?
            .items
            .into_iter()
            .map(|o| o.metadata)
            .collect(),
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    add(
        "ConfigMap",
        cms.list(&lp)
            .await?
            .items
            .into_iter()
            .map(|o| o.metadata)
            .collect(),
    );
    anyhow::ensure!(
        out.len() >= 5,
        "expected at least 5 owned objects, found {out:?}"
    );
    Ok(out)
}

#[tokio::test]
async fn a_forbidden_plan_is_rejected_whole_and_other_apps_carry_on() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-guard").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let fault = plugin_configmap("fault-plugin", "fault_plugin.wasm")?;
    cms.create(&PostParams::default(), &fault).await?;
    let image = push_kvstore(&local).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let from_cm = json!({"configMap": {"name": "fault-plugin", "key": "plugin.wasm"}});
    apps.create(
        &PostParams::default(),
        &app(
            "bad",
            from_cm.clone(),
            "1.0.0",
            json!({"fault": "forbidden"}),
        )?,
    )
    .await?;
    apps.create(
        &PostParams::default(),
        &app("trapping", from_cm, "1.0.0", json!({"fault": "panic"}))?,
    )
    .await?;
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

    let bad = wait_app(&apps, "bad", "Degraded", Duration::from_secs(60), |a| {
        condition(a, "Degraded").is_some_and(|c| c.0 == "True")
    })
    .await?;
    let degraded = condition(&bad, "Degraded").unwrap_or_default();
    assert_eq!(degraded.1, "PlanRejected", "{degraded:?}");
    assert!(
        degraded.2.contains("ConfigMap/escape") && degraded.2.contains("kube-system"),
        "{degraded:?}"
    );
    // Rejected whole: not even the harmless ConfigMap of the same plan was applied.
    assert!(
        cms.get_opt("fault").await?.is_none(),
        "part of a rejected plan was applied"
    );
    let kube_system: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    assert!(kube_system.get_opt("escape").await?.is_none());

    let trapping = wait_app(
        &apps,
        "trapping",
        "Degraded",
        Duration::from_secs(60),
        |a| condition(a, "Degraded").is_some_and(|c| c.0 == "True"),
    )
    .await?;
    let degraded = condition(&trapping, "Degraded").unwrap_or_default();
    assert_eq!(degraded.1, "PluginTrapped", "{degraded:?}");
    assert!(degraded.2.contains("panics on purpose"), "{degraded:?}");

    wait_app(
        &apps,
        "good",
        "Ready beside the faulty Apps",
        Duration::from_secs(60),
        ready_at(1, "7.2.4"),
    )
    .await?;

    // A plan naming an object someone else made is refused; the object stays theirs.
    let theirs = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("taken-config".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("owner".into(), "a user".into())])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &theirs).await?;
    apps.create(
        &PostParams::default(),
        &app(
            "taken",
            json!({"image": image}),
            "7.2.4",
            json!({"replicas": 1}),
        )?,
    )
    .await?;
    let taken = wait_app(&apps, "taken", "Degraded", Duration::from_secs(60), |a| {
        condition(a, "Degraded").is_some_and(|c| c.0 == "True")
    })
    .await?;
    let degraded = condition(&taken, "Degraded").unwrap_or_default();
    assert!(
        degraded.2.contains("ConfigMap/taken-config already exists"),
        "{degraded:?}"
    );
    let still = cms.get("taken-config").await?;
    assert!(
        still.metadata.owner_references.is_none(),
        "the user's ConfigMap was taken over"
    );
    assert_eq!(
        still.data.and_then(|d| d.get("owner").cloned()).as_deref(),
        Some("a user")
    );
    ns.delete().await
}

/// The trust boundary on the real cluster (issue 21): an App whose plugin turns hostile keeps
/// the objects it had, nothing of the hostile plan is applied, the rule is named, and an App
/// beside it stays Ready; a label a user wrote on their own object does not let a plan take it.
#[tokio::test]
async fn a_hostile_plan_changes_nothing_and_a_forged_label_takes_nothing() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-hostile").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let plugin = plugin_configmap("fault-plugin", "fault_plugin.wasm")?;
    cms.create(&PostParams::default(), &plugin).await?;
    let image = push_kvstore(&local).await?;
    // A user's ConfigMap carrying the label the host used to trust for ownership.
    let forged = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("forged-config".into()),
            labels: Some(BTreeMap::from([("wasmop.dev/app".into(), "forged".into())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("owner".into(), "a user".into())])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &forged).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let from_cm = json!({"configMap": {"name": "fault-plugin", "key": "plugin.wasm"}});
    apps.create(
        &PostParams::default(),
        &app("turncoat", from_cm, "1.0.0", json!({"fault": "count"}))?,
    )
    .await?;
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
    apps.create(
        &PostParams::default(),
        &app(
            "forged",
            json!({"image": image}),
            "7.2.4",
            json!({"replicas": 1}),
        )?,
    )
    .await?;
    let before = wait_for(
        "the turncoat App's ConfigMap",
        Duration::from_secs(60),
        || async { Ok(cms.get_opt("fault").await?) },
    )
    .await?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), &ns.name);
    for (generation, (mode, rule)) in [
        (
            "privileged",
            "spec.template.spec.containers[0].securityContext.privileged",
        ),
        (
            "host-service-account",
            "spec.template.spec.serviceAccountName",
        ),
        ("external-ips", "Service/evil: spec.externalIPs"),
    ]
    .into_iter()
    .enumerate()
    {
        patch_spec(&apps, "turncoat", json!({"config": {"fault": mode}})).await?;
        let generation = generation as i64 + 2;
        let rejected = wait_app(&apps, "turncoat", mode, Duration::from_secs(30), |a| {
            condition(a, "Degraded").is_some_and(|c| c.0 == "True" && c.2.contains(rule))
                && a.metadata.generation == Some(generation)
        })
        .await?;
        let degraded = condition(&rejected, "Degraded").unwrap_or_default();
        assert_eq!(degraded.1, "PlanRejected", "{mode}: {degraded:?}");
        assert!(
            deployments.get_opt("evil").await?.is_none(),
            "{mode}: applied"
        );
        assert!(services.get_opt("evil").await?.is_none(), "{mode}: applied");
        let now = cms.get("fault").await?;
        assert_eq!(
            (now.data.clone(), now.metadata.resource_version.clone()),
            (
                before.data.clone(),
                before.metadata.resource_version.clone()
            ),
            "{mode}: the App's previous ConfigMap changed"
        );
    }
    wait_app(
        &apps,
        "good",
        "Ready beside the hostile App",
        Duration::from_secs(60),
        ready_at(1, "7.2.4"),
    )
    .await?;

    let forged_app = wait_app(&apps, "forged", "Degraded", Duration::from_secs(60), |a| {
        condition(a, "Degraded").is_some_and(|c| c.0 == "True")
    })
    .await?;
    let degraded = condition(&forged_app, "Degraded").unwrap_or_default();
    assert!(
        degraded
            .2
            .contains("ConfigMap/forged-config already exists"),
        "{degraded:?}"
    );
    let still = cms.get("forged-config").await?;
    assert!(
        still.metadata.owner_references.is_none(),
        "taken over by label"
    );
    assert_eq!(
        still.data.and_then(|d| d.get("owner").cloned()).as_deref(),
        Some("a user")
    );
    ns.delete().await
}

#[tokio::test]
async fn deletion_honours_the_retention_policy() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-retain").await?;
    let image = push_kvstore(&local).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    for (name, retention) in [("kept", "Retain"), ("gone", "Delete")] {
        let config = json!({"replicas": 2, "retention": retention});
        apps.create(
            &PostParams::default(),
            &app(name, json!({"image": image}), "7.2.4", config)?,
        )
        .await?;
    }
    for name in ["kept", "gone"] {
        let ready = wait_app(
            &apps,
            name,
            "Ready",
            Duration::from_secs(60),
            ready_at(1, "7.2.4"),
        )
        .await?;
        assert!(
            ready.finalizers().iter().any(|f| f == "wasmop.dev/cleanup"),
            "{name} has no finalizer"
        );
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let claims_of = |app: &'static str| live_claims(&pvcs, app);
    wait_for("claims of both Apps", Duration::from_secs(30), || async {
        Ok((claims_of("kept").await? >= 2 && claims_of("gone").await? >= 2).then_some(()))
    })
    .await?;

    for name in ["kept", "gone"] {
        apps.delete(name, &DeleteParams::default()).await?;
    }
    for name in ["kept", "gone"] {
        wait_for(
            &format!("App {name} to be gone"),
            Duration::from_secs(60),
            || async { Ok(apps.get_opt(name).await?.is_none().then_some(())) },
        )
        .await?;
    }
    wait_for(
        "the Delete App's claims to go",
        Duration::from_secs(30),
        || async { Ok((claims_of("gone").await? == 0).then_some(())) },
    )
    .await?;
    assert!(
        claims_of("kept").await? >= 2,
        "the Retain App's claims must stay"
    );
    ns.delete().await
}

/// Issue 46: an App deleted while its StatefulSet is still creating pods leaves none of its
/// claims behind under `retention: Delete`. Before the fix `finalize` deleted the claims there
/// were while the StatefulSet lived on until garbage collection, and a pod it created meanwhile
/// came with a claim owned by nobody. Several Apps, each deleted at another moment of its
/// scale-up, so that some deletion meets a pod being created.
#[tokio::test]
async fn an_app_deleted_while_its_statefulset_scales_up_leaves_no_claim() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-delete-race").await?;
    let image = push_kvstore(&local).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let names: Vec<String> = (0..4).map(|i| format!("race-{i}")).collect();
    for name in &names {
        let config = json!({"replicas": 5, "retention": "Delete"});
        apps.create(
            &PostParams::default(),
            &app(name, json!({"image": image}), "7.2.4", config)?,
        )
        .await?;
    }
    // Each App is deleted once its StatefulSet has made its first claim, then after a pause
    // that grows with the App's index, so the deletions fall at different points of the
    // scale-up (pods 1 to 4 are still to come).
    for (i, name) in names.iter().enumerate() {
        wait_for(
            &format!("the first claim of {name}"),
            Duration::from_secs(60),
            || async { Ok((claims_named(&pvcs, name).await? >= 1).then_some(())) },
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(300 * i as u64)).await;
        apps.delete(name, &DeleteParams::default()).await?;
    }
    for name in &names {
        wait_for(
            &format!("App {name} to be gone"),
            Duration::from_secs(90),
            || async { Ok(apps.get_opt(name).await?.is_none().then_some(())) },
        )
        .await?;
    }
    // The garbage collector removes what the Apps owned; give a StatefulSet that outlived its
    // App the time to make another claim, as it did before the fix.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut left = Vec::new();
    for name in &names {
        let count = claims_named(&pvcs, name).await?;
        if count > 0 {
            left.push(format!("{name}: {count}"));
        }
    }
    assert!(left.is_empty(), "claims left behind: {left:?}");
    ns.delete().await
}

/// How many claims of App `name`'s StatefulSet (`data-<name>-<n>`, labelled or not) exist and
/// are not being deleted.
async fn claims_named(pvcs: &Api<PersistentVolumeClaim>, name: &str) -> anyhow::Result<usize> {
    let prefix = format!("data-{name}-");
    Ok(pvcs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .count())
}

/// How many claims labelled for App `app` exist and are not being deleted.
pub async fn live_claims(pvcs: &Api<PersistentVolumeClaim>, app: &str) -> anyhow::Result<usize> {
    let list = pvcs
        .list(&ListParams::default().labels(&format!("wasmop.dev/app={app}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count())
}

/// Creates a one-replica kvstore App from `image` and waits until it is Ready.
pub async fn create_one_replica_app(
    apps: &Api<App>,
    name: &str,
    image: &str,
    what: &str,
) -> anyhow::Result<()> {
    let config = json!({"replicas": 1});
    apps.create(
        &PostParams::default(),
        &app(name, json!({"image": image}), "7.2.4", config)?,
    )
    .await?;
    wait_app(
        apps,
        name,
        what,
        Duration::from_secs(60),
        ready_at(1, "7.2.4"),
    )
    .await?;
    Ok(())
}

/// Leader election on the real control plane: one replica reconciles; a standby is warm (its
/// caches synced, the plugins of the Apps loaded, also of an App created while it waits) yet
/// reconciles and writes nothing; it takes a released lease at its next retry and a killed
/// leader's once the lease runs out, and serves from then on.
#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;

    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-leader").await?;
    let image = push_kvstore(&local).await?;
    let args = ["--leader-elect", "--lease-namespace", ns.name.as_str()];
    let first = Host::start_with(&local, &ns.name, &args, &format!("{}-a", ns.name)).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let holder = || async {
        let lease = leases.get_opt("wasmop-leader").await?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity))
    };
    let leader = wait_for("a leader", Duration::from_secs(30), holder).await?;
    assert_eq!(leader, format!("{}-a", ns.name));
    let second = Host::start_with(&local, &ns.name, &args, &format!("{}-b", ns.name)).await?;
    assert_eq!(
        holder().await?.as_deref(),
        Some(leader.as_str()),
        "the standby must not take a held lease"
    );

    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    create_one_replica_app(&apps, "one", &image, "Ready under the first leader").await?;
    // The standby is warm: it loads the plugin of an App that appeared while it waited.
    let metrics = second.url("/metrics");
    wait_for(
        "the standby to load the new App's plugin",
        Duration::from_secs(20),
        || async {
            Ok((metric_sum(&metrics, "wasmop_plugin_loads_total").await? > 0.0).then_some(()))
        },
    )
    .await?;
    // The standby reconciled nothing and wrote nothing while the first replica led, and the
    // leader did (so the counters are the ones that would show it).
    assert_eq!(metric_sum(&metrics, "wasmop_reconcile_total").await?, 0.0);
    assert_eq!(metric_sum(&metrics, "wasmop_api_writes_total").await?, 0.0);
    assert!(metric_sum(&first.url("/metrics"), "wasmop_api_writes_total").await? > 0.0);

    // A graceful stop releases the lease: the standby takes over at its next retry (2 s), not
    // after a whole lease (15 s).
    let stopped = std::time::Instant::now();
    let status = first.terminate().await?;
    assert!(status.success(), "a graceful stop exits 0: {status}");
    let next = format!("{}-b", ns.name);
    wait_for(
        "the standby to take the released lease",
        Duration::from_secs(8),
        || async { Ok(holder().await?.filter(|h| *h == next).map(|_| ())) },
    )
    .await?;
    println!(
        "standby took the released lease {:.1}s after SIGTERM",
        stopped.elapsed().as_secs_f64()
    );
    create_one_replica_app(&apps, "two", &image, "Ready under the new leader").await?;
    // A leader killed outright holds the lease until it runs out on the standby's clock.
    let third = Host::start_with(&local, &ns.name, &args, &format!("{}-c", ns.name)).await?;
    assert_eq!(
        metric_sum(&third.url("/metrics"), "wasmop_reconcile_total").await?,
        0.0
    );
    drop(second);
    let last = format!("{}-c", ns.name);
    wait_for(
        "the last standby to take the lease of a killed leader",
        Duration::from_secs(40),
        || async { Ok(holder().await?.filter(|h| *h == last).map(|_| ())) },
    )
    .await?;
    create_one_replica_app(&apps, "three", &image, "Ready under the third leader").await?;
    drop(third);
    ns.delete().await
}

/// The operator checklist's first rule, on the real control plane: once an App is Ready, a
/// reconcile (here forced by touching an owned object's annotations, and any Pod or
/// StatefulSet status update meanwhile) writes nothing: no apply, no delete, no status patch.
#[tokio::test]
async fn a_ready_app_reconciles_without_writing() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-idem").await?;
    let image = push_kvstore(&local).await?;
    let host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    create_one_replica_app(&apps, "steady", &image, "Ready").await?;
    let metrics = host.url("/metrics");
    let writes = || metric_sum(&metrics, "wasmop_api_writes_total");
    let reconciles = || metric_sum(&metrics, "wasmop_reconcile_total");
    // Pods and the StatefulSet settle after Ready; wait until writes stop.
    let mut before = writes().await?;
    for attempt in 0.. {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = writes().await?;
        if now == before {
            break;
        }
        anyhow::ensure!(attempt < 10, "writes did not settle after Ready: {now}");
        before = now;
    }
    assert!(before > 0.0, "the App's objects were written once");
    let reconciled = reconciles().await?;
    // A change to an owned object reconciles its App (an App's own metadata does not).
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let set = sets
        .list(&ListParams::default().labels("wasmop.dev/app=steady"))
        .await?
        .items
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the App's StatefulSet"))?;
    sets.patch(
        &set.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}})),
    )
    .await?;
    wait_for(
        "a reconcile after the touch",
        Duration::from_secs(20),
        || async { Ok((reconciles().await? > reconciled).then_some(())) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        writes().await?,
        before,
        "a Ready App's reconcile writes nothing"
    );
    drop(host);
    ns.delete().await
}

/// Issue 42's request savings on the real control plane: a new App's objects are created (one
/// request each, no read first), a field the first plan set and the next plan drops is gone
/// after the next apply (the create's field ownership was handed over to server-side apply),
/// and an App whose plugin neither exports `finalize` nor makes claims carries no finalizer
/// and is deleted at once.
#[tokio::test]
async fn a_created_object_loses_what_the_next_plan_drops_and_needs_no_finalizer()
-> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let ns = TestNamespace::create(&client, "e2e-create").await?;
    let plugin = fault_plugin_in(&client, &ns.name).await?;
    let _host = Host::start(&local, &ns.name).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    apps.create(
        &PostParams::default(),
        &app("lean", plugin, "1.0.0", json!({"fault": "extra"}))?,
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let entries = |cm: &ConfigMap| -> Vec<(String, String)> {
        cm.managed_fields()
            .iter()
            .filter(|e| e.manager.as_deref() == Some("wasmop"))
            .map(|e| {
                (
                    e.operation.clone().unwrap_or_default(),
                    e.subresource.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    let created = wait_for("the planned ConfigMap", Duration::from_secs(60), || async {
        Ok(cms.get_opt("fault").await?.filter(|cm| {
            cm.data
                .as_ref()
                .is_some_and(|d| d.get("extra").map(String::as_str) == Some("planned once"))
        }))
    })
    .await?;
    assert_eq!(
        entries(&created),
        [("Update".to_string(), String::new())],
        "created with a POST, not applied"
    );
    let lean = wait_app(&apps, "lean", "Ready", Duration::from_secs(60), |a| {
        condition(a, "Ready").is_some_and(|c| c.0 == "True")
    })
    .await?;
    assert!(
        lean.finalizers().is_empty(),
        "no finalize, no claims, yet finalizers {:?}",
        lean.finalizers()
    );

    patch_spec(&apps, "lean", json!({"config": {"fault": "none"}})).await?;
    let replanned = wait_for(
        "the ConfigMap without the dropped key",
        Duration::from_secs(60),
        || async {
            Ok(cms
                .get_opt("fault")
                .await?
                .filter(|cm| cm.data.as_ref().is_some_and(|d| !d.contains_key("extra"))))
        },
    )
    .await?;
    assert_eq!(
        replanned
            .data
            .as_ref()
            .and_then(|d| d.get("payload"))
            .map(String::as_str),
        Some("fine")
    );
    assert_eq!(
        entries(&replanned),
        [("Apply".to_string(), String::new())],
        "the create's fields belong to server-side apply now"
    );

    apps.delete("lean", &DeleteParams::default()).await?;
    wait_for("the App to go", Duration::from_secs(10), || async {
        Ok(apps.get_opt("lean").await?.is_none().then_some(()))
    })
    .await?;
    ns.delete().await
}
