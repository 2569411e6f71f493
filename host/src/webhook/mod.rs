//! Admission and conversion by plugins, served by the host over HTTPS.
//!
//! The stages, as separate modules with separate types:
//! - [`certs`]: the CA and the serving certificate the host makes, renews and rotates itself
//!   (pure decisions and certificate making; no cert-manager needed);
//! - [`store`]: the Secret every replica serves them from;
//! - [`tls`]: the certificate served at each handshake, swapped in place (from the Secret, or
//!   from `--webhook-cert-dir` for certificates someone else manages);
//! - [`review`]: the `AdmissionReview` and `ConversionReview` wire types;
//! - [`target`]: which binding and plugin a call is for;
//! - [`admit`] and [`conversion`]: the answers, from the plugin's `validate` and `convert`;
//! - [`server`]: the HTTPS server, on every replica;
//! - [`configs`]: the `ValidatingWebhookConfiguration`s and CRD conversions the leader keeps;
//! - [`migrate`]: a converted kind's objects stored anew at its storage version, by the leader.
//!
//! [`start`] runs them all: the server and the certificate reload on every replica, the
//! certificate maintenance and the configurations once `leading`.

pub mod admit;
pub mod certs;
pub mod configs;
pub mod conversion;
pub mod migrate;
pub mod review;
pub mod server;
pub mod store;
pub mod target;
pub mod tls;

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, reflector, watcher},
};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    binding::PluginBinding, controller::watch_backoff::WatchBackoff,
    plugin::runtime::PluginRuntime, policy::view::PolicyView,
};
use configs::{Endpoint, Maintainer, Wanted};
use server::WebhookMetrics;
use target::Targets;
use tls::{CertDir, ServingCert};

/// How the webhooks are served, from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the server listens.
    pub listen: SocketAddr,
    /// Where the API server reaches it.
    pub endpoint: Endpoint,
    /// Certificates someone else manages, if so.
    pub cert_dir: Option<PathBuf>,
    /// The Secret of the certificates the host makes, in `host_namespace`.
    pub secret: String,
    /// The host's namespace.
    pub host_namespace: String,
    /// Certificate lifetimes.
    pub timing: certs::Timing,
    /// The namespaces the host watches (empty: all).
    pub scopes: Vec<String>,
    /// `--binding-selector`.
    pub selector: BTreeMap<String, String>,
}

impl Settings {
    /// The endpoint for `--webhook-service`, `--webhook-url`, or (neither given) the URL of
    /// `listen` itself, for a host outside the cluster on the API server's machine.
    pub fn endpoint(
        service: Option<&str>,
        url: Option<&str>,
        listen: SocketAddr,
        host_namespace: &str,
    ) -> anyhow::Result<Endpoint> {
        Ok(match (service, url) {
            (Some(_), Some(_)) => {
                anyhow::bail!("give --webhook-service or --webhook-url, not both")
            }
            (Some(name), None) => Endpoint::Service {
                namespace: host_namespace.to_string(),
                name: name.to_string(),
                port: 443,
            },
            (None, Some(url)) => {
                let parsed = reqwest::Url::parse(url)
                    .with_context(|| format!("--webhook-url {url} is not a URL"))?;
                if parsed.scheme() != "https" || parsed.host_str().is_none() {
                    anyhow::bail!("--webhook-url {url}: the API server calls webhooks over https");
                }
                Endpoint::Url(url.trim_end_matches('/').to_string())
            }
            (None, None) => {
                let ip = if listen.ip().is_unspecified() {
                    std::net::IpAddr::from([127, 0, 0, 1])
                } else {
                    listen.ip()
                };
                Endpoint::Url(format!("https://{}", SocketAddr::new(ip, listen.port())))
            }
        })
    }
}

/// How often the certificates are looked at (read, or maintained by the leader), and the
/// configurations brought up to date.
const TICK: Duration = Duration::from_secs(5);

/// The running webhooks.
pub struct Webhooks {
    /// Where the server listens.
    pub addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts serving the webhooks (see the module docs): the server at once, certificates as they
/// come, configurations once `leading` is true.
pub async fn start(
    mut settings: Settings,
    client: Client,
    runtime: PluginRuntime,
    policies: Arc<PolicyView>,
    metrics: WebhookMetrics,
    leading: watch::Receiver<bool>,
) -> anyhow::Result<Webhooks> {
    let (bindings, writer) = reflector::store();
    let watch_bindings = reflector::reflector(
        writer,
        watcher(
            Api::<PluginBinding>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .backoff(WatchBackoff::default())
    .touched_objects()
    .for_each(|_| async {});
    let targets = Targets {
        bindings,
        selector: settings.selector.clone(),
        policies,
        runtime,
        host_namespace: settings.host_namespace.clone(),
    };
    let serving = Arc::new(ServingCert::default());
    let (addr, serve) = server::bind(settings.listen, serving.clone(), targets.clone(), metrics)
        .await
        .with_context(|| format!("binding the webhook server to {}", settings.listen))?;
    // Port 0 (the tests'): the URL names the port bound.
    if let Endpoint::Url(url) = &settings.endpoint
        && settings.listen.port() == 0
        && url.ends_with(":0")
    {
        settings.endpoint = Endpoint::Url(format!("{}:{}", &url[..url.len() - 2], addr.port()));
    }
    tracing::info!(%addr, endpoint = ?settings.endpoint, "serving the plugins' webhooks");
    let (bundle_tx, bundle) = watch::channel(None::<String>);
    let (published_tx, published) = watch::channel(None::<String>);
    let settings = Arc::new(settings);
    let certificates = tokio::spawn(keep_certificates(
        settings.clone(),
        client.clone(),
        serving,
        bundle_tx,
        published,
        leading.clone(),
    ));
    let configurations = tokio::spawn(keep_configurations(
        settings.clone(),
        client,
        targets,
        bundle,
        published_tx,
        leading,
    ));
    Ok(Webhooks {
        addr,
        tasks: vec![
            tokio::spawn(watch_bindings),
            tokio::spawn(serve),
            certificates,
            configurations,
        ],
    })
}

/// Keeps the served certificate current: from `--webhook-cert-dir`, or from the Secret (made
/// and rotated by the leader, read by the others). Publishes the CA bundle to `bundle`.
async fn keep_certificates(
    settings: Arc<Settings>,
    client: Client,
    serving: Arc<ServingCert>,
    bundle: watch::Sender<Option<String>>,
    published: watch::Receiver<Option<String>>,
    leading: watch::Receiver<bool>,
) {
    let api: Api<Secret> = Api::namespaced(client, &settings.host_namespace);
    let names = settings.endpoint.names();
    let tick = TICK
        .min(settings.timing.overlap / 2)
        .max(Duration::from_millis(200));
    let mut failing = false;
    loop {
        // The serving certificate, its key, the bundle to publish, and (of the host's own) the
        // CA that issued it.
        type Found = (String, String, Option<String>, Option<String>);
        let leads = *leading.borrow();
        let found: Result<Found, String> = match &settings.cert_dir {
            Some(dir) => CertDir::read(dir)
                .map(|d| (d.cert_pem, d.key_pem, d.ca_pem, None))
                .map_err(|err| format!("--webhook-cert-dir {}: {err}", dir.display())),
            None if leads => {
                let now = chrono::Utc::now().timestamp();
                let published = published.borrow().clone();
                match store::maintain(
                    &api,
                    &settings.secret,
                    now,
                    &settings.timing,
                    &names,
                    published.as_deref(),
                )
                .await
                {
                    Ok((material, step)) => {
                        if !matches!(step, certs::Step::Keep { .. }) {
                            tracing::info!(?step, secret = %settings.secret, "webhook certificates");
                        }
                        Ok((
                            material.leaf.cert_pem.clone(),
                            material.leaf.key_pem.clone(),
                            Some(material.ca_bundle()),
                            Some(material.ca.cert_pem.clone()),
                        ))
                    }
                    Err(err) => Err(err.to_string()),
                }
            }
            None => match store::read(&api, &settings.secret).await {
                Ok((Some(material), _)) => Ok((
                    material.leaf.cert_pem.clone(),
                    material.leaf.key_pem.clone(),
                    Some(material.ca_bundle()),
                    None,
                )),
                Ok((None, _)) => Err(format!(
                    "Secret {}/{} holds no certificates yet (the leader makes them)",
                    settings.host_namespace, settings.secret
                )),
                Err(err) => Err(err.to_string()),
            },
        };
        match found {
            Ok((cert, key, ca, issuer)) => {
                // A certificate of a CA no configuration holds yet (the Secret was made anew:
                // deleted, edited, or its CA expired) waits for the leader's next pass, the
                // certificate served until then stays: calls keep working meanwhile.
                let unpublished = leads
                    && serving.is_loaded()
                    && issuer.is_some_and(|ca| {
                        !published
                            .borrow()
                            .as_deref()
                            .is_some_and(|b| b.contains(ca.trim()))
                    });
                match if unpublished {
                    Ok(false)
                } else {
                    serving.set(&cert, &key)
                } {
                    Ok(true) => tracing::info!("serving a new webhook certificate"),
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "the webhook certificate cannot be served; the previous one stays")
                    }
                }
                bundle.send_if_modified(|b| {
                    if *b != ca {
                        *b = ca;
                        true
                    } else {
                        false
                    }
                });
                failing = false;
            }
            Err(message) => {
                // Once per streak, not every tick.
                if !failing {
                    tracing::warn!(error = %message, "webhook certificates");
                }
                failing = true;
            }
        }
        tokio::time::sleep(tick).await;
    }
}

/// Keeps the configurations (on the leader): every tick, and at once when the bundle changes.
async fn keep_configurations(
    settings: Arc<Settings>,
    client: Client,
    targets: Targets,
    mut bundle: watch::Receiver<Option<String>>,
    published: watch::Sender<Option<String>>,
    mut leading: watch::Receiver<bool>,
) {
    if leading.wait_for(|l| *l).await.is_err() {
        return;
    }
    // Not before every binding is known: a CRD whose binding seemed gone would have its
    // conversion reset.
    if targets.bindings.wait_until_ready().await.is_err() {
        return;
    }
    let maintainer = Maintainer::new(
        client.clone(),
        settings.endpoint.clone(),
        settings.scopes.clone(),
    );
    let mut failing = false;
    let mut pacing = migrate::Pacing::default();
    loop {
        let ca_bundle = bundle.borrow_and_update().clone();
        // Without a bundle of its own (self-made certificates not read yet) nothing is
        // written: a configuration without one would be refused by every call. With
        // --webhook-cert-dir and no ca.crt, a CA injector sets it.
        if ca_bundle.is_some() || settings.cert_dir.is_some() {
            let wanted = wanted(&settings, &targets);
            let selected = |name: &str| {
                targets
                    .bindings
                    .get(&kube::runtime::reflector::ObjectRef::new(name))
                    .is_some_and(|b| {
                        let labels = b.labels();
                        settings
                            .selector
                            .iter()
                            .all(|(k, v)| labels.get(k) == Some(v))
                    })
                    && !targets.pending(name)
            };
            let known = |name: &str| {
                targets
                    .bindings
                    .get(&kube::runtime::reflector::ObjectRef::new(name))
                    .is_some()
            };
            let report = maintainer
                .pass(&wanted, ca_bundle.as_deref(), selected, known)
                .await;
            if report.failures.is_empty() {
                published.send_replace(ca_bundle);
                // Not in a pass that wrote (a conversion just set is not served yet).
                if report.written == 0 {
                    migrate_stored(&client, &settings.endpoint, &wanted, &selected, &mut pacing)
                        .await;
                }
                if failing {
                    tracing::info!("webhook configurations written again");
                }
                failing = false;
            } else {
                if !failing {
                    tracing::warn!(failures = ?report.failures, "webhook configurations");
                }
                failing = true;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            changed = bundle.changed() => if changed.is_err() { return; },
        }
    }
}

/// Stores anew the objects of each kind the host converts whose CRD lists an old stored version
/// (see [`migrate`]), once the CRD's live conversion is this host's for the binding, the CRD
/// has settled and no backoff runs (`pacing`). It runs inside the configurations' loop, so the
/// next pass waits for a migration to end (a patch per object: seconds for thousands); the CA's
/// steps, which wait for passes, are minutes apart.
async fn migrate_stored(
    client: &Client,
    endpoint: &Endpoint,
    wanted: &[Wanted],
    selected: &impl Fn(&str) -> bool,
    pacing: &mut migrate::Pacing,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut converted = Vec::new();
    for w in wanted {
        let binding = w.binding.name_any();
        if w.convert != Some(true) || !selected(&binding) {
            continue;
        }
        let name = format!("{}.{}", w.resource, w.binding.spec.kind.group);
        converted.push(name.clone());
        let now = std::time::Instant::now();
        let crd = match crds.get_opt(&name).await {
            Ok(Some(crd)) => crd,
            Ok(None) => continue,
            Err(err) => {
                let err = format!("reading CRD {name}: {err}");
                if pacing.failed(&name, &err, now) {
                    tracing::warn!(crd = %name, %err, "storage version migration");
                }
                continue;
            }
        };
        let (Some(migration), Some(version)) = (migrate::plan(&crd), crd.resource_version()) else {
            pacing.succeeded(&name);
            continue;
        };
        if !configs::converts_through(&crd, &binding, endpoint) {
            let err = format!(
                "CRD {name} lists stored versions {:?} but its conversion is not this host's \
                 for binding {binding} (changed by someone else?): its objects are not stored \
                 anew until it is",
                migration.stored
            );
            if pacing.waiting(&name, &err) {
                tracing::warn!(crd = %name, %err, "storage version migration");
            }
            continue;
        }
        if !pacing.due(&name, &version, now) {
            continue;
        }
        tracing::info!(crd = %name, stored = ?migration.stored, storage = migration.storage(),
            "storing every object at the storage version");
        match migrate::perform(client, &migration).await {
            Ok(done) => {
                pacing.succeeded(&name);
                tracing::info!(crd = %name, objects = done.objects, dropped = ?done.dropped,
                    storage = migration.storage(),
                    "every object stored at the storage version; status.storedVersions set to it");
            }
            Err(err) => {
                if pacing.failed(&name, &err, std::time::Instant::now()) {
                    tracing::warn!(crd = %name, %err,
                        "storage version migration (tried again after a backoff)");
                }
            }
        }
    }
    pacing.retain(&converted);
}

/// What each binding this host serves and holds in force asks of the configurations.
fn wanted(settings: &Settings, targets: &Targets) -> Vec<Wanted> {
    targets
        .bindings
        .state()
        .into_iter()
        .filter_map(|b| {
            let binding = targets.binding(&b.name_any()).ok()?;
            let resource = binding.status.as_ref()?.resource.clone()?;
            // Where the plugin is loaded from when no instance has loaded it yet: a namespace
            // the host watches, else the plugin's own and `default`, whose policy governs.
            let namespaces = if settings.scopes.is_empty() {
                vec![
                    binding
                        .spec
                        .source_namespace
                        .clone()
                        .unwrap_or_else(|| settings.host_namespace.clone()),
                    "default".to_string(),
                ]
            } else {
                settings.scopes.clone()
            };
            let capabilities = targets.capabilities(&binding, &namespaces);
            Some(Wanted {
                validate: capabilities.as_ref().map(|c| c.contains(&"validate")),
                convert: capabilities.as_ref().map(|c| c.contains(&"convert")),
                binding,
                resource,
            })
        })
        .collect()
}
