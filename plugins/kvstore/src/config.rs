//! `spec.config` of a kvstore App: defaults, and validation serde cannot do.

use std::str::FromStr;

use serde::Deserialize;
use wasmop_sdk::k8s_openapi::api::core::v1::ResourceRequirements;
use wasmop_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use wasmop_sdk::schemars::{self, JsonSchema};
use wasmop_sdk::{Error, Result, Schedule};

/// Most replicas one App may ask for. Replication is full-copy from the
/// primary, so more replicas than this only multiply the primary's load.
pub const MAX_REPLICAS: i32 = 15;

/// Most backups kept. Each is a full RDB on the backups volume.
pub const MAX_RETAIN: u32 = 100;

/// Eviction policies Valkey accepts for `maxmemory-policy`.
const POLICIES: &[&str] = &[
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
];

/// The configuration of a kvstore, a replicated Valkey: an App's `spec.config`,
/// or the whole `spec` (beside `version`) of a kind bound to kvstore. Every
/// field has a default, so an empty configuration gives a 3-replica store with
/// 1Gi volumes and no backups.
///
/// ```yaml
/// replicas: 3
/// image: valkey/valkey          # the tag is the version
/// storage: 1Gi
/// storageClassName: standard
/// resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}
/// maxmemory: 200mb
/// maxmemoryPolicy: allkeys-lru
/// backup: {schedule: "0 */6 * * *", retain: 5, storage: 2Gi}
/// retention: Retain             # or Delete: what happens to data PVCs on deletion
/// ```
// The doc comments are the schema's descriptions (what `kubectl explain` shows for a kind bound
// to kvstore), so they are written for the people who write the configuration; the
// `#[schemars(...)]` limits repeat those `Config::validate` checks, so the API server refuses such
// a configuration at `kubectl apply` (validate still checks an App's `spec.config`).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Number of Valkey Pods, 1 to 15: Pod 0 is the primary, the others
    /// replicate from it.
    #[schemars(range(min = 1, max = MAX_REPLICAS))]
    pub replicas: i32,
    /// Image repository, without a tag or digest: the tag is `version`.
    #[schemars(length(min = 1))]
    pub image: String,
    /// Size of each replica's data volume, e.g. `1Gi`.
    pub storage: String,
    /// StorageClass of data and backup volumes; the cluster default if unset.
    pub storage_class_name: Option<String>,
    /// Resources of the Valkey container.
    #[schemars(schema_with = "resources_schema")]
    pub resources: ResourceRequirements,
    /// Valkey `maxmemory`, e.g. `200mb`; unbounded if unset.
    pub maxmemory: Option<String>,
    /// Valkey `maxmemory-policy`: which keys go when `maxmemory` is reached.
    #[schemars(extend("enum" = POLICIES))]
    pub maxmemory_policy: String,
    /// Scheduled backups; none if unset.
    pub backup: Option<BackupConfig>,
    /// What happens to the data volumes when the store is deleted.
    pub retention: Retention,
}

/// Scheduled backups.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BackupConfig {
    /// Cron schedule, UTC: 5 fields, or a shorthand such as `@daily`.
    pub schedule: String,
    /// How many successful backups to keep, 1 to 100.
    #[schemars(range(min = 1, max = MAX_RETAIN))]
    pub retain: u32,
    /// Size of the backups volume the plugin creates, e.g. `2Gi`.
    pub storage: String,
    /// Use this existing PVC instead of creating `<app>-backups`. Backups on
    /// it outlive the App; the created one is deleted with the App (but kept
    /// while the App lives, even if backups are switched off). The host lets
    /// backup Jobs mount only the App's own claims, so label it
    /// `wasmop.dev/app=<app>` (finalize never deletes it: only data claims).
    #[schemars(length(min = 1))]
    pub claim_name: Option<String>,
    /// A tick missed by more than this many minutes (the store was down) is
    /// skipped rather than run late.
    pub starting_deadline_minutes: u32,
}

/// Retention of data volumes on deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
pub enum Retention {
    /// Keep the PVCs (and the data) after the App is deleted.
    #[default]
    Retain,
    /// Delete the PVCs with the App.
    Delete,
}

/// The schema of [`Config::resources`]: a container's `resources` in short. k8s-openapi's own
/// schema of `ResourceRequirements` carries the API reference's long descriptions (of
/// `Quantity` alone 3 KB) and costs the component 10 KB; this one validates the same
/// quantities (`x-kubernetes-int-or-string`, as k8s-openapi's) in a few hundred bytes.
fn resources_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "properties": {
            "limits": {
                "description": "Most of each resource the container may use, e.g. `memory: 256Mi`.",
                "type": "object",
                "additionalProperties": {"x-kubernetes-int-or-string": true},
            },
            "requests": {
                "description": "What the scheduler reserves for the container, e.g. `cpu: 100m`.",
                "type": "object",
                "additionalProperties": {"x-kubernetes-int-or-string": true},
            },
            "claims": {
                "description": "Dynamic resource claims the container uses (Kubernetes' ResourceClaim).",
                "type": "array",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        },
    })
}

impl Default for Config {
    fn default() -> Self {
        let quantity = |q: &str| Quantity(q.to_string());
        Config {
            replicas: 3,
            image: "valkey/valkey".to_string(),
            storage: "1Gi".to_string(),
            storage_class_name: None,
            resources: ResourceRequirements {
                requests: Some(
                    [
                        ("cpu".to_string(), quantity("100m")),
                        ("memory".to_string(), quantity("128Mi")),
                    ]
                    .into(),
                ),
                limits: Some([("memory".to_string(), quantity("256Mi"))].into()),
                ..Default::default()
            },
            maxmemory: None,
            maxmemory_policy: "noeviction".to_string(),
            backup: None,
            retention: Retention::Retain,
        }
    }
}

impl Default for BackupConfig {
    fn default() -> Self {
        BackupConfig {
            schedule: "0 */6 * * *".to_string(),
            retain: 5,
            storage: "2Gi".to_string(),
            claim_name: None,
            starting_deadline_minutes: 60,
        }
    }
}

impl Config {
    /// Checks ranges and formats; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(Error::invalid_config(
                "spec.config.replicas",
                format!(
                    "must be between 1 and {MAX_REPLICAS}, got {}",
                    self.replicas
                ),
            ));
        }
        validate_image(&self.image)?;
        validate_quantity("spec.config.storage", &self.storage)?;
        if !POLICIES.contains(&self.maxmemory_policy.as_str()) {
            return Err(Error::invalid_config(
                "spec.config.maxmemoryPolicy",
                format!("must be one of {}", POLICIES.join(", ")),
            ));
        }
        if let Some(max) = &self.maxmemory {
            // Valkey's own units; a bad value would crash-loop the server.
            let digits = max.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let unit = &max[digits.len()..].to_ascii_lowercase();
            if digits.is_empty()
                || !digits.chars().all(|c| c.is_ascii_digit())
                || !["", "b", "k", "kb", "m", "mb", "g", "gb"].contains(&unit.as_str())
            {
                return Err(Error::invalid_config(
                    "spec.config.maxmemory",
                    format!("{max:?} is not a Valkey memory size such as 200mb"),
                ));
            }
        }
        if let Some(backup) = &self.backup {
            backup.cron()?;
            if !(1..=MAX_RETAIN).contains(&backup.retain) {
                return Err(Error::invalid_config(
                    "spec.config.backup.retain",
                    format!("must be between 1 and {MAX_RETAIN}, got {}", backup.retain),
                ));
            }
            validate_quantity("spec.config.backup.storage", &backup.storage)?;
            if backup.claim_name.as_deref() == Some("") {
                return Err(Error::invalid_config(
                    "spec.config.backup.claimName",
                    "must not be empty",
                ));
            }
        }
        Ok(())
    }
}

impl BackupConfig {
    /// The parsed schedule.
    pub fn cron(&self) -> Result<Schedule> {
        Schedule::from_str(&self.schedule).map_err(|e| {
            Error::invalid_config(
                "spec.config.backup.schedule",
                format!("{:?} is not a cron schedule: {e}", self.schedule),
            )
        })
    }
}

/// The tag comes from `spec.version`, so a tag or digest here would
/// silently pin the version and defeat the upgrade gate.
fn validate_image(image: &str) -> Result<()> {
    let last = image.rsplit('/').next().unwrap_or_default();
    if image.is_empty()
        || last.is_empty()
        || last.contains(':')
        || image.contains('@')
        || image.contains(char::is_whitespace)
    {
        return Err(Error::invalid_config(
            "spec.config.image",
            format!(
                "{image:?} must be an image repository without tag or digest; the tag is spec.version"
            ),
        ));
    }
    Ok(())
}

/// A Kubernetes quantity the API server would accept for storage, such as
/// `1Gi` or `500M`: a positive number and an optional binary or decimal
/// suffix.
fn validate_quantity(field: &str, text: &str) -> Result<()> {
    const SUFFIXES: &[&str] = &[
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
    ];
    let number = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &text[number.len()..];
    let mut parts = number.splitn(2, '.');
    let whole = parts.next().unwrap_or_default();
    let fraction = parts.next();
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let valid = digits(whole)
        && fraction.is_none_or(digits)
        && SUFFIXES.contains(&suffix)
        && number.chars().any(|c| c.is_ascii_digit() && c != '0');
    if valid {
        Ok(())
    } else {
        Err(Error::invalid_config(
            field,
            format!("{text:?} is not a storage size such as 1Gi"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Config {
        serde_json::from_value(value).expect("config deserializes")
    }

    #[test]
    fn empty_config_gets_defaults() {
        let config = parse(json!({}));
        assert_eq!(config, Config::default());
        assert_eq!(config.replicas, 3);
        assert_eq!(config.retention, Retention::Retain);
        assert!(config.backup.is_none());
        config.validate().expect("defaults are valid");
    }

    #[test]
    fn backup_defaults_fill_missing_fields() {
        let config = parse(json!({"backup": {"schedule": "@daily"}}));
        let backup = config.backup.as_ref().expect("backup");
        assert_eq!(backup.retain, 5);
        assert_eq!(backup.storage, "2Gi");
        config.validate().expect("valid");
    }

    #[test]
    fn the_documented_example_is_valid() {
        let config = parse(json!({
            "replicas": 3, "image": "valkey/valkey", "storage": "1Gi", "storageClassName": "standard",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "maxmemory": "200mb", "maxmemoryPolicy": "allkeys-lru",
            "backup": {"schedule": "0 */6 * * *", "retain": 5, "storage": "2Gi"},
            "retention": "Delete"
        }));
        config.validate().expect("valid");
        assert_eq!(config.retention, Retention::Delete);
    }

    #[test]
    fn invalid_values_name_their_field() {
        let cases = [
            (json!({"replicas": 0}), "spec.config.replicas"),
            (json!({"replicas": 16}), "spec.config.replicas"),
            (json!({"image": "valkey/valkey:7.2"}), "spec.config.image"),
            (json!({"image": "valkey@sha256:abc"}), "spec.config.image"),
            (json!({"image": ""}), "spec.config.image"),
            (json!({"storage": "lots"}), "spec.config.storage"),
            (json!({"storage": "0Gi"}), "spec.config.storage"),
            (json!({"storage": "1.Gi"}), "spec.config.storage"),
            (
                json!({"maxmemoryPolicy": "lru"}),
                "spec.config.maxmemoryPolicy",
            ),
            (json!({"maxmemory": "lots"}), "spec.config.maxmemory"),
            (json!({"maxmemory": "200tb"}), "spec.config.maxmemory"),
            (
                json!({"backup": {"schedule": "every day"}}),
                "spec.config.backup.schedule",
            ),
            (
                json!({"backup": {"schedule": "61 * * * *"}}),
                "spec.config.backup.schedule",
            ),
            (
                json!({"backup": {"retain": 0}}),
                "spec.config.backup.retain",
            ),
            (
                json!({"backup": {"retain": 101}}),
                "spec.config.backup.retain",
            ),
            (
                json!({"backup": {"storage": "2 Gi"}}),
                "spec.config.backup.storage",
            ),
            (
                json!({"backup": {"claimName": ""}}),
                "spec.config.backup.claimName",
            ),
        ];
        for (value, field) in cases {
            let err = parse(value.clone())
                .validate()
                .expect_err(&value.to_string());
            assert_eq!(err.field(), Some(field), "{value}: {err}");
        }
    }

    /// The schema a CRD made for kvstore gets (`wasmop plugin crd`): the docs, and the limits
    /// `validate` checks, for the API server to enforce.
    #[test]
    fn the_schema_documents_and_bounds_the_config() {
        let schema = wasmop_sdk::testing::Fixture::config_schema::<crate::Kvstore>()
            .expect("the host would load it")
            .expect("a schema");
        let fields = &schema["properties"];
        let replicas = &fields["replicas"];
        assert!(
            replicas["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Number of Valkey Pods")),
            "{replicas}"
        );
        assert_eq!(replicas["type"], "integer");
        assert_eq!(
            (&replicas["minimum"], &replicas["maximum"]),
            (&json!(1), &json!(MAX_REPLICAS))
        );
        assert_eq!(replicas["default"], 3);
        let backup = &fields["backup"];
        assert_eq!(backup["nullable"], true);
        assert_eq!(backup["properties"]["retain"]["maximum"], MAX_RETAIN);
        assert_eq!(fields["maxmemoryPolicy"]["enum"], json!(POLICIES));
        assert_eq!(fields["retention"]["enum"], json!(["Retain", "Delete"]));
        assert_eq!(fields["resources"]["type"], "object");
        // Every limit in the schema is one validate holds too: its defaults pass both.
        Config::default().validate().expect("defaults are valid");
    }

    #[test]
    fn registry_ports_are_not_tags() {
        parse(json!({"image": "localhost:5000/valkey/valkey"}))
            .validate()
            .expect("port, not tag");
        for ok in ["1Gi", "500M", "1.5Gi", "1024"] {
            validate_quantity("f", ok).expect(ok);
        }
    }
}
