//! Whom a webhook call is for: the `PluginBinding` named in its path, and the plugin that
//! binding serves, resolved for the instance's namespace exactly as a reconcile resolves it
//! (the namespace's policy, the source it allows, the version in service). Every replica
//! answers, standbys too: the bindings are read from a watch of its own, and a binding counts
//! only once the leader has found it `Valid` for its current generation.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use kube::runtime::reflector::{ObjectRef, Store};

use crate::{
    binding::PluginBinding,
    plugin::{registry::LoadedPlugin, runtime::PluginRuntime, source::SourceRef},
    policy::{Resolution, view::PolicyView},
};

/// How often a call waiting for its plugin to load looks again.
const LOAD_POLL: Duration = Duration::from_millis(50);

/// What a webhook call needs to find its plugin.
#[derive(Clone)]
pub struct Targets {
    /// Every PluginBinding.
    pub bindings: Store<PluginBinding>,
    /// The labels a binding must carry to be this host's (`--binding-selector`).
    pub selector: BTreeMap<String, String>,
    /// The policies, which bound what a namespace may run.
    pub policies: Arc<PolicyView>,
    /// The plugins.
    pub runtime: PluginRuntime,
    /// The default `sourceNamespace`.
    pub host_namespace: String,
}

impl Targets {
    /// The binding `name`, if this host serves it and it is in force. The reasons say nothing
    /// of the binding (its kind, its status' words) beyond its name: anyone who reaches the port
    /// may ask.
    pub fn binding(&self, name: &str) -> Result<Arc<PluginBinding>, String> {
        let unknown = || "no webhook of this wasmop host at this path".to_string();
        if name.len() > 253 {
            return Err(unknown());
        }
        let binding = self
            .bindings
            .get(&ObjectRef::new(name))
            .ok_or_else(unknown)?;
        let labels = binding.metadata.labels.clone().unwrap_or_default();
        if self.selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return Err(unknown());
        }
        let status = binding.status.clone().unwrap_or_default();
        let valid = status.conditions.iter().find(|c| c.type_ == "Valid");
        match valid {
            Some(c)
                if c.status == "True"
                    && status.observed_generation == binding.metadata.generation =>
            {
                Ok(binding)
            }
            Some(c) if c.status == "False" => Err(format!(
                "PluginBinding {name} is not in force (its status says why)"
            )),
            _ => Err(format!("PluginBinding {name} has not been checked yet")),
        }
    }

    /// Whether binding `name` exists and is this host's but its current generation has not been
    /// checked yet (a spec just edited, a leader just started): its configurations stay as
    /// they are until it has, rather than go and come back.
    pub fn pending(&self, name: &str) -> bool {
        let Some(binding) = self.bindings.get(&ObjectRef::new(name)) else {
            return false;
        };
        let labels = binding.metadata.labels.clone().unwrap_or_default();
        if self.selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
        let status = binding.status.clone().unwrap_or_default();
        status.observed_generation != binding.metadata.generation
            || !status.conditions.iter().any(|c| c.type_ == "Valid")
    }

    /// The plugin version serving `binding` for an instance in `namespace`, waiting up to
    /// `wait` for it to load (a replica that never served the kind loads it on its first
    /// call). Why not, in words that name the binding and the plugin.
    pub async fn plugin(
        &self,
        binding: &PluginBinding,
        namespace: &str,
        wait: Duration,
    ) -> Result<Arc<LoadedPlugin>, String> {
        let name = binding.metadata.name.as_deref().unwrap_or_default();
        let rules = match self.policies.resolve(namespace) {
            None => {
                return Err(format!(
                    "the PluginPolicies are not read yet by this wasmop host (PluginBinding \
                     {name})"
                ));
            }
            Some(Resolution::Refused { reason }) => {
                return Err(format!("namespace {namespace}: {reason}"));
            }
            Some(Resolution::Governed { rules, .. }) => rules,
        };
        let source_namespace = binding
            .spec
            .source_namespace
            .clone()
            .unwrap_or_else(|| self.host_namespace.clone());
        let source =
            SourceRef::from_spec(&source_namespace, &binding.spec.plugin, &rules.source.oci)
                .map_err(|message| format!("PluginBinding {name}: {message}"))?;
        rules
            .source
            .allows_source(&source)
            .map_err(|reason| format!("PluginBinding {name}: {reason}"))?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let state = self.runtime.acquire(&source, namespace);
            if let Some(loaded) = state.current {
                return Ok(loaded);
            }
            if let Some(err) = state.last_error {
                return Err(format!("PluginBinding {name}: plugin {source}: {err}"));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "PluginBinding {name}: plugin {source} is not loaded yet on this replica"
                ));
            }
            tokio::time::sleep(LOAD_POLL).await;
        }
    }
}

impl Targets {
    /// The interfaces the plugin of `binding` exports, if a version of it is loaded: any
    /// namespace's (the capabilities are the component's, whoever's credentials fetched it),
    /// else the version of the first of `namespaces` whose policy governs it, whose load this
    /// starts. `None` until one is loaded.
    pub fn capabilities(
        &self,
        binding: &PluginBinding,
        namespaces: &[String],
    ) -> Option<Vec<&'static str>> {
        let source_namespace = binding
            .spec
            .source_namespace
            .clone()
            .unwrap_or_else(|| self.host_namespace.clone());
        let anonymous = SourceRef::from_spec(
            &source_namespace,
            &binding.spec.plugin,
            &crate::plugin::source::OciRules::default(),
        )
        .ok()?
        .location();
        let of = |loaded: &LoadedPlugin| {
            loaded
                .compiled
                .capabilities
                .iter()
                .map(|c| c.interface())
                .collect()
        };
        for (source, state) in self.runtime.registry.snapshot() {
            if source.location() == anonymous
                && let Some(loaded) = state.current
            {
                return Some(of(&loaded));
            }
        }
        for namespace in namespaces {
            let Some(Resolution::Governed { rules, .. }) = self.policies.resolve(namespace) else {
                continue;
            };
            let source =
                SourceRef::from_spec(&source_namespace, &binding.spec.plugin, &rules.source.oci)
                    .ok()?;
            rules.source.allows_source(&source).ok()?;
            return self
                .runtime
                .acquire(&source, namespace)
                .current
                .map(|loaded| of(&loaded));
        }
        None
    }
}

/// Whether `loaded` exports the interface `name` (`validate`, `convert`).
pub fn exports(loaded: &LoadedPlugin, name: &str) -> bool {
    loaded
        .compiled
        .capabilities
        .iter()
        .any(|c| c.interface() == name)
}
