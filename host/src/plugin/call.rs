//! Evaluate: one call of one capability, in a fresh Store with its deadline and memory cap, and
//! the host's checks on what comes back (sizes, JSON shape) before anyone uses it.

use std::{collections::BTreeSet, time::Duration};

use wasmtime::{
    Store, Trap,
    component::{ComponentExportIndex, ComponentNamedList, Instance, Lift, Lower},
};

use super::{
    CallError, Capability,
    bindings::exports::wasmop::plugin as guest,
    compile::{CompiledPlugin, PluginMetadata},
    engine::PluginEngine,
    input::AppContext,
    lift::{self, Reader},
    limits::CallLimits,
    object::PluginObject,
    sandbox::{CallState, CallTags},
};

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

/// One export to call: which capability, and its function's index (absent when the component
/// does not export the capability).
struct Export<'a> {
    interface: &'static str,
    index: Option<&'a ComponentExportIndex>,
}

/// The result every capability function returns, its answer lifted as views (see [`lift`]).
type Answer<R> = (Result<R, lift::PluginError>,);

impl CompiledPlugin {
    /// Runs `f` against a fresh instance in a fresh Store with `limits`, and turns whatever went
    /// wrong into the specific [`CallError`].
    fn with_instance<R>(
        &self,
        engine: &PluginEngine,
        interface: &'static str,
        limits: &CallLimits,
        tags: CallTags,
        now_ms: i64,
        f: impl FnOnce(&mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let state = CallState::new(tags, limits, now_ms);
        let mut store = Store::new(engine.engine(), state);
        store.limiter(|state| state.limiter());
        store.set_epoch_deadline(limits.deadline_ticks());
        store.set_hostcall_fuel(limits.transfer_bytes());
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| f(&mut store, &instance));
        let last_words = store.data().flush_stdio();
        let plugin = self.label();
        result.map_err(|err| {
            if store.data().memory_exceeded() {
                return CallError::MemoryExceeded {
                    plugin,
                    interface,
                    limit_mib: limits.memory_bytes >> 20,
                };
            }
            if let Some(reason) = overreach(&err, limits) {
                return CallError::BadOutput {
                    plugin,
                    interface,
                    reason,
                };
            }
            match err.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => CallError::DeadlineExceeded {
                    plugin,
                    interface,
                    limit: limits.deadline,
                },
                Some(trap) => CallError::Trap {
                    plugin,
                    interface,
                    message: match last_words {
                        Some(words) => format!("{trap}; guest stderr: {words}"),
                        None => trap.to_string(),
                    },
                },
                None => CallError::Host {
                    plugin,
                    interface,
                    message: format!("{err:#}"),
                },
            }
        })
    }

    /// Calls one exported function with `params` and hands its answer, still in guest memory,
    /// to `read`, which copies out what it needs through a [`lift::Reader`] bounded by the
    /// output cap. A plugin's own error becomes [`CallError::Refused`], a bad answer
    /// [`CallError::BadOutput`].
    // Each argument is a separate input of the call; bundling them would only move the list.
    #[allow(clippy::too_many_arguments)]
    fn call_export<P, R, T>(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        now_ms: i64,
        export: Export<'_>,
        params: P,
        read: impl FnOnce(&mut Reader, R) -> Result<T, String>,
    ) -> Result<T, CallError>
    where
        P: ComponentNamedList + Lower,
        R: Lift + 'static,
    {
        let Export { interface, index } = export;
        let Some(index) = index else {
            return Err(CallError::Unsupported {
                plugin: self.label(),
                interface,
            });
        };
        let answer = self.with_instance(
            engine,
            interface,
            limits,
            tags,
            now_ms,
            |store, instance| {
                let func = instance.get_typed_func::<P, Answer<R>>(&mut *store, index)?;
                let (answer,) = func.call(&mut *store, params)?;
                let mut reader = Reader::new(limits.max_output_bytes);
                Ok(match answer {
                    Ok(value) => read(&mut reader, value).map_err(Err),
                    Err(err) => Err(Self::read_refusal(&mut reader, err)),
                })
            },
        )?;
        answer.map_err(|err| match err {
            Ok((kind, message, field)) => CallError::Refused {
                plugin: self.label(),
                interface,
                kind: kind.to_string(),
                message,
                field,
            },
            Err(reason) => self.bad_in(interface, reason),
        })
    }

    /// A plugin's own error, copied out: its kind, message and field; or why it is unreadable.
    fn read_refusal(
        reader: &mut Reader,
        err: lift::PluginError,
    ) -> Result<(&'static str, String, Option<String>), String> {
        let kind = err.kind.as_str();
        let message = reader
            .string(err.message)
            .map_err(|reason| format!("its error message: {reason}"))?;
        let field = reader
            .optional(err.field)
            .map_err(|reason| format!("its error field: {reason}"))?;
        Ok((kind, message, field))
    }

    /// The export of `capability` for [`Self::call_export`].
    fn export(&self, capability: Capability) -> Export<'_> {
        let index = match capability {
            Capability::SpecDiff => self.exports.spec_diff.as_ref(),
            Capability::Health => self.exports.health.as_ref(),
            Capability::Backup => self.exports.backup.as_ref(),
            Capability::Upgrade => self.exports.upgrade.as_ref(),
            Capability::Finalize => self.exports.finalize.as_ref(),
        };
        Export {
            interface: capability.interface(),
            index,
        }
    }

    /// Looks every function this component exports up in one instance, which checks its type
    /// against what the host calls it with: a mismatch is found at load, not on a first call.
    pub(super) fn check_export_types(&self, engine: &PluginEngine) -> Result<(), String> {
        use guest::{backup, finalize, health, spec_diff, upgrade};
        let limits = CallLimits::default();
        self.with_instance(
            engine,
            "metadata",
            &limits,
            CallTags::default(),
            0,
            |store, i| {
                fn check<P: ComponentNamedList + Lower, R: ComponentNamedList + Lift>(
                    store: &mut Store<CallState>,
                    instance: &Instance,
                    index: Option<&ComponentExportIndex>,
                    name: &str,
                ) -> wasmtime::Result<()> {
                    if let Some(index) = index {
                        instance
                            .get_typed_func::<P, R>(&mut *store, index)
                            .map_err(|err| err.context(format!("{name} has the wrong type")))?;
                    }
                    Ok(())
                }
                let e = &self.exports;
                check::<(), (lift::Info,)>(store, i, Some(&e.metadata), "metadata.get")?;
                check::<(spec_diff::PlanInput<'_>,), Answer<lift::Desired>>(
                    store,
                    i,
                    e.spec_diff.as_ref(),
                    "spec-diff.plan",
                )?;
                check::<(health::CheckInput<'_>,), Answer<lift::Report>>(
                    store,
                    i,
                    e.health.as_ref(),
                    "health.check",
                )?;
                check::<(backup::ScheduleInput<'_>,), Answer<lift::ScheduleDecision>>(
                    store,
                    i,
                    e.backup.as_ref(),
                    "backup.schedule",
                )?;
                check::<(upgrade::GateInput<'_>,), Answer<lift::GateDecision>>(
                    store,
                    i,
                    e.upgrade.as_ref(),
                    "upgrade.gate",
                )?;
                check::<(finalize::CleanupInput<'_>,), Answer<lift::CleanupDecision>>(
                    store,
                    i,
                    e.finalize.as_ref(),
                    "finalize.cleanup",
                )
            },
        )
        .map_err(|err| err.to_string())
    }

    /// Calls `metadata.get`: the smoke test at load, and what the plugin says about itself.
    pub fn call_metadata(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
    ) -> Result<(PluginMetadata, BTreeSet<Capability>), CallError> {
        let read = |reader: &mut Reader, info: lift::Info| {
            let mut kinds = |list: Vec<lift::KindRef>, what: &str| {
                reader
                    .list(list, MAX_LISTED, what)?
                    .into_iter()
                    .map(|k| {
                        Ok(format!(
                            "{}/{}",
                            reader.string(k.api_version)?,
                            reader.string(k.kind)?
                        ))
                    })
                    .collect::<Result<Vec<_>, String>>()
            };
            let owns = kinds(info.owns, "kinds in owns")?;
            let observes = kinds(info.observes, "kinds in observes")?;
            let claimed = reader
                .list(info.capabilities, Capability::ALL.len(), "capabilities")?
                .into_iter()
                .map(|c| match c {
                    lift::Capability::SpecDiff => Capability::SpecDiff,
                    lift::Capability::Health => Capability::Health,
                    lift::Capability::Backup => Capability::Backup,
                    lift::Capability::Upgrade => Capability::Upgrade,
                    lift::Capability::Finalize => Capability::Finalize,
                })
                .collect();
            let mut text = |s: String, field: &str, max: usize| {
                let text = reader.string(s)?;
                match text.len() {
                    len if len > max => {
                        Err(format!("metadata {field} has {len} bytes; at most {max}"))
                    }
                    _ => Ok(text),
                }
            };
            let metadata = PluginMetadata {
                name: text(info.name, "name", 63)?,
                version: text(info.version, "version", 64)?,
                description: text(info.description, "description", 1024)?,
                owns,
                observes,
            };
            if metadata.name.is_empty() {
                return Err("metadata name must be 1 to 63 characters".to_string());
            }
            Ok((metadata, claimed))
        };
        // metadata gets no input, so its wall clock reads the epoch: same answer every time.
        let answer =
            self.with_instance(engine, "metadata", limits, tags, 0, |store, instance| {
                let func = instance
                    .get_typed_func::<(), (lift::Info,)>(&mut *store, &self.exports.metadata)?;
                let (info,) = func.call(&mut *store, ())?;
                Ok(read(&mut Reader::new(limits.max_output_bytes), info))
            })?;
        answer.map_err(|reason| CallError::BadOutput {
            plugin: self.label(),
            interface: "metadata",
            reason,
        })
    }

    /// Calls `spec-diff.plan` and checks every object it returns.
    pub fn call_plan(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        current_version: Option<&str>,
        target_version: &str,
    ) -> Result<Plan, CallError> {
        let capability = Capability::SpecDiff;
        let input = guest::spec_diff::PlanInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            current_version,
            target_version,
            now: cx.now_ms,
        };
        let (texts, requeue_after) = self.call_export(
            engine,
            limits,
            tags,
            cx.now_ms,
            self.export(capability),
            (input,),
            |reader, desired: lift::Desired| {
                let texts = reader.strings(desired.objects, MAX_PLANNED, "objects")?;
                Ok((texts, desired.requeue_after))
            },
        )?;
        Ok(Plan {
            objects: self.parse_objects(capability, &texts)?,
            requeue_after: requeue_after.map(Duration::from_millis),
        })
    }

    /// Calls `health.check`.
    pub fn call_health(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        version: &str,
    ) -> Result<HealthReport, CallError> {
        use lift::{ConditionStatus, State};
        let capability = Capability::Health;
        let input = guest::health::CheckInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            version,
            now: cx.now_ms,
        };
        let report = self.call_export(
            engine,
            limits,
            tags,
            cx.now_ms,
            self.export(capability),
            (input,),
            |reader, report: lift::Report| {
                let conditions = reader
                    .list(report.conditions, MAX_LISTED, "conditions")?
                    .into_iter()
                    .map(|c| {
                        Ok(PluginCondition {
                            type_: reader.string(c.condition_type)?,
                            status: match c.status {
                                ConditionStatus::True => "True",
                                ConditionStatus::False => "False",
                                ConditionStatus::Unknown => "Unknown",
                            },
                            reason: reader.string(c.reason)?,
                            message: reader.string(c.message)?,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Ok(HealthReport {
                    state: match report.state {
                        State::Healthy => HealthState::Healthy,
                        State::Progressing => HealthState::Progressing,
                        State::Degraded => HealthState::Degraded,
                    },
                    conditions,
                    message: reader.string(report.message)?,
                    rollout_complete: report.rollout_complete,
                })
            },
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for c in &report.conditions {
            if RESERVED_CONDITIONS.contains(&c.type_.as_str()) || !seen.insert(&c.type_) {
                return Err(self.bad(
                    capability,
                    format!("condition type {:?} is the host's or repeated", c.type_),
                ));
            }
            if !is_camel_case(&c.type_) || !is_camel_case(&c.reason) {
                return Err(self.bad(
                    capability,
                    format!(
                        "condition type {:?} and reason {:?} must be CamelCase words",
                        c.type_, c.reason
                    ),
                ));
            }
        }
        Ok(report)
    }

    /// Calls `backup.schedule`.
    pub fn call_backup(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        last_completed_slot: Option<&str>,
    ) -> Result<BackupDecision, CallError> {
        let capability = Capability::Backup;
        let input = guest::backup::ScheduleInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            last_completed_slot,
            now: cx.now_ms,
        };
        let (run, expire, requeue_after) = self.call_export(
            engine,
            limits,
            tags,
            cx.now_ms,
            self.export(capability),
            (input,),
            |reader, decision: lift::ScheduleDecision| {
                let expire = reader.strings(decision.expire, MAX_LISTED, "slots to expire")?;
                let run = match decision.run {
                    Some(run) => Some((reader.string(run.slot)?, reader.string(run.job)?)),
                    None => None,
                };
                Ok((run, expire, decision.requeue_after))
            },
        )?;
        for slot in expire.iter().chain(run.as_ref().map(|(slot, _)| slot)) {
            if !is_slot(slot) {
                return Err(self.bad(
                    capability,
                    format!("slot {slot:?} must be 1 to 40 lower-case letters, digits and '-'"),
                ));
            }
        }
        let run = match run {
            Some((slot, job)) => {
                let mut job = self.parse_objects(capability, std::slice::from_ref(&job))?;
                job.pop().map(|job| (slot, job))
            }
            None => None,
        };
        Ok(BackupDecision {
            run,
            expire,
            requeue_after: requeue_after.map(Duration::from_millis),
        })
    }

    /// Calls `upgrade.gate`.
    pub fn call_upgrade(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        from_version: &str,
        to_version: &str,
    ) -> Result<GateDecision, CallError> {
        let input = guest::upgrade::GateInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            from_version,
            to_version,
            now: cx.now_ms,
        };
        self.call_export(
            engine,
            limits,
            tags,
            cx.now_ms,
            self.export(Capability::Upgrade),
            (input,),
            |reader, decision: lift::GateDecision| {
                Ok(match decision {
                    lift::GateDecision::Allow => GateDecision::Allow,
                    lift::GateDecision::Wait(reason) => GateDecision::Wait(reader.string(reason)?),
                    lift::GateDecision::Deny(reason) => GateDecision::Deny(reader.string(reason)?),
                })
            },
        )
    }

    /// Calls `finalize.cleanup`.
    pub fn call_finalize(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<CleanupDecision, CallError> {
        let input = guest::finalize::CleanupInput {
            app: &cx.app,
            retained: &cx.observed_texts(),
            now: cx.now_ms,
        };
        self.call_export(
            engine,
            limits,
            tags,
            cx.now_ms,
            self.export(Capability::Finalize),
            (input,),
            |reader, decision: lift::CleanupDecision| {
                if decision.delete.len().saturating_add(decision.keep.len()) > MAX_LISTED {
                    return Err(format!(
                        "{} objects to delete or keep; at most {MAX_LISTED}",
                        decision.delete.len().saturating_add(decision.keep.len())
                    ));
                }
                let mut refs = |list: Vec<lift::ObjectRef>, what: &str| {
                    reader
                        .list(list, MAX_LISTED, what)?
                        .into_iter()
                        .map(|r| {
                            Ok(ObjectRef {
                                api_version: reader.string(r.api_version)?,
                                kind: reader.string(r.kind)?,
                                name: reader.string(r.name)?,
                            })
                        })
                        .collect::<Result<Vec<_>, String>>()
                };
                Ok(CleanupDecision {
                    delete: refs(decision.delete, "objects to delete")?,
                    keep: refs(decision.keep, "objects to keep")?,
                })
            },
        )
    }

    fn bad(&self, capability: Capability, reason: String) -> CallError {
        self.bad_in(capability.interface(), reason)
    }

    fn bad_in(&self, interface: &'static str, reason: String) -> CallError {
        CallError::BadOutput {
            plugin: self.label(),
            interface,
            reason,
        }
    }

    /// Checks the objects the plugin returned as JSON text (see [`PluginObject::parse`]); their
    /// size was bounded as they were read.
    fn parse_objects(
        &self,
        capability: Capability,
        texts: &[String],
    ) -> Result<Vec<PluginObject>, CallError> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| {
                PluginObject::parse(text)
                    .map_err(|reason| self.bad(capability, format!("object {index} {reason}")))
            })
            .collect()
    }
}

/// Why a call failed, when it failed because the guest asked the host for more than a call
/// may have: a transfer over [`CallLimits::transfer_bytes`], or more host resources than [`MAX_HOST_RESOURCES`](super::limits::MAX_HOST_RESOURCES).
fn overreach(err: &wasmtime::Error, limits: &CallLimits) -> Option<String> {
    if err
        .chain()
        .any(|e| e.is::<wasmtime::component::ResourceTableError>())
    {
        return Some(format!(
            "it opened more than {} host resources (streams, pollables) at once",
            super::limits::MAX_HOST_RESOURCES
        ));
    }
    lift::over_transfer_limit(err).then(|| {
        format!(
            "it passed more than {} bytes to the host in one transfer (a result, or the \
                 arguments of one import call), counting every entry of its lists",
            limits.transfer_bytes()
        )
    })
}

/// Most objects a plan may hold as it is read: far more than the guard lets through (it names
/// the count it allows), few enough that reading the list costs nothing.
const MAX_PLANNED: usize = 4096;

/// Most entries in any list a plugin returns besides a plan's objects (kinds in metadata, slots
/// to expire, objects to delete or keep): a plugin of one App has no use for more.
const MAX_LISTED: usize = 64;

/// Condition types the host writes itself; a plugin's own conditions must use other names.
const RESERVED_CONDITIONS: [&str; 5] = [
    "PluginReady",
    "Available",
    "Progressing",
    "Degraded",
    "UpgradeGated",
];

fn is_camel_case(text: &str) -> bool {
    text.len() <= 128
        && text.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && text.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_slot(slot: &str) -> bool {
    (1..=40).contains(&slot.len())
        && slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !slot.starts_with('-')
        && !slot.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_dns_label_safe() {
        assert!(is_slot("20261202-060000"));
        assert!(!is_slot("2026-12-02T06:00:00Z"));
        assert!(!is_slot(""));
        assert!(!is_slot("-a"));
        assert!(!is_slot(&"a".repeat(41)));
    }

    #[test]
    fn condition_words_are_camel_case() {
        assert!(is_camel_case("ReplicasReady"));
        assert!(!is_camel_case("replicas ready"));
        assert!(!is_camel_case(""));
    }
}
