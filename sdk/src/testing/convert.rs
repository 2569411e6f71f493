//! [`Fixture::convert`] and [`Fixture::round_trip`]: a plugin's conversions, natively, held to
//! the host's rules on a converted object ([`wasmop_core::admission::check_converted`]), and
//! Kubernetes' rule that a conversion loses nothing: an instance converted to the other version
//! and back reads as it was.

use serde_json::Value;
use wasmop_core::{
    admission::{ConvertRequest, check_converted},
    answers::DEFAULT_MAX_OUTPUT_BYTES,
};

use super::{Fixture, answers};
use crate::convert::{Convert, normalized};
use crate::error::{Error, Result};

/// Most differences a failed round trip names: the first few say what is wrong.
const MAX_DIFFERENCES: usize = 8;

impl Fixture {
    /// Calls `convert.convert` on `object` (JSON text of an instance of a bound kind) for
    /// `desired_api_version` (`group/version`): the converted object, as the host takes it
    /// (see [`wasmop_core::admission::check_converted`]; a plugin error, or an answer the host
    /// would refuse, is an error here).
    pub fn convert<P: Convert>(object: &str, desired_api_version: &str) -> Result<Value> {
        let converted = crate::convert::convert::<P>(object, desired_api_version)?;
        let request = ConvertRequest {
            object: object.to_string(),
            desired_api_version: desired_api_version.to_string(),
        };
        check_converted(&request, &converted, DEFAULT_MAX_OUTPUT_BYTES)
            .map_err(answers::refused::<P>("convert"))
    }

    /// Converts `object` to the other version `P` knows and back, and checks that it comes back
    /// as it was: its configuration as its own version's type reads it (the defaults a
    /// conversion writes out filled in on both sides), everything else exactly. The object at
    /// the other version, or an `internal` error naming what changed, field by field.
    ///
    /// See [`Convert`] for an example.
    pub fn round_trip<P: Convert>(object: &str) -> Result<Value> {
        let original: Value = serde_json::from_str(object)
            .map_err(|e| Error::invalid_input(format!("the object is not JSON: {e}")))?;
        let api_version = original["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let other = if version == P::VERSION {
            P::PREVIOUS_VERSION
        } else {
            P::VERSION
        };
        let other = match group {
            "" => other.to_string(),
            group => format!("{group}/{other}"),
        };
        let there = Self::convert::<P>(object, &other)?;
        let back = Self::convert::<P>(&there.to_string(), api_version)?;
        let expected: Value = serde_json::from_str(&normalized::<P>(object)?)
            .map_err(|e| Error::internal(format!("the object, normalized, is not JSON: {e}")))?;
        let mut changed = Vec::new();
        differences(&expected, &back, "", &mut changed);
        if changed.is_empty() {
            return Ok(there);
        }
        let more = changed.len().saturating_sub(MAX_DIFFERENCES);
        changed.truncate(MAX_DIFFERENCES);
        let more = match more {
            0 => String::new(),
            n => format!("; and {n} more"),
        };
        Err(Error::internal(format!(
            "the round trip {api_version} -> {other} -> {api_version} changed the object: {}{more}",
            changed.join("; ")
        )))
    }
}

/// Where `is` differs from `was`, as `path: was became is` (paths dotted, list entries
/// `[i]`), at most [`MAX_DIFFERENCES`] plus one (to say there are more).
fn differences(was: &Value, is: &Value, path: &str, out: &mut Vec<String>) {
    if out.len() > MAX_DIFFERENCES || was == is {
        return;
    }
    let at = |key: &str| match path {
        "" => key.to_string(),
        path => format!("{path}.{key}"),
    };
    match (was, is) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                match (a.get(key), b.get(key)) {
                    (Some(a), Some(b)) => differences(a, b, &at(key), out),
                    (a, b) => out.push(format!("{}: {} became {}", at(key), shown(a), shown(b))),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                differences(a, b, &format!("{path}[{i}]"), out);
            }
        }
        _ => out.push(format!(
            "{}: {} became {}",
            if path.is_empty() { "the object" } else { path },
            was,
            is
        )),
    }
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_string(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;
    use crate::error::ErrorKind;
    use crate::metadata::{Metadata, Plugin};
    use crate::testing;

    /// `v1`: a count and a volume size.
    #[derive(Debug, Deserialize, Serialize, schemars::JsonSchema)]
    #[serde(default, rename_all = "camelCase")]
    struct Config {
        replicas: i32,
        storage: String,
    }

    impl Default for Config {
        fn default() -> Self {
            Config {
                replicas: 3,
                storage: "1Gi".into(),
            }
        }
    }

    /// `v1alpha1`: the count as text; `lossy` in its name loses the volume size going down.
    #[derive(Debug, Default, Deserialize, Serialize, schemars::JsonSchema)]
    #[serde(default)]
    struct Previous {
        size: String,
        storage: Option<String>,
    }

    struct Store;

    impl Plugin for Store {
        type Config = Config;

        fn metadata() -> Metadata {
            Metadata::new("store", "0.1.0")
        }
    }

    impl Convert for Store {
        type Previous = Previous;
        const PREVIOUS_VERSION: &'static str = "v1alpha1";
        const VERSION: &'static str = "v1";

        fn up(previous: Previous) -> Result<Config> {
            let replicas = previous
                .size
                .parse()
                .map_err(|_| Error::invalid_config("spec.config.size", "is not a number"))?;
            Ok(Config {
                replicas,
                storage: previous.storage.unwrap_or_else(|| "1Gi".into()),
            })
        }

        fn down(config: Config) -> Result<Previous> {
            // A bug on purpose for one size: the round trip must catch it.
            let storage = (config.storage != "5Gi").then_some(config.storage);
            Ok(Previous {
                size: config.replicas.to_string(),
                storage,
            })
        }
    }

    crate::export!(Store: Convert);

    fn store(version: &str, spec: Value) -> String {
        let mut object: Value = serde_json::from_str(&testing::instance(
            &format!("data.example.com/{version}"),
            "Store",
            "s",
            "shop",
            "7.2.4",
            spec,
        ))
        .expect("JSON");
        object["metadata"]["labels"] = json!({"team": "a"});
        object["status"] = json!({"version": "7.2.3", "phase": "Ready"});
        object.to_string()
    }

    #[test]
    fn up_and_down_rewrite_only_the_configuration_and_the_api_version() {
        let old = store("v1alpha1", json!({"size": "5", "storage": "2Gi"}));
        let new = Fixture::convert::<Store>(&old, "data.example.com/v1").expect("up");
        let mut expected: Value = serde_json::from_str(&old).expect("JSON");
        expected["apiVersion"] = json!("data.example.com/v1");
        expected["spec"] = json!({"replicas": 5, "storage": "2Gi", "version": "7.2.4"});
        assert_eq!(new, expected);

        let down =
            Fixture::convert::<Store>(&new.to_string(), "data.example.com/v1alpha1").expect("down");
        assert_eq!(
            down["spec"],
            json!({"size": "5", "storage": "2Gi", "version": "7.2.4"})
        );
        assert_eq!(down["metadata"], expected["metadata"]);
        assert_eq!(down["status"], expected["status"]);
    }

    #[test]
    fn the_same_version_comes_back_untouched() {
        let sparse = store("v1", json!({}));
        let same = crate::convert::convert::<Store>(&sparse, "data.example.com/v1").expect("same");
        assert_eq!(same, sparse);
    }

    #[test]
    fn versions_and_groups_it_does_not_know_are_named() {
        let old = store("v1alpha1", json!({"size": "5"}));
        let err = Fixture::convert::<Store>(&old, "data.example.com/v2").expect_err("v2");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(err.field(), Some("desired-api-version"));
        assert_eq!(
            err.message(),
            "v2 is not an API version store knows (v1alpha1, v1)"
        );
        let beta = store("v1beta1", json!({}));
        let err = Fixture::convert::<Store>(&beta, "data.example.com/v1").expect_err("v1beta1");
        assert_eq!(err.field(), Some("apiVersion"));
        let err = Fixture::convert::<Store>(&old, "other.example.com/v1").expect_err("a group");
        assert_eq!(err.field(), Some("desired-api-version"));
        let app = testing::app("a", "ns", "1", json!({}));
        let err = Fixture::convert::<Store>(&app, "wasmop.dev/v1").expect_err("an App");
        assert_eq!(err.field(), Some("kind"));
    }

    #[test]
    fn a_configuration_that_does_not_read_names_its_field() {
        let old = store("v1alpha1", json!({"size": 5}));
        let err = Fixture::convert::<Store>(&old, "data.example.com/v1").expect_err("a number");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.field(), Some("spec.size"));
        let old = store("v1alpha1", json!({"size": "five"}));
        let err = Fixture::convert::<Store>(&old, "data.example.com/v1").expect_err("not one");
        assert_eq!(
            err.field(),
            Some("spec.size"),
            "moved from spec.config.size"
        );
    }

    #[test]
    fn a_round_trip_fills_in_defaults_and_names_what_it_loses() {
        // Sparse: the defaults a conversion writes out count as the same.
        let there = Fixture::round_trip::<Store>(&store("v1", json!({"replicas": 2})))
            .expect("v1 -> v1alpha1 -> v1");
        assert_eq!(there["spec"]["size"], "2");
        Fixture::round_trip::<Store>(&store("v1alpha1", json!({"size": "4", "storage": "3Gi"})))
            .expect("v1alpha1 -> v1 -> v1alpha1");

        let lossy = store("v1", json!({"replicas": 2, "storage": "5Gi"}));
        let err = Fixture::round_trip::<Store>(&lossy).expect_err("5Gi is lost");
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert_eq!(
            err.message(),
            "the round trip data.example.com/v1 -> data.example.com/v1alpha1 -> \
             data.example.com/v1 changed the object: spec.storage: \"5Gi\" became \"1Gi\""
        );
    }

    #[test]
    fn metadata_lists_both_versions_with_their_schemas() {
        let versions = Fixture::metadata::<Store>().versions;
        let names: Vec<&str> = versions.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["v1alpha1", "v1"]);
        let previous: Value =
            serde_json::from_str(versions[0].config_schema.as_deref().expect("a schema"))
                .expect("JSON");
        assert!(previous["properties"].get("size").is_some(), "{previous}");
        Fixture::config_schema::<Store>().expect("the host would load it");
    }

    #[test]
    fn differences_are_listed_by_path() {
        let mut out = Vec::new();
        differences(
            &json!({"a": {"b": [1, 2]}, "c": "x", "d": 1}),
            &json!({"a": {"b": [1, 3]}, "c": "x", "e": 2}),
            "",
            &mut out,
        );
        assert_eq!(
            out,
            [
                "a.b[1]: 2 became 3",
                "d: 1 became absent",
                "e: absent became 2"
            ]
        );
    }
}
