//! The rules on a binding by itself and against the others, pure: which kinds may be bound at
//! all, and which binding serves a kind that several bind. What needs the cluster (does the
//! kind exist, may the host serve it) is [`super::serve`]'s.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::{BoundKind, PluginBinding};

/// Why a binding is not in force: the `Valid` condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// CamelCase reason.
    pub reason: &'static str,
    /// What is wrong and what to do, naming the field.
    pub message: String,
}

impl Refusal {
    fn not_bindable(message: String) -> Self {
        Self {
            reason: "KindNotBindable",
            message,
        }
    }
}

/// Whether `kind` may be bound at all: a custom resource kind of someone's own API group. Not
/// a built-in kind (the core group, `*.k8s.io`, `*.kubernetes.io`, and the groups without a dot,
/// which only Kubernetes' own APIs have: a CRD's group must hold one), not one of wasmop's own
/// (`wasmop.dev` and its subdomains: the App is served already, PluginBindings and
/// PluginPolicies are the admin's). The names must be as Kubernetes writes them.
pub fn bindable(kind: &BoundKind) -> Result<(), Refusal> {
    let group = kind.group.as_str();
    let protected = |suffix: &str| group == suffix || group.ends_with(&format!(".{suffix}"));
    if !group.contains('.') {
        return Err(Refusal::not_bindable(format!(
            "spec.kind.group {group:?} is a built-in API group (a custom resource's group holds \
             a dot, e.g. data.acme.io)"
        )));
    }
    if protected("k8s.io") || protected("x-k8s.io") || protected("kubernetes.io") {
        return Err(Refusal::not_bindable(format!(
            "spec.kind.group {group:?} is reserved for Kubernetes' own APIs"
        )));
    }
    if protected("wasmop.dev") {
        return Err(Refusal::not_bindable(format!(
            "spec.kind.group {group:?} is wasmop's own: its kinds are served already"
        )));
    }
    let dns_subdomain = group.len() <= 253
        && group.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !dns_subdomain {
        return Err(Refusal::not_bindable(format!(
            "spec.kind.group {group:?} is not an API group (a lower-case DNS subdomain)"
        )));
    }
    let k = kind.kind.as_str();
    if !k.starts_with(|c: char| c.is_ascii_uppercase())
        || !k.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(Refusal::not_bindable(format!(
            "spec.kind.kind {k:?} is not a kind (CamelCase letters and digits, e.g. KVStore)"
        )));
    }
    let v = kind.version.as_str();
    if !v.starts_with('v')
        || !v
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Err(Refusal::not_bindable(format!(
            "spec.kind.version {v:?} is not an API version (e.g. v1 or v1alpha1)"
        )));
    }
    Ok(())
}

/// The labels `--binding-selector` asks for: `key=value` terms, comma-separated (equality only,
/// as a selector of the few bindings one host serves needs no more).
pub fn selector(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (key, value) = term
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim().trim_start_matches('=')))
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--binding-selector: {term:?} is not key=value"))?;
        if key.contains(['!', ' ']) || value.contains(['!', ' ', '=']) {
            return Err(format!("--binding-selector: {term:?} is not key=value"));
        }
        labels.insert(key.to_string(), value.to_string());
    }
    Ok(labels)
}

/// The fields of `spec` that `versionPath` names (`spec.version`: `["version"]`): dotted,
/// under `spec`, each a field name (letters, digits, `_`, `-`), at most eight deep.
pub fn version_path(path: Option<&str>) -> Result<Vec<String>, Refusal> {
    let path = path.unwrap_or("spec.version");
    let invalid = || Refusal {
        reason: "InvalidVersionPath",
        message: format!(
            "spec.versionPath {path:?} must name a field of spec, as spec.version or \
             spec.image.tag"
        ),
    };
    let rest = path.strip_prefix("spec.").ok_or_else(invalid)?;
    let fields: Vec<String> = rest.split('.').map(str::to_string).collect();
    let field_name = |f: &String| {
        !f.is_empty()
            && f.len() <= 63
            && f.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if fields.len() > 8 || !fields.iter().all(field_name) {
        return Err(invalid());
    }
    Ok(fields)
}

/// Which binding serves each kind (by group and kind, whatever the version: every version of
/// a kind is the same objects): the oldest of those that bind it (creation time, then name),
/// so a second binding of a kind never takes it over from the one in force. A binding being
/// deleted still serves its kind until it is gone (its instances' deletion needs it).
pub fn winners<'a>(
    bindings: impl IntoIterator<Item = &'a PluginBinding>,
) -> BTreeMap<(String, String), String> {
    let mut by_kind: BTreeMap<(String, String), (Option<i64>, String)> = BTreeMap::new();
    for binding in bindings {
        let key = (
            binding.spec.kind.group.clone(),
            binding.spec.kind.kind.clone(),
        );
        let created = binding
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond());
        let candidate = (created, binding.name_any());
        // `None` (no creation time: never from the API server) sorts first; fine either way.
        by_kind
            .entry(key)
            .and_modify(|held| {
                if candidate < *held {
                    *held = candidate.clone();
                }
            })
            .or_insert(candidate);
    }
    by_kind
        .into_iter()
        .map(|(kind, (_, name))| (kind, name))
        .collect()
}

/// The refusal of `binding` when another binding serves its kind ([`winners`]).
pub fn already_bound(
    binding: &PluginBinding,
    winners: &BTreeMap<(String, String), String>,
) -> Option<Refusal> {
    let key = (
        binding.spec.kind.group.clone(),
        binding.spec.kind.kind.clone(),
    );
    let winner = winners.get(&key)?;
    (*winner != binding.name_any()).then(|| Refusal {
        reason: "AlreadyBound",
        message: format!(
            "{} is bound by PluginBinding {winner} already (the oldest binding of a kind \
             serves it); delete one of them",
            binding.spec.kind
        ),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::{
        app::PluginSource,
        binding::{PluginBinding, PluginBindingSpec},
    };

    fn kind(group: &str, version: &str, kind: &str) -> BoundKind {
        BoundKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn only_a_custom_resource_kind_of_someones_own_group_may_be_bound() {
        assert_eq!(bindable(&kind("data.acme.io", "v1", "KVStore")), Ok(()));
        assert_eq!(bindable(&kind("acme.com", "v1alpha1", "Cache2")), Ok(()));
        for (k, field) in [
            (kind("", "v1", "Pod"), "group"),
            (kind("apps", "v1", "Deployment"), "group"),
            (kind("networking.k8s.io", "v1", "Ingress"), "group"),
            (kind("cluster.x-k8s.io", "v1beta1", "Cluster"), "group"),
            (kind("k8s.io", "v1", "X"), "group"),
            (kind("x.kubernetes.io", "v1", "X"), "group"),
            (kind("wasmop.dev", "v1alpha1", "App"), "group"),
            (kind("policy.wasmop.dev", "v1", "X"), "group"),
            (kind("Data.Acme.io", "v1", "KVStore"), "group"),
            (kind("data..io", "v1", "KVStore"), "group"),
            (kind("data.acme.io", "v1", "kvstore"), "kind"),
            (kind("data.acme.io", "v1", "KV-Store"), "kind"),
            (kind("data.acme.io", "1", "KVStore"), "version"),
            (kind("data.acme.io", "v1/x", "KVStore"), "version"),
        ] {
            let refusal = bindable(&k).expect_err(&format!("{k:?} was bindable"));
            assert_eq!(refusal.reason, "KindNotBindable");
            assert!(
                refusal.message.contains(&format!("spec.kind.{field}")),
                "{refusal:?}"
            );
        }
    }

    #[test]
    fn a_binding_selector_is_equality_terms() {
        assert_eq!(
            selector("team=data, tier==gold"),
            Ok(BTreeMap::from([
                ("team".to_string(), "data".to_string()),
                ("tier".to_string(), "gold".to_string()),
            ]))
        );
        assert_eq!(selector(""), Ok(BTreeMap::new()));
        for bad in ["team", "team!=data", "=x", "a in (b)"] {
            assert!(selector(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_version_path_names_a_field_of_spec() {
        assert_eq!(version_path(None), Ok(vec!["version".to_string()]));
        assert_eq!(
            version_path(Some("spec.image.tag")),
            Ok(vec!["image".to_string(), "tag".to_string()])
        );
        for bad in [
            "version",
            "spec.",
            "spec..tag",
            "status.version",
            "spec.a b",
            "spec.x[0]",
        ] {
            let refusal = version_path(Some(bad)).expect_err(bad);
            assert_eq!(refusal.reason, "InvalidVersionPath");
            assert!(refusal.message.contains("spec.versionPath"), "{refusal:?}");
        }
    }

    fn binding(name: &str, created_s: i64, group: &str, version: &str) -> PluginBinding {
        let mut b = PluginBinding::new(
            name,
            PluginBindingSpec {
                kind: kind(group, version, "KVStore"),
                plugin: PluginSource {
                    image: Some("r/p:1".into()),
                    image_pull_secrets: Vec::new(),
                    config_map: None,
                    file: None,
                },
                source_namespace: None,
                limits: None,
                version_path: None,
                admission: None,
                rollout: None,
            },
        );
        b.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created_s).expect("a time"),
        ));
        b
    }

    /// The oldest binding of a kind serves it, in any version; a later one is refused and
    /// named, and takes over nothing; kinds of other groups are apart.
    #[test]
    fn the_oldest_binding_of_a_kind_serves_it() {
        let all = [
            binding("late", 20, "data.acme.io", "v1"),
            binding("first", 10, "data.acme.io", "v2"),
            binding("same-time-b", 30, "other.io", "v1"),
            binding("same-time-a", 30, "other.io", "v1"),
        ];
        let winners = winners(&all);
        assert_eq!(
            winners.get(&("data.acme.io".into(), "KVStore".into())),
            Some(&"first".to_string())
        );
        assert_eq!(
            winners.get(&("other.io".into(), "KVStore".into())),
            Some(&"same-time-a".to_string())
        );
        assert_eq!(already_bound(&all[1], &winners), None);
        let refused = already_bound(&all[0], &winners).expect("refused");
        assert_eq!(refused.reason, "AlreadyBound");
        assert!(
            refused.message.contains("PluginBinding first"),
            "{refused:?}"
        );
        assert!(already_bound(&all[2], &winners).is_some());
    }
}
