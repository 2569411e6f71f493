//! [`Fixture::reconcile`] and [`Fixture::delete`]: the host's whole reconcile and deletion,
//! natively. The decision core the host
//! runs (`wasmop_core::decide`) calls the plugin's traits directly, through the same parsing
//! and serialization as the component, so a test sees the objects the host would apply
//! (stamped with its labels and owner reference), what it would prune, the backup Job, the
//! status with its conditions, the Events and the requeue. Every answer is held to the host's
//! rules on answers ([`super::answers`]): one the host would refuse makes the decision the
//! host's for it (`Degraded`, reason `BadOutput`, the host's message).
//!
//! What stays with the host: the namespace's PluginPolicy. Here every planned object gets the
//! App's namespace and one naming another namespace is refused; pod security, the allowed kinds
//! and sizes are checked by `wasmop plugin run` (with `--policy`) and by the host.

use std::collections::BTreeSet;

use serde_json::Value;
use wasmop_core::{
    Decision, Deletion, Failure, PlanCheck, PluginCalls, Snapshot,
    answers::{self, GateDecision},
    capability::Capability as CoreCapability,
    decide::{self, PluginState},
    decide_deletion,
    object::PluginObject,
    observed::visible_to,
    status::PluginStatus,
};

use super::{Fixture, answers as rules};
use crate::error::{Error, ErrorKind};
use crate::runtime::{Exported, Native};

impl Fixture {
    /// Runs one reconcile of the App as the host would (see the module docs of
    /// `sdk/src/testing/reconcile.rs`): the App's `status` is the previous status, the observed
    /// objects are the cluster, the clock is [`Fixture::now`].
    ///
    /// # Errors
    /// When the App JSON is not an App (no name, a status the host could not have written), or
    /// the plugin's metadata is one the host would refuse to load (`BadOutput`). A plugin error
    /// or an answer the host would refuse is not an `Err`: the decision holds it, as the host's
    /// status would (`Degraded`, reason and message), with `requeue: Backoff`.
    pub fn reconcile<P: Exported>(&self) -> Result<Decision, Error> {
        let (snapshot, owns, observes) = self.snapshot::<P>()?;
        let capabilities = capabilities::<P>();
        let visible: Vec<String> = visible_to(
            &snapshot.observed,
            &owns,
            &observes,
            capabilities.contains(&CoreCapability::Backup),
        )
        .map(|o| o.json.to_string())
        .collect();
        let mut calls = NativeCalls::of::<P>(self.app.clone(), visible, self.now_ms);
        let check = NamespaceCheck {
            namespace: snapshot.app.namespace.clone(),
        };
        Ok(decide::decide(&snapshot, &mut calls, &check))
    }

    /// Runs one pass of deleting the App as the host would ([`wasmop_core::deletion`]): the
    /// observed objects are the cluster (the App's claims among them, which `finalize` is
    /// shown), the clock is [`Fixture::now`]. A StatefulSet of the App that makes claims is
    /// stopped first, and `finalize` is asked only once none is left: carry a decision out
    /// with the observed objects it stops removed, and delete again.
    ///
    /// # Errors
    /// As [`Fixture::reconcile`].
    pub fn delete<P: Exported>(&self) -> Result<Deletion, Error> {
        let (snapshot, _, _) = self.snapshot::<P>()?;
        let retained: Vec<String> = snapshot
            .observed
            .iter()
            .filter(|o| o.api_version == "v1" && o.kind == "PersistentVolumeClaim")
            .map(|o| o.json.to_string())
            .collect();
        let mut calls = NativeCalls::of::<P>(self.app.clone(), retained, self.now_ms);
        Ok(decide_deletion(&snapshot, &mut calls))
    }

    /// The snapshot the host would read for the App: its identity and status, the observed
    /// objects, the plugin serving; with the plugin's declared `owns` and `observes`.
    fn snapshot<P: Exported>(&self) -> Result<(Snapshot, Vec<String>, Vec<String>), Error> {
        let app: Value = serde_json::from_str(&self.app)
            .map_err(|e| Error::invalid_input(format!("the App is not JSON: {e}")))?;
        let metadata = P::metadata();
        let checked = rules::metadata(&metadata).map_err(rules::refused::<P>("metadata"))?;
        let capabilities = capabilities::<P>();
        let plugin = PluginState::Serving {
            label: rules::label(&metadata),
            status: PluginStatus {
                reference: "fixture".into(),
                digest: "native".into(),
                short_digest: "native".into(),
                capabilities: capabilities
                    .iter()
                    .map(|c| c.interface().to_string())
                    .collect(),
                loaded_at: None,
            },
            newer_refused: None,
            uncached: None,
        };
        let now = k8s_openapi::jiff::Timestamp::from_millisecond(self.now_ms)
            .map_err(|e| Error::invalid_input(format!("now: {e}")))?;
        let observed = self
            .observed
            .iter()
            .filter_map(|o| serde_json::from_str(o).ok());
        let mut snapshot = wasmop_core::snapshot::from_json(&app, observed, now, plugin)
            .map_err(|e| Error::invalid_input(e.to_string()))?;
        snapshot.desired_version = self.target();
        if let Some(current) = &self.current_version {
            snapshot.previous.version = Some(current.clone());
        }
        Ok((snapshot, checked.owns, checked.observes))
    }

    /// The fixture as the cluster would be once `decision` was carried out: the App's status
    /// is the decision's; applied objects and the backup Job are observed as the API server
    /// returns them (with a uid and a resourceVersion); pruned and expired objects are gone.
    /// Reconciling that again is how a test checks idempotence.
    ///
    /// # Panics
    /// If the App JSON is not an object: fixtures are test code.
    pub fn after(&self, decision: &Decision) -> Fixture {
        let mut next = self.clone();
        let mut app: Value = serde_json::from_str(&self.app).expect("fixture App is JSON");
        app["status"] = serde_json::to_value(&decision.status).expect("status serializes");
        next.app = app.to_string();
        next.current_version = None;
        let key = |o: &Value| {
            let text = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (text("/apiVersion"), text("/kind"), text("/metadata/name"))
        };
        let gone: BTreeSet<(String, String, String)> = decision
            .prune
            .iter()
            .chain(&decision.backup_expire)
            .map(|k| (k.api_version.clone(), k.kind.clone(), k.name.clone()))
            .collect();
        let existing: Vec<Value> = self
            .observed
            .iter()
            .filter_map(|o| serde_json::from_str::<Value>(o).ok())
            .collect();
        // Applied over what exists: the plan's fields replace the live ones, the rest (status,
        // server defaults) stays, as server-side apply leaves fields it does not manage.
        let created: Vec<Value> = decision
            .apply
            .iter()
            .chain(decision.backup_start.as_ref().map(|(_, job)| job))
            .map(|object| {
                let planned = object.to_value();
                let mut live = existing
                    .iter()
                    .find(|o| key(o) == key(&planned))
                    .cloned()
                    .unwrap_or_else(|| {
                        serde_json::json!({"metadata": {
                            "uid": format!("uid-{}", object.name()),
                            "resourceVersion": "1",
                        }})
                    });
                if let (Some(live), Some(planned)) = (live.as_object_mut(), planned.as_object()) {
                    for (field, value) in planned {
                        match (field.as_str(), live.get_mut(field), value.as_object()) {
                            ("metadata", Some(Value::Object(meta)), Some(planned_meta)) => {
                                meta.extend(planned_meta.clone());
                            }
                            _ => {
                                live.insert(field.clone(), value.clone());
                            }
                        }
                    }
                }
                live
            })
            .collect();
        let replaced: BTreeSet<_> = created.iter().map(key).collect();
        next.observed = existing
            .into_iter()
            .filter(|o| !gone.contains(&key(o)) && !replaced.contains(&key(o)))
            .chain(created)
            .map(|o| o.to_string())
            .collect();
        next
    }
}

/// The plugin's traits as the decision core's calls: a [`PluginCalls`] that runs the plugin's
/// Rust code directly, through the same parsing and serialization as the component. What
/// [`Fixture::reconcile`] decides with, and what a host built with its `native-plugins` feature
/// (the scale benchmark's measure of the Wasm tax) calls instead of the component.
pub struct NativeCalls {
    native: Native,
    capabilities: BTreeSet<CoreCapability>,
    app: String,
    observed: Vec<String>,
    now_ms: i64,
    label: String,
}

impl NativeCalls {
    /// The calls of plugin `P` for the App JSON `app`, with the observed objects it may see
    /// (JSON text) and the clock `now_ms`.
    pub fn of<P: Exported>(app: String, observed: Vec<String>, now_ms: i64) -> Self {
        let metadata = P::metadata();
        NativeCalls {
            native: P::NATIVE,
            capabilities: capabilities::<P>(),
            app,
            observed,
            now_ms,
            label: rules::label(&metadata),
        }
    }

    /// The host's view of an answer it refuses: `BadOutput`, in its words.
    fn bad(&self, interface: &'static str) -> impl FnOnce(answers::AnswerError) -> Failure + '_ {
        move |err| rules::failure(&self.label, interface, &err)
    }

    /// The host's view of a plugin error: `InvalidConfig` or `PluginError`, naming the field.
    fn refused(&self, interface: &str, err: Error) -> Failure {
        let reason = match err.kind() {
            ErrorKind::InvalidConfig => "InvalidConfig",
            _ => "PluginError",
        };
        let field = err
            .field()
            .map(|f| format!(" (field {f})"))
            .unwrap_or_default();
        Failure::new(
            reason,
            format!(
                "plugin {} refused {interface}: {}{field}",
                self.label,
                err.message()
            ),
        )
    }

    fn missing(&self, interface: &str) -> Failure {
        Failure::new(
            "CapabilityMissing",
            format!("{} does not export {interface}", self.label),
        )
    }
}

impl PluginCalls for NativeCalls {
    fn capabilities(&self) -> &BTreeSet<CoreCapability> {
        &self.capabilities
    }

    fn gate(&mut self, from: &str, to: &str) -> Result<GateDecision, Failure> {
        let gate = self.native.gate.ok_or_else(|| self.missing("upgrade"))?;
        let decision = gate(
            &self.app,
            self.observed.clone(),
            from.into(),
            to.into(),
            self.now_ms,
        )
        .map_err(|e| self.refused("upgrade", e))?;
        rules::gate(&decision).map_err(self.bad("upgrade"))
    }

    fn plan(&mut self, current: Option<&str>, target: &str) -> Result<answers::Plan, Failure> {
        let plan = self.native.plan.ok_or_else(|| self.missing("spec-diff"))?;
        let raw = plan(
            &self.app,
            self.observed.clone(),
            current.map(str::to_string),
            target.into(),
            self.now_ms,
        )
        .map_err(|e| self.refused("spec-diff", e))?;
        rules::plan(&raw).map_err(self.bad("spec-diff"))
    }

    fn health(&mut self, version: &str) -> Result<answers::HealthReport, Failure> {
        let check = self.native.check.ok_or_else(|| self.missing("health"))?;
        let report = check(
            &self.app,
            self.observed.clone(),
            version.into(),
            self.now_ms,
        )
        .map_err(|e| self.refused("health", e))?;
        rules::health(&report).map_err(self.bad("health"))
    }

    fn backup(&mut self, last_completed: Option<&str>) -> Result<answers::BackupDecision, Failure> {
        let schedule = self.native.schedule.ok_or_else(|| self.missing("backup"))?;
        let raw = schedule(
            &self.app,
            self.observed.clone(),
            last_completed.map(str::to_string),
            self.now_ms,
        )
        .map_err(|e| self.refused("backup", e))?;
        rules::backup(raw).map_err(self.bad("backup"))
    }

    fn finalize(&mut self) -> Result<answers::CleanupDecision, Failure> {
        let cleanup = self
            .native
            .cleanup
            .ok_or_else(|| self.missing("finalize"))?;
        let raw = cleanup(&self.app, self.observed.clone(), self.now_ms)
            .map_err(|e| self.refused("finalize", e))?;
        rules::cleanup(&raw).map_err(self.bad("finalize"))
    }
}

/// The capabilities `P` exports, as the decision core names them.
fn capabilities<P: Exported>() -> BTreeSet<CoreCapability> {
    P::CAPABILITIES
        .iter()
        .filter_map(|c| CoreCapability::from_interface(c.as_str()))
        .collect()
}

/// The part of the host's guard that needs no policy: objects land in the App's namespace.
struct NamespaceCheck {
    namespace: String,
}

impl PlanCheck for NamespaceCheck {
    fn check_plan(&self, objects: Vec<PluginObject>) -> Result<Vec<PluginObject>, Failure> {
        objects
            .into_iter()
            .map(|mut object| {
                let elsewhere = object
                    .metadata()
                    .get("namespace")
                    .and_then(Value::as_str)
                    .is_some_and(|ns| ns != self.namespace);
                if elsewhere {
                    return Err(Failure::new(
                        "PlanRejected",
                        format!(
                            "plan rejected: {}/{}: metadata.namespace: objects must be in the \
                             App's namespace {}",
                            object.kind(),
                            object.name(),
                            self.namespace
                        ),
                    ));
                }
                object.metadata_mut(|m| {
                    m.insert("namespace".into(), Value::String(self.namespace.clone()));
                });
                Ok(object)
            })
            .collect()
    }

    fn check_backup_job(
        &self,
        _: &str,
        _: &PluginObject,
        _: &BTreeSet<String>,
        _: &BTreeSet<String>,
    ) -> Result<(), Failure> {
        Ok(())
    }

    fn prunable(&self, _: &str, _: &str) -> bool {
        true
    }
}
