//! Bounded lifting: what a plugin returns, as the host reads it.
//!
//! The canonical ABI lets a guest return a list whose entries all point at the same bytes: a
//! 64 MiB guest can return eight million entries aliasing one 4 MiB buffer, 32 TiB to copy. So
//! every Store carries wasmtime's hostcall fuel set to `CallLimits::transfer_bytes`, which one
//! lift (a result, or the arguments of one import call) may not exceed, counting every entry it
//! copies however they alias; what passes is then held to the call's output cap and a count per
//! list by a [`Reader`]. Results are lifted as owned values, copied before the guest's
//! post-return runs: a guest whose allocator writes into freed blocks (wasi-libc's) would
//! otherwise hand the host what `free` wrote.
//!
//! The types mirror the WIT records field by field, in order, with the WIT names; wasmtime
//! checks them against the component's types when the function is looked up (at load), so a
//! mismatch is a load error, never a misread.

// The field names are the WIT's; the types are read only through the Reader.
#![allow(missing_docs)]

use wasmtime::component::{ComponentType, Lift};

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
    pub message: String,
    #[component(name = "field")]
    pub field: Option<String>,
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
    pub api_version: String,
    #[component(name = "kind")]
    pub kind: String,
}

/// `metadata.info`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Info {
    #[component(name = "name")]
    pub name: String,
    #[component(name = "version")]
    pub version: String,
    #[component(name = "description")]
    pub description: String,
    #[component(name = "capabilities")]
    pub capabilities: Vec<Capability>,
    #[component(name = "owns")]
    pub owns: Vec<KindRef>,
    #[component(name = "observes")]
    pub observes: Vec<KindRef>,
}

/// `spec-diff.desired`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Desired {
    #[component(name = "objects")]
    pub objects: Vec<String>,
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
    pub condition_type: String,
    #[component(name = "status")]
    pub status: ConditionStatus,
    #[component(name = "reason")]
    pub reason: String,
    #[component(name = "message")]
    pub message: String,
}

/// `health.report`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Report {
    #[component(name = "state")]
    pub state: State,
    #[component(name = "conditions")]
    pub conditions: Vec<Condition>,
    #[component(name = "message")]
    pub message: String,
    #[component(name = "rollout-complete")]
    pub rollout_complete: bool,
}

/// `backup.backup-run`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct BackupRun {
    #[component(name = "slot")]
    pub slot: String,
    #[component(name = "job")]
    pub job: String,
}

/// `backup.schedule-decision`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct ScheduleDecision {
    #[component(name = "run")]
    pub run: Option<BackupRun>,
    #[component(name = "expire")]
    pub expire: Vec<String>,
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
    Wait(String),
    #[component(name = "deny")]
    Deny(String),
}

/// `finalize.object-ref`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct ObjectRef {
    #[component(name = "api-version")]
    pub api_version: String,
    #[component(name = "kind")]
    pub kind: String,
    #[component(name = "name")]
    pub name: String,
}

/// `finalize.cleanup-decision`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct CleanupDecision {
    #[component(name = "delete")]
    pub delete: Vec<ObjectRef>,
    #[component(name = "keep")]
    pub keep: Vec<ObjectRef>,
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
    pub key: String,
    #[component(name = "value")]
    pub value: String,
}

/// Holds a call's answer to the output cap (all its strings together) and to a count per
/// list, taking its parts one by one.
pub struct Reader {
    cap: usize,
    read: usize,
}

impl Reader {
    /// A reader of at most `cap` bytes of strings.
    pub fn new(cap: usize) -> Self {
        Self { cap, read: 0 }
    }

    /// Takes one string, if it fits in what is left of the cap.
    pub fn string(&mut self, text: String) -> Result<String, String> {
        self.read = self.read.saturating_add(text.len());
        if self.read > self.cap {
            return Err(format!(
                "{} bytes of output is over the {} byte cap",
                self.read, self.cap
            ));
        }
        Ok(text)
    }

    /// Takes one optional string.
    pub fn optional(&mut self, text: Option<String>) -> Result<Option<String>, String> {
        text.map(|t| self.string(t)).transpose()
    }

    /// Takes a list of at most `max` entries, `what` naming them in the error.
    pub fn list<T>(&mut self, list: Vec<T>, max: usize, what: &str) -> Result<Vec<T>, String> {
        if list.len() > max {
            return Err(format!("{} {what}; at most {max}", list.len()));
        }
        Ok(list)
    }

    /// Takes a list of at most `max` strings.
    pub fn strings(
        &mut self,
        list: Vec<String>,
        max: usize,
        what: &str,
    ) -> Result<Vec<String>, String> {
        self.list(list, max, what)?
            .into_iter()
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
