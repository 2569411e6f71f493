//! The guard's bound on how many pods one workload of a plan may ask for (rule
//! `wasmop/maxReplicas`). Each replica is a pod the cluster schedules and runs on the
//! namespace's account and the host caches (it watches the Pods an App's workloads make), so a
//! plan with `replicas: 100000` costs every tenant, and the namespace's ResourceQuota, if the
//! admin set one, is the only other bound. The policy's `maxReplicas` (default
//! [`DEFAULT_MAX_REPLICAS`], at most [`MAX_REPLICAS_CEILING`]) bounds every field that sets a
//! count of pods, in plans and backup Jobs alike ([`fields_of`]):
//! - `spec.replicas` of a Deployment, StatefulSet, ReplicaSet and ReplicationController;
//! - `spec.parallelism` of a Job and `spec.jobTemplate.spec.parallelism` of a CronJob: the most
//!   pods a Job runs at once (`completions` only says how many succeed in turn, and is not
//!   bounded);
//! - `spec.minReplicas` and `spec.maxReplicas` of a HorizontalPodAutoscaler ([`AUTOSCALER`],
//!   checked with its other rules in [`super::extra`]), which scales its workload without a
//!   plan, on load whoever reaches the App can drive.
//!
//! A count is a JSON number with no fraction (the API server takes `3.0` and `1e3` as integers
//! and refuses any other value in these `int32` fields); anything else, a string or `2.5`, is a
//! value the guard does not understand and is refused, not let through. A DaemonSet runs one
//! pod per node the scheduler lets it on, which the scheduling rules bound
//! ([`super::scheduling`]).

use serde_json::Value;

use super::Breach;

/// Replicas one workload field may ask for when the policy says nothing (`PluginPolicy`
/// `maxReplicas`); the same as the default bound on an App's claims.
pub const DEFAULT_MAX_REPLICAS: usize = 64;

/// The most a policy may raise `maxReplicas` to (as `maxClaims`): the host caches every Pod of
/// every App, and a policy that says more than this means a mistake, not a tenant.
pub const MAX_REPLICAS_CEILING: u32 = 1024;

const RULE: &str = "wasmop/maxReplicas";

/// The fields of a HorizontalPodAutoscaler's `spec` that set a count of pods.
pub(super) const AUTOSCALER: &[&str] = &["minReplicas", "maxReplicas"];

/// The fields of `spec` (dotted paths) that set a count of pods for the workload kinds of
/// `api_version`/`kind`; empty for every other kind (an autoscaler's are [`AUTOSCALER`]).
pub(super) fn fields_of(api_version: &str, kind: &str) -> &'static [&'static str] {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "ReplicaSet")
        | ("v1", "ReplicationController") => &["replicas"],
        ("batch/v1", "Job") => &["parallelism"],
        ("batch/v1", "CronJob") => &["jobTemplate.spec.parallelism"],
        _ => &[],
    }
}

/// Checks the `fields` of `spec` against `max`; the first breach, at `spec.<field>`.
pub(super) fn check(max: usize, fields: &[&str], spec: &Value) -> Option<Breach> {
    fields.iter().find_map(|field| {
        let value = field.split('.').try_fold(spec, |value, key| value.get(key));
        within(value, max).map(|reason| Breach {
            path: format!("spec.{field}"),
            rule: RULE.into(),
            reason,
        })
    })
}

/// Why `value` is not a count of at most `max` pods; `None` when it is one, or absent (the API
/// server's default, 1, or its own refusal where the field is required).
fn within(value: Option<&Value>, max: usize) -> Option<String> {
    let number = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Number(number)) => number,
        Some(other) => {
            return Some(format!(
                "{other} is not a number: the guard bounds counts of pods by the policy's \
                 maxReplicas ({max}) and lets through no value it cannot read"
            ));
        }
    };
    let over = |shown: &dyn std::fmt::Display| {
        format!(
            "{shown} is over the policy's maxReplicas ({max}), the most pods one workload may ask \
             for (a PluginPolicy's maxReplicas raises it, up to {MAX_REPLICAS_CEILING})"
        )
    };
    if let Some(count) = number.as_u64() {
        return (count > max as u64).then(|| over(&count));
    }
    // A negative integer, or a float: whole and not negative is what the API server takes.
    match number.as_f64() {
        Some(count) if count.fract() == 0.0 && count >= 0.0 => {
            (count > max as f64).then(|| over(&number))
        }
        _ => Some(format!(
            "{number} is not a count of pods (a whole number from 0 to the policy's maxReplicas, \
             {max})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_pod_count_field_is_known() {
        assert_eq!(fields_of("apps/v1", "StatefulSet"), ["replicas"]);
        assert_eq!(fields_of("apps/v1", "Deployment"), ["replicas"]);
        assert_eq!(fields_of("apps/v1", "ReplicaSet"), ["replicas"]);
        assert_eq!(fields_of("v1", "ReplicationController"), ["replicas"]);
        assert_eq!(fields_of("batch/v1", "Job"), ["parallelism"]);
        assert_eq!(
            fields_of("batch/v1", "CronJob"),
            ["jobTemplate.spec.parallelism"]
        );
        assert!(fields_of("apps/v1", "DaemonSet").is_empty());
        assert!(fields_of("v1", "ConfigMap").is_empty());
        // Another group's kind of the same name is not the built-in one.
        assert!(fields_of("example.com/v1", "Deployment").is_empty());
    }

    #[test]
    fn counts_up_to_the_bound_pass_and_what_is_over_or_unreadable_is_refused() {
        let replicas = |value: Value| json!({"replicas": value});
        for fine in [
            json!({}),
            replicas(json!(null)),
            replicas(json!(0)),
            replicas(json!(1)),
            replicas(json!(64)),
            replicas(json!(64.0)),
            replicas(json!(6.4e1)),
        ] {
            assert_eq!(check(64, &["replicas"], &fine), None, "{fine}");
        }
        for (spec, reason) in [
            (
                replicas(json!(65)),
                "65 is over the policy's maxReplicas (64)",
            ),
            (
                replicas(json!(100_000)),
                "100000 is over the policy's maxReplicas (64)",
            ),
            (
                replicas(json!(u64::MAX)),
                "18446744073709551615 is over the policy's maxReplicas (64)",
            ),
            (
                replicas(json!(1e5)),
                "100000.0 is over the policy's maxReplicas (64)",
            ),
            (
                replicas(json!(1e300)),
                "is over the policy's maxReplicas (64)",
            ),
            (replicas(json!(2.5)), "2.5 is not a count of pods"),
            (replicas(json!(-1)), "-1 is not a count of pods"),
            (replicas(json!(-1e9)), "is not a count of pods"),
            (replicas(json!("100000")), "\"100000\" is not a number"),
            (replicas(json!("3")), "\"3\" is not a number"),
            (replicas(json!(true)), "true is not a number"),
            (replicas(json!([3])), "[3] is not a number"),
            (replicas(json!({"value": 3})), "is not a number"),
        ] {
            let breach = check(64, &["replicas"], &spec).unwrap_or_else(|| panic!("{spec} passed"));
            assert_eq!(
                (breach.path.as_str(), breach.rule.as_str()),
                ("spec.replicas", RULE),
                "{spec}"
            );
            assert!(breach.reason.contains(reason), "{spec}: {}", breach.reason);
        }
        // The bound is the policy's.
        assert_eq!(check(200, &["replicas"], &replicas(json!(200))), None);
        assert!(check(1, &["replicas"], &replicas(json!(2))).is_some());
    }

    #[test]
    fn nested_and_several_fields_name_the_one_over() {
        let cron = json!({"jobTemplate": {"spec": {"parallelism": 500, "completions": 100000}}});
        let breach = check(64, &["jobTemplate.spec.parallelism"], &cron).expect("over");
        assert_eq!(breach.path, "spec.jobTemplate.spec.parallelism");
        // A template that is not an object has no such field (the API server refuses it).
        assert_eq!(
            check(
                64,
                &["jobTemplate.spec.parallelism"],
                &json!({"jobTemplate": "x"})
            ),
            None
        );
        let hpa = |min: Value, max: Value| json!({"minReplicas": min, "maxReplicas": max});
        assert_eq!(check(64, AUTOSCALER, &hpa(json!(1), json!(64))), None);
        let breach = check(64, AUTOSCALER, &hpa(json!(1), json!(65))).expect("max over");
        assert_eq!(breach.path, "spec.maxReplicas");
        let breach = check(64, AUTOSCALER, &hpa(json!(1000), json!(10))).expect("min over");
        assert_eq!(breach.path, "spec.minReplicas");
    }
}
