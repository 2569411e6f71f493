//! The `convert` capability: an instance of a kind bound to the plugin from one of the kind's
//! API versions to another, for the API server's conversion webhook, written as two typed
//! functions ([`Convert::up`], [`Convert::down`]) between the configuration's previous shape and
//! its current one ([`Plugin::Config`]).
//!
//! The SDK does the rest of a conversion as Kubernetes requires it: it reads the object's
//! `apiVersion` (`group/version`), reads the configuration (the instance's `spec` but
//! `spec.version`) as the type of that version, converts it up or down, and writes it back with
//! `spec.version`, `metadata`, `status` and every other field exactly as they came, and the
//! desired `apiVersion`. An object already at the desired version comes back unchanged. A
//! converted configuration is written whole, its defaults filled in: its types decide what it
//! holds.

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::app::{RawFields, instance_field, instance_spec, is_app_kind, read_config};
use crate::error::{Error, Result};
use crate::metadata::{ApiVersion, Plugin, config_schema};
use crate::runtime;

/// Converts the configuration of a bound kind's instances between its previous API version and
/// the current one, whose shape is [`Plugin::Config`].
///
/// `metadata.get` then lists both versions with their schemas (derived from
/// [`Convert::Previous`] and [`Plugin::Config`]), oldest first, so that a CRD made for the kind
/// serves both. The two functions must be inverses on what both shapes can hold: an instance
/// written at either version must read back the same after a round trip, which
/// [`Fixture::round_trip`](crate::testing::Fixture::round_trip) checks.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use wasmop_sdk::schemars::{self, JsonSchema};
/// use wasmop_sdk::{Convert, Metadata, Plugin, Result};
///
/// /// `v1`: the size is a number.
/// #[derive(Deserialize, Serialize, JsonSchema)]
/// #[serde(rename_all = "camelCase")]
/// struct Config {
///     replicas: i32,
/// }
///
/// /// `v1alpha1`: it was text.
/// #[derive(Deserialize, Serialize, JsonSchema)]
/// struct ConfigV1alpha1 {
///     size: String,
/// }
///
/// struct Store;
///
/// impl Plugin for Store {
///     type Config = Config;
///     fn metadata() -> Metadata {
///         Metadata::new("store", "0.1.0")
///     }
/// }
///
/// impl Convert for Store {
///     type Previous = ConfigV1alpha1;
///     const PREVIOUS_VERSION: &'static str = "v1alpha1";
///     const VERSION: &'static str = "v1";
///
///     fn up(previous: ConfigV1alpha1) -> Result<Config> {
///         let replicas = previous.size.parse().map_err(|_| {
///             wasmop_sdk::Error::invalid_config("spec.size", "is not a number")
///         })?;
///         Ok(Config { replicas })
///     }
///
///     fn down(config: Config) -> Result<ConfigV1alpha1> {
///         Ok(ConfigV1alpha1 { size: config.replicas.to_string() })
///     }
/// }
///
/// wasmop_sdk::export!(Store: Convert);
///
/// # fn main() {
/// use wasmop_sdk::testing::{self, Fixture};
/// let old = testing::instance(
///     "data.example.com/v1alpha1", "Store", "s", "shop", "1.0", serde_json::json!({"size": "3"}),
/// );
/// let new = Fixture::convert::<Store>(&old, "data.example.com/v1").expect("converts");
/// assert_eq!(new["spec"], serde_json::json!({"replicas": 3, "version": "1.0"}));
/// Fixture::round_trip::<Store>(&old).expect("v1alpha1 -> v1 -> v1alpha1 loses nothing");
///
/// let versions = Fixture::metadata::<Store>().versions;
/// assert_eq!((versions[0].name.as_str(), versions[1].name.as_str()), ("v1alpha1", "v1"));
/// # }
/// ```
pub trait Convert: Plugin<Config: Serialize> {
    /// The configuration at [`Convert::PREVIOUS_VERSION`]: a type like [`Plugin::Config`]
    /// (deserialized, serialized back, its schema derived).
    type Previous: DeserializeOwned + Serialize + JsonSchema;
    /// The previous API version of the bound kind, e.g. `v1alpha1`.
    const PREVIOUS_VERSION: &'static str;
    /// The current API version, e.g. `v1`: the one whose configuration is
    /// [`Plugin::Config`].
    const VERSION: &'static str;

    /// The configuration at the previous version, at the current one. An error names the
    /// field as the previous version has it (`spec.size`, or as an App would,
    /// `spec.config.size`, which the SDK moves to `spec.size`).
    fn up(previous: Self::Previous) -> Result<Self::Config>;

    /// The configuration at the current version, at the previous one.
    fn down(config: Self::Config) -> Result<Self::Previous>;
}

/// `convert.convert` as a function: object, desired API version.
pub type ConvertFn = fn(&str, &str) -> Result<String>;

/// `convert.convert`, on the WIT's raw values.
pub fn convert<P: Convert>(object: &str, desired_api_version: &str) -> Result<String> {
    rewrite::<P, false>(object, desired_api_version)
}

/// The API versions `P` knows for `metadata.get`: the previous one and the current one, each
/// with its configuration's schema.
pub fn versions<P: Convert>() -> Vec<ApiVersion> {
    vec![
        ApiVersion {
            name: P::PREVIOUS_VERSION.to_string(),
            config_schema: config_schema::<P::Previous>(),
        },
        ApiVersion {
            name: P::VERSION.to_string(),
            config_schema: config_schema::<P::Config>(),
        },
    ]
}

/// `object` with its configuration as its own version's type reads and writes it (defaults
/// filled in), as a conversion writes it: what a round trip must come back to.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn normalized<P: Convert>(object: &str) -> Result<String> {
    let api_version = read_string(&RawFields::read(object, "object")?, "apiVersion")?;
    rewrite::<P, true>(object, &api_version)
}

/// `object` at `desired_api_version`; one already there is returned as it is, unless
/// `NORMALIZE`, when its configuration is read and written again (a separate instantiation, so
/// a component carries only the conversion).
fn rewrite<P: Convert, const NORMALIZE: bool>(
    object: &str,
    desired_api_version: &str,
) -> Result<String> {
    let fields = RawFields::read(object, "object")?;
    let api_version = read_string(&fields, "apiVersion")?;
    let kind = read_string(&fields, "kind")?;
    if is_app_kind(&api_version, &kind) {
        return Err(Error::invalid_input(
            "an App is the host's own kind; convert takes instances of a kind bound to the plugin",
        )
        .with_field("kind"));
    }
    let (group, from) = split(&api_version);
    let (desired_group, to) = split(desired_api_version);
    if desired_group != group {
        return Err(Error::invalid_input(format!(
            "{desired_api_version} is not a version of {api_version}'s group: a conversion \
             keeps the group"
        ))
        .with_field("desired-api-version"));
    }
    if from == to && !NORMALIZE {
        return Ok(object.to_string());
    }
    for (version, field) in [(from, "apiVersion"), (to, "desired-api-version")] {
        if version != P::PREVIOUS_VERSION && version != P::VERSION {
            return Err(Error::invalid_input(format!(
                "{version} is not an API version {} knows ({}, {})",
                P::metadata().name,
                P::PREVIOUS_VERSION,
                P::VERSION
            ))
            .with_field(field));
        }
    }
    let spec = fields
        .0
        .iter()
        .find(|(name, _)| name == "spec")
        .map(|(_, spec)| *spec)
        .ok_or_else(|| Error::invalid_input("the object has no spec").with_field("spec"))?;
    let (version, config) = instance_spec(spec)?;
    // A plugin may name a field as an App has it, as in its other capabilities.
    let located = |err: Error| match err.field().and_then(instance_field) {
        Some(field) => err.with_field(field),
        None => err,
    };
    let converted = match (from == P::VERSION, to == P::VERSION) {
        (true, true) => runtime::to_json(&read_config::<P::Config>(&config, "spec")?)?,
        (true, false) => {
            runtime::to_json(&P::down(read_config(&config, "spec")?).map_err(located)?)?
        }
        (false, true) => runtime::to_json(&P::up(read_config(&config, "spec")?).map_err(located)?)?,
        (false, false) => runtime::to_json(&read_config::<P::Previous>(&config, "spec")?)?,
    };
    let mut spec = String::with_capacity(converted.len() + version.len() + 16);
    spec.push('{');
    let converted_fields = RawFields::read(&converted, "spec").map_err(|_| {
        Error::internal(format!(
            "the configuration at {to} serializes to no JSON object"
        ))
    })?;
    for (name, value) in converted_fields.0 {
        if name == "version" {
            return Err(Error::internal(format!(
                "the configuration at {to} has a field `version`, which is spec.version's"
            )));
        }
        push_field(&mut spec, &name, value.get())?;
    }
    push_field(&mut spec, "version", &runtime::to_json(&version)?)?;
    spec.push('}');
    let mut out = String::with_capacity(object.len() + spec.len());
    out.push('{');
    for (name, value) in &fields.0 {
        match name.as_str() {
            "apiVersion" => push_field(&mut out, name, &runtime::to_json(&desired_api_version)?)?,
            "spec" => push_field(&mut out, name, &spec)?,
            _ => push_field(&mut out, name, value.get())?,
        }
    }
    out.push('}');
    Ok(out)
}

/// `"name":value` after a `,` unless it is the first field of the object `out` opens.
fn push_field(out: &mut String, name: &str, value: &str) -> Result<()> {
    if !out.ends_with('{') {
        out.push(',');
    }
    out.push_str(&runtime::to_json(&name)?);
    out.push(':');
    out.push_str(value);
    Ok(())
}

/// The string field `name` of the object's `fields`.
fn read_string(fields: &RawFields<'_>, name: &str) -> Result<String> {
    let value = fields.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    value
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::invalid_input(format!("the object has no {name}")).with_field(name))
}

/// `group/version` as (`group`, `version`); the core group's `v1` as (``, `v1`).
fn split(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}
