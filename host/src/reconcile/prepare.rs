//! Prepare: everything a decision needs, read before anything is decided: the namespace's
//! policy, the parent's plugin reference (the App's own, or its binding's) and whether the plugin can be called, and the snapshot of
//! the App's objects (reflector caches, plus any kinds the policy adds, listed live).

use std::{sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use wasmop_core::{
    Failure, PluginCalls, PluginState, Snapshot, guard, kind::Kind, status::PluginStatus,
};

use super::{Context, fetch};
use crate::{
    app::App,
    parent::Parent,
    plugin::{
        Capability, compiled::CompiledPlugin, component_calls::ComponentCalls, input::AppContext,
        limits::CallLimits, registry::LoadedPlugin, source::SourceRef,
    },
    policy::{Resolution, Rules},
    rollout::Pick,
};

/// While the policy caches have not synced (start-up) or lack the App's namespace, look again
/// this soon, changing nothing: guessing a policy could apply a plan under the wrong one.
pub const POLICY_WAIT: Duration = Duration::from_secs(1);

/// The policy a reconcile holds the App's plugin to.
#[derive(Clone)]
pub struct Governing {
    /// `PluginPolicy <name>` or `the built-in default policy`.
    pub name: String,
    /// Its rules.
    pub rules: Rules,
}

/// The rules for the App's namespace, by name for messages (`None`: not known yet).
pub fn governing(ctx: &Context, namespace: &str) -> Option<Result<Governing, String>> {
    Some(match ctx.policies.resolve(namespace)? {
        Resolution::Governed { policy, rules } => Ok(Governing {
            name: match policy {
                Some(name) => format!("PluginPolicy {name}"),
                None => "the built-in default policy".into(),
            },
            rules,
        }),
        Resolution::Refused { reason } => Err(reason),
    })
}

/// What a reconcile found before deciding.
pub enum Prepared {
    /// The namespace's policy is not known yet: decide nothing.
    PolicyUnknown,
    /// The plugin cannot be called (refused, loading, broken): the decision only holds.
    Holding(Snapshot),
    /// Listing a kind the policy adds failed: the decision says so.
    ObserveFailed(Snapshot, Failure),
    /// The plugin serves the App.
    Serving {
        /// The App and its objects.
        snapshot: Snapshot,
        /// The plugin, ready to call.
        calls: Box<dyn PluginCalls + Send>,
        /// The guard under the namespace's policy.
        check: Box<guard::AppCheck>,
    },
}

/// `status.plugin` for a loaded plugin.
pub fn plugin_status(loaded: &LoadedPlugin) -> PluginStatus {
    plugin_status_of(
        loaded.source.to_string(),
        &loaded.compiled,
        Some(loaded.loaded_at.to_rfc3339()),
    )
}

/// `status.plugin` for `compiled`, loaded from `reference` (at `loaded_at`, if it is in service).
pub fn plugin_status_of(
    reference: String,
    compiled: &CompiledPlugin,
    loaded_at: Option<String>,
) -> PluginStatus {
    PluginStatus {
        reference,
        digest: compiled.digest.to_string(),
        short_digest: compiled.digest.short().to_string(),
        capabilities: compiled
            .capabilities
            .iter()
            .map(|c| c.interface().to_string())
            .collect(),
        loaded_at,
    }
}

/// The limits of every call of `loaded` for `app`: the App's own (`spec.limits`), and never more
/// memory than the whole budget could cover, which would wait forever.
pub fn call_limits(app: &App, loaded: &LoadedPlugin) -> CallLimits {
    let mut limits = CallLimits::with_overrides(
        app.spec.limits.as_ref().and_then(|l| l.timeout_ms),
        app.spec.limits.as_ref().and_then(|l| l.memory_mib),
    );
    limits.memory_bytes = limits
        .memory_bytes
        .min(loaded.engine().budget().max_call_bytes());
    limits
}

/// Which plugin serves an App, as a reconcile and a deletion both find it.
pub enum Resolved {
    /// The namespace's policy is not known yet: decide nothing.
    PolicyUnknown,
    /// The plugin cannot be called (refused, loading, broken), and why.
    Holding(PluginState),
    /// A version serves the App, under the namespace's policy.
    Serving {
        /// `PluginState::Serving`.
        plugin: PluginState,
        /// The plugin.
        loaded: Arc<LoadedPlugin>,
        /// The namespace's policy (boxed: it is most of the variant's size).
        governing: Box<Governing>,
    },
}

/// The App's plugin: the policy first (an App its namespace refuses does not even load its
/// plugin), then the source (one the policy does not allow is never fetched), then what the
/// registry of loaded plugins holds of it: the version in service, or, for an instance of a
/// progressively rolled out binding, the version its rollout picks ([`crate::rollout`]).
pub fn resolve_plugin(parent: &Parent, ctx: &Context) -> Resolved {
    resolve_plugin_at(parent, ctx, None)
}

/// [`resolve_plugin`], with the version of digest `force` rather than the one the rollout picks
/// (the shadow plans of a rollout's candidate, and of its stable version).
pub fn resolve_plugin_at(parent: &Parent, ctx: &Context, force: Option<&str>) -> Resolved {
    let refused = |reason: &'static str, message: String| {
        Resolved::Holding(PluginState::Refused { reason, message })
    };
    let namespace = &parent.namespace();
    if let Some(invalid) = &parent.invalid {
        return refused("InvalidSpec", invalid.clone());
    }
    let governing = match governing(ctx, namespace) {
        None => return Resolved::PolicyUnknown,
        Some(Ok(governing)) => governing,
        Some(Err(reason)) => return refused("NamespaceRefused", reason),
    };
    // A bound kind's plugin is its binding's: messages say which, as the instance's author
    // cannot fix it.
    let binding = |message: String| match &parent.kind.binding {
        Some(binding) => format!("PluginBinding {}: {message}", binding.name),
        None => message,
    };
    let source = match SourceRef::from_spec(
        &parent.source_namespace(),
        &parent.app.spec.plugin,
        &governing.rules.source.oci,
    ) {
        Ok(source) => source,
        Err(message) => return refused("InvalidSource", binding(message)),
    };
    if let Err(reason) = governing.rules.source.allows_source(&source) {
        return refused(
            "SourceRefused",
            binding(format!("{reason} (under {})", governing.name)),
        );
    }
    let state = ctx.plugins.acquire(&source, namespace);
    let want = match force {
        Some(digest) => Some(digest.to_string()),
        None => match pick(parent, ctx) {
            Pick::Unknown => return Resolved::PolicyUnknown,
            Pick::Offered => None,
            Pick::Digest(digest) => Some(digest),
            Pick::Refused { reason, message } => return refused(reason, message),
        },
    };
    // The version picked, when the registry has it loaded; else it is loaded beside the one in
    // service, and the parent waits (a change of the source requeues it).
    let current = match &want {
        None => state.current.clone(),
        Some(digest) => match ctx.plugins.registry.version(&source, digest) {
            Some(loaded) => Some(loaded),
            None => return Resolved::Holding(recall(ctx, &source, digest)),
        },
    };
    let Some(loaded) = current else {
        return Resolved::Holding(match &state.last_error {
            Some(err) => PluginState::Broken {
                reason: err.reason(),
                message: err.to_string(),
            },
            None => PluginState::Loading {
                message: format!("loading plugin {source}"),
            },
        });
    };
    let plugin = PluginState::Serving {
        label: loaded.compiled.label(),
        status: plugin_status(&loaded),
        newer_refused: state.last_error.as_ref().map(ToString::to_string),
        uncached: loaded.compiled.uncached.clone(),
    };
    Resolved::Serving {
        plugin,
        loaded,
        governing: Box::new(governing),
    }
}

/// Starts loading the version of `source` with `digest` beside the one in service (from the
/// host's plugin cache: the source offers only its newest), and says the parent waits for it.
fn recall(ctx: &Context, source: &SourceRef, digest: &str) -> PluginState {
    if let Some(err) = ctx.plugins.registry.recall_failure(source, digest) {
        return PluginState::Broken {
            reason: err.reason(),
            message: err.to_string(),
        };
    }
    ctx.plugins.recall_in_background(source, digest);
    PluginState::Loading {
        message: format!("loading plugin {source} at {digest} for its rollout"),
    }
}

/// Which version a progressive binding's rollout picks for the instance `parent`; the version
/// in service for an App or an instance of a binding that rolls out at once.
fn pick(parent: &Parent, ctx: &Context) -> Pick {
    let Some(binding) = &parent.kind.binding else {
        return Pick::Offered;
    };
    let Some(settings) = &binding.rollout else {
        return Pick::Offered;
    };
    let meta = &parent.app.metadata;
    let key = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    let labels = meta.labels.clone().unwrap_or_default();
    let pin = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::rollout::PIN_ANNOTATION))
        .map(String::as_str);
    ctx.rollouts
        .pick(&binding.name, settings, &key, &labels, pin)
}

/// Reads what the decision for `parent` needs.
pub async fn prepare(parent: &Parent, ctx: &Context) -> Prepared {
    prepare_resolved(parent, ctx, resolve_plugin(parent, ctx)).await
}

/// [`prepare`], with the plugin already resolved.
pub async fn prepare_resolved(parent: &Parent, ctx: &Context, resolved: Resolved) -> Prepared {
    let app = &parent.app;
    let app_ref = parent.app_ref();
    let snapshot =
        |plugin: PluginState, observed: Vec<wasmop_core::observed::ObservedObject>| Snapshot {
            app: app_ref.clone(),
            desired_version: app.spec.version.clone(),
            previous: app.status.clone().unwrap_or_default(),
            observed,
            now: Timestamp::now(),
            created: app.metadata.creation_timestamp.as_ref().map(|t| t.0),
            plugin,
        };
    let namespace = &app_ref.namespace;
    let (plugin, loaded, governing) = match resolved {
        Resolved::PolicyUnknown => return Prepared::PolicyUnknown,
        Resolved::Holding(plugin) => return Prepared::Holding(snapshot(plugin, Vec::new())),
        Resolved::Serving {
            plugin,
            loaded,
            governing,
        } => (plugin, loaded, governing),
    };

    let mut observed = ctx.stores.observe(&app_ref);
    let metadata = &loaded.compiled.metadata;
    let extra: Vec<&Kind> = governing
        .rules
        .plan
        .extra_kinds
        .iter()
        .filter(|k| {
            let key = format!("{}/{}", k.api_version(), k.kind);
            metadata.owns.contains(&key) || metadata.observes.contains(&key)
        })
        .collect();
    if !extra.is_empty() {
        match fetch::observe_extra(&ctx.client, &app_ref, &extra).await {
            Ok(objects) => {
                // An extra kind the caches hold too (a bare Pod, under `extraKinds: [v1/Pod]`):
                // the listing has the whole object, the cache a trimmed copy
                // (`crate::controller::trim`), which the plan's in-place check must not be held against.
                let listed: std::collections::BTreeSet<(&str, &str, &str)> = objects
                    .iter()
                    .map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str()))
                    .collect();
                observed.retain(|o| {
                    !listed.contains(&(o.api_version.as_str(), o.kind.as_str(), o.name.as_str()))
                });
                observed.extend(objects);
                observed.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
            }
            Err(err) => {
                let failure =
                    Failure::new("ObserveFailed", format!("{err} (under {})", governing.name));
                return Prepared::ObserveFailed(snapshot(plugin, observed), failure);
            }
        }
    }
    let snapshot = snapshot(plugin, observed);
    let visible = wasmop_core::observed::visible_to(
        &snapshot.observed,
        &metadata.owns,
        &metadata.observes,
        loaded.compiled.capabilities.contains(&Capability::Backup),
    );
    let input = AppContext::new(
        &parent.object,
        visible.map(|o| &o.json),
        snapshot.now.as_millisecond(),
    );
    let limits = call_limits(app, &loaded);
    // Synced with the policies: known whenever the policy is.
    let Some(mut bound) = ctx.policies.bound(namespace, &parent.grantee()) else {
        return Prepared::PolicyUnknown;
    };
    bound.keep_owned(
        snapshot
            .observed
            .iter()
            .filter(|o| o.owned && o.api_version == "v1" && o.kind == "ServiceAccount")
            .map(|o| o.name.as_str()),
    );
    let check = Box::new(guard::AppCheck {
        policy: governing.rules.plan.clone(),
        policy_name: governing.name.clone(),
        app: app_ref.name.clone(),
        kind_mark: app_ref.kind_mark(),
        namespace: namespace.clone(),
        owns: metadata.owns.clone(),
        bound,
    });
    #[cfg(feature = "native-plugins")]
    if let Some(calls) = super::native::calls(&loaded, &input) {
        return Prepared::Serving {
            snapshot,
            calls,
            check,
        };
    }
    let calls = Box::new(ComponentCalls::budgeted(
        Arc::clone(&loaded),
        Arc::new(input),
        limits,
        namespace.clone(),
        parent.key(),
    ));
    Prepared::Serving {
        snapshot,
        calls,
        check,
    }
}
