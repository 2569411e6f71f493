//! Bounded lifting: what a plugin returns is read as views into its linear memory and measured
//! before anything is copied into the host.
//!
//! The generated bindings lift a `list<string>` by copying every entry, and the canonical ABI
//! lets a guest return a list whose entries all point at the same bytes: a 64 MiB guest can
//! return eight million entries aliasing one 4 MiB buffer, 32 TiB to copy, and the host would be
//! gone before any size check ran. So every export is called through the types here, which hold
//! [`WasmStr`] and [`WasmList`] views (lifting one checks bounds, copies nothing), and a
//! [`Reader`] copies entries out one by one against the call's output cap and a count limit per
//! list, stopping at the first that does not fit. The `log` import takes its arguments the same
//! way (see `sandbox`).
//!
//! The types mirror the WIT records field by field, in order, with the WIT names; wasmtime
//! checks them against the component's types when the function is looked up, so a mismatch is a
//! load error, never a misread.

// The field names are the WIT's; the types are read only through the Reader.
#![allow(missing_docs)]

use wasmtime::{
    AsContextMut, Store,
    component::{ComponentType, Lift, WasmList, WasmStr},
};

use super::sandbox::CallState;

/// `error-kind`, the same in every interface.
#[derive(ComponentType, Lift, Clone, Copy, Debug, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub enum ErrorKind {
    #[component(name = "invalid-config")]
    InvalidConfig,
    #[component(name = "invalid-input")]
    InvalidInput,
    #[component(name = "internal")]
    Internal,
}

impl ErrorKind {
    /// The WIT name, as reported.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidConfig => "invalid-config",
            Self::InvalidInput => "invalid-input",
            Self::Internal => "internal",
        }
    }
}

/// `plugin-error`, the same in every interface.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct PluginError {
    #[component(name = "kind")]
    pub kind: ErrorKind,
    #[component(name = "message")]
    pub message: WasmStr,
    #[component(name = "field")]
    pub field: Option<WasmStr>,
}

/// `metadata.capability`.
#[derive(ComponentType, Lift, Clone, Copy, Debug, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub enum Capability {
    #[component(name = "spec-diff")]
    SpecDiff,
    #[component(name = "health")]
    Health,
    #[component(name = "backup")]
    Backup,
    #[component(name = "upgrade")]
    Upgrade,
    #[component(name = "finalize")]
    Finalize,
}

/// `metadata.kind-ref`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct KindRef {
    #[component(name = "api-version")]
    pub api_version: WasmStr,
    #[component(name = "kind")]
    pub kind: WasmStr,
}

/// `metadata.info`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Info {
    #[component(name = "name")]
    pub name: WasmStr,
    #[component(name = "version")]
    pub version: WasmStr,
    #[component(name = "description")]
    pub description: WasmStr,
    #[component(name = "capabilities")]
    pub capabilities: WasmList<Capability>,
    #[component(name = "owns")]
    pub owns: WasmList<KindRef>,
    #[component(name = "observes")]
    pub observes: WasmList<KindRef>,
}

/// `spec-diff.desired`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Desired {
    #[component(name = "objects")]
    pub objects: WasmList<WasmStr>,
    #[component(name = "requeue-after")]
    pub requeue_after: Option<u64>,
}

/// `health.state`.
#[derive(ComponentType, Lift, Clone, Copy, Debug, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub enum State {
    #[component(name = "healthy")]
    Healthy,
    #[component(name = "progressing")]
    Progressing,
    #[component(name = "degraded")]
    Degraded,
}

/// `health.condition-status`.
#[derive(ComponentType, Lift, Clone, Copy, Debug, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub enum ConditionStatus {
    #[component(name = "true")]
    True,
    #[component(name = "false")]
    False,
    #[component(name = "unknown")]
    Unknown,
}

/// `health.condition`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Condition {
    #[component(name = "condition-type")]
    pub condition_type: WasmStr,
    #[component(name = "status")]
    pub status: ConditionStatus,
    #[component(name = "reason")]
    pub reason: WasmStr,
    #[component(name = "message")]
    pub message: WasmStr,
}

/// `health.report`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Report {
    #[component(name = "state")]
    pub state: State,
    #[component(name = "conditions")]
    pub conditions: WasmList<Condition>,
    #[component(name = "message")]
    pub message: WasmStr,
    #[component(name = "rollout-complete")]
    pub rollout_complete: bool,
}

/// `backup.backup-run`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct BackupRun {
    #[component(name = "slot")]
    pub slot: WasmStr,
    #[component(name = "job")]
    pub job: WasmStr,
}

/// `backup.schedule-decision`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct ScheduleDecision {
    #[component(name = "run")]
    pub run: Option<BackupRun>,
    #[component(name = "expire")]
    pub expire: WasmList<WasmStr>,
    #[component(name = "requeue-after")]
    pub requeue_after: Option<u64>,
}

/// `upgrade.gate-decision`.
#[derive(ComponentType, Lift)]
#[component(variant)]
pub enum GateDecision {
    #[component(name = "allow")]
    Allow,
    #[component(name = "wait")]
    Wait(WasmStr),
    #[component(name = "deny")]
    Deny(WasmStr),
}

/// `finalize.object-ref`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct ObjectRef {
    #[component(name = "api-version")]
    pub api_version: WasmStr,
    #[component(name = "kind")]
    pub kind: WasmStr,
    #[component(name = "name")]
    pub name: WasmStr,
}

/// `finalize.cleanup-decision`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct CleanupDecision {
    #[component(name = "delete")]
    pub delete: WasmList<ObjectRef>,
    #[component(name = "keep")]
    pub keep: WasmList<ObjectRef>,
}

/// `log.level`.
#[derive(ComponentType, Lift, Clone, Copy, Debug, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub enum Level {
    #[component(name = "trace")]
    Trace,
    #[component(name = "debug")]
    Debug,
    #[component(name = "info")]
    Info,
    #[component(name = "warn")]
    Warn,
    #[component(name = "error")]
    Error,
}

/// `log.field`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Field {
    #[component(name = "key")]
    pub key: WasmStr,
    #[component(name = "value")]
    pub value: WasmStr,
}

/// Copies a call's output out of guest memory, entry by entry, against a byte budget: the
/// call's output cap, shared by every string of the answer.
pub struct Reader<S> {
    store: S,
    cap: usize,
    read: usize,
}

impl<S: AsContextMut<Data = CallState>> Reader<S> {
    /// A reader of at most `cap` bytes of strings out of `store`'s instance.
    pub fn new(store: S, cap: usize) -> Self {
        Self {
            store,
            cap,
            read: 0,
        }
    }

    /// Copies one string, if it fits in what is left of the cap.
    pub fn string(&mut self, text: &WasmStr) -> Result<String, String> {
        let store = self.store.as_context();
        let text = text
            .to_str(&store)
            .map_err(|err| format!("a string is not valid UTF-8: {err}"))?;
        self.read = self.read.saturating_add(text.len());
        if self.read > self.cap {
            return Err(format!(
                "output is over the {} byte cap (stopped reading at {} bytes)",
                self.cap, self.read
            ));
        }
        Ok(text.into_owned())
    }

    /// Copies one optional string.
    pub fn optional(&mut self, text: &Option<WasmStr>) -> Result<Option<String>, String> {
        text.as_ref().map(|t| self.string(t)).transpose()
    }

    /// Reads at most `max` entries of a list, `what` naming them in the error; the entries are
    /// views still, read with [`Self::string`].
    pub fn list<T: Lift + 'static>(
        &mut self,
        list: &WasmList<T>,
        max: usize,
        what: &str,
    ) -> Result<Vec<T>, String> {
        if list.len() > max {
            return Err(format!("{} {what}; at most {max}", list.len()));
        }
        list.iter(self.store.as_context_mut())
            .and_then(|entries| entries.collect::<wasmtime::Result<Vec<T>>>())
            .map_err(|err| match over_transfer_limit(&err) {
                true => format!("output is over the {} byte cap", self.cap),
                false => format!("{what} cannot be read: {err:#}"),
            })
    }

    /// Copies a list of strings, at most `max` of them.
    pub fn strings(
        &mut self,
        list: &WasmList<WasmStr>,
        max: usize,
        what: &str,
    ) -> Result<Vec<String>, String> {
        self.list(list, max, what)?
            .iter()
            .map(|text| self.string(text))
            .collect()
    }
}

/// Whether `err` is wasmtime refusing a transfer over the Store's hostcall fuel (see
/// `CallLimits::transfer_bytes`). wasmtime says so only in words, so the words are matched;
/// `host/tests/runtime.rs` proves they still are.
pub fn over_transfer_limit(err: &wasmtime::Error) -> bool {
    format!("{err:#}").contains("fuel allocated for hostcalls has been exhausted")
}

/// A reader over a Store borrowed for the call.
pub type StoreReader<'a> = Reader<&'a mut Store<CallState>>;
