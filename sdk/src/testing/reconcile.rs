//! [`Fixture::reconcile`] and [`Fixture::delete`]: the host's whole reconcile and deletion,
//! natively. The decision core the host
//! runs (`wasmop_core::decide`) calls the plugin's traits directly, through the same parsing
//! and serialization as the component, so a test sees the objects the host would apply
//! (stamped with its labels and owner reference), what it would prune, the backup Job, the
//! status with its conditions, the Events and the requeue. Every answer is held to the host's
//! rules on answers ([`super::answers`]): one the host would refuse makes the decision the
//! host's for it (`Degraded`, reason `BadOutput`, the host's message).
//!
//! Plans and backup Jobs go through the host's guard ([`wasmop_core::guard::AppCheck`]) under
//! the built-in default policy's plan rules, or the rules given with [`Fixture::with_policy`]:
//! the allowed kinds and the plugin's declared `owns`, names, sizes and the App's namespace,
//! metadata the host owns, the Pod Security Standards level and wasmop's pod rules. A plan the
//! host would refuse makes the decision the host's for it (`Degraded`, reason `PlanRejected`,
//! the host's message). What stays with the host: which PluginPolicy governs the namespace,
//! where plugins may come from, and the RBAC bindings that name ServiceAccounts (none here, as
//! in `wasmop plugin run`).

use std::collections::BTreeSet;

use serde_json::Value;
use wasmop_core::{
    Decision, Deletion, Snapshot,
    capability::Capability as CoreCapability,
    decide::{self, PluginState},
    decide_deletion,
    guard::{AppCheck, Bound, PlanPolicy},
    observed::visible_to,
    status::PluginStatus,
};

use super::{Fixture, NativeCalls, answers as rules};
use crate::error::Error;
use crate::runtime::Exported;

impl Fixture {
    /// Holds plans to `policy`'s plan rules in [`Fixture::reconcile`] instead of the built-in
    /// default policy's ([`PlanPolicy::default`]): what a PluginPolicy of the App's namespace
    /// would allow (`PluginPolicySpec::plan_rules` in the host).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    /// use wasmop_sdk::testing::{self, Fixture, core::guard::PlanPolicy};
    /// # use wasmop_sdk::{Metadata, Plan, PlanInput, Plugin, Result, SpecDiff};
    /// # struct Exposed;
    /// # impl Plugin for Exposed {
    /// #     type Config = serde_json::Value;
    /// #     fn metadata() -> Metadata { Metadata::new("exposed", "0.1.0").owns::<Service>() }
    /// # }
    /// # impl SpecDiff for Exposed {
    /// #     fn plan(_: &PlanInput<serde_json::Value>) -> Result<Plan> {
    /// #         let mut plan = Plan::new();
    /// #         plan.push(&Service {
    /// #             metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    /// #                 name: Some("web".into()),
    /// #                 ..Default::default()
    /// #             },
    /// #             spec: Some(ServiceSpec {
    /// #                 type_: Some("NodePort".into()),
    /// #                 ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
    /// #                 ..Default::default()
    /// #             }),
    /// #             ..Default::default()
    /// #         })?;
    /// #         Ok(plan)
    /// #     }
    /// # }
    /// # wasmop_sdk::export!(Exposed: SpecDiff);
    /// // `Exposed` plans a NodePort Service, which the built-in default policy refuses.
    /// let app = testing::app("demo", "default", "1.0.0", serde_json::json!({}));
    /// let refused = Fixture::new(app.clone()).reconcile::<Exposed>().expect("decides");
    /// assert!(refused.apply.is_empty());
    ///
    /// let node_ports = PlanPolicy {
    ///     service_types: vec!["ClusterIP".into(), "NodePort".into()],
    ///     ..PlanPolicy::default()
    /// };
    /// let decision = Fixture::new(app)
    ///     .with_policy(node_ports)
    ///     .reconcile::<Exposed>()
    ///     .expect("decides");
    /// assert_eq!(decision.apply.len(), 1);
    /// ```
    pub fn with_policy(mut self, policy: PlanPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

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
        // The host's guard, as for an App whose namespace no RBAC binding names accounts in.
        let check = AppCheck {
            policy: self.policy.clone().unwrap_or_default(),
            policy_name: match self.policy {
                None => "the built-in default policy".into(),
                Some(_) => "the Fixture's policy".into(),
            },
            app: snapshot.app.name.clone(),
            kind_mark: snapshot.app.kind_mark(),
            namespace: snapshot.app.namespace.clone(),
            owns: owns.clone(),
            bound: Bound::default(),
        };
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

/// The capabilities `P` exports.
pub(super) fn capabilities<P: Exported>() -> BTreeSet<CoreCapability> {
    P::CAPABILITIES.iter().copied().collect()
}
