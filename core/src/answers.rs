//! What a plugin answers (its metadata, a plan, a health report, a backup decision, an upgrade
//! gate's verdict, a finalize decision) and the rules an answer must pass before anyone uses it.
//! Plain data, the same whether the answer came from a Wasm component or from a plugin's Rust
//! traits called natively.
//!
//! The rules are the one rulebook for answers: the host's call layer (and with it `wasmop
//! plugin run`) and the SDK's `Fixture` apply these same pure functions, so a plugin's native
//! test fails where the host would refuse the answer as [`BAD_OUTPUT`], with the host's words.
//! Each `check_*` function takes one capability's answer and returns it checked, or an
//! [`AnswerError`] naming the field at fault and the rule it breaks:
//!
//! - every answer fits the call's output cap ([`DEFAULT_MAX_OUTPUT_BYTES`] unless the host says
//!   otherwise), counting the text the plugin wrote;
//! - every object (a plan's, a backup Job) is a JSON object with `apiVersion`, `kind` and
//!   `metadata.name` ([`PluginObject::parse`]);
//! - lists hold at most [`MAX_LISTED`] entries (slots to expire, objects to delete or keep,
//!   kinds in metadata), a health report at most [`MAX_CONDITIONS`] conditions;
//! - a condition's type is none of the host's own ([`RESERVED_CONDITIONS`]) nor repeated, and
//!   it and its reason are CamelCase words of at most [`MAX_WORD_BYTES`];
//! - backup slots are DNS-label-safe, at most [`MAX_SLOT_BYTES`];
//! - metadata's name, version and description are bounded ([`MAX_NAME_BYTES`],
//!   [`MAX_VERSION_BYTES`], [`MAX_DESCRIPTION_BYTES`]);
//! - metadata's configuration schema can be a CustomResourceDefinition's ([`config_schema`]:
//!   bounded JSON, an object, structural once rewritten by [`crate::structural`]), and its
//!   printer columns are at most [`MAX_PRINTER_COLUMNS`], with distinct names that are not the
//!   host's ([`RESERVED_COLUMNS`]) and JSONPaths starting with `.` ([`check_printer_columns`]);
//! - metadata's API versions are at most [`MAX_API_VERSIONS`], uniquely named DNS-1035 labels,
//!   each schema made structural as the configuration's ([`api_versions`], [`check_api_versions`]),
//!   and at least two when the plugin exports `convert` ([`check_convertible`]).
//!
//! The answers of the admission capabilities (`validate`, `convert`) have their rules beside
//! their requests, in [`crate::admission`].
//!
//! What the host writes of an answer into status is bounded again there
//! ([`crate::status::bounded`]); that is a limit on status, not a rule on answers.

use std::{collections::BTreeSet, fmt, time::Duration};

use crate::{capability::Capability, object::PluginObject};

/// What the plugin says about itself in `metadata`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginMetadata {
    /// The plugin's name, e.g. `kvstore`.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One line for people.
    pub description: String,
    /// Kinds the plugin plans (`apiVersion/kind`).
    pub owns: Vec<String>,
    /// Further kinds it wants to observe.
    pub observes: Vec<String>,
    /// The schema of its configuration, made structural by [`config_schema`] (what a
    /// CustomResourceDefinition's `spec` takes); `None` when the plugin declares none (a
    /// `wasmop:plugin@0.1.0` plugin, or a free-form configuration).
    pub config_schema: Option<serde_json::Value>,
    /// Columns `kubectl get` shows for a kind bound to the plugin.
    pub printer_columns: Vec<PrinterColumn>,
    /// The API versions of a bound kind the plugin knows, oldest first, each with its
    /// configuration's schema made structural ([`api_versions`]); empty: one version, whose
    /// schema is [`Self::config_schema`] (and always for a plugin older than
    /// `wasmop:plugin@0.3.0`).
    pub versions: Vec<ApiVersionSchema>,
}

/// One API version of a bound kind, as the plugin knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiVersionSchema {
    /// The version, e.g. `v1alpha1`.
    pub name: String,
    /// The configuration's schema at this version, made structural as
    /// [`PluginMetadata::config_schema`] is; `None`: free-form.
    pub config_schema: Option<serde_json::Value>,
}

/// The type of a printer column's values, as a CustomResourceDefinition's
/// `additionalPrinterColumns[].type`. In WIT order (`metadata.column-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// Text.
    String,
    /// `true` or `false`.
    Boolean,
    /// An RFC 3339 time, shown as an age.
    Date,
}

impl ColumnType {
    /// Every type, in WIT order.
    pub const ALL: [ColumnType; 5] = [
        Self::Integer,
        Self::Number,
        Self::String,
        Self::Boolean,
        Self::Date,
    ];

    /// The type at `index` of the WIT enum `metadata.column-type` (a generated binding's
    /// discriminant).
    pub fn from_wit_index(index: usize) -> Option<Self> {
        Self::ALL.get(index).copied()
    }

    /// As a CRD writes it: `integer`, `number`, `string`, `boolean`, `date`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Integer => "integer",
            Self::Number => "number",
            Self::String => "string",
            Self::Boolean => "boolean",
            Self::Date => "date",
        }
    }
}

/// One column of `kubectl get` for a kind bound to the plugin; serializes as a CRD's
/// `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrinterColumn {
    /// The heading, e.g. `Replicas`.
    pub name: String,
    /// The type of its values.
    #[serde(rename = "type")]
    pub type_: ColumnType,
    /// Where in the instance its value is, e.g. `.spec.replicas`.
    pub json_path: String,
    /// One line for people; empty for none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// The objects a plugin wants to exist.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Each a JSON object with `apiVersion`, `kind` and `metadata.name`.
    pub objects: Vec<PluginObject>,
    /// When the plugin wants to be asked again regardless of events.
    pub requeue_after: Option<Duration>,
}

/// The overall state a health check reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// Everything is as planned and serving.
    Healthy,
    /// Converging.
    Progressing,
    /// Serving less than it should, or not at all.
    Degraded,
}

/// One plugin-specific condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCondition {
    /// Condition type, CamelCase.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

/// What a health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// The overall state.
    pub state: HealthState,
    /// Plugin-specific conditions.
    pub conditions: Vec<PluginCondition>,
    /// For people.
    pub message: String,
    /// Whether the rollout at the checked version is complete.
    pub rollout_complete: bool,
}

/// What the backup schedule decided.
#[derive(Debug, Clone)]
pub struct BackupDecision {
    /// A backup to start now: its slot id and Job.
    pub run: Option<(String, PluginObject)>,
    /// Slots whose Jobs should be deleted.
    pub expire: Vec<String>,
    /// When to ask again.
    pub requeue_after: Option<Duration>,
}

/// What the upgrade gate decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Roll out the new version now.
    Allow,
    /// Not yet; ask again later.
    Wait(String),
    /// Never, as requested.
    Deny(String),
}

/// An object named by a finalize decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `PersistentVolumeClaim`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
}

/// What to do with objects that outlive the App.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleanupDecision {
    /// Delete these.
    pub delete: Vec<ObjectRef>,
    /// Keep these.
    pub keep: Vec<ObjectRef>,
}

/// The condition reason (and metrics label) of an answer the host refuses.
pub const BAD_OUTPUT: &str = "BadOutput";

/// How the host words a refused answer: `plugin`'s answer to `interface` breaks `reason`. The
/// host's `BadOutput` error and the SDK's `Fixture` both say it so.
pub fn refusal(plugin: &str, interface: &str, reason: &dyn fmt::Display) -> String {
    format!("plugin {plugin} returned bad output from {interface}: {reason}")
}

/// A plan larger than this is a bug or an attack; the API server would refuse most of it
/// anyway. The host's default output cap of a call, and the SDK's `Fixture`'s.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 4 << 20;

/// Most entries in any list a plugin returns besides a plan's objects (kinds in metadata, slots
/// to expire, objects to delete or keep): a plugin of one App has no use for more.
pub const MAX_LISTED: usize = 64;

/// Most conditions a health report may carry beside the host's own. Each condition is written
/// into the App's status on every change; with the messages cut to 1 KiB
/// ([`crate::status::MAX_MESSAGE_BYTES`]), this bounds a status to a few tens of KiB whatever
/// the plugin says.
pub const MAX_CONDITIONS: usize = 16;

/// Condition types the host writes itself ([`crate::decide()`]); a plugin's own conditions must
/// use other names.
pub const RESERVED_CONDITIONS: [&str; 8] = crate::conditions::HOST_TYPES;

/// Longest condition type or reason: Kubernetes' `Condition.reason` allows 1024, its
/// `Condition.type` 316; a word for people needs far less.
pub const MAX_WORD_BYTES: usize = 128;

/// Longest backup slot: the host names the slot's Job after the App and the slot, and a Job's
/// name is a DNS label (63 characters).
pub const MAX_SLOT_BYTES: usize = 40;

/// Longest plugin name: it names the plugin in every message, metric and OCI artifact, as
/// short as a DNS label.
pub const MAX_NAME_BYTES: usize = 63;
/// Longest plugin version.
pub const MAX_VERSION_BYTES: usize = 64;
/// Longest plugin description.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;

/// Most printer columns a plugin may declare. The host adds three (Ready, Version, Age), and a
/// `kubectl get` wider than about ten columns no longer fits a terminal.
pub const MAX_PRINTER_COLUMNS: usize = 8;
/// Longest printer column name.
pub const MAX_COLUMN_NAME_BYTES: usize = 32;
/// Longest printer column JSONPath.
pub const MAX_JSON_PATH_BYTES: usize = 256;
/// Longest printer column description.
pub const MAX_COLUMN_DESCRIPTION_BYTES: usize = 256;
/// Printer columns every CRD `wasmop plugin crd` makes has already; a plugin's must be named
/// otherwise.
pub const RESERVED_COLUMNS: [&str; 3] = ["Ready", "Version", "Age"];

/// Most API versions a plugin may list. Each carries a schema of up to 256 KiB into the kind's
/// CustomResourceDefinition, which the API server stores whole (an object of at most about
/// 1.5 MiB in etcd); real kinds serve two or three versions at once.
pub const MAX_API_VERSIONS: usize = 8;
/// Longest API version name: a DNS-1035 label, as the API server takes a CRD's version names.
pub const MAX_API_VERSION_BYTES: usize = 63;

/// Why the host refuses a plugin's answer (as [`BAD_OUTPUT`]): the variant is the rule broken,
/// [`AnswerError::field`] the field of the answer at fault (as the WIT names it). The message is
/// the host's, word for word, wherever the answer is checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The answer's text is over the call's output cap.
    #[error("{size} bytes of output is over the {max} byte cap")]
    OverOutputCap {
        /// The fields counted, e.g. `objects`.
        field: String,
        /// Bytes the plugin returned there.
        size: usize,
        /// The cap in force.
        max: usize,
    },
    /// An object is not a JSON object with string `apiVersion`, `kind` and `metadata.name`.
    #[error("object {index} {reason}")]
    NotAnObject {
        /// e.g. `objects[2]`, `run.job`.
        field: String,
        /// Its place among the objects returned together.
        index: usize,
        /// What is wrong with it ([`PluginObject::parse`]).
        reason: String,
    },
    /// More slots to expire than [`MAX_LISTED`].
    #[error("{count} slots to expire; at most {max} per call")]
    TooManySlots {
        /// `expire`.
        field: String,
        /// Slots listed.
        count: usize,
        /// [`MAX_LISTED`].
        max: usize,
    },
    /// A backup slot that is not DNS-label-safe.
    #[error("slot {slot:?} must be 1 to {n} lower-case letters, digits and '-'", n = MAX_SLOT_BYTES)]
    BadSlot {
        /// e.g. `run.slot`, `expire[3]`.
        field: String,
        /// The slot as returned.
        slot: String,
    },
    /// More objects to delete or keep than [`MAX_LISTED`].
    #[error("{count} objects to delete or keep; at most {max}")]
    TooManyObjectRefs {
        /// `delete, keep`.
        field: String,
        /// Objects listed in both.
        count: usize,
        /// [`MAX_LISTED`].
        max: usize,
    },
    /// More conditions than [`MAX_CONDITIONS`].
    #[error("{count} conditions; at most {max}")]
    TooManyConditions {
        /// `conditions`.
        field: String,
        /// Conditions returned.
        count: usize,
        /// [`MAX_CONDITIONS`].
        max: usize,
    },
    /// A condition type the host writes itself ([`RESERVED_CONDITIONS`]), or one already used
    /// by an earlier condition of the report.
    #[error("condition type {condition_type:?} is the host's or repeated")]
    ConditionTypeTaken {
        /// e.g. `conditions[0].condition-type`.
        field: String,
        /// The type as returned.
        condition_type: String,
    },
    /// A condition type or reason that is not one CamelCase word of at most
    /// [`MAX_WORD_BYTES`].
    #[error("condition type {condition_type:?} and reason {reason:?} must be CamelCase words")]
    NotCamelCase {
        /// e.g. `conditions[0].reason`: the first of the two at fault.
        field: String,
        /// The type as returned.
        condition_type: String,
        /// The reason as returned.
        reason: String,
    },
    /// A metadata field longer than its bound, in bytes or entries.
    #[error("metadata {field} has {len} bytes or entries; at most {max}")]
    MetadataTooLong {
        /// `version`, `description`, `owns` or `observes`.
        field: String,
        /// Its length.
        len: usize,
        /// Its bound.
        max: usize,
    },
    /// A plugin name that is empty or longer than [`MAX_NAME_BYTES`].
    #[error("metadata name {name:?} must be 1 to {n} characters", n = MAX_NAME_BYTES)]
    BadName {
        /// `name`.
        field: String,
        /// The name as returned.
        name: String,
    },
    /// A configuration schema that is no bounded JSON object schema or cannot be made
    /// structural ([`crate::structural`]).
    #[error("metadata config-schema: {reason}")]
    BadConfigSchema {
        /// `config-schema`.
        field: String,
        /// The rule it breaks, and where.
        reason: String,
    },
    /// A printer column that breaks one of [`check_printer_columns`]' rules.
    #[error("metadata printer column {name:?}: {reason}")]
    BadPrinterColumn {
        /// e.g. `printer-columns[2]`, or `printer-columns` for their count.
        field: String,
        /// The column's name as returned.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// An API version that breaks one of [`check_api_versions`]' rules, or whose schema
    /// [`api_versions`] cannot make structural.
    #[error("metadata API version {name:?}: {reason}")]
    BadApiVersion {
        /// e.g. `versions[1].name`, `versions[0].config-schema`, or `versions` for their count.
        field: String,
        /// The version's name as returned.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A plugin that exports `convert` and lists fewer than two API versions to convert between.
    #[error(
        "metadata lists {count} API versions; a plugin that exports convert lists the two or \
         more it converts between"
    )]
    NotConvertible {
        /// `versions`.
        field: String,
        /// Versions listed.
        count: usize,
    },
    /// A list longer than its bound (a verdict's violations or warnings).
    #[error("{count} {field}; at most {max}")]
    TooMany {
        /// e.g. `violations`, `warnings`.
        field: String,
        /// Entries returned.
        count: usize,
        /// Its bound.
        max: usize,
    },
    /// A text that is too long or holds control characters (a violation's field or message, a
    /// warning).
    #[error("{field} {reason}")]
    BadText {
        /// e.g. `violations[0].message`, `warnings[2]`.
        field: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A converted object that is not the object asked for at the desired version
    /// ([`crate::admission::check_converted`]).
    #[error("converted object: {reason}")]
    BadConversion {
        /// e.g. `apiVersion`, `metadata.uid`, `object`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl AnswerError {
    /// The field of the answer at fault, as the WIT names it: `objects[2]`,
    /// `conditions[0].condition-type`, `run.slot`, `description`...
    pub fn field(&self) -> &str {
        match self {
            Self::OverOutputCap { field, .. }
            | Self::NotAnObject { field, .. }
            | Self::TooManySlots { field, .. }
            | Self::BadSlot { field, .. }
            | Self::TooManyObjectRefs { field, .. }
            | Self::TooManyConditions { field, .. }
            | Self::ConditionTypeTaken { field, .. }
            | Self::NotCamelCase { field, .. }
            | Self::MetadataTooLong { field, .. }
            | Self::BadName { field, .. }
            | Self::BadConfigSchema { field, .. }
            | Self::BadPrinterColumn { field, .. }
            | Self::BadApiVersion { field, .. }
            | Self::NotConvertible { field, .. }
            | Self::TooMany { field, .. }
            | Self::BadText { field, .. }
            | Self::BadConversion { field, .. } => field,
        }
    }
}

/// Checks what `metadata.get` returned.
pub fn check_metadata(metadata: &PluginMetadata) -> Result<(), AnswerError> {
    let too_long = [
        ("version", metadata.version.len(), MAX_VERSION_BYTES),
        (
            "description",
            metadata.description.len(),
            MAX_DESCRIPTION_BYTES,
        ),
        ("owns", metadata.owns.len(), MAX_LISTED),
        ("observes", metadata.observes.len(), MAX_LISTED),
    ]
    .into_iter()
    .find(|(_, len, max)| len > max);
    if let Some((field, len, max)) = too_long {
        return Err(AnswerError::MetadataTooLong {
            field: field.into(),
            len,
            max,
        });
    }
    if metadata.name.is_empty() || metadata.name.len() > MAX_NAME_BYTES {
        return Err(AnswerError::BadName {
            field: "name".into(),
            name: metadata.name.clone(),
        });
    }
    check_printer_columns(&metadata.printer_columns)?;
    check_api_versions(&metadata.versions)
}

/// The configuration schema `metadata.get` returned as JSON text (`config-schema`), made
/// structural ([`crate::structural::plugin_config`]): `None` stays `None`.
pub fn config_schema(text: Option<&str>) -> Result<Option<serde_json::Value>, AnswerError> {
    text.map(|text| {
        crate::structural::plugin_config(text).map_err(|err| AnswerError::BadConfigSchema {
            field: "config-schema".into(),
            reason: err.to_string(),
        })
    })
    .transpose()
}

/// The API versions `metadata.get` returned (`versions`: each name and schema as JSON text),
/// each schema made structural as [`config_schema`] makes the configuration's; counted first
/// (at most [`MAX_API_VERSIONS`]), since making a schema structural is the costly part.
pub fn api_versions(
    versions: Vec<(String, Option<String>)>,
) -> Result<Vec<ApiVersionSchema>, AnswerError> {
    check_api_version_count(versions.len(), |i| versions[i].0.clone())?;
    versions
        .into_iter()
        .enumerate()
        .map(|(index, (name, schema))| {
            let config_schema = config_schema(schema.as_deref()).map_err(|err| {
                let reason = match err {
                    AnswerError::BadConfigSchema { reason, .. } => reason,
                    other => other.to_string(),
                };
                AnswerError::BadApiVersion {
                    field: format!("versions[{index}].config-schema"),
                    name: name.clone(),
                    reason: format!("config-schema: {reason}"),
                }
            })?;
            Ok(ApiVersionSchema {
                name,
                config_schema,
            })
        })
        .collect()
}

/// Checks a plugin's API versions: at most [`MAX_API_VERSIONS`], each name a DNS-1035 label
/// (lower-case letters, digits and `-`, starting with a letter, at most
/// [`MAX_API_VERSION_BYTES`]: what a CustomResourceDefinition takes as a version's name), none
/// named twice.
pub fn check_api_versions(versions: &[ApiVersionSchema]) -> Result<(), AnswerError> {
    check_api_version_count(versions.len(), |i| versions[i].name.clone())?;
    let mut seen = BTreeSet::new();
    for (index, version) in versions.iter().enumerate() {
        let bad = |reason: &str| AnswerError::BadApiVersion {
            field: format!("versions[{index}].name"),
            name: version.name.clone(),
            reason: reason.into(),
        };
        if !is_dns_1035_label(&version.name) {
            return Err(bad(&format!(
                "a version is named by 1 to {MAX_API_VERSION_BYTES} lower-case letters, digits \
                 and '-', starting with a letter (a DNS-1035 label such as v1alpha1)"
            )));
        }
        if !seen.insert(version.name.as_str()) {
            return Err(bad("another version has this name"));
        }
    }
    Ok(())
}

/// At most [`MAX_API_VERSIONS`] of `count` versions; `name` names the one at an index.
fn check_api_version_count(
    count: usize,
    name: impl Fn(usize) -> String,
) -> Result<(), AnswerError> {
    if count > MAX_API_VERSIONS {
        return Err(AnswerError::BadApiVersion {
            field: "versions".into(),
            name: name(MAX_API_VERSIONS),
            reason: format!("{count} versions; at most {MAX_API_VERSIONS}"),
        });
    }
    Ok(())
}

/// Checks that a plugin exporting `convert` (among `capabilities`) lists at least two API
/// versions: a conversion needs two versions to convert between, and the host serves a
/// conversion webhook only for the versions listed.
pub fn check_convertible(
    metadata: &PluginMetadata,
    capabilities: &BTreeSet<Capability>,
) -> Result<(), AnswerError> {
    if capabilities.contains(&Capability::Convert) && metadata.versions.len() < 2 {
        return Err(AnswerError::NotConvertible {
            field: "versions".into(),
            count: metadata.versions.len(),
        });
    }
    Ok(())
}

/// A DNS-1035 label: 1 to [`MAX_API_VERSION_BYTES`] lower-case letters, digits and `-`,
/// starting with a letter and not ending with `-`.
fn is_dns_1035_label(name: &str) -> bool {
    (1..=MAX_API_VERSION_BYTES).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Checks a plugin's printer columns: at most [`MAX_PRINTER_COLUMNS`]; each named by 1 to
/// [`MAX_COLUMN_NAME_BYTES`] printable ASCII characters, none named twice nor as one of the host's
/// ([`RESERVED_COLUMNS`]); each JSONPath 2 to [`MAX_JSON_PATH_BYTES`] characters starting with
/// `.`, its brackets, parentheses and quotes balanced, without `{`/`}` (a template, not a path)
/// or control characters; descriptions at most [`MAX_COLUMN_DESCRIPTION_BYTES`].
pub fn check_printer_columns(columns: &[PrinterColumn]) -> Result<(), AnswerError> {
    if columns.len() > MAX_PRINTER_COLUMNS {
        return Err(AnswerError::BadPrinterColumn {
            field: "printer-columns".into(),
            name: columns[MAX_PRINTER_COLUMNS].name.clone(),
            reason: format!(
                "{} columns; at most {MAX_PRINTER_COLUMNS} (the host adds Ready, Version and Age)",
                columns.len()
            ),
        });
    }
    let mut seen = BTreeSet::new();
    for (index, column) in columns.iter().enumerate() {
        let bad = |reason: String| AnswerError::BadPrinterColumn {
            field: format!("printer-columns[{index}]"),
            name: column.name.clone(),
            reason,
        };
        let name = &column.name;
        // Printable ASCII only: a zero-width or look-alike character would make a column that
        // reads as the host's `Ready` in `kubectl get`.
        if name.trim().is_empty()
            || name.len() > MAX_COLUMN_NAME_BYTES
            || !name.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        {
            return Err(bad(format!(
                "a name must be 1 to {MAX_COLUMN_NAME_BYTES} printable ASCII characters"
            )));
        }
        if RESERVED_COLUMNS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(name))
        {
            return Err(bad(format!(
                "the host's own columns are {}; name it otherwise",
                RESERVED_COLUMNS.join(", ")
            )));
        }
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(bad("another column has this name".into()));
        }
        if let Err(reason) = check_json_path(&column.json_path) {
            return Err(bad(format!("JSONPath {:?} {reason}", column.json_path)));
        }
        if column.description.len() > MAX_COLUMN_DESCRIPTION_BYTES {
            return Err(bad(format!(
                "a description of {} bytes; at most {MAX_COLUMN_DESCRIPTION_BYTES}",
                column.description.len()
            )));
        }
    }
    Ok(())
}

/// A printer column's JSONPath as the API server takes one (relative to the object, e.g.
/// `.spec.replicas` or `.status.conditions[?(@.type=="Ready")].status`): the shape checked
/// here, the grammar by the API server when the CRD is applied.
fn check_json_path(path: &str) -> Result<(), String> {
    if path.len() < 2 || path.len() > MAX_JSON_PATH_BYTES {
        return Err(format!("must be 2 to {MAX_JSON_PATH_BYTES} characters"));
    }
    if !path.starts_with('.') {
        return Err("must start with `.` (relative to the object, e.g. `.spec.replicas`)".into());
    }
    if path.chars().any(|c| c.is_control() || c == '{' || c == '}') {
        return Err("must not hold braces or control characters".into());
    }
    let mut open = Vec::new();
    let mut quote = None;
    for c in path.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '(') => open.push(c),
            (None, ']') if open.pop() == Some('[') => {}
            (None, ')') if open.pop() == Some('(') => {}
            (None, ']' | ')') => return Err(format!("closes a `{c}` it did not open")),
            (None, c) if c.is_whitespace() && open.is_empty() => {
                return Err("must not hold spaces outside brackets".into());
            }
            _ => {}
        }
    }
    if quote.is_some() || !open.is_empty() {
        return Err("leaves a bracket, parenthesis or quote open".into());
    }
    Ok(())
}

/// Checks the objects `spec-diff.plan` returned as JSON text (see [`PluginObject::parse`]) and
/// makes them a [`Plan`].
pub fn check_plan(
    objects: &[String],
    requeue_after: Option<Duration>,
    max_output_bytes: usize,
) -> Result<Plan, AnswerError> {
    Ok(Plan {
        objects: parse_objects("objects", objects, max_output_bytes, |index| {
            format!("objects[{index}]")
        })?,
        requeue_after,
    })
}

/// Checks what `health.check` returned.
pub fn check_health(report: &HealthReport, max_output_bytes: usize) -> Result<(), AnswerError> {
    let size = report.message.len()
        + report
            .conditions
            .iter()
            .map(|c| c.type_.len() + c.reason.len() + c.message.len())
            .sum::<usize>();
    check_size("message, conditions", size, max_output_bytes)?;
    if report.conditions.len() > MAX_CONDITIONS {
        return Err(AnswerError::TooManyConditions {
            field: "conditions".into(),
            count: report.conditions.len(),
            max: MAX_CONDITIONS,
        });
    }
    // Compared without case: `kubectl wait --for=condition=Ready` matches types that way and
    // takes the first, so a plugin's `READY` listed before the host's `Ready` would answer it.
    let mut seen = BTreeSet::new();
    for (index, c) in report.conditions.iter().enumerate() {
        let reserved = RESERVED_CONDITIONS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(&c.type_));
        if reserved || !seen.insert(c.type_.to_ascii_lowercase()) {
            return Err(AnswerError::ConditionTypeTaken {
                field: format!("conditions[{index}].condition-type"),
                condition_type: c.type_.clone(),
            });
        }
        let wrong = if !is_camel_case(&c.type_) {
            Some("condition-type")
        } else if !is_camel_case(&c.reason) {
            Some("reason")
        } else {
            None
        };
        if let Some(wrong) = wrong {
            return Err(AnswerError::NotCamelCase {
                field: format!("conditions[{index}].{wrong}"),
                condition_type: c.type_.clone(),
                reason: c.reason.clone(),
            });
        }
    }
    Ok(())
}

/// Checks what `backup.schedule` returned (the slot and Job JSON to run, the slots to expire)
/// and makes it a [`BackupDecision`].
pub fn check_backup(
    run: Option<(String, String)>,
    expire: Vec<String>,
    requeue_after: Option<Duration>,
    max_output_bytes: usize,
) -> Result<BackupDecision, AnswerError> {
    if expire.len() > MAX_LISTED {
        return Err(AnswerError::TooManySlots {
            field: "expire".into(),
            count: expire.len(),
            max: MAX_LISTED,
        });
    }
    let slots = expire
        .iter()
        .enumerate()
        .map(|(index, slot)| (format!("expire[{index}]"), slot))
        .chain(run.as_ref().map(|(slot, _)| ("run.slot".to_string(), slot)));
    for (field, slot) in slots {
        if !is_slot(slot) {
            return Err(AnswerError::BadSlot {
                field,
                slot: slot.clone(),
            });
        }
    }
    let run = match run {
        Some((slot, job)) => {
            let job = std::slice::from_ref(&job);
            let mut job = parse_objects("run.job", job, max_output_bytes, |_| "run.job".into())?;
            job.pop().map(|job| (slot, job))
        }
        None => None,
    };
    Ok(BackupDecision {
        run,
        expire,
        requeue_after,
    })
}

/// Checks what `upgrade.gate` returned.
pub fn check_gate(decision: &GateDecision, max_output_bytes: usize) -> Result<(), AnswerError> {
    match decision {
        GateDecision::Allow => Ok(()),
        GateDecision::Wait(reason) => check_size("wait", reason.len(), max_output_bytes),
        GateDecision::Deny(reason) => check_size("deny", reason.len(), max_output_bytes),
    }
}

/// Checks what `finalize.cleanup` returned.
pub fn check_cleanup(
    decision: &CleanupDecision,
    max_output_bytes: usize,
) -> Result<(), AnswerError> {
    let listed = decision.delete.len() + decision.keep.len();
    if listed > MAX_LISTED {
        return Err(AnswerError::TooManyObjectRefs {
            field: "delete, keep".into(),
            count: listed,
            max: MAX_LISTED,
        });
    }
    let size = decision
        .delete
        .iter()
        .chain(&decision.keep)
        .map(|r| r.api_version.len() + r.kind.len() + r.name.len())
        .sum();
    check_size("delete, keep", size, max_output_bytes)
}

fn check_size(field: &str, size: usize, max: usize) -> Result<(), AnswerError> {
    if size > max {
        return Err(AnswerError::OverOutputCap {
            field: field.into(),
            size,
            max,
        });
    }
    Ok(())
}

/// The objects of `field` as JSON text: within the cap together (checked before any is parsed),
/// each a JSON object ([`PluginObject::parse`]); `at` names the field of the one at an index.
fn parse_objects(
    field: &str,
    texts: &[String],
    max_output_bytes: usize,
    at: impl Fn(usize) -> String,
) -> Result<Vec<PluginObject>, AnswerError> {
    check_size(field, texts.iter().map(String::len).sum(), max_output_bytes)?;
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            PluginObject::parse(text).map_err(|reason| AnswerError::NotAnObject {
                field: at(index),
                index,
                reason,
            })
        })
        .collect()
}

/// One CamelCase word: an upper-case ASCII letter, then letters and digits, at most
/// [`MAX_WORD_BYTES`].
pub fn is_camel_case(text: &str) -> bool {
    text.len() <= MAX_WORD_BYTES
        && text.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && text.chars().all(|c| c.is_ascii_alphanumeric())
}

/// A backup slot: 1 to [`MAX_SLOT_BYTES`] lower-case letters, digits and `-`, neither first nor
/// last a `-`.
pub fn is_slot(slot: &str) -> bool {
    (1..=MAX_SLOT_BYTES).contains(&slot.len())
        && slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !slot.starts_with('-')
        && !slot.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = 1000;

    fn condition(type_: &str, reason: &str) -> PluginCondition {
        PluginCondition {
            type_: type_.into(),
            status: "True",
            reason: reason.into(),
            message: String::new(),
        }
    }

    fn report(conditions: Vec<PluginCondition>) -> HealthReport {
        HealthReport {
            state: HealthState::Healthy,
            conditions,
            message: "ok".into(),
            rollout_complete: true,
        }
    }

    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "kvstore".into(),
            version: "1.2.0".into(),
            description: "A key-value store".into(),
            owns: vec!["apps/v1/StatefulSet".into()],
            observes: vec!["v1/Pod".into()],
            config_schema: None,
            printer_columns: vec![column("Replicas", ".spec.replicas")],
            versions: vec![version("v1alpha1"), version("v1")],
        }
    }

    fn version(name: &str) -> ApiVersionSchema {
        ApiVersionSchema {
            name: name.into(),
            config_schema: None,
        }
    }

    fn column(name: &str, json_path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            type_: ColumnType::Integer,
            json_path: json_path.into(),
            description: String::new(),
        }
    }

    fn object(name: &str) -> String {
        format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#)
    }

    fn refs(count: usize, name: &str) -> Vec<ObjectRef> {
        (0..count)
            .map(|i| ObjectRef {
                api_version: "v1".into(),
                kind: "PersistentVolumeClaim".into(),
                name: format!("{name}-{i}"),
            })
            .collect()
    }

    /// The field and message a case expects the answer to be refused with.
    fn bad(field: &str, message: impl Into<String>) -> Option<(String, String)> {
        Some((field.into(), message.into()))
    }

    /// One case: what it breaks, the result, and the field and message expected (`None`: it
    /// passes).
    type Case<'a> = (&'a str, Result<(), AnswerError>, Option<(String, String)>);

    fn assert_cases(cases: Vec<Case>) {
        for (case, result, expected) in cases {
            match (result, expected) {
                (Ok(()), None) => {}
                (Err(err), Some((field, message))) => {
                    assert_eq!(err.field(), field, "{case}: {err}");
                    assert_eq!(err.to_string(), message, "{case}");
                }
                (result, expected) => panic!("{case}: {result:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn metadata_is_bounded() {
        let with = |change: fn(&mut PluginMetadata)| {
            let mut m = metadata();
            change(&mut m);
            check_metadata(&m)
        };
        assert_cases(vec![
            ("nothing", with(|_| {}), None),
            (
                "a long version",
                with(|m| m.version = "1".repeat(65)),
                bad(
                    "version",
                    "metadata version has 65 bytes or entries; at most 64",
                ),
            ),
            (
                "a long description",
                with(|m| m.description = "d".repeat(1025)),
                bad(
                    "description",
                    "metadata description has 1025 bytes or entries; at most 1024",
                ),
            ),
            (
                "many owned kinds",
                with(|m| m.owns = vec!["v1/ConfigMap".into(); 65]),
                bad("owns", "metadata owns has 65 bytes or entries; at most 64"),
            ),
            (
                "many observed kinds",
                with(|m| m.observes = vec!["v1/Pod".into(); 65]),
                bad(
                    "observes",
                    "metadata observes has 65 bytes or entries; at most 64",
                ),
            ),
            (
                "no name",
                with(|m| m.name.clear()),
                bad("name", r#"metadata name "" must be 1 to 63 characters"#),
            ),
            (
                "a 63-character name",
                with(|m| m.name = "n".repeat(63)),
                None,
            ),
            (
                "a 64-character name",
                with(|m| m.name = "n".repeat(64)),
                bad(
                    "name",
                    format!(
                        "metadata name {:?} must be 1 to 63 characters",
                        "n".repeat(64)
                    ),
                ),
            ),
        ]);
    }

    #[test]
    fn printer_columns_are_few_distinct_and_relative() {
        let with = |columns: Vec<PrinterColumn>| {
            let mut m = metadata();
            m.printer_columns = columns;
            check_metadata(&m)
        };
        let at = |i: usize, name: &str, reason: &str| {
            bad(
                &format!("printer-columns[{i}]"),
                format!("metadata printer column {name:?}: {reason}"),
            )
        };
        let conditions = r#".status.conditions[?(@.type=="Ready")].reason"#;
        assert_cases(vec![
            ("none", with(vec![]), None),
            (
                "a filter",
                with(vec![
                    column("Replicas", ".spec.replicas"),
                    column("Why", conditions),
                ]),
                None,
            ),
            (
                "nine",
                with(
                    (0..9)
                        .map(|i| column(&format!("C{i}"), ".spec.a"))
                        .collect(),
                ),
                bad(
                    "printer-columns",
                    r#"metadata printer column "C8": 9 columns; at most 8 (the host adds Ready, Version and Age)"#,
                ),
            ),
            (
                "the host's",
                with(vec![column("version", ".spec.version")]),
                at(
                    0,
                    "version",
                    "the host's own columns are Ready, Version, Age; name it otherwise",
                ),
            ),
            (
                "twice",
                with(vec![column("A", ".spec.a"), column("a", ".spec.b")]),
                at(1, "a", "another column has this name"),
            ),
            (
                "no name",
                with(vec![column(" ", ".spec.a")]),
                at(0, " ", "a name must be 1 to 32 printable ASCII characters"),
            ),
            (
                "look-alike",
                with(vec![column("Ready\u{200b}", ".spec.a")]),
                at(
                    0,
                    "Ready\u{200b}",
                    "a name must be 1 to 32 printable ASCII characters",
                ),
            ),
            (
                "absolute",
                with(vec![column("A", "spec.a")]),
                at(
                    0,
                    "A",
                    r#"JSONPath "spec.a" must start with `.` (relative to the object, e.g. `.spec.replicas`)"#,
                ),
            ),
            (
                "a template",
                with(vec![column("A", "{.spec.a}")]),
                at(
                    0,
                    "A",
                    r#"JSONPath "{.spec.a}" must start with `.` (relative to the object, e.g. `.spec.replicas`)"#,
                ),
            ),
            (
                "braces",
                with(vec![column("A", ".spec.{a}")]),
                at(
                    0,
                    "A",
                    r#"JSONPath ".spec.{a}" must not hold braces or control characters"#,
                ),
            ),
            (
                "unbalanced",
                with(vec![column("A", ".spec.a[0")]),
                at(
                    0,
                    "A",
                    r#"JSONPath ".spec.a[0" leaves a bracket, parenthesis or quote open"#,
                ),
            ),
            (
                "a space",
                with(vec![column("A", ".spec. a")]),
                at(
                    0,
                    "A",
                    r#"JSONPath ".spec. a" must not hold spaces outside brackets"#,
                ),
            ),
        ]);
    }

    #[test]
    fn api_versions_are_few_distinct_dns_labels() {
        let with = |names: &[&str]| {
            let mut m = metadata();
            m.versions = names.iter().map(|n| version(n)).collect();
            check_metadata(&m)
        };
        let at = |i: usize, name: &str, reason: &str| {
            bad(
                &format!("versions[{i}].name"),
                format!("metadata API version {name:?}: {reason}"),
            )
        };
        let label = "a version is named by 1 to 63 lower-case letters, digits and '-', \
                     starting with a letter (a DNS-1035 label such as v1alpha1)";
        let nine: Vec<String> = (0..9).map(|i| format!("v{i}")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_cases(vec![
            ("none", with(&[]), None),
            ("two", with(&["v1alpha1", "v1"]), None),
            ("a dash", with(&["v1-beta"]), None),
            ("eight", with(&nine[..8]), None),
            (
                "nine",
                with(&nine),
                bad(
                    "versions",
                    r#"metadata API version "v8": 9 versions; at most 8"#,
                ),
            ),
            (
                "twice",
                with(&["v1", "v1"]),
                at(1, "v1", "another version has this name"),
            ),
            ("upper case", with(&["V1"]), at(0, "V1", label)),
            ("a digit first", with(&["1v"]), at(0, "1v", label)),
            (
                "a group",
                with(&["data.example.com/v1"]),
                at(0, "data.example.com/v1", label),
            ),
            ("empty", with(&[""]), at(0, "", label)),
            ("a dash last", with(&["v1-"]), at(0, "v1-", label)),
            (
                "too long",
                with(&[&*"v".repeat(64)]),
                at(0, &"v".repeat(64), label),
            ),
        ]);
    }

    #[test]
    fn api_version_schemas_are_made_structural_or_refused() {
        let versions = api_versions(vec![
            ("v1alpha1".to_string(), None),
            (
                "v1".to_string(),
                Some(
                    r#"{"type": "object", "properties": {"a": {"type": ["string", "null"]}}}"#
                        .into(),
                ),
            ),
        ])
        .expect("structural");
        assert_eq!(versions[0], version("v1alpha1"));
        assert_eq!(
            versions[1].config_schema,
            Some(
                serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "nullable": true}}})
            )
        );
        let err = api_versions(vec![
            ("v1".to_string(), None),
            ("v2".to_string(), Some(r#"{"type": "array"}"#.into())),
        ])
        .expect_err("not an object");
        assert_eq!(err.field(), "versions[1].config-schema");
        assert_eq!(
            err.to_string(),
            "metadata API version \"v2\": config-schema: the configuration's schema must be of \
             `type: object` (a CRD's spec is an object) (at .)"
        );
    }

    #[test]
    fn a_converting_plugin_lists_two_versions() {
        let converting: BTreeSet<Capability> = [Capability::SpecDiff, Capability::Convert].into();
        let mut m = metadata();
        check_convertible(&m, &converting).expect("two versions");
        m.versions.pop();
        let err = check_convertible(&m, &converting).expect_err("one version");
        assert_eq!(err.field(), "versions");
        assert_eq!(
            err.to_string(),
            "metadata lists 1 API versions; a plugin that exports convert lists the two or more \
             it converts between"
        );
        check_convertible(&m, &[Capability::Validate].into()).expect("no convert");
    }

    #[test]
    fn config_schemas_are_made_structural_or_refused() {
        assert_eq!(config_schema(None), Ok(None));
        let schema = config_schema(Some(
            r##"{"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}},
                "$defs": {"B": {"type": ["integer", "null"]}}}"##,
        ))
        .expect("structural")
        .expect("a schema");
        assert_eq!(
            schema,
            serde_json::json!({"type": "object", "properties": {"b": {"type": "integer", "nullable": true}}})
        );
        let err = config_schema(Some(r#"{"type": "array"}"#)).expect_err("not an object");
        assert_eq!(err.field(), "config-schema");
        assert_eq!(
            err.to_string(),
            "metadata config-schema: the configuration's schema must be of `type: object` (a CRD's spec is an object) (at .)"
        );
    }

    #[test]
    fn plans_are_json_objects_within_the_cap() {
        let plan = |texts: &[String]| check_plan(texts, None, CAP).map(|_| ());
        let big = object(&"n".repeat(CAP));
        assert_cases(vec![
            ("nothing", plan(&[object("a"), object("b")]), None),
            ("no objects", plan(&[]), None),
            (
                "over the cap together",
                plan(&[object(&"a".repeat(600)), object(&"b".repeat(600))]),
                bad("objects", "1322 bytes of output is over the 1000 byte cap"),
            ),
            (
                "the cap before parsing",
                plan(&[big.replace('}', "")]),
                bad("objects", "1059 bytes of output is over the 1000 byte cap"),
            ),
            (
                "not JSON",
                plan(&[object("a"), "{".into()]),
                bad(
                    "objects[1]",
                    "object 1 is not valid JSON: EOF while parsing an object at line 1 column 1",
                ),
            ),
            (
                "not an object",
                plan(&["[1]".into()]),
                bad("objects[0]", "object 0 is not a JSON object"),
            ),
            (
                "no name",
                plan(&[r#"{"apiVersion":"v1","kind":"A","metadata":{}}"#.into()]),
                bad("objects[0]", "object 0 has no string metadata.name"),
            ),
        ]);
        let plan = check_plan(&[object("a")], Some(Duration::from_secs(7)), CAP).expect("valid");
        assert_eq!(plan.objects[0].name(), "a");
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn health_conditions_are_the_plugins_own_camel_case_words() {
        let health = |conditions: Vec<PluginCondition>| check_health(&report(conditions), CAP);
        let mut cases = vec![
            ("no conditions", health(vec![]), None),
            (
                "two of its own",
                health(vec![
                    condition("ReplicasReady", "AllReady"),
                    condition("BackupFresh", "Recent2"),
                ]),
                None,
            ),
            (
                "repeated",
                health(vec![
                    condition("ReplicasReady", "AllReady"),
                    condition("ReplicasReady", "AllReady"),
                ]),
                bad(
                    "conditions[1].condition-type",
                    r#"condition type "ReplicasReady" is the host's or repeated"#,
                ),
            ),
            (
                "a type in words",
                health(vec![condition("replicas ready", "AllReady")]),
                bad(
                    "conditions[0].condition-type",
                    r#"condition type "replicas ready" and reason "AllReady" must be CamelCase words"#,
                ),
            ),
            (
                "a reason in lower case",
                health(vec![condition("ReplicasReady", "allReady")]),
                bad(
                    "conditions[0].reason",
                    r#"condition type "ReplicasReady" and reason "allReady" must be CamelCase words"#,
                ),
            ),
            (
                "no reason",
                health(vec![condition("ReplicasReady", "")]),
                bad(
                    "conditions[0].reason",
                    r#"condition type "ReplicasReady" and reason "" must be CamelCase words"#,
                ),
            ),
            (
                "17 conditions",
                health(
                    (0..17)
                        .map(|i| condition(&format!("Check{i}"), "Fine"))
                        .collect(),
                ),
                bad("conditions", "17 conditions; at most 16"),
            ),
            (
                "over the cap",
                check_health(
                    &HealthReport {
                        message: "m".repeat(CAP),
                        ..report(vec![condition("A", "B")])
                    },
                    CAP,
                ),
                bad(
                    "message, conditions",
                    "1002 bytes of output is over the 1000 byte cap",
                ),
            ),
        ];
        // In any case: `kubectl wait` matches condition types without it.
        let upper: Vec<String> = RESERVED_CONDITIONS
            .iter()
            .map(|t| t.to_ascii_uppercase())
            .collect();
        let reserved: Vec<_> = RESERVED_CONDITIONS
            .iter()
            .copied()
            .chain(upper.iter().map(String::as_str))
            .map(|type_| {
                (
                    type_,
                    health(vec![condition(type_, "Mine")]),
                    bad(
                        "conditions[0].condition-type",
                        format!("condition type {type_:?} is the host's or repeated"),
                    ),
                )
            })
            .collect();
        cases.extend(reserved);
        assert_cases(cases);
    }

    #[test]
    fn backups_name_safe_slots_and_a_job() {
        let backup = |run: Option<(&str, String)>, expire: &[&str]| {
            check_backup(
                run.map(|(slot, job)| (slot.to_string(), job)),
                expire.iter().map(|s| s.to_string()).collect(),
                None,
                CAP,
            )
            .map(|_| ())
        };
        let many: Vec<String> = (0..65).map(|i| format!("s{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_cases(vec![
            ("nothing to do", backup(None, &[]), None),
            (
                "a run and expiries",
                backup(
                    Some(("20261202-060000", object("job"))),
                    &["20261201-060000"],
                ),
                None,
            ),
            (
                "65 expiries",
                backup(None, &many),
                bad("expire", "65 slots to expire; at most 64 per call"),
            ),
            (
                "an expiry with a colon",
                backup(None, &["ok", "2026-12-02T06:00:00Z"]),
                bad(
                    "expire[1]",
                    r#"slot "2026-12-02T06:00:00Z" must be 1 to 40 lower-case letters, digits and '-'"#,
                ),
            ),
            (
                "an empty run slot",
                backup(Some(("", object("job"))), &[]),
                bad(
                    "run.slot",
                    r#"slot "" must be 1 to 40 lower-case letters, digits and '-'"#,
                ),
            ),
            (
                "a job that is not JSON",
                backup(Some(("a", "job".into())), &[]),
                bad(
                    "run.job",
                    "object 0 is not valid JSON: expected value at line 1 column 1",
                ),
            ),
            (
                "a job over the cap",
                backup(Some(("a", object(&"j".repeat(CAP)))), &[]),
                bad("run.job", "1061 bytes of output is over the 1000 byte cap"),
            ),
        ]);
    }

    #[test]
    fn gate_reasons_fit_the_cap() {
        assert_cases(vec![
            ("allow", check_gate(&GateDecision::Allow, CAP), None),
            (
                "wait",
                check_gate(&GateDecision::Wait("w".repeat(CAP)), CAP),
                None,
            ),
            (
                "a long wait",
                check_gate(&GateDecision::Wait("w".repeat(CAP + 1)), CAP),
                bad("wait", "1001 bytes of output is over the 1000 byte cap"),
            ),
            (
                "a long deny",
                check_gate(&GateDecision::Deny("d".repeat(CAP + 1)), CAP),
                bad("deny", "1001 bytes of output is over the 1000 byte cap"),
            ),
        ]);
    }

    #[test]
    fn cleanups_are_bounded() {
        let cleanup = |delete: Vec<ObjectRef>, keep: Vec<ObjectRef>, cap: usize| {
            check_cleanup(&CleanupDecision { delete, keep }, cap)
        };
        let cap = DEFAULT_MAX_OUTPUT_BYTES;
        assert_cases(vec![
            ("nothing", cleanup(vec![], vec![], CAP), None),
            (
                "64 in all",
                cleanup(refs(32, "d"), refs(32, "k"), cap),
                None,
            ),
            (
                "65 in all",
                cleanup(refs(33, "d"), refs(32, "k"), cap),
                bad("delete, keep", "65 objects to delete or keep; at most 64"),
            ),
            (
                "over the cap",
                cleanup(refs(1, &"n".repeat(CAP)), vec![], CAP),
                bad(
                    "delete, keep",
                    "1025 bytes of output is over the 1000 byte cap",
                ),
            ),
        ]);
    }

    #[test]
    fn slots_are_dns_label_safe() {
        for (slot, safe) in [
            ("20261202-060000", true),
            ("a", true),
            (&*"a".repeat(40), true),
            ("2026-12-02T06:00:00Z", false),
            ("", false),
            ("-a", false),
            ("a-", false),
            ("A", false),
            (&*"a".repeat(41), false),
        ] {
            assert_eq!(is_slot(slot), safe, "{slot:?}");
        }
    }

    #[test]
    fn condition_words_are_camel_case() {
        for (word, camel) in [
            ("ReplicasReady", true),
            ("R2", true),
            (&*format!("A{}", "a".repeat(127)), true),
            (&*format!("A{}", "a".repeat(128)), false),
            ("replicasReady", false),
            ("replicas ready", false),
            ("Replicas-Ready", false),
            ("Énorme", false),
            ("", false),
        ] {
            assert_eq!(is_camel_case(word), camel, "{word:?}");
        }
    }

    #[test]
    fn a_refusal_names_the_plugin_and_the_interface() {
        let err = AnswerError::TooManyConditions {
            field: "conditions".into(),
            count: 17,
            max: MAX_CONDITIONS,
        };
        assert_eq!(
            refusal("kvstore@1a2b3c", "health", &err),
            "plugin kvstore@1a2b3c returned bad output from health: 17 conditions; at most 16"
        );
    }
}
