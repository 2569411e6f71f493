//! `wasmop run`: connect to the cluster, install the CRDs, serve probes, run until signalled.

use std::sync::Arc;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tracing::info;

use crate::{
    api_health::{ApiHealth, ApiHealthLayer},
    cli::RunArgs,
    controller, crd_install,
    leader::{Fence, LeaderElector},
    plugin::runtime::PluginRuntime,
    policy::view::PolicyView,
    probes::Probes,
    write::WriteFenceLayer,
};

/// Runs the host until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let health = ApiHealth::new(args.unready_after, args.unhealthy_after);
    let config = kube::Config::infer()
        .await
        .context("reading the kubeconfig or in-cluster environment")?;
    // Armed once this replica leads (with --leader-elect): from then on every write the client
    // sends, kube's Recorder and finalizer helper included, first checks the lease is still held.
    let fence = Fence::default();
    let client = kube::client::ClientBuilder::try_from(config)
        .context("building a Kubernetes client")?
        .with_layer(&ApiHealthLayer(health.clone()))
        .with_layer(&WriteFenceLayer::new({
            let fence = fence.clone();
            move || fence.ensure_leading()
        }))
        .build();
    let version = client
        .apiserver_version()
        .await
        .context("reaching the Kubernetes API server")?;
    info!(server = %version.git_version, "connected to the API server");

    if !args.skip_crd_install {
        crd_install::ensure_crds(&client)
            .await
            .context("installing the wasmop CRDs")?;
        info!("CRDs established");
    }

    let mut registry = Registry::with_prefix("wasmop");
    health.register_metrics(&mut registry);
    let runtime = PluginRuntime::start(&args, &client, &mut registry)?;
    let reconcile_metrics = crate::reconcile::execute::ReconcileMetrics::register(&mut registry);
    let rollouts = crate::rollout::Rollouts::register(&mut registry);
    let webhook_metrics = crate::webhook::server::WebhookMetrics::register(&mut registry);
    let probes = Probes::new(registry, runtime.registry.clone(), health.clone())
        .debug_from_anywhere(args.debug_from_anywhere);
    let api_probe = tokio::spawn(health.clone().probe_forever(client.clone()));
    let (addr, server) = probes
        .clone()
        .bind(args.listen)
        .await
        .with_context(|| format!("binding the probe server to {}", args.listen))?;
    info!(%addr, "serving /healthz, /readyz, /metrics and /debug/plugins");
    let server = tokio::spawn(server);

    // One signal ends everything: the controllers stop taking work and finish what is in flight.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let signals = {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            if let Err(err) = shutdown_signal().await {
                tracing::error!(error = %err, "signal handling");
            }
            info!("shutting down: finishing in-flight reconciles");
            let _ = stop_tx.send(true);
        })
    };

    // Whether this replica may write: at once without --leader-elect, else once it leads.
    let (leading_tx, leading) = tokio::sync::watch::channel(!args.leader_elect);
    let host_namespace = args
        .host_namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    // Policies are read on every replica (a standby answers webhooks under them); their status
    // is written only once leading.
    let (policies, writers) = PolicyView::new(args.host_namespace.clone());
    let policy_task = tokio::spawn(
        policies
            .clone()
            .run(client.clone(), writers, leading.clone()),
    );
    let binding_selector =
        crate::binding::check::selector(args.binding_selector.as_deref().unwrap_or_default())
            .map_err(anyhow::Error::msg)?;
    let _webhooks = match args.webhook_listen {
        Some(listen) => Some(
            crate::webhook::start(
                crate::webhook::Settings {
                    listen,
                    endpoint: crate::webhook::Settings::endpoint(
                        args.webhook_service.as_deref(),
                        args.webhook_url.as_deref(),
                        listen,
                        &host_namespace,
                    )?,
                    cert_dir: args.webhook_cert_dir.clone(),
                    secret: args.webhook_secret.clone(),
                    host_namespace: host_namespace.clone(),
                    timing: args
                        .webhook_cert_lifetime
                        .map(crate::webhook::certs::Timing::short)
                        .unwrap_or_default(),
                    scopes: args.namespaces.clone(),
                    selector: binding_selector.clone(),
                },
                client.clone(),
                runtime.clone(),
                policies.clone(),
                webhook_metrics,
                leading.clone(),
            )
            .await?,
        ),
        None => None,
    };

    let namespaces: Vec<Option<String>> = if args.namespaces.is_empty() {
        vec![None]
    } else {
        args.namespaces.iter().cloned().map(Some).collect()
    };
    let mut elector = args.leader_elect.then(|| {
        let identity =
            // Outside a Pod the pid alone is not unique (it is 1 in every container).
            std::env::var("POD_NAME").unwrap_or_else(|_| {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "wasmop".into());
                format!("{host}-{}", std::process::id())
            });
        let namespace = args
            .lease_namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        info!(%namespace, %identity, warm = args.warm_standby, "waiting for the leader lease");
        LeaderElector::new(
            client.clone(),
            &namespace,
            "wasmop-leader",
            &identity,
            fence.clone(),
        )
    });
    let mut leadership = None;
    // A cold standby starts nothing before it leads; it is ready meanwhile (to take over is
    // all it does), and not ready from then until its caches have synced.
    if !args.warm_standby
        && let Some(elector) = elector.take()
    {
        probes.set_ready(true);
        let Some(leading) = lead(elector, stopped(stop_rx.clone())).await else {
            policy_task.abort();
            server.abort();
            return Ok(());
        };
        probes.set_ready(false);
        leadership = Some(leading);
    }
    // The kinds PluginBindings bind: served once leading; until then those the leader found
    // valid, for a warm standby.
    let (bound_tx, bound) = tokio::sync::watch::channel(crate::controller::bound::Bound::new());
    let (listed_tx, bindings_listed) = tokio::sync::watch::channel(false);
    // The controllers start now, leading or not: a warm standby has its caches synced and
    // current and its Apps' plugins loaded, reports ready, and reconciles from the moment it
    // leads (controller-runtime's warm replicas). Ready once every namespace's controller is.
    let pending = Arc::new(std::sync::atomic::AtomicUsize::new(namespaces.len()));
    let first_scope = namespaces.first().cloned().flatten();
    let controllers = namespaces.clone().into_iter().map(|namespace| {
        let (probes, pending) = (probes.clone(), pending.clone());
        let drives_rollouts = namespace == first_scope;
        let ready = move || {
            if pending.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                probes.set_ready(true);
            }
        };
        info!(
            namespace = namespace.as_deref().unwrap_or("<all>"),
            "starting the App controller"
        );
        let settings = controller::Settings {
            namespace,
            concurrency: args.concurrency,
            coalesce: args.coalesce,
            health: health.clone(),
            policies: policies.clone(),
            metrics: reconcile_metrics.clone(),
            bound: bound.clone(),
            bindings_listed: bindings_listed.clone(),
            leading: leading.clone(),
            rollouts: rollouts.clone(),
            drives_rollouts,
        };
        controller::run(
            client.clone(),
            &runtime,
            settings,
            ready,
            stopped(stop_rx.clone()),
        )
    });
    let controllers = futures::future::join_all(controllers);
    tokio::pin!(controllers);
    // PluginBindings: checked, their status and finalizers written, only once leading; a warm
    // standby watches them meanwhile and warms the kinds the leader found valid.
    let binding_task = crate::binding::serve::start(
        client.clone(),
        host_namespace,
        namespaces,
        binding_selector,
        bound_tx,
        listed_tx,
        leading.clone(),
    );
    if let Some(elector) = elector.take() {
        // The controllers end only on a stop (or their watches ending): nothing to lead then.
        let Some(leading) = lead(elector, async {
            (&mut controllers).await;
        })
        .await
        else {
            policy_task.abort();
            binding_task.abort();
            server.abort();
            return Ok(());
        };
        leadership = Some(leading);
    }
    leading_tx.send_replace(true);
    controllers.await;
    probes.set_ready(false);
    // Nothing writes any more (reconciles done, policy status writer stopped): hand the lease
    // over now rather than after a lease duration.
    policy_task.abort();
    binding_task.abort();
    if let Some(leadership) = leadership {
        leadership.release().await;
        info!("released the leader lease");
    }
    api_probe.abort();
    signals.abort();
    server.abort();
    if !*stop_rx.borrow() {
        // The controllers only return on their own if their watch streams ended: nothing is
        // watched any more, so exit with an error for the kubelet to restart the host.
        anyhow::bail!("the App controller stopped without being asked to");
    }
    info!("stopped");
    Ok(())
}

/// Takes the lease, unless `until` resolves first; a replica that leads exits the moment it
/// stops leading.
async fn lead(
    elector: LeaderElector,
    until: impl std::future::Future<Output = ()>,
) -> Option<crate::leader::Leadership> {
    let leading = tokio::select! {
        leading = elector.acquire() => leading,
        () = until => return None,
    };
    info!("leading");
    let mut lost = leading.watch();
    tokio::spawn(async move {
        // Err: the renewer was stopped by a graceful release, which is no loss.
        if lost.wait_for(|leading| !*leading).await.is_ok() {
            // A deposed leader must not finish what it started: another replica may act from
            // the moment its own lease clock runs out (client-go's renew deadline keeps that
            // moment after this one). Exit, as controller-runtime does.
            tracing::error!("lost leadership; exiting");
            std::process::exit(1);
        }
    });
    Some(leading)
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT")?,
    }
    Ok(())
}
