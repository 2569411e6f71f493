//! How many PersistentVolumeClaims one App may hold. Claims are never pruned (they hold data;
//! only `finalize` deletes them), so a plugin that named a new claim on every reconcile would
//! pile them up without bound, each cached by the host and copied into every call. The count is
//! of every claim the App would hold after the plan is applied: those observed with its label,
//! those the plan names, and those its StatefulSets' claim templates make, one per replica.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::{calls::Failure, object::PluginObject, observed::ObservedObject};

/// Claims one App may hold when its policy says nothing (`PluginPolicy` `maxClaims`).
pub const DEFAULT_MAX_CLAIMS: usize = 64;

/// Refuses a plan (reason `PlanRejected`) after which the App would hold more than `max`
/// claims; `objects` is the checked plan, `observed` what the host holds of the App.
pub fn within_limit(
    objects: &[PluginObject],
    observed: &[ObservedObject],
    max: usize,
) -> Result<(), Failure> {
    let mut names: BTreeSet<String> = observed
        .iter()
        .filter(|o| o.api_version == "v1" && o.kind == "PersistentVolumeClaim")
        .map(|o| o.name.clone())
        .collect();
    let mut templated: u64 = 0;
    let mut from_sets = Vec::new();
    for object in objects {
        match (object.api_version(), object.kind()) {
            ("v1", "PersistentVolumeClaim") => {
                names.insert(object.name().to_string());
            }
            ("apps/v1", "StatefulSet") => {
                let set = StatefulSetClaims::of(object);
                templated = templated.saturating_add(set.count());
                from_sets.push(set);
            }
            _ => {}
        }
    }
    let too_many = |count: u64| {
        Failure::new(
            "PlanRejected",
            format!(
                "the App would hold {count} PersistentVolumeClaims, over its limit of {max} \
                 (claims are kept until the App is deleted; a policy's maxClaims raises the \
                 limit)"
            ),
        )
    };
    // More claims from StatefulSets alone than the limit: no need to name them.
    if templated > max as u64 {
        return Err(too_many(templated.max(names.len() as u64)));
    }
    for set in &from_sets {
        names.extend(set.names());
    }
    if names.len() > max {
        return Err(too_many(names.len() as u64));
    }
    Ok(())
}

/// The claims a StatefulSet's controller makes: one per claim template and replica, named
/// `<template>-<set>-<ordinal>`, and it takes over a claim of that name that already exists.
pub struct StatefulSetClaims {
    set: String,
    templates: Vec<String>,
    start: u64,
    replicas: u64,
}

impl StatefulSetClaims {
    /// Those of the planned StatefulSet `object`.
    pub fn of(object: &PluginObject) -> Self {
        let spec = object.field("spec").ok().flatten().unwrap_or(Value::Null);
        // The API server defaults replicas to 1 and takes an integral float (`1e3`) as the
        // integer; anything else it refuses, so counting it as 1 is safe.
        let count = |value: Option<&Value>, default: u64| {
            value
                .and_then(Value::as_f64)
                .filter(|n| n.fract() == 0.0 && *n >= 0.0)
                .map_or(default, |n| n.min(f64::from(i32::MAX)) as u64)
        };
        let templates = spec
            .get("volumeClaimTemplates")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|t| t.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect();
        Self {
            set: object.name().to_string(),
            templates,
            start: count(spec.pointer("/ordinals/start"), 0),
            replicas: count(spec.get("replicas"), 1),
        }
    }

    /// Whether the set makes claims at all: it has claim templates, whatever its replicas now
    /// (a set scaled to 0 makes claims again when scaled up, outside any plan).
    pub fn makes_claims(&self) -> bool {
        !self.templates.is_empty()
    }

    /// How many claims.
    pub fn count(&self) -> u64 {
        self.replicas.saturating_mul(self.templates.len() as u64)
    }

    /// Their names; as many as [`Self::count`], so bound that first.
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.templates.iter().flat_map(move |template| {
            (self.start..self.start.saturating_add(self.replicas))
                .map(move |ordinal| format!("{template}-{}-{ordinal}", self.set))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> PluginObject {
        PluginObject::parse(&value.to_string()).expect("a plugin object")
    }

    fn claim(name: &str) -> PluginObject {
        object(
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}}),
        )
    }

    fn observed_claim(name: &str) -> ObservedObject {
        ObservedObject::from_value(
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}}),
            "uid",
        )
        .expect("an observed object")
    }

    fn set(name: &str, replicas: u64) -> PluginObject {
        object(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
        )
    }

    #[test]
    fn claims_kept_from_earlier_plans_count_toward_the_limit() {
        // A plugin that names a new claim on every reconcile: the claims it named before are
        // still there (never pruned), so the plan that makes the 65th is refused.
        let observed: Vec<ObservedObject> =
            (0..64).map(|i| observed_claim(&format!("x-{i}"))).collect();
        within_limit(&[claim("x-63")], &observed, DEFAULT_MAX_CLAIMS).expect("the same 64");
        let err = within_limit(&[claim("x-64")], &observed, DEFAULT_MAX_CLAIMS)
            .expect_err("a 65th claim");
        assert_eq!(err.reason, "PlanRejected");
        assert!(
            err.message
                .contains("would hold 65 PersistentVolumeClaims, over its limit of 64"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_statefulset_counts_one_claim_per_replica_and_template_once() {
        // kvstore's shape: 3 replicas with a data template, and one backups claim; the
        // observed claims are the same ones and count once.
        let observed = vec![
            observed_claim("data-db-0"),
            observed_claim("data-db-1"),
            observed_claim("backups"),
        ];
        within_limit(&[set("db", 3), claim("backups")], &observed, 4).expect("4 claims");
        assert!(within_limit(&[set("db", 3), claim("backups")], &observed, 3).is_err());
        // `1e3` is 1000 replicas to the API server.
        let float = object(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 1e3, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
        );
        assert!(within_limit(&[float], &[], DEFAULT_MAX_CLAIMS).is_err());
        // Ordinals from `start` name the same claims as those observed.
        let shifted = object(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 2, "ordinals": {"start": 5}, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
        );
        let names: Vec<String> = StatefulSetClaims::of(&shifted).names().collect();
        assert_eq!(names, ["data-db-5", "data-db-6"]);
        let err = within_limit(&[set("db", 2_000_000_000)], &[], DEFAULT_MAX_CLAIMS)
            .expect_err("two billion replicas");
        assert!(
            err.message.contains("would hold 2000000000 "),
            "{}",
            err.message
        );
    }
}
