//! Pod Security Standards: the guard's own check of every pod template a plugin plans, at the
//! Kubernetes levels `baseline` and `restricted`, before anything is applied.
//!
//! A port of the Go package `k8s.io/pod-security-admission/policy` v0.36.3 (Kubernetes 1.36),
//! with the latest policy version of every check. `checks.go` and `registry.go` become
//! `CHECKS` and `OVERRIDES`: `baseline` runs the baseline checks, `restricted` runs every
//! check except the baseline ones a restricted check overrides, `privileged` runs nothing, and
//! violations come in upstream's order (baseline IDs sorted, then restricted IDs sorted).
//! `visitor.go` becomes `Reader::containers` (init containers, then containers, then ephemeral
//! containers) and `helpers.go` becomes `join_quote`, `pluralize` and
//! `Reader::user_namespace`. Each `check_*.go` is one submodule, with the cases of its
//! `*_test.go` as table tests; `proptests` checks the levels against each other.
//!
//! Upstream checks a decoded `PodSpec`; this module reads the JSON an untrusted plugin wrote, so
//! it also decides what upstream leaves to the decoder:
//! - `null` is the same as an absent field, as in Go's decoding (a `null` list element is the
//!   element's zero value: an empty object, or `""` in a list of strings).
//! - A field a check reads that has the wrong JSON type (a string where a boolean belongs, an
//!   array where an object belongs, a float or out-of-range number where an integer belongs, a
//!   non-object template or `spec`) is a violation of that check naming the field. Upstream
//!   never sees such an object (its decoding fails); allowing it would let a plugin pass a value
//!   the checks did not understand, so it is forbidden instead. The template itself is named `.`.
//! - Fields no check reads are ignored whatever their type, like unknown fields.
//!
//! Two deliberate departures, both only for pods the API server's validation rejects, so that
//! `restricted` never allows what `baseline` forbids: a volume with several sources fails
//! `restrictedVolumes` when any of them is restricted (upstream allows it when one source is
//! allowed), and on a Windows pod `capabilities_restricted` and `seccompProfile_restricted`
//! apply the baseline check they override instead of allowing everything (the API server
//! forbids capabilities and seccomp profiles on Windows pods).

mod allow_privilege_escalation;
mod app_armor_profile;
mod capabilities_baseline;
mod capabilities_restricted;
mod host_namespaces;
mod host_path_volumes;
mod host_ports;
mod host_probes_and_host_lifecycle;
mod privileged;
mod proc_mount_baseline;
mod proc_mount_restricted;
mod restricted_volumes;
mod run_as_non_root;
mod run_as_user;
mod se_linux_options;
mod seccomp_profile_baseline;
mod seccomp_profile_restricted;
mod sysctls;
mod windows_host_process;

#[cfg(test)]
mod proptests;

use std::{collections::BTreeSet, fmt, str::FromStr, sync::LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A Pod Security Standards level, from the most to the least permissive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Unrestricted: no check runs.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Pod hardening best practice; includes every baseline check (or a stricter one).
    Restricted,
}

impl Level {
    /// The level's name as Kubernetes spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A level name that is not `privileged`, `baseline` or `restricted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseLevelError(pub String);

impl fmt::Display for ParseLevelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown Pod Security level {:?}: must be one of privileged, baseline, restricted",
            self.0
        )
    }
}

impl std::error::Error for ParseLevelError {}

impl FromStr for Level {
    type Err = ParseLevelError;

    /// Exact, case-sensitive names, as upstream's `api.ParseLevel`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "privileged" => Ok(Self::Privileged),
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            other => Err(ParseLevelError(other.to_string())),
        }
    }
}

/// One failed check of a pod template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The upstream check ID, like `"privileged"` or `"runAsNonRoot"`.
    pub rule: &'static str,
    /// Every offending field, relative to the pod template, like
    /// `spec.containers[0].securityContext.privileged` (never empty).
    pub paths: Vec<String>,
    /// Upstream's reason and detail, and the level that forbids them, like
    /// `privileged is not allowed under baseline: container "a" must not set
    /// securityContext.privileged=true`.
    pub reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.paths.is_empty() {
            write!(f, "{}: ", self.paths.join(", "))?;
        }
        f.write_str(&self.reason)
    }
}

/// Checks a pod template (`{metadata: {annotations}, spec: PodSpec}`, as in a Deployment's
/// `spec.template` or a bare Pod) against `level`; empty when it is allowed. Never panics,
/// whatever the JSON.
pub fn check_pod_template(level: Level, template: &Value) -> Vec<Violation> {
    checks_for(level)
        .filter_map(|(id, check)| check(template).map(|finding| finding.violation(id, level)))
        .collect()
}

/// One check: reads the template and says what it forbids, if anything.
type CheckFn = fn(&Value) -> Option<Finding>;

/// Every check with its level, in upstream's evaluation order: baseline IDs sorted, then
/// restricted IDs sorted (byte order, as Go's `slices.Sort`). From `registry.go` and each
/// check's `Check*()` registration.
const CHECKS: &[(&str, Level, CheckFn)] = &[
    ("appArmorProfile", Level::Baseline, app_armor_profile::check),
    (
        "capabilities_baseline",
        Level::Baseline,
        capabilities_baseline::check,
    ),
    ("hostNamespaces", Level::Baseline, host_namespaces::check),
    ("hostPathVolumes", Level::Baseline, host_path_volumes::check),
    ("hostPorts", Level::Baseline, host_ports::check),
    (
        "hostProbesAndHostLifecycle",
        Level::Baseline,
        host_probes_and_host_lifecycle::check,
    ),
    ("privileged", Level::Baseline, privileged::check),
    ("procMount", Level::Baseline, proc_mount_baseline::check),
    ("seLinuxOptions", Level::Baseline, se_linux_options::check),
    (
        "seccompProfile_baseline",
        Level::Baseline,
        seccomp_profile_baseline::check,
    ),
    ("sysctls", Level::Baseline, sysctls::check),
    (
        "windowsHostProcess",
        Level::Baseline,
        windows_host_process::check,
    ),
    (
        "allowPrivilegeEscalation",
        Level::Restricted,
        allow_privilege_escalation::check,
    ),
    (
        "capabilities_restricted",
        Level::Restricted,
        capabilities_restricted::check,
    ),
    (
        "procMount_restricted",
        Level::Restricted,
        proc_mount_restricted::check,
    ),
    (
        "restrictedVolumes",
        Level::Restricted,
        restricted_volumes::check,
    ),
    ("runAsNonRoot", Level::Restricted, run_as_non_root::check),
    ("runAsUser", Level::Restricted, run_as_user::check),
    (
        "seccompProfile_restricted",
        Level::Restricted,
        seccomp_profile_restricted::check,
    ),
];

/// `(restricted check, baseline check it replaces at restricted)`: upstream's
/// `OverrideCheckIDs` of the latest versions.
const OVERRIDES: &[(&str, &str)] = &[
    ("capabilities_restricted", "capabilities_baseline"),
    ("procMount_restricted", "procMount"),
    ("restrictedVolumes", "hostPathVolumes"),
    ("seccompProfile_restricted", "seccompProfile_baseline"),
];

/// The checks `level` runs, in order (upstream's `checkRegistry.EvaluatePod`).
fn checks_for(level: Level) -> impl Iterator<Item = (&'static str, CheckFn)> {
    CHECKS
        .iter()
        .filter(move |(id, check_level, _)| {
            level != Level::Privileged
                && *check_level <= level
                && !(level == Level::Restricted
                    && *check_level == Level::Baseline
                    && OVERRIDES.iter().any(|(_, overridden)| overridden == id))
        })
        .map(|(id, _, check)| (*id, *check))
}

/// What one check forbids: upstream's `CheckResult` of a disallowed pod, with the paths.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Finding {
    /// Upstream's `ForbiddenReason`.
    reason: String,
    /// Upstream's `ForbiddenDetail`, then what had the wrong type.
    detail: String,
    /// The offending fields.
    paths: Vec<String>,
}

impl Finding {
    fn new(reason: impl Into<String>, detail: String, paths: Vec<FieldPath>) -> Self {
        Self {
            reason: reason.into(),
            detail,
            paths: paths.into_iter().map(FieldPath::into_string).collect(),
        }
    }

    fn violation(self, rule: &'static str, level: Level) -> Violation {
        let reason = if self.detail.is_empty() {
            format!("{} is not allowed under {level}", self.reason)
        } else {
            format!(
                "{} is not allowed under {level}: {}",
                self.reason, self.detail
            )
        };
        Violation {
            rule,
            paths: self.paths,
            reason,
        }
    }
}

/// A field path relative to the pod template, spelled as Kubernetes' `field.Path`:
/// `spec.containers[0].name`, `metadata.annotations[some/key]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct FieldPath(String);

impl FieldPath {
    fn root() -> Self {
        Self(String::new())
    }

    fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_string())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The path as reported; the template itself is `.`.
    fn into_string(self) -> String {
        if self.0.is_empty() {
            ".".into()
        } else {
            self.0
        }
    }
}

/// The zero value a `null` list element decodes to.
static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// A JSON object of the template and where it is.
#[derive(Debug, Clone)]
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: FieldPath,
}

impl<'a> Obj<'a> {
    /// The path of a field of this object.
    fn at(&self, key: &str) -> FieldPath {
        self.path.child(key)
    }

    /// A field that is set (present and not `null`).
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    /// `name`, for messages only (Go's zero value when it is not a string).
    fn name(&self) -> &'a str {
        self.map.get("name").and_then(Value::as_str).unwrap_or("")
    }

    fn object(&self, r: &mut Reader<'_>, key: &str) -> Option<Obj<'a>> {
        match self.get(key)? {
            Value::Object(map) => Some(Obj {
                map,
                path: self.at(key),
            }),
            other => {
                r.wrong(self.at(key), "an object", other);
                None
            }
        }
    }

    fn boolean(&self, r: &mut Reader<'_>, key: &str) -> Option<bool> {
        match self.get(key)? {
            Value::Bool(value) => Some(*value),
            other => {
                r.wrong(self.at(key), "a boolean", other);
                None
            }
        }
    }

    fn string(&self, r: &mut Reader<'_>, key: &str) -> Option<&'a str> {
        match self.get(key)? {
            Value::String(value) => Some(value),
            other => {
                r.wrong(self.at(key), "a string", other);
                None
            }
        }
    }

    /// An integer of Go type `int32` (`wide` false) or `int64` (`wide` true).
    fn integer(&self, r: &mut Reader<'_>, key: &str, wide: bool) -> Option<i64> {
        let value = self.get(key)?;
        let (range, expected) = if wide {
            (i64::MIN..=i64::MAX, "a 64-bit integer")
        } else {
            (
                i64::from(i32::MIN)..=i64::from(i32::MAX),
                "a 32-bit integer",
            )
        };
        match value.as_i64().filter(|n| range.contains(n)) {
            Some(n) => Some(n),
            None => {
                r.wrong(self.at(key), expected, value);
                None
            }
        }
    }

    fn array(&self, r: &mut Reader<'_>, key: &str) -> &'a [Value] {
        match self.get(key) {
            None => &[],
            Some(Value::Array(items)) => items,
            Some(other) => {
                r.wrong(self.at(key), "an array", other);
                &[]
            }
        }
    }

    /// A list of objects (`null` elements are empty objects).
    fn objects(&self, r: &mut Reader<'_>, key: &str) -> Vec<Obj<'a>> {
        let list = self.at(key);
        let mut out = Vec::new();
        for (i, item) in self.array(r, key).iter().enumerate() {
            match item {
                Value::Object(map) => out.push(Obj {
                    map,
                    path: list.index(i),
                }),
                Value::Null => out.push(Obj {
                    map: &EMPTY,
                    path: list.index(i),
                }),
                other => r.wrong(list.index(i), "an object", other),
            }
        }
        out
    }

    /// A list of strings (`null` elements are `""`).
    fn strings(&self, r: &mut Reader<'_>, key: &str) -> Vec<(FieldPath, &'a str)> {
        let list = self.at(key);
        let mut out = Vec::new();
        for (i, item) in self.array(r, key).iter().enumerate() {
            match item {
                Value::String(s) => out.push((list.index(i), s.as_str())),
                Value::Null => out.push((list.index(i), "")),
                other => r.wrong(list.index(i), "a string", other),
            }
        }
        out
    }
}

/// A container, init container or ephemeral container (upstream's `visitContainers`).
#[derive(Debug, Clone)]
struct Container<'a> {
    obj: Obj<'a>,
    name: &'a str,
}

impl<'a> Container<'a> {
    fn security_context(&self, r: &mut Reader<'_>) -> Option<Obj<'a>> {
        self.obj.object(r, "securityContext")
    }

    /// The path of a field of this container's security context, set or not.
    fn security_context_path(&self, field: &str) -> FieldPath {
        self.obj.at("securityContext").child(field)
    }
}

/// One check's view of the template: typed reads that note every field of the wrong type.
struct Reader<'a> {
    template: &'a Value,
    /// `(field, expected type, what was there)`.
    wrong: Vec<(FieldPath, &'static str, &'static str)>,
}

impl<'a> Reader<'a> {
    fn new(template: &'a Value) -> Self {
        Self {
            template,
            wrong: Vec::new(),
        }
    }

    fn wrong(&mut self, path: FieldPath, expected: &'static str, found: &Value) {
        let found = match found {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) if !expected.ends_with("integer") => "a number",
            Value::Number(n) if n.is_f64() => "a fractional number",
            Value::Number(_) => "an out-of-range number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        self.wrong.push((path, expected, found));
    }

    fn root(&mut self) -> Option<Obj<'a>> {
        match self.template {
            Value::Object(map) => Some(Obj {
                map,
                path: FieldPath::root(),
            }),
            other => {
                self.wrong(FieldPath::root(), "an object", other);
                None
            }
        }
    }

    /// `spec`; absent is an empty spec, as in Go.
    fn spec(&mut self) -> Option<Obj<'a>> {
        self.root()?.object(self, "spec")
    }

    /// `spec.securityContext`.
    fn pod_security_context(&mut self) -> Option<Obj<'a>> {
        self.spec()?.object(self, "securityContext")
    }

    /// `metadata.annotations`.
    fn annotations(&mut self) -> Option<Obj<'a>> {
        self.root()?
            .object(self, "metadata")?
            .object(self, "annotations")
    }

    /// Every container: init containers, then containers, then ephemeral containers.
    fn containers(&mut self) -> Vec<Container<'a>> {
        let Some(spec) = self.spec() else {
            return Vec::new();
        };
        ["initContainers", "containers", "ephemeralContainers"]
            .into_iter()
            .flat_map(|list| spec.objects(self, list))
            .map(|obj| Container {
                name: obj.name(),
                obj,
            })
            .collect()
    }

    /// `spec.hostUsers: false` (upstream's `relaxPolicyForUserNamespacePod`).
    fn user_namespace(&mut self) -> bool {
        self.spec()
            .and_then(|spec| spec.boolean(self, "hostUsers"))
            .is_some_and(|host_users| !host_users)
    }

    /// `spec.os.name: windows`.
    fn windows(&mut self) -> bool {
        self.spec()
            .and_then(|spec| spec.object(self, "os"))
            .and_then(|os| os.string(self, "name"))
            == Some("windows")
    }

    /// The check's finding with the wrong-typed fields added; `reason` is the check's reason
    /// when only those fail it.
    fn finish(self, reason: &str, found: Option<Finding>) -> Option<Finding> {
        if self.wrong.is_empty() {
            return found;
        }
        let mut finding = found.unwrap_or_else(|| Finding {
            reason: reason.to_string(),
            detail: String::new(),
            paths: Vec::new(),
        });
        let mut notes = Vec::new();
        let mut noted = BTreeSet::new();
        for (path, expected, was) in self.wrong {
            let path = path.into_string();
            if noted.insert(path.clone()) {
                notes.push(format!("{path} must be {expected}, not {was}"));
                finding.paths.push(path);
            }
        }
        let mut seen = BTreeSet::new();
        finding.paths.retain(|path| seen.insert(path.clone()));
        if !finding.detail.is_empty() {
            finding.detail.push_str("; ");
        }
        finding.detail.push_str(&notes.join("; "));
        Some(finding)
    }
}

/// `"a", "b"` (upstream's `joinQuote`).
fn join_quote<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let quoted: Vec<String> = items
        .into_iter()
        .map(|item| format!("\"{}\"", item.as_ref()))
        .collect();
    quoted.join(", ")
}

/// Upstream's `pluralize`.
fn pluralize(singular: &'static str, plural: &'static str, count: usize) -> &'static str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` or `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

#[cfg(test)]
mod testing {
    //! Table tests of single checks.

    use serde_json::{Value, json};

    use super::CheckFn;

    /// One upstream test case: the template, and `(reason, detail, paths)` when forbidden.
    pub(super) struct Case {
        pub name: &'static str,
        pub template: Value,
        pub forbidden: Option<(String, String, Vec<String>)>,
    }

    /// A template with this spec and no metadata.
    pub(super) fn pod(spec: Value) -> Value {
        json!({ "metadata": {}, "spec": spec })
    }

    pub(super) fn forbidden(
        name: &'static str,
        template: Value,
        reason: &str,
        detail: &str,
        paths: &[&str],
    ) -> Case {
        Case {
            name,
            template,
            forbidden: Some((
                reason.to_string(),
                detail.to_string(),
                paths.iter().map(ToString::to_string).collect(),
            )),
        }
    }

    pub(super) fn allowed(name: &'static str, template: Value) -> Case {
        Case {
            name,
            template,
            forbidden: None,
        }
    }

    pub(super) fn run(check: CheckFn, cases: Vec<Case>) {
        for case in cases {
            let found = check(&case.template);
            match (case.forbidden, found) {
                (None, None) => {}
                (None, Some(found)) => panic!("{}: expected allowed, got {found:?}", case.name),
                (Some(_), None) => panic!("{}: expected forbidden, was allowed", case.name),
                (Some((reason, detail, paths)), Some(found)) => {
                    assert_eq!(found.reason, reason, "{}: reason", case.name);
                    assert_eq!(found.detail, detail, "{}: detail", case.name);
                    assert_eq!(found.paths, paths, "{}: paths", case.name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules(level: Level, template: &Value) -> Vec<&'static str> {
        check_pod_template(level, template)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn levels_parse_print_and_serialize_lowercase() {
        for (name, level) in [
            ("privileged", Level::Privileged),
            ("baseline", Level::Baseline),
            ("restricted", Level::Restricted),
        ] {
            assert_eq!(name.parse::<Level>(), Ok(level));
            assert_eq!(level.to_string(), name);
            assert_eq!(serde_json::to_value(level).ok(), Some(json!(name)));
            assert_eq!(
                serde_json::from_value::<Level>(json!(name)).ok(),
                Some(level)
            );
        }
        assert!(
            "Restricted".parse::<Level>().is_err(),
            "case-sensitive, as upstream"
        );
        assert!(serde_json::from_value::<Level>(json!("latest")).is_err());
        assert!(Level::Privileged < Level::Baseline && Level::Baseline < Level::Restricted);
    }

    /// `checks_test.go` `TestValidChecks` and `registry.go`'s `validateChecks`.
    #[test]
    fn the_registry_is_valid() {
        let ids: Vec<&str> = CHECKS.iter().map(|(id, _, _)| *id).collect();
        let unique: BTreeSet<&str> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "unique IDs");
        assert_eq!(ids.len(), 19);
        for (restricted, baseline) in OVERRIDES {
            assert!(
                CHECKS
                    .iter()
                    .any(|(id, level, _)| id == restricted && *level == Level::Restricted),
                "only restricted checks override: {restricted}"
            );
            assert!(
                CHECKS
                    .iter()
                    .any(|(id, level, _)| id == baseline && *level == Level::Baseline),
                "only baseline checks are overridden: {baseline}"
            );
        }
        // Upstream's order: baseline IDs sorted, then restricted IDs sorted.
        for level in [Level::Baseline, Level::Restricted] {
            let of_level: Vec<&str> = CHECKS
                .iter()
                .filter(|(_, l, _)| *l == level)
                .map(|(id, _, _)| *id)
                .collect();
            let mut sorted = of_level.clone();
            sorted.sort_unstable();
            assert_eq!(of_level, sorted);
        }
        assert!(CHECKS.windows(2).all(|pair| pair[0].1 <= pair[1].1));
    }

    /// `registry_test.go`: what each level runs at the latest version.
    #[test]
    fn each_level_runs_its_checks() {
        let ids = |level| checks_for(level).map(|(id, _)| id).collect::<Vec<_>>();
        assert!(ids(Level::Privileged).is_empty());
        assert_eq!(
            ids(Level::Baseline),
            [
                "appArmorProfile",
                "capabilities_baseline",
                "hostNamespaces",
                "hostPathVolumes",
                "hostPorts",
                "hostProbesAndHostLifecycle",
                "privileged",
                "procMount",
                "seLinuxOptions",
                "seccompProfile_baseline",
                "sysctls",
                "windowsHostProcess",
            ]
        );
        assert_eq!(
            ids(Level::Restricted),
            [
                "appArmorProfile",
                "hostNamespaces",
                "hostPorts",
                "hostProbesAndHostLifecycle",
                "privileged",
                "seLinuxOptions",
                "sysctls",
                "windowsHostProcess",
                "allowPrivilegeEscalation",
                "capabilities_restricted",
                "procMount_restricted",
                "restrictedVolumes",
                "runAsNonRoot",
                "runAsUser",
                "seccompProfile_restricted",
            ]
        );
    }

    fn restricted_pod() -> Value {
        json!({
            "metadata": { "labels": { "app": "x" } },
            "spec": {
                "securityContext": {
                    "runAsNonRoot": true,
                    "seccompProfile": { "type": "RuntimeDefault" }
                },
                "containers": [{
                    "name": "app",
                    "image": "registry.k8s.io/pause",
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"] }
                    }
                }]
            }
        })
    }

    #[test]
    fn a_restricted_pod_passes_every_level() {
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(check_pod_template(level, &restricted_pod()), []);
        }
        assert_eq!(check_pod_template(Level::Baseline, &json!({})), []);
    }

    #[test]
    fn a_violation_names_its_fields_and_level() {
        let mut pod = restricted_pod();
        pod["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true);
        pod["spec"]["hostPID"] = json!(true);
        let violations = check_pod_template(Level::Baseline, &pod);
        let shown: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "spec.hostPID: host namespaces is not allowed under baseline: hostPID=true",
                "spec.containers[0].securityContext.privileged: privileged is not allowed under \
                 baseline: container \"app\" must not set securityContext.privileged=true",
            ]
        );
        assert_eq!(violations[1].rule, "privileged");
        assert_eq!(
            rules(Level::Restricted, &pod),
            ["hostNamespaces", "privileged"]
        );
        assert_eq!(rules(Level::Privileged, &pod), Vec::<&str>::new());
    }

    #[test]
    fn restricted_replaces_the_baseline_checks_it_overrides() {
        let mut pod = restricted_pod();
        pod["spec"]["volumes"] = json!([{ "name": "root", "hostPath": { "path": "/" } }]);
        assert_eq!(rules(Level::Baseline, &pod), ["hostPathVolumes"]);
        assert_eq!(rules(Level::Restricted, &pod), ["restrictedVolumes"]);
    }

    #[test]
    fn wrong_types_are_forbidden_and_named() {
        let mut pod = restricted_pod();
        pod["spec"]["containers"][0]["securityContext"]["privileged"] = json!("false");
        let violations = check_pod_template(Level::Baseline, &pod);
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].rule, "privileged");
        assert_eq!(
            violations[0].to_string(),
            "spec.containers[0].securityContext.privileged: privileged is not allowed under \
             baseline: spec.containers[0].securityContext.privileged must be a boolean, not a \
             string"
        );

        // A template or spec that is not an object fails every check that reads it.
        for template in [json!([]), json!("pod"), json!(null), json!({ "spec": 1 })] {
            let violations = check_pod_template(Level::Restricted, &template);
            assert_eq!(violations.len(), 15, "{template}");
            for v in &violations {
                assert!(v.paths == ["."] || v.paths == ["spec"], "{v}");
            }
        }
        // Metadata is read by appArmorProfile only.
        assert_eq!(
            rules(
                Level::Restricted,
                &json!({ "metadata": [], "spec": restricted_pod()["spec"] })
            ),
            ["appArmorProfile"]
        );
    }

    #[test]
    fn null_is_absent() {
        let mut pod = restricted_pod();
        pod["spec"]["hostNetwork"] = Value::Null;
        pod["spec"]["volumes"] = Value::Null;
        pod["spec"]["containers"][0]["securityContext"]["privileged"] = Value::Null;
        pod["metadata"]["annotations"] = Value::Null;
        assert_eq!(check_pod_template(Level::Restricted, &pod), []);
    }

    #[test]
    fn quoting_and_plurals_follow_upstream() {
        assert_eq!(join_quote(Vec::<&str>::new()), "");
        assert_eq!(join_quote(["a"]), "\"a\"");
        assert_eq!(join_quote(["a", "b"]), "\"a\", \"b\"");
        assert_eq!(pluralize("volume", "volumes", 0), "volumes");
        assert_eq!(pluralize("volume", "volumes", 1), "volume");
        assert_eq!(containers_phrase(&["a", "b"]), "containers \"a\", \"b\"");
    }

    /// Runs upstream's generated conformance fixtures (`test/testdata/{baseline,restricted}/
    /// v1.35/{pass,fail}/*.yaml` of `k8s.io/pod-security-admission`, the newest policy
    /// version) when `WASMOP_PSA_TESTDATA` names that `testdata` folder; passes otherwise.
    #[test]
    fn upstream_fixtures_when_available() {
        let Ok(root) = std::env::var("WASMOP_PSA_TESTDATA") else {
            eprintln!("WASMOP_PSA_TESTDATA unset: upstream fixtures skipped");
            return;
        };
        let mut count = 0;
        for (level, dir) in [
            (Level::Baseline, "baseline"),
            (Level::Restricted, "restricted"),
        ] {
            for outcome in ["pass", "fail"] {
                let folder = std::path::Path::new(&root)
                    .join(dir)
                    .join("v1.35")
                    .join(outcome);
                let entries = std::fs::read_dir(&folder).expect("fixture folder");
                for entry in entries {
                    let path = entry.expect("fixture entry").path();
                    let text = std::fs::read_to_string(&path).expect("fixture file");
                    let pod: Value = serde_yaml::from_str(&text).expect("fixture YAML");
                    let violations = check_pod_template(level, &pod);
                    let name = path.display();
                    if outcome == "pass" {
                        assert_eq!(violations, [], "{name}");
                    } else {
                        assert!(!violations.is_empty(), "{name} passed");
                        // Upstream names a fixture after the check it targets.
                        let file = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                        let target = file.trim_end_matches(|c: char| c.is_ascii_digit());
                        let replaced = OVERRIDES
                            .iter()
                            .find(|(_, base)| base.to_lowercase() == target)
                            .map(|(restricted, _)| restricted.to_lowercase());
                        assert!(
                            violations.iter().any(|v| {
                                let rule = v.rule.to_lowercase();
                                rule == target
                                    || (level == Level::Restricted
                                        && replaced.as_deref() == Some(rule.as_str()))
                            }),
                            "{name}: {violations:?}"
                        );
                    }
                    count += 1;
                }
            }
        }
        assert!(count > 100, "only {count} fixtures");
    }
}
