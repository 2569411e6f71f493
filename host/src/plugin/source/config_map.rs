//! ConfigMap sources: the component is a key of `binaryData`; its version is the sha256 of the
//! bytes. The watch itself lives in `plugin::watch`.

use k8s_openapi::api::core::v1::ConfigMap;

use super::{Fetched, SourceRef, fetch_error};
use crate::plugin::LoadError;

/// Takes the component out of `config_map` for `source` (a [`SourceRef::ConfigMap`]).
pub fn extract(
    source: &SourceRef,
    config_map: &ConfigMap,
    key: &str,
) -> Result<Fetched, LoadError> {
    if let Some(bytes) = config_map.binary_data.as_ref().and_then(|d| d.get(key)) {
        return Ok(Fetched::new(bytes.0.clone()));
    }
    if config_map
        .data
        .as_ref()
        .is_some_and(|d| d.contains_key(key))
    {
        return Err(fetch_error(
            source,
            format!(
                "key {key:?} is in data, not binaryData; create it with kubectl create configmap --from-file"
            ),
        ));
    }
    let keys: Vec<&String> = config_map
        .binary_data
        .iter()
        .flat_map(|d| d.keys())
        .collect();
    Err(fetch_error(
        source,
        format!("binaryData has no key {key:?} (it has {keys:?})"),
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn source() -> SourceRef {
        SourceRef::ConfigMap {
            namespace: "ns".into(),
            name: "cm".into(),
            key: "plugin.wasm".into(),
        }
    }

    #[test]
    fn binary_data_key_is_the_component() {
        let cm = ConfigMap {
            binary_data: Some(BTreeMap::from([(
                "plugin.wasm".to_string(),
                ByteString(b"abc".to_vec()),
            )])),
            ..Default::default()
        };
        let fetched = extract(&source(), &cm, "plugin.wasm").expect("key present");
        assert_eq!(fetched.bytes, b"abc");
        assert_eq!(fetched.digest, crate::plugin::Digest::of(b"abc"));
    }

    #[test]
    fn a_key_in_data_gets_a_hint() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([(
                "plugin.wasm".to_string(),
                "text".to_string(),
            )])),
            ..Default::default()
        };
        let err = extract(&source(), &cm, "plugin.wasm").expect_err("not binary");
        assert!(err.to_string().contains("not binaryData"), "{err}");
    }

    #[test]
    fn a_missing_key_names_the_keys_there_are() {
        let err = extract(&source(), &ConfigMap::default(), "plugin.wasm").expect_err("missing");
        assert!(
            err.to_string().contains("configmap:ns/cm#plugin.wasm"),
            "{err}"
        );
        assert!(err.to_string().contains("no key \"plugin.wasm\""), "{err}");
    }
}
