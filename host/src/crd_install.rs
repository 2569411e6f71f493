//! The host's CRDs (App, PluginPolicy and PluginBinding): installs or updates them at start-up and waits until
//! the API server serves them; [`crd_yaml`] is what `wasmop crds` prints and `deploy/crds/`
//! holds.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, CustomResourceExt,
    api::{Patch, PatchParams},
    runtime::wait::{await_condition, conditions},
};

use crate::{app::App, binding::PluginBinding, policy::PluginPolicy, write::FIELD_MANAGER};

/// How long a freshly applied CRD may take to become Established before start-up fails.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum CrdInstallError {
    /// The server-side apply of the CRD was refused.
    #[error("applying CustomResourceDefinition {name}: {source}")]
    Apply {
        /// Name of the CRD.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The CRD was applied but never became Established.
    #[error("CustomResourceDefinition {name} was not Established within {timeout:?}")]
    NotEstablished {
        /// Name of the CRD.
        name: String,
        /// How long the host waited.
        timeout: Duration,
    },
    /// Watching the CRD for its Established condition failed.
    #[error("waiting for CustomResourceDefinition {name}: {source}")]
    Wait {
        /// Name of the CRD.
        name: String,
        /// The watch error.
        #[source]
        source: kube::runtime::wait::Error,
    },
}

/// Every CRD the host owns.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![App::crd(), PluginPolicy::crd(), PluginBinding::crd()]
        .into_iter()
        .map(with_kubernetes_formats)
        .collect()
}

/// `crd` with the integer formats schemars writes for Rust's unsigned types (`uint32`, ...)
/// replaced by what Kubernetes knows (`int64`, with the type's bounds as `minimum`/`maximum`):
/// the API server warns `unrecognized format "uint32"` on every apply of the CRD otherwise.
fn with_kubernetes_formats(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                let max = match map.get("format").and_then(|f| f.as_str()) {
                    Some("uint8") => Some(u64::from(u8::MAX)),
                    Some("uint16") => Some(u64::from(u16::MAX)),
                    Some("uint32") => Some(u64::from(u32::MAX)),
                    Some("uint64" | "uint") => None,
                    _ => {
                        map.values_mut().for_each(walk);
                        return;
                    }
                };
                map.insert("format".into(), "int64".into());
                // A bound the field declares itself (`#[schemars(range)]`) stays when it is
                // tighter than the type's.
                let bound = |map: &serde_json::Map<String, serde_json::Value>, key: &str| {
                    map.get(key).and_then(serde_json::Value::as_f64)
                };
                if bound(map, "minimum").is_none_or(|min| min < 0.0) {
                    map.insert("minimum".into(), 0.into());
                }
                if let Some(max) = max
                    && bound(map, "maximum").is_none_or(|declared| declared > max as f64)
                {
                    map.insert("maximum".into(), max.into());
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    walk(&mut value);
    serde_json::from_value(value).unwrap_or(crd)
}

/// The CRDs as a multi-document YAML stream.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let docs = crds()
        .iter()
        .map(serde_yaml::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(docs.join("---\n"))
}

/// Server-side applies every CRD and waits for each to be Established.
pub async fn ensure_crds(client: &Client) -> Result<(), CrdInstallError> {
    for crd in crds() {
        ensure(client, crd).await?;
    }
    Ok(())
}

async fn ensure(client: &Client, crd: CustomResourceDefinition) -> Result<(), CrdInstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .map_err(|source| CrdInstallError::Apply {
        name: name.clone(),
        source,
    })?;
    let established = await_condition(api, &name, conditions::is_crd_established());
    match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(CrdInstallError::Wait { name, source }),
        Err(_) => Err(CrdInstallError::NotEstablished {
            name,
            timeout: ESTABLISH_TIMEOUT,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crds_use_only_formats_kubernetes_knows() {
        let yaml = crd_yaml().expect("CRDs serialise");
        assert!(!yaml.contains("format: uint"), "{yaml}");
        // An unsigned field's own range stays; without one, the type's.
        let policy = crds()
            .into_iter()
            .find(|crd| crd.spec.names.kind == "PluginPolicy")
            .expect("the PluginPolicy CRD");
        let policy = serde_json::to_value(policy).expect("serialises");
        let spec = policy
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
            .expect("a spec schema");
        for field in ["maxClaims", "maxReplicas"] {
            let bounds = (
                spec.pointer(&format!("/{field}/minimum"))
                    .and_then(|v| v.as_f64()),
                spec.pointer(&format!("/{field}/maximum"))
                    .and_then(|v| v.as_f64()),
            );
            assert_eq!(bounds, (Some(1.0), Some(1024.0)), "{field}");
        }
    }

    /// `deploy/crds/` is what `kubectl apply` installs and `deploy/helm/wasmop/crds/` what
    /// `helm install` does; both must be what the host would apply.
    #[test]
    fn checked_in_crds_match_the_code() {
        for crd in crds() {
            let name = crd.metadata.name.clone().expect("a named CRD");
            let want = serde_yaml::to_string(&crd).expect("CRD serialises");
            for dir in ["deploy/crds", "deploy/helm/wasmop/crds"] {
                let path = format!("{}/../{dir}/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
                if std::env::var_os("WASMOP_BLESS").is_some() {
                    std::fs::write(&path, &want).expect("writing the CRD");
                }
                let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
                assert!(
                    checked_in == want,
                    "{dir}/{name}.yaml is stale: regenerate it with \
                     `WASMOP_BLESS=1 cargo test -p wasmop-host --lib crd_install`"
                );
            }
        }
    }
}
