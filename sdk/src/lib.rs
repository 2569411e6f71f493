//! Write [wasmop](https://github.com/wasmop/wasmop) plugins in Rust.
//!
//! A plugin is a Wasm component that holds the domain knowledge of one kind
//! of service: what Kubernetes objects it needs ([`SpecDiff`]), when it is
//! healthy ([`Health`]), when to back it up ([`Backup`]), when an upgrade is
//! safe ([`Upgrade`]) and what to keep on deletion ([`Finalize`]); for a
//! kind bound to it, which instances the API server may write
//! ([`Validate`]) and how an instance converts between the kind's API
//! versions ([`Convert`]). The wasmop host does everything else: watches,
//! server-side apply, pruning, status, backup Jobs, finalizers, webhooks.
//!
//! Writing one takes four steps:
//!
//! 1. Implement [`Plugin`]: metadata and a serde type for `spec.config`
//!    that also derives [`JsonSchema`] (see [Its schema](#its-schema)).
//! 2. Implement the capability traits you need. Inputs are typed: the
//!    [`App`] with its config deserialized, [`Observed`] objects read as
//!    k8s-openapi types, `now` as a `chrono` time. Return [`Error`] for bad
//!    input, never panic: the host shows the message (and the field) on the
//!    App.
//! 3. Call [`export!`] once with the capabilities you implemented. The
//!    component exports exactly those WIT interfaces (plus the mandatory
//!    `metadata`), which is how the host discovers them.
//! 4. Test natively with [`testing::Fixture`]; build with
//!    `cargo build --release --target wasm32-wasip2`.
//!
//! The crate-type must be `cdylib` for the component (unit tests still build
//! natively; add `rlib` only if another crate links the plugin). Whole-program
//! LTO with one codegen unit lets the SDK, serde_json and k8s-openapi inline
//! into your code, which makes every call faster (12-18% for the kvstore
//! example) at about the same size (hello 5% smaller, kvstore 7% larger):
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! wasmop-sdk = "0.1"
//! serde = { version = "1", features = ["derive"] }
//!
//! [profile.release]
//! lto = true
//! codegen-units = 1
//! ```
//!
//! # Example
//!
//! A complete plugin running a fixed number of echo servers, with a health
//! check and a native test:
//!
//! ```
//! use serde::Deserialize;
//! use wasmop_sdk::schemars::{self, JsonSchema};
//! use wasmop_sdk::k8s_openapi::api::apps::v1::StatefulSet;
//! use wasmop_sdk::k8s_openapi::api::core::v1::{Container, Service};
//! use wasmop_sdk::objects::{Scope, ServiceBuilder, StatefulSetBuilder};
//! use wasmop_sdk::{
//!     Error, Health, HealthInput, HealthReport, Metadata, Plan, PlanInput, Plugin, Result,
//!     SpecDiff, log,
//! };
//!
//! /// `spec.config` of an echo App.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(default, deny_unknown_fields)]
//! struct Config {
//!     /// How many echo servers run.
//!     #[schemars(range(min = 1))]
//!     replicas: i32,
//! }
//!
//! impl Default for Config {
//!     fn default() -> Self {
//!         Config { replicas: 2 }
//!     }
//! }
//!
//! struct Echo;
//!
//! impl Plugin for Echo {
//!     type Config = Config;
//!
//!     fn metadata() -> Metadata {
//!         Metadata::new("echo", "0.1.0")
//!             .description("Echo servers")
//!             .owns::<StatefulSet>()
//!             .owns::<Service>()
//!     }
//!
//!     fn validate(config: &Config) -> Result<()> {
//!         if config.replicas < 1 {
//!             return Err(Error::invalid_config("spec.config.replicas", "must be at least 1"));
//!         }
//!         Ok(())
//!     }
//! }
//!
//! impl SpecDiff for Echo {
//!     fn plan(input: &PlanInput<Config>) -> Result<Plan> {
//!         let scope = Scope::new(&input.app, "echo")
//!             .with_component("server")
//!             .with_version(&input.target_version);
//!         let name = input.app.name();
//!         let mut plan = Plan::new();
//!         plan.push(
//!             &StatefulSetBuilder::new(&scope, name)
//!                 .replicas(input.app.config().replicas)
//!                 .container(Container {
//!                     name: "echo".into(),
//!                     image: Some(format!("hashicorp/http-echo:{}", input.target_version)),
//!                     ..Default::default()
//!                 })
//!                 .build(),
//!         )?;
//!         plan.push(&ServiceBuilder::headless(&scope, name).port("http", 5678).build())?;
//!         log::info("planned", &[("objects", &plan.len())]);
//!         Ok(plan)
//!     }
//! }
//!
//! impl Health for Echo {
//!     fn check(input: &HealthInput<Config>) -> Result<HealthReport> {
//!         let ready = input
//!             .observed
//!             .get::<StatefulSet>(input.app.name())?
//!             .and_then(|s| s.status)
//!             .and_then(|s| s.ready_replicas)
//!             .unwrap_or(0);
//!         let want = input.app.config().replicas;
//!         Ok(if ready >= want {
//!             HealthReport::healthy(format!("{ready}/{want} ready")).rollout_complete(true)
//!         } else {
//!             HealthReport::progressing(format!("{ready}/{want} ready"))
//!         })
//!     }
//! }
//!
//! wasmop_sdk::export!(Echo: SpecDiff, Health);
//!
//! // Natively, e.g. in `#[cfg(test)] mod tests`:
//! use wasmop_sdk::testing::{self, Fixture};
//!
//! let app = testing::app("hi", "default", "1.0", serde_json::json!({"replicas": 3}));
//! let plan = Fixture::new(app.clone()).plan::<Echo>().expect("plans");
//! let sts: StatefulSet = plan.get("hi").expect("typed").expect("planned");
//! assert_eq!(sts.spec.replicas, Some(3));
//!
//! let bad = testing::app("hi", "default", "1.0", serde_json::json!({"replicas": 0}));
//! let err = Fixture::new(bad).plan::<Echo>().expect_err("validated");
//! assert_eq!(err.field(), Some("spec.config.replicas"));
//!
//! let caps = Fixture::metadata::<Echo>().capabilities;
//! assert_eq!(caps, [wasmop_sdk::Capability::SpecDiff, wasmop_sdk::Capability::Health]);
//! ```
//!
//! # Its schema
//!
//! The configuration's [`JsonSchema`] is the plugin's schema: `metadata.get`
//! reports it (derived once per call of `metadata`, from the type alone), the
//! host checks at load that a CustomResourceDefinition can hold it, and
//! `wasmop plugin crd` prints a CRD whose `spec` is the configuration, so the
//! API server validates every instance at `kubectl apply` and `kubectl
//! explain` shows its docs. Nothing is written twice:
//!
//! - derive it through the SDK's re-export, `use
//!   wasmop_sdk::schemars::{self, JsonSchema};` then `#[derive(Deserialize,
//!   JsonSchema)]` (the derive refers to `schemars::`, which the `use` puts in
//!   scope; no dependency of your own);
//! - serde's attributes shape it (`rename_all`, `default`, `Option` fields
//!   not required, `deny_unknown_fields`); a `#[serde(default)]` field's
//!   default is in the schema when its type is `Serialize`, and the API
//!   server then fills it in;
//! - doc comments are the fields' descriptions: write them for the people
//!   who will write the config;
//! - `#[schemars(range(min = 1, max = 15))]`, `length(max = 63)` and
//!   `regex(pattern = "...")` become limits the API server enforces, and
//!   `#[schemars(extend("x-kubernetes-validations" = [{"rule": "...",
//!   "message": "..."}]))]` CEL rules; keep [`Plugin::validate`] for what it
//!   checks today (an App's `spec.config` is not validated by a CRD);
//! - a `Config` of `serde_json::Value` declares no schema (free-form).
//!
//! The schema must have a structural form: an object at the root, no
//! recursive types, no untagged enum mixing types (see the host's
//! `wasmop_core::structural`); [`testing::Fixture::config_schema`] and
//! `wasmop plugin inspect` say when it has not. Columns for `kubectl get` of
//! a bound kind come from [`Metadata::printer_column`].
//!
//! # Keeping components small
//!
//! Code size follows the k8s-openapi types a plugin reads and writes: each
//! one compiles its serde code into the component. Read big kinds you only
//! inspect (Pods, StatefulSets, Jobs) through [`Observed::all_as`] with a
//! [`StatusView`] or your own slim struct instead of the full type; the SDK
//! already routes every object through one `serde_json::Value` path so each
//! type is compiled once. The kvstore example plugin, which reads and writes
//! all of these, is about 1 MB stripped.
//!
//! # How capabilities reach the component
//!
//! The SDK generates one WIT world per capability. wit-bindgen emits each
//! world's export description inside its export macro, so only the worlds
//! named in [`export!`] end up in the plugin's `component-type` sections.
//! `wasm-tools component wit plugin.wasm` then shows `metadata` plus exactly
//! the listed interfaces, and `metadata.get` reports the same list. No Cargo
//! features are involved, so building several plugins in one `cargo`
//! invocation is safe.

pub mod app;
pub mod backup;
pub mod convert;
pub mod error;
pub mod finalize;
pub mod health;
pub mod log;
pub mod metadata;
pub mod objects;
pub mod observed;
pub mod schedule;
pub mod spec_diff;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
pub mod upgrade;
pub mod validate;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod arena;
mod runtime;
#[doc(hidden)]
pub mod wit;

pub use app::{App, AppSpec, AppStatus};
pub use backup::{Backup, BackupDecision, BackupInput, BackupJob, BackupRun, JobState, Slot};
pub use convert::Convert;
pub use error::{Error, ErrorKind, Result};
pub use finalize::{Finalize, FinalizeDecision, FinalizeInput, ObjectRef};
pub use health::{Condition, ConditionStatus, Health, HealthInput, HealthReport, HealthState};
pub use metadata::{ApiVersion, Capability, ColumnType, KindRef, Metadata, Plugin, PrinterColumn};
pub use observed::{Observed, StatusView};
pub use schedule::{Schedule, ScheduleError};
pub use spec_diff::{Plan, PlanInput, SpecDiff};
pub use upgrade::{Upgrade, UpgradeDecision, UpgradeInput};
pub use validate::{Admission, Operation, Validate, Verdict, Violation};

// The versions plugins must use for types that cross the SDK's API.
pub use chrono;
pub use k8s_openapi;
/// The schema derive for `Plugin::Config`: `use wasmop_sdk::schemars::{self, JsonSchema};`.
pub use schemars;
pub use schemars::JsonSchema;
pub use serde_json;

/// Used by [`export!`]; not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::backup::{ScheduleFn, schedule};
    pub use crate::convert::{ConvertFn, convert, versions};
    pub use crate::finalize::{CleanupFn, cleanup};
    pub use crate::health::{CheckFn, check};
    pub use crate::runtime::{Exported, Native};
    pub use crate::spec_diff::{PlanFn, plan};
    pub use crate::upgrade::{GateFn, gate};
    pub use crate::validate::{ValidateFn, validate};
}

/// Exports a plugin type as the component's implementation.
///
/// List the capability traits the type implements; the component will
/// export `wasmop:plugin/metadata` plus exactly those interfaces, and
/// `metadata.get` will report the same list:
///
/// ```text
/// wasmop_sdk::export!(Kvstore: SpecDiff, Health, Backup, Upgrade, Finalize);
/// wasmop_sdk::export!(Hello: SpecDiff, Validate, Convert);
/// ```
///
/// With `Convert`, `metadata.get` also lists the two API versions it converts
/// between, with their schemas ([`convert::versions`]).
///
/// Use it once per plugin crate, at the crate root, with the type's name
/// (an identifier in scope, not a path). In the component it also installs
/// the SDK's per-call bump allocator (a plugin must not declare its own
/// `#[global_allocator]`). A listed capability the type does not implement
/// is a compile error naming the trait:
///
/// ```compile_fail
/// # use wasmop_sdk::{Metadata, Plugin};
/// struct Only;
/// impl Plugin for Only {
///     type Config = serde_json::Value;
///     fn metadata() -> Metadata { Metadata::new("only", "0.1.0") }
/// }
/// // error: the trait bound `Only: Health` is not satisfied
/// wasmop_sdk::export!(Only: Health);
/// ```
///
/// and an unknown name is a compile error listing the valid ones:
///
/// ```compile_fail
/// # use wasmop_sdk::{Metadata, Plugin};
/// # struct Only;
/// # impl Plugin for Only {
/// #     type Config = serde_json::Value;
/// #     fn metadata() -> Metadata { Metadata::new("only", "0.1.0") }
/// # }
/// // error: wasmop_sdk::export!: unknown capability `Healthy`; expected ...
/// wasmop_sdk::export!(Only: Healthy);
/// ```
///
/// Listing nothing exports the mandatory `metadata` alone:
///
/// ```
/// # use wasmop_sdk::{Metadata, Plugin};
/// # struct Only;
/// # impl Plugin for Only {
/// #     type Config = serde_json::Value;
/// #     fn metadata() -> Metadata { Metadata::new("only", "0.1.0") }
/// # }
/// wasmop_sdk::export!(Only);
/// # fn main() {
/// assert!(wasmop_sdk::testing::Fixture::metadata::<Only>().capabilities.is_empty());
/// # }
/// ```
#[macro_export]
macro_rules! export {
    ($plugin:ident $(: $($capability:ident),+ $(,)?)?) => {
        impl $crate::__private::Exported for $plugin {
            const CAPABILITIES: &'static [$crate::Capability] =
                &[$($($crate::Capability::$capability),+)?];
            const NATIVE: $crate::__private::Native = $crate::__private::Native(&[
                $($($crate::__native_capability!($plugin, $capability),)+)?
            ]);
            $crate::__export_versions!($plugin; $($($capability),+)?);
        }

        #[cfg(target_arch = "wasm32")]
        $crate::wit::base::export!($plugin with_types_in $crate::wit::base);

        // One instance serves one call: see the SDK's `arena` module.
        #[cfg(target_arch = "wasm32")]
        #[global_allocator]
        static __WASMOP_CALL_ARENA: $crate::arena::CallArena = $crate::arena::CallArena::new();

        $($($crate::__export_capability!($plugin, $capability);)+)?
    };
}

/// One capability of [`export!`] as a native function: an entry of its `Native`.
#[doc(hidden)]
#[macro_export]
macro_rules! __native_capability {
    (@entry $plugin:ident, $capability:ident, $function:ident, $type:ident) => {
        (
            $crate::Capability::$capability,
            &($crate::__private::$function::<$plugin> as $crate::__private::$type),
        )
    };
    ($plugin:ident, SpecDiff) => {
        $crate::__native_capability!(@entry $plugin, SpecDiff, plan, PlanFn)
    };
    ($plugin:ident, Health) => {
        $crate::__native_capability!(@entry $plugin, Health, check, CheckFn)
    };
    ($plugin:ident, Backup) => {
        $crate::__native_capability!(@entry $plugin, Backup, schedule, ScheduleFn)
    };
    ($plugin:ident, Upgrade) => {
        $crate::__native_capability!(@entry $plugin, Upgrade, gate, GateFn)
    };
    ($plugin:ident, Finalize) => {
        $crate::__native_capability!(@entry $plugin, Finalize, cleanup, CleanupFn)
    };
    ($plugin:ident, Validate) => {
        $crate::__native_capability!(@entry $plugin, Validate, validate, ValidateFn)
    };
    ($plugin:ident, Convert) => {
        $crate::__native_capability!(@entry $plugin, Convert, convert, ConvertFn)
    };
    // An unknown name is reported by `__export_capability`; this entry only keeps the list whole.
    ($plugin:ident, $other:ident) => {
        ($crate::Capability::SpecDiff, &())
    };
}

/// One capability of [`export!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __export_capability {
    (@world $plugin:ident, $trait:ident, $module:ident) => {
        // Checked on every target, so native builds and tests report a
        // missing impl as "`X: Health` is not satisfied".
        const _: () = {
            fn implements<T: $crate::$trait>() {}
            let _ = implements::<$plugin>;
        };

        #[cfg(target_arch = "wasm32")]
        $crate::wit::$module::export!($plugin with_types_in $crate::wit::$module);
    };
    ($plugin:ident, SpecDiff) => {
        $crate::__export_capability!(@world $plugin, SpecDiff, spec_diff);
    };
    ($plugin:ident, Health) => {
        $crate::__export_capability!(@world $plugin, Health, health);
    };
    ($plugin:ident, Backup) => {
        $crate::__export_capability!(@world $plugin, Backup, backup);
    };
    ($plugin:ident, Upgrade) => {
        $crate::__export_capability!(@world $plugin, Upgrade, upgrade);
    };
    ($plugin:ident, Finalize) => {
        $crate::__export_capability!(@world $plugin, Finalize, finalize);
    };
    ($plugin:ident, Validate) => {
        $crate::__export_capability!(@world $plugin, Validate, validate);
    };
    ($plugin:ident, Convert) => {
        $crate::__export_capability!(@world $plugin, Convert, convert);
    };
    ($plugin:ident, $other:ident) => {
        compile_error!(concat!(
            "wasmop_sdk::export!: unknown capability `",
            stringify!($other),
            "`; expected SpecDiff, Health, Backup, Upgrade, Finalize, Validate or Convert"
        ));
    };
}

/// The `versions` of [`export!`]'s `Exported` impl: [`convert::versions`] when the list names
/// `Convert`, the default (none) otherwise.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_versions {
    ($plugin:ident;) => {};
    ($plugin:ident; Convert $(, $rest:ident)*) => {
        fn versions() -> ::std::vec::Vec<$crate::ApiVersion> {
            $crate::__private::versions::<$plugin>()
        }
    };
    ($plugin:ident; $other:ident $(, $rest:ident)*) => {
        $crate::__export_versions!($plugin; $($rest),*);
    };
}
