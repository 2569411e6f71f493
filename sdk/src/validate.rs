//! The `validate` capability: whether the API server may write an instance of a kind bound to
//! the plugin, by the rules its schema cannot say (a field that may not change, two fields that
//! must agree). The host's validating admission webhook calls it, for the bound kinds' instances
//! only, and must have the answer within the API server's webhook timeout: keep it quick.

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::error::Result;
use crate::metadata::Plugin;
use crate::runtime;

/// The operation being admitted, and the verdict and its violations: the host's own types
/// ([`wasmop_core::admission`]), whose rules the host holds a verdict to. Build a verdict with
/// [`Verdict::allow`], [`Verdict::deny`] and [`Verdict::warn`].
pub use wasmop_core::admission::{Operation, Verdict, Violation};

/// Judges the objects the API server is asked to write.
///
/// The SDK has judged the object being written (on `Create` and `Update`) before
/// [`Validate::review`] is called: a configuration that does not fit [`Plugin::Config`], or that
/// [`Plugin::validate`] refuses, is denied with the field that error names, and `review` is not
/// called. So `review` holds the rules that need more than one configuration: the old one, the
/// operation, the user. (It is not named `validate`, which [`Plugin`] has already, for one
/// configuration.)
///
/// ```
/// use wasmop_sdk::{Admission, Metadata, Operation, Plugin, Result, Validate, Verdict};
/// # use wasmop_sdk::schemars::{self, JsonSchema};
/// # #[derive(serde::Deserialize, JsonSchema)]
/// # struct Config { replicas: i32 }
/// struct Store;
/// # impl Plugin for Store {
/// #     type Config = Config;
/// #     fn metadata() -> Metadata { Metadata::new("store", "0.1.0") }
/// # }
///
/// impl Validate for Store {
///     fn review(input: &Admission<Config>) -> Result<Verdict> {
///         let mut verdict = Verdict::allow();
///         if let (Operation::Update, Some(old)) = (input.operation, input.old_config()) {
///             if input.config().replicas < old.replicas {
///                 // Named as an App has it; the SDK moves it to `spec.replicas` for a bound kind.
///                 verdict = verdict.deny("spec.config.replicas", "may not shrink");
///             }
///         }
///         Ok(verdict)
///     }
/// }
/// wasmop_sdk::export!(Store: Validate);
///
/// # fn main() {
/// use wasmop_sdk::testing::{self, Fixture};
/// let kind = |replicas: i32| testing::instance(
///     "data.example.com/v1", "Store", "s", "shop", "1.0", serde_json::json!({"replicas": replicas}),
/// );
/// let verdict = Fixture::new(kind(2))
///     .old_object(kind(3))
///     .validate::<Store>(Operation::Update)
///     .expect("a verdict");
/// assert_eq!(verdict.violations[0].field, "spec.replicas");
///
/// // A configuration that does not parse never reaches `review`.
/// let bad = testing::instance("data.example.com/v1", "Store", "s", "shop", "1.0",
///     serde_json::json!({"replicas": "three"}));
/// let verdict = Fixture::new(bad).validate::<Store>(Operation::Create).expect("a verdict");
/// assert!(!verdict.allowed());
/// assert_eq!(verdict.violations[0].field, "spec.replicas");
/// # }
/// ```
pub trait Validate: Plugin {
    /// Judges one object: [`Verdict::allow`], with violations to refuse it (each naming the
    /// field, as an App has it: `spec.config.replicas`) and warnings for the user either way.
    /// Return an error only when the object cannot be judged: the API server then applies the
    /// webhook's failure policy, not your rules.
    fn review(input: &Admission<Self::Config>) -> Result<Verdict>;
}

/// What the API server is asked to write.
#[derive(Debug, Clone)]
pub struct Admission<C> {
    /// What the API server is asked to do.
    pub operation: Operation,
    /// The object as it would be written, configuration typed (and valid: see [`Validate`]); on
    /// `Delete`, the object being deleted.
    pub object: App<C>,
    /// The stored object, configuration typed, on `Update`; `None` on other operations, and
    /// when its configuration no longer reads as [`Plugin::Config`] (stored before the type
    /// changed: [`Admission::raw_old_object`] still has it).
    pub old: Option<App<C>>,
    /// [`Admission::object`] as the host sent it, JSON text.
    pub raw_object: String,
    /// The stored object as the host sent it, on `Update`.
    pub raw_old_object: Option<String>,
    /// The groups of the user asking, when the kind's binding asks the host for them.
    pub user_groups: Option<Vec<String>>,
    /// The host's clock.
    pub now: DateTime<Utc>,
}

impl<C> Admission<C> {
    /// The configuration being written (on `Delete`, the one being deleted).
    pub fn config(&self) -> &C {
        self.object.config()
    }

    /// The stored configuration, on `Update` (see [`Admission::old`]).
    pub fn old_config(&self) -> Option<&C> {
        self.old.as_ref().map(App::config)
    }

    /// Whether the user asking is in `group`; `false` when the host did not say (the kind's
    /// binding does not ask for groups).
    pub fn in_group(&self, group: &str) -> bool {
        self.user_groups
            .as_ref()
            .is_some_and(|groups| groups.iter().any(|g| g == group))
    }
}

/// `validate.validate` as a function: operation, object, old object, user groups, now.
pub type ValidateFn =
    fn(Operation, &str, Option<String>, Option<Vec<String>>, i64) -> Result<Verdict>;

/// `validate.validate`, on the WIT's raw values.
pub fn validate<P: Validate>(
    operation: Operation,
    object: &str,
    old_object: Option<String>,
    user_groups: Option<Vec<String>>,
    now_ms: i64,
) -> Result<Verdict> {
    let now = runtime::read_now(now_ms)?;
    let read = App::<P::Config>::from_json(object).and_then(|app| {
        P::validate(app.config()).map_err(|e| app.locate(e))?;
        Ok(app)
    });
    let app = match read {
        Ok(app) => app,
        // The object being written: what cannot be read of it (a configuration that does not
        // fit the type, or that the plugin's validation refuses) is the user's to fix, and is
        // said where the user wrote it.
        Err(err) if matches!(operation, Operation::Create | Operation::Update) => {
            return Ok(Verdict::allow().deny(err.field().unwrap_or_default(), err.message()));
        }
        // An object being deleted (or connected to) is not being written: one whose
        // configuration no longer reads, stored before a schema changed, must stay deletable.
        Err(_) => return Ok(Verdict::allow()),
    };
    let old = old_object
        .as_deref()
        .and_then(|text| App::from_json(text).ok());
    let input = Admission {
        operation,
        object: app,
        old,
        raw_object: object.to_string(),
        raw_old_object: old_object,
        user_groups,
        now,
    };
    let mut verdict = P::review(&input).map_err(|e| input.object.locate(e))?;
    for violation in &mut verdict.violations {
        if let Some(field) = input.object.relocated(&violation.field) {
            violation.field = field;
        }
    }
    Ok(verdict)
}
