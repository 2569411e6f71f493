//! Evaluate: one call of one capability, in a fresh Store with its deadline and memory cap, and
//! the host's checks on what comes back (sizes, JSON shape) before anyone uses it.
//!
//! The canonical ABI lets a guest return a list whose entries all point at the same bytes: a
//! 64 MiB guest can return eight million entries aliasing one 4 MiB buffer, 32 TiB to copy. So
//! every Store carries wasmtime's hostcall fuel, set to `CallLimits::transfer_bytes`: one lift
//! (a result, or the arguments of one import call) may not copy more, counting every entry
//! however the entries alias. What passes is then held to the output cap and to a count per
//! list, here.

use std::{collections::BTreeSet, time::Duration};

use wasmtime::{Store, Trap, component::Instance};

use super::{
    CallError, Capability,
    bindings::exports::wasmop::plugin as guest,
    compile::{CompiledPlugin, PluginMetadata},
    engine::PluginEngine,
    input::AppContext,
    limits::CallLimits,
    object::PluginObject,
    sandbox::{CallState, CallTags},
};

pub use wasmop_core::answers::{
    BackupDecision, CleanupDecision, GateDecision, HealthReport, HealthState, ObjectRef, Plan,
    PluginCondition,
};

/// Converts one interface's generated `plugin-error` into a [`CallError::Refused`]; each WIT
/// interface has its own copy of the type, so this is written once as a macro.
macro_rules! refused {
    ($iface:ident, $plugin:expr, $capability:expr, $err:expr) => {{
        let err = $err;
        let kind = match err.kind {
            guest::$iface::ErrorKind::InvalidConfig => "invalid-config",
            guest::$iface::ErrorKind::InvalidInput => "invalid-input",
            guest::$iface::ErrorKind::Internal => "internal",
        };
        CallError::Refused {
            plugin: $plugin,
            interface: $capability.interface(),
            kind: kind.to_string(),
            message: err.message,
            field: err.field,
        }
    }};
}

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

    /// Runs `call` against the capability's export `indices`, or reports it unsupported.
    // Each argument is a separate input of the call; bundling them would only move the list.
    #[allow(clippy::too_many_arguments)]
    fn invoke<I, R>(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        now_ms: i64,
        capability: Capability,
        indices: &Option<I>,
        call: impl FnOnce(&I, &mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let Some(indices) = indices else {
            return Err(CallError::Unsupported {
                plugin: self.label(),
                interface: capability.interface(),
            });
        };
        self.with_instance(
            engine,
            capability.interface(),
            limits,
            tags,
            now_ms,
            |store, instance| call(indices, store, instance),
        )
    }

    /// Calls `metadata.get`: the smoke test at load, and what the plugin says about itself.
    pub fn call_metadata(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
    ) -> Result<(PluginMetadata, BTreeSet<Capability>), CallError> {
        // metadata gets no input, so its wall clock reads the epoch: same answer every time.
        let info = self.with_instance(engine, "metadata", limits, tags, 0, |store, instance| {
            self.exports
                .metadata
                .load(&mut *store, instance)?
                .call_get(&mut *store)
        })?;
        let kind = |k: &guest::metadata::KindRef| format!("{}/{}", k.api_version, k.kind);
        let claimed = info
            .capabilities
            .iter()
            .map(|c| match c {
                guest::metadata::Capability::SpecDiff => Capability::SpecDiff,
                guest::metadata::Capability::Health => Capability::Health,
                guest::metadata::Capability::Backup => Capability::Backup,
                guest::metadata::Capability::Upgrade => Capability::Upgrade,
                guest::metadata::Capability::Finalize => Capability::Finalize,
            })
            .collect();
        let metadata = PluginMetadata {
            name: info.name,
            version: info.version,
            description: info.description,
            owns: info.owns.iter().map(kind).collect(),
            observes: info.observes.iter().map(kind).collect(),
        };
        let too_long = [
            ("version", metadata.version.len(), 64),
            ("description", metadata.description.len(), 1024),
            ("owns", metadata.owns.len(), MAX_LISTED),
            ("observes", metadata.observes.len(), MAX_LISTED),
        ]
        .into_iter()
        .find(|(_, len, max)| len > max);
        if let Some((field, len, max)) = too_long {
            return Err(CallError::BadOutput {
                plugin: self.label(),
                interface: "metadata",
                reason: format!("metadata {field} has {len} bytes or entries; at most {max}"),
            });
        }
        if metadata.name.is_empty() || metadata.name.len() > 63 {
            return Err(CallError::BadOutput {
                plugin: self.label(),
                interface: "metadata",
                reason: format!(
                    "metadata name {:?} must be 1 to 63 characters",
                    metadata.name
                ),
            });
        }
        Ok((metadata, claimed))
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
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.spec_diff,
            |g, store, instance| g.load(&mut *store, instance)?.call_plan(&mut *store, input),
        )?;
        let desired = result.map_err(|err| refused!(spec_diff, self.label(), capability, err))?;
        let objects = self.parse_objects(capability, limits, &desired.objects)?;
        Ok(Plan {
            objects,
            requeue_after: desired.requeue_after.map(Duration::from_millis),
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
        use guest::health::{ConditionStatus, State};
        let capability = Capability::Health;
        let input = guest::health::CheckInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            version,
            now: cx.now_ms,
        };
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.health,
            |g, store, instance| {
                g.load(&mut *store, instance)?
                    .call_check(&mut *store, input)
            },
        )?;
        let report = result.map_err(|err| refused!(health, self.label(), capability, err))?;
        let size = report.message.len()
            + report
                .conditions
                .iter()
                .map(|c| c.condition_type.len() + c.reason.len() + c.message.len())
                .sum::<usize>();
        self.check_size(capability, limits, size)?;
        let mut seen = std::collections::BTreeSet::new();
        for c in &report.conditions {
            if RESERVED_CONDITIONS.contains(&c.condition_type.as_str())
                || !seen.insert(&c.condition_type)
            {
                return Err(self.bad(
                    capability,
                    format!(
                        "condition type {:?} is the host's or repeated",
                        c.condition_type
                    ),
                ));
            }
            if !is_camel_case(&c.condition_type) || !is_camel_case(&c.reason) {
                return Err(self.bad(
                    capability,
                    format!(
                        "condition type {:?} and reason {:?} must be CamelCase words",
                        c.condition_type, c.reason
                    ),
                ));
            }
        }
        Ok(HealthReport {
            state: match report.state {
                State::Healthy => HealthState::Healthy,
                State::Progressing => HealthState::Progressing,
                State::Degraded => HealthState::Degraded,
            },
            conditions: report
                .conditions
                .into_iter()
                .map(|c| PluginCondition {
                    type_: c.condition_type,
                    status: match c.status {
                        ConditionStatus::True => "True",
                        ConditionStatus::False => "False",
                        ConditionStatus::Unknown => "Unknown",
                    },
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            message: report.message,
            rollout_complete: report.rollout_complete,
        })
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
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.backup,
            |g, store, instance| {
                g.load(&mut *store, instance)?
                    .call_schedule(&mut *store, input)
            },
        )?;
        let decision = result.map_err(|err| refused!(backup, self.label(), capability, err))?;
        if decision.expire.len() > MAX_LISTED {
            return Err(self.bad(
                capability,
                format!(
                    "{} slots to expire; at most {MAX_LISTED} per call",
                    decision.expire.len()
                ),
            ));
        }
        for slot in decision
            .expire
            .iter()
            .chain(decision.run.as_ref().map(|r| &r.slot))
        {
            if !is_slot(slot) {
                return Err(self.bad(
                    capability,
                    format!("slot {slot:?} must be 1 to 40 lower-case letters, digits and '-'"),
                ));
            }
        }
        let run = match decision.run {
            Some(run) => {
                let mut job =
                    self.parse_objects(capability, limits, std::slice::from_ref(&run.job))?;
                job.pop().map(|job| (run.slot, job))
            }
            None => None,
        };
        Ok(BackupDecision {
            run,
            expire: decision.expire,
            requeue_after: decision.requeue_after.map(Duration::from_millis),
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
        let capability = Capability::Upgrade;
        let input = guest::upgrade::GateInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            from_version,
            to_version,
            now: cx.now_ms,
        };
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.upgrade,
            |g, store, instance| g.load(&mut *store, instance)?.call_gate(&mut *store, input),
        )?;
        let decision = result.map_err(|err| refused!(upgrade, self.label(), capability, err))?;
        Ok(match decision {
            guest::upgrade::GateDecision::Allow => GateDecision::Allow,
            guest::upgrade::GateDecision::Wait(reason) => {
                self.check_size(capability, limits, reason.len())?;
                GateDecision::Wait(reason)
            }
            guest::upgrade::GateDecision::Deny(reason) => {
                self.check_size(capability, limits, reason.len())?;
                GateDecision::Deny(reason)
            }
        })
    }

    /// Calls `finalize.cleanup`.
    pub fn call_finalize(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
    ) -> Result<CleanupDecision, CallError> {
        let capability = Capability::Finalize;
        let input = guest::finalize::CleanupInput {
            app: &cx.app,
            retained: &cx.observed_texts(),
            now: cx.now_ms,
        };
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.finalize,
            |g, store, instance| {
                g.load(&mut *store, instance)?
                    .call_cleanup(&mut *store, input)
            },
        )?;
        let decision = result.map_err(|err| refused!(finalize, self.label(), capability, err))?;
        let listed = decision.delete.len() + decision.keep.len();
        if listed > MAX_LISTED {
            return Err(self.bad(
                capability,
                format!("{listed} objects to delete or keep; at most {MAX_LISTED}"),
            ));
        }
        let size: usize = decision
            .delete
            .iter()
            .chain(&decision.keep)
            .map(|r| r.api_version.len() + r.kind.len() + r.name.len())
            .sum();
        self.check_size(capability, limits, size)?;
        let convert = |r: guest::finalize::ObjectRef| ObjectRef {
            api_version: r.api_version,
            kind: r.kind,
            name: r.name,
        };
        Ok(CleanupDecision {
            delete: decision.delete.into_iter().map(convert).collect(),
            keep: decision.keep.into_iter().map(convert).collect(),
        })
    }

    fn bad(&self, capability: Capability, reason: String) -> CallError {
        CallError::BadOutput {
            plugin: self.label(),
            interface: capability.interface(),
            reason,
        }
    }

    fn check_size(
        &self,
        capability: Capability,
        limits: &CallLimits,
        size: usize,
    ) -> Result<(), CallError> {
        if size > limits.max_output_bytes {
            return Err(self.bad(
                capability,
                format!(
                    "{size} bytes of output is over the {} byte cap",
                    limits.max_output_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Checks the objects the plugin returned as JSON text (see [`PluginObject::parse`]).
    fn parse_objects(
        &self,
        capability: Capability,
        limits: &CallLimits,
        texts: &[String],
    ) -> Result<Vec<PluginObject>, CallError> {
        self.check_size(capability, limits, texts.iter().map(String::len).sum())?;
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
    // wasmtime says so only in words, so the words are matched; host/tests/runtime.rs and
    // aliased_output.rs prove they still are.
    let exhausted = format!("{err:#}").contains("fuel allocated for hostcalls has been exhausted");
    exhausted.then(|| {
        format!(
            "it passed more than {} bytes to the host in one transfer (a result, or the \
                 arguments of one import call), counting every entry of its lists",
            limits.transfer_bytes()
        )
    })
}

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
