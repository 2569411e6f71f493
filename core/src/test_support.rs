//! What the core's tests share: the snapshot of App `ns/kv` (uid `u-1`, generation 3) at a fixed
//! clock, with the plugin in a given state; test doubles' answers to any [`Call`].

use std::any::Any;

use k8s_openapi::jiff::Timestamp;

use crate::{
    calls::{Call, Failure},
    decide::{PluginState, Snapshot},
    observed::ObservedObject,
    stamp::AppRef,
    status::{AppStatus, PluginStatus},
};

/// The snapshot of App `ns/kv` with `plugin`, `previous` status and `observed` objects.
pub fn snapshot_with(
    plugin: PluginState,
    previous: AppStatus,
    observed: Vec<ObservedObject>,
) -> Snapshot {
    Snapshot {
        app: AppRef {
            api_version: crate::stamp::APP_API_VERSION.into(),
            kind: crate::stamp::APP_KIND.into(),
            name: "kv".into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
            generation: Some(3),
        },
        desired_version: "1.0".into(),
        previous,
        observed,
        now: Timestamp::from_second(1_800_000_000).expect("time"),
        created: Timestamp::from_second(1_800_000_000 - 1).ok(),
        plugin,
    }
}

/// `kv@0.1.0` serving, exporting `capabilities` (WIT interface names).
pub fn serving(capabilities: &[&str]) -> PluginState {
    PluginState::Serving {
        label: "kv@0.1.0 (sha256:abc)".into(),
        status: PluginStatus {
            reference: "registry/kv:1".into(),
            digest: "sha256:abc".into(),
            short_digest: "abc".into(),
            capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
            loaded_at: None,
        },
        newer_refused: None,
        uncached: None,
    }
}

/// `value` as `B`, when it is one; else `value` back.
fn cast<A: 'static, B: 'static>(value: A) -> Result<B, A> {
    let any: Box<dyn Any> = Box::new(value);
    match any.downcast::<B>() {
        Ok(b) => Ok(*b),
        Err(any) => Err(*any.downcast::<A>().expect("the value it was made of")),
    }
}

/// `answer` as the answer to a call of type `C`, whose answer type it must be: how a test double
/// that takes any [`Call`] answers the one it scripts.
///
/// # Panics
/// When `C` answers another type.
pub fn answer_as<C: Call, T: 'static>(answer: T) -> C::Answer {
    cast(answer).unwrap_or_else(|_| panic!("{} answers another type", C::CAPABILITY))
}

/// A call of type `C` answered by the first script of its type: a test double's answers, one
/// script per capability it scripts.
pub struct Scripted<C: Call>(Result<Result<C::Answer, Failure>, C>);

impl<C: Call> Scripted<C> {
    /// `call`, not answered yet.
    pub fn new(call: C) -> Self {
        Self(Err(call))
    }

    /// Answers with `script` if the call is a `T` and no earlier script answered it.
    pub fn on<T: Call>(self, script: impl FnOnce(T) -> Result<T::Answer, Failure>) -> Self {
        match self.0 {
            Err(call) => match cast::<C, T>(call) {
                Ok(call) => Self(Ok(script(call).map(answer_as::<C, _>))),
                Err(call) => Self(Err(call)),
            },
            answered => Self(answered),
        }
    }

    /// The answer.
    ///
    /// # Panics
    /// When no script took the call: the decision asked a capability the test did not script.
    pub fn answer(self) -> Result<C::Answer, Failure> {
        self.0
            .unwrap_or_else(|_| panic!("the test double does not script {}", C::CAPABILITY))
    }
}
