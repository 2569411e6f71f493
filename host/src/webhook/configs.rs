//! What the API server is told to call: a `ValidatingWebhookConfiguration` for each bound kind
//! whose plugin exports `validate`, and the CRD's `spec.conversion` for each whose plugin
//! exports `convert`, both with the current CA bundle. [`desired_validating`] and
//! [`desired_conversion`] decide, as plain objects; [`Maintainer::pass`] compares them with
//! what is live and writes the difference (on the leader only).
//!
//! What each is tied to, so that nothing outlives its binding:
//! - a configuration is named `wasmop.<binding>`, labelled with the binding and owned by it
//!   (an owner reference): deleting the binding has the garbage collector delete it, even with
//!   no host running; a binding that stays but loses the capability (a new digest without
//!   `validate`), or is no longer in force, has it deleted by the host;
//! - a CRD's conversion is labelled `wasmop.dev/conversion=<binding>` by the same apply, so
//!   the host finds the CRDs it set; one whose binding is gone, no longer in force or whose
//!   plugin no longer converts is set back to `strategy: None`.
//!
//! Each object carries a hash of what the host applied (`wasmop.dev/applied`): a pass writes
//! only what differs, not every object every time.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::admissionregistration::v1::ValidatingWebhookConfiguration,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::binding::{AdmissionSettings, FailurePolicy, PluginBinding};

/// The label naming the binding a configuration is for (see [`label_value`]).
pub const BINDING_LABEL: &str = "wasmop.dev/binding";
/// The label naming the binding a CRD's conversion is for.
pub const CONVERSION_LABEL: &str = "wasmop.dev/conversion";
/// The annotation holding the hash of what the host applied.
pub const APPLIED: &str = "wasmop.dev/applied";
/// The field manager of the CRD's conversion: apart from the host's own (`wasmop`), so that
/// the platform team's apply of the CRD and the host's never take each other's fields.
pub const CONVERSION_MANAGER: &str = "wasmop-conversion";

/// Where the API server reaches the host's webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Service in front of the host's Pods (the deployment's way).
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: i32,
    },
    /// A URL (a host outside the cluster, as in the tests): `https://127.0.0.1:9443`.
    Url(String),
}

impl Endpoint {
    /// The names the serving certificate must hold for the API server to trust it here.
    pub fn names(&self) -> Vec<String> {
        match self {
            Self::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
                format!("{name}.{namespace}"),
                name.clone(),
            ],
            Self::Url(url) => reqwest::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
                .into_iter()
                .collect(),
        }
    }

    /// A `clientConfig` for `path` with `ca_bundle` (PEM; left out when `None`, for a CA
    /// injector to set).
    pub fn client_config(&self, path: &str, ca_bundle: Option<&str>) -> Value {
        use base64::Engine as _;
        let mut config = match self {
            Self::Service {
                namespace,
                name,
                port,
            } => {
                json!({"service": {"namespace": namespace, "name": name, "port": port, "path": path}})
            }
            Self::Url(url) => json!({"url": format!("{}{path}", url.trim_end_matches('/'))}),
        };
        if let Some(bundle) = ca_bundle {
            config["caBundle"] =
                json!(base64::engine::general_purpose::STANDARD.encode(bundle.as_bytes()));
        }
        config
    }
}

/// A binding's name as a label value: itself if it is one (63 characters at most), else cut
/// with a hash of the whole (a binding's name may be 253 long; a label refused by the API
/// server would fail every pass, and with it every CA step).
pub fn label_value(binding: &str) -> String {
    if binding.len() <= 63 {
        return binding.to_string();
    }
    let hash = hex(&Sha256::digest(binding.as_bytes()))[..16].to_string();
    format!("{}-{hash}", binding[..46].trim_end_matches(['.', '-']))
}

/// The path of the validating webhook of `binding`.
pub fn validate_path(binding: &str) -> String {
    format!("/validate/{binding}")
}

/// The path of the conversion webhook of `binding`.
pub fn convert_path(binding: &str) -> String {
    format!("/convert/{binding}")
}

/// The name of `binding`'s `ValidatingWebhookConfiguration`: `wasmop.<binding>`, or, past the
/// 253 characters of a name, a cut one with a hash of the whole.
pub fn configuration_name(binding: &str) -> String {
    let name = format!("wasmop.{binding}");
    if name.len() <= 253 {
        return name;
    }
    let hash = hex(&Sha256::digest(binding.as_bytes()))[..16].to_string();
    format!("wasmop.{}.{hash}", &binding[..200])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn applied_hash(value: &Value) -> String {
    hex(&Sha256::digest(value.to_string().as_bytes()))[..32].to_string()
}

/// What the host knows of a binding for its configurations.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// The binding, in force.
    pub binding: Arc<PluginBinding>,
    /// The kind's plural resource name.
    pub resource: String,
    /// Whether its plugin exports `validate` (`None`: not known yet, leave what is live).
    pub validate: Option<bool>,
    /// Whether it exports `convert`.
    pub convert: Option<bool>,
}

/// The `ValidatingWebhookConfiguration` for `wanted`: one webhook, for creates and updates of
/// the kind's instances (not of their status), in the binding's version (`matchPolicy:
/// Equivalent` has the API server convert a request in another version first), in `scopes`
/// only when the host watches only those namespaces.
pub fn desired_validating(
    wanted: &Wanted,
    endpoint: &Endpoint,
    ca_bundle: Option<&str>,
    scopes: &[String],
) -> Value {
    let binding = &wanted.binding;
    let name = binding.name_any();
    let kind = &binding.spec.kind;
    let settings: AdmissionSettings = binding.spec.admission.clone().unwrap_or_default();
    let failure_policy = match settings.failure_policy() {
        FailurePolicy::Fail => "Fail",
        FailurePolicy::Ignore => "Ignore",
    };
    let namespace_selector = if scopes.is_empty() {
        json!({})
    } else {
        json!({"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In", "values": scopes,
        }]})
    };
    let webhooks = json!([{
        "name": format!("validate.{}.{}", wanted.resource, kind.group),
        "clientConfig": endpoint.client_config(&validate_path(&name), ca_bundle),
        "rules": [{
            "apiGroups": [kind.group],
            "apiVersions": [kind.version],
            "resources": [&wanted.resource],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }],
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "namespaceSelector": namespace_selector,
        "sideEffects": "None",
        "timeoutSeconds": settings.timeout_seconds(),
        "admissionReviewVersions": ["v1"],
    }]);
    let hash = applied_hash(&webhooks);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": configuration_name(&name),
            "labels": {"app.kubernetes.io/managed-by": "wasmop", BINDING_LABEL: label_value(&name)},
            "annotations": {APPLIED: hash, BINDING_LABEL: name},
            "ownerReferences": [{
                "apiVersion": "wasmop.dev/v1alpha1",
                "kind": "PluginBinding",
                "name": name,
                "uid": binding.uid().unwrap_or_default(),
            }],
        },
        "webhooks": webhooks,
    })
}

/// The CRD's conversion for `wanted`: through the host (`convert`: true), or back to `None`.
pub fn desired_conversion(
    crd: &str,
    binding: &str,
    convert: bool,
    endpoint: &Endpoint,
    ca_bundle: Option<&str>,
) -> Value {
    let conversion = if convert {
        json!({
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": endpoint.client_config(&convert_path(binding), ca_bundle),
                "conversionReviewVersions": ["v1"],
            },
        })
    } else {
        json!({"strategy": "None"})
    };
    let hash = applied_hash(&conversion);
    let mut metadata = json!({"name": crd, "annotations": {APPLIED: hash}});
    if convert {
        metadata["labels"] = json!({CONVERSION_LABEL: label_value(binding)});
        metadata["annotations"][CONVERSION_LABEL] = json!(binding);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {"conversion": conversion},
    })
}

/// Whether `crd`'s live conversion is the one [`desired_conversion`] makes for `binding`
/// through `endpoint`, the CA bundle aside.
pub fn converts_through(
    crd: &CustomResourceDefinition,
    binding: &str,
    endpoint: &Endpoint,
) -> bool {
    let Some(conversion) = &crd.spec.conversion else {
        return false;
    };
    let Some(config) = conversion
        .webhook
        .as_ref()
        .and_then(|w| w.client_config.as_ref())
    else {
        return false;
    };
    let Ok(mut live) = serde_json::to_value(config) else {
        return false;
    };
    if let Some(map) = live.as_object_mut() {
        map.remove("caBundle");
    }
    conversion.strategy == "Webhook" && live == endpoint.client_config(&convert_path(binding), None)
}

/// Whether the live object already carries what `desired` would apply.
fn same(live: Option<&BTreeMap<String, String>>, desired: &Value) -> bool {
    let want = desired
        .pointer(&format!(
            "/metadata/annotations/{}",
            APPLIED.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    live.and_then(|a| a.get(APPLIED)).map(String::as_str) == want && want.is_some()
}

/// Writes the configurations (the leader's).
pub struct Maintainer {
    client: Client,
    endpoint: Endpoint,
    scopes: Vec<String>,
}

/// What one pass found wrong (the pass goes on with the other objects).
#[derive(Debug, Default)]
pub struct PassReport {
    /// Objects written.
    pub written: usize,
    /// Failures, each naming the object.
    pub failures: Vec<String>,
}

impl Maintainer {
    /// A maintainer for a host reached at `endpoint`, watching `scopes` (empty: all).
    pub fn new(client: Client, endpoint: Endpoint, scopes: Vec<String>) -> Self {
        Self {
            client,
            endpoint,
            scopes,
        }
    }

    /// Brings the live configurations to what `wanted` asks, with `ca_bundle`. `selected` says
    /// whether a binding of that name is this host's to serve and not pending a check (another
    /// host's configurations, and a binding's whose new generation is not checked yet, are left
    /// alone); `known` whether a binding of that name exists at all.
    ///
    /// A CRD's conversion is set back to `None` only once its binding is gone (its finalizer
    /// holds it while instances remain): a binding out of force, or a plugin version without
    /// `convert`, leaves it calling the host, whose answer then fails the read (closed) rather
    /// than the API server serve stored objects of another version unconverted.
    pub async fn pass(
        &self,
        wanted: &[Wanted],
        ca_bundle: Option<&str>,
        selected: impl Fn(&str) -> bool,
        known: impl Fn(&str) -> bool,
    ) -> PassReport {
        let mut report = PassReport::default();
        self.validating(wanted, ca_bundle, &selected, &mut report)
            .await;
        self.conversions(wanted, ca_bundle, &known, &mut report)
            .await;
        report
    }

    async fn validating(
        &self,
        wanted: &[Wanted],
        ca_bundle: Option<&str>,
        selected: &impl Fn(&str) -> bool,
        report: &mut PassReport,
    ) {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let live = match api
            .list_metadata(&ListParams::default().labels(BINDING_LABEL))
            .await
        {
            Ok(list) => list.items,
            Err(err) => {
                report
                    .failures
                    .push(format!("listing ValidatingWebhookConfigurations: {err}"));
                return;
            }
        };
        let live_of = |binding: &str| {
            live.iter()
                .find(|c| c.annotations().get(BINDING_LABEL).map(String::as_str) == Some(binding))
        };
        let mut keep = Vec::new();
        for w in wanted {
            let name = w.binding.name_any();
            match w.validate {
                Some(true) => {
                    keep.push(name.clone());
                    let desired = desired_validating(w, &self.endpoint, ca_bundle, &self.scopes);
                    let current = live_of(&name);
                    if same(current.map(|c| c.annotations()), &desired) {
                        continue;
                    }
                    let config = configuration_name(&name);
                    match api
                        .patch(
                            &config,
                            &PatchParams::apply(crate::write::FIELD_MANAGER).force(),
                            &Patch::Apply(&desired),
                        )
                        .await
                    {
                        Ok(_) => report.written += 1,
                        Err(err) => report.failures.push(format!(
                            "applying ValidatingWebhookConfiguration {config}: {err}"
                        )),
                    }
                }
                // Not known yet: whatever is live stays.
                None => keep.push(name),
                Some(false) => {}
            }
        }
        for config in &live {
            // The whole name is in the annotation (the label may be cut).
            let Some(binding) = config.annotations().get(BINDING_LABEL) else {
                continue;
            };
            // A binding that is gone takes its configurations with it (owner reference); a
            // binding of another host is that host's.
            if keep.contains(binding) || !selected(binding) {
                continue;
            }
            let name = config.name_any();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => report.written += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(err) => report.failures.push(format!(
                    "deleting ValidatingWebhookConfiguration {name}: {err}"
                )),
            }
        }
    }

    async fn conversions(
        &self,
        wanted: &[Wanted],
        ca_bundle: Option<&str>,
        known: &impl Fn(&str) -> bool,
        report: &mut PassReport,
    ) {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        // Whole objects (the labelled CRDs only): the hash says what the host applied, the
        // conversion itself whether someone changed it since.
        let live = match api
            .list(&ListParams::default().labels(CONVERSION_LABEL))
            .await
        {
            Ok(list) => list.items,
            Err(err) => {
                report
                    .failures
                    .push(format!("listing CustomResourceDefinitions: {err}"));
                return;
            }
        };
        let apply = |crd: String, desired: Value| {
            let api = api.clone();
            async move {
                api.patch(
                    &crd,
                    &PatchParams::apply(CONVERSION_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
                .map(drop)
                .map_err(|err| format!("setting the conversion of CRD {crd}: {err}"))
            }
        };
        let mut keep = Vec::new();
        for w in wanted {
            let name = w.binding.name_any();
            let crd = format!("{}.{}", w.resource, w.binding.spec.kind.group);
            match w.convert {
                Some(true) => {
                    keep.push(crd.clone());
                    let desired = desired_conversion(&crd, &name, true, &self.endpoint, ca_bundle);
                    let current = live.iter().find(|c| c.name_any() == crd);
                    if same(current.map(|c| c.annotations()), &desired)
                        && current.is_some_and(|c| converts_through(c, &name, &self.endpoint))
                    {
                        continue;
                    }
                    match apply(crd, desired).await {
                        Ok(()) => report.written += 1,
                        Err(err) => report.failures.push(err),
                    }
                }
                None => keep.push(crd),
                Some(false) => {}
            }
        }
        for crd in &live {
            let name = crd.name_any();
            let Some(binding) = crd.annotations().get(CONVERSION_LABEL) else {
                continue;
            };
            if keep.contains(&name) || known(binding) {
                continue;
            }
            let desired = desired_conversion(&name, binding, false, &self.endpoint, None);
            match apply(name, desired).await {
                Ok(()) => report.written += 1,
                Err(err) => report.failures.push(err),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::PluginSource;
    use crate::binding::{BoundKind, PluginBindingSpec};

    fn binding(admission: Option<AdmissionSettings>) -> PluginBinding {
        let mut b = PluginBinding::new(
            "kv",
            PluginBindingSpec {
                kind: BoundKind {
                    group: "data.acme.io".into(),
                    version: "v1".into(),
                    kind: "KVStore".into(),
                },
                plugin: PluginSource {
                    image: Some("r/p:1".into()),
                    image_pull_secrets: Vec::new(),
                    config_map: None,
                    file: None,
                },
                source_namespace: None,
                limits: None,
                version_path: None,
                admission,
                rollout: None,
            },
        );
        b.metadata.uid = Some("u-1".into());
        b
    }

    fn service() -> Endpoint {
        Endpoint::Service {
            namespace: "wasmop-system".into(),
            name: "wasmop-webhook".into(),
            port: 443,
        }
    }

    #[test]
    fn the_configuration_is_the_bindings_own_with_its_settings() {
        let b = binding(Some(AdmissionSettings {
            failure_policy: Some(FailurePolicy::Ignore),
            timeout_seconds: Some(3),
            user_groups: None,
        }));
        let wanted = Wanted {
            binding: Arc::new(b),
            resource: "kvstores".into(),
            validate: Some(true),
            convert: None,
        };
        let c = desired_validating(&wanted, &service(), Some("PEM"), &[]);
        assert_eq!(c["metadata"]["name"], "wasmop.kv");
        assert_eq!(c["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let hook = &c["webhooks"][0];
        assert_eq!(hook["name"], "validate.kvstores.data.acme.io");
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["timeoutSeconds"], 3);
        assert_eq!(hook["rules"][0]["resources"][0], "kvstores");
        assert_eq!(hook["rules"][0]["apiVersions"][0], "v1");
        assert_eq!(hook["clientConfig"]["service"]["path"], "/validate/kv");
        assert_eq!(hook["clientConfig"]["caBundle"], "UEVN");
        assert_eq!(hook["namespaceSelector"], json!({}));
        let wanted = Wanted {
            binding: Arc::new(binding(None)),
            ..wanted
        };
        let scoped = desired_validating(&wanted, &service(), None, &["team-a".into()]);
        let hook = &scoped["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["timeoutSeconds"], 5);
        assert!(hook["clientConfig"].get("caBundle").is_none());
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][0]["values"][0],
            "team-a"
        );
    }

    #[test]
    fn a_live_conversion_is_the_hosts_only_through_its_endpoint_and_the_bindings_path()
    -> anyhow::Result<()> {
        let crd = |conversion: Value| -> anyhow::Result<CustomResourceDefinition> {
            Ok(serde_json::from_value(json!({
                "metadata": {"name": "greetings.example.com"},
                "spec": {
                    "group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "greetings", "kind": "Greeting"},
                    "versions": [], "conversion": conversion,
                },
            }))?)
        };
        let desired =
            desired_conversion("greetings.example.com", "b", true, &service(), Some("pem"));
        let ours = crd(desired["spec"]["conversion"].clone())?;
        assert!(converts_through(&ours, "b", &service()));
        assert!(!converts_through(&ours, "other", &service()));
        let elsewhere = Endpoint::Url("https://127.0.0.1:9443".into());
        assert!(!converts_through(&ours, "b", &elsewhere));
        assert!(!converts_through(
            &crd(json!({"strategy": "None"}))?,
            "b",
            &service()
        ));
        Ok(())
    }

    #[test]
    fn a_new_bundle_changes_the_hash_and_the_same_one_does_not() {
        let wanted = Wanted {
            binding: Arc::new(binding(None)),
            resource: "kvstores".into(),
            validate: Some(true),
            convert: Some(true),
        };
        let hash = |bundle: &str| {
            desired_validating(&wanted, &service(), Some(bundle), &[])["metadata"]["annotations"]
                [APPLIED]
                .clone()
        };
        assert_eq!(hash("a"), hash("a"));
        assert_ne!(hash("a"), hash("b"));
        let conversion = |bundle| {
            desired_conversion(
                "kvstores.data.acme.io",
                "kv",
                true,
                &service(),
                Some(bundle),
            )
        };
        assert_ne!(
            conversion("a")["metadata"]["annotations"][APPLIED],
            conversion("b")["metadata"]["annotations"][APPLIED]
        );
        let on = conversion("a");
        assert_eq!(on["spec"]["conversion"]["strategy"], "Webhook");
        assert_eq!(
            on["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"],
            "/convert/kv"
        );
        assert_eq!(on["metadata"]["labels"][CONVERSION_LABEL], "kv");
        let off = desired_conversion("kvstores.data.acme.io", "kv", false, &service(), None);
        assert_eq!(off["spec"]["conversion"], json!({"strategy": "None"}));
        assert!(off["metadata"].get("labels").is_none());
    }

    #[test]
    fn the_certificate_names_follow_the_endpoint() {
        assert_eq!(service().names()[0], "wasmop-webhook.wasmop-system.svc");
        assert_eq!(
            Endpoint::Url("https://127.0.0.1:9443".into()).names(),
            ["127.0.0.1"]
        );
        let url = Endpoint::Url("https://127.0.0.1:9443/".into());
        assert_eq!(
            url.client_config("/validate/kv", None)["url"],
            "https://127.0.0.1:9443/validate/kv"
        );
        let long = "a".repeat(260);
        assert!(configuration_name(&long).len() <= 253);
    }
}
