//! Property tests of the levels against each other, on templates from a small grammar of the
//! fields the checks read (valid, forbidden and wrong-typed values), on restricted templates
//! changed in one forbidden field, and on arbitrary JSON.

use proptest::{collection::vec, prelude::*, sample::Index, sample::select};
use serde_json::{Map, Value, json};

use super::{Level, Violation, check_pod_template};

// --- The grammar --------------------------------------------------------------------------

/// An object with any subset of these fields.
fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let (keys, values): (Vec<_>, Vec<_>) = fields
        .into_iter()
        .map(|(key, value)| (key, proptest::option::of(value)))
        .unzip();
    values
        .prop_map(move |values| {
            let mut map = Map::new();
            for (key, value) in keys.iter().zip(values) {
                if let Some(value) = value {
                    map.insert((*key).to_string(), value);
                }
            }
            Value::Object(map)
        })
        .boxed()
}

fn one_of(values: Vec<Value>) -> BoxedStrategy<Value> {
    select(values).boxed()
}

fn list(item: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    vec(item, 0..=max).prop_map(Value::Array).boxed()
}

fn boolean() -> BoxedStrategy<Value> {
    one_of(vec![json!(true), json!(false), Value::Null, json!("true")])
}

fn capabilities() -> BoxedStrategy<Value> {
    let names = || {
        one_of(vec![
            json!("NET_BIND_SERVICE"),
            json!("CHOWN"),
            json!("SYS_ADMIN"),
            json!("NET_RAW"),
            json!("ALL"),
            json!(""),
            json!(7),
        ])
    };
    object(vec![("add", list(names(), 3)), ("drop", list(names(), 2))])
}

fn typed(types: Vec<Value>) -> BoxedStrategy<Value> {
    object(vec![("type", one_of(types))])
}

fn seccomp() -> BoxedStrategy<Value> {
    typed(vec![
        json!("RuntimeDefault"),
        json!("Localhost"),
        json!("Unconfined"),
        json!(""),
        json!(5),
    ])
}

fn app_armor() -> BoxedStrategy<Value> {
    typed(vec![
        json!("RuntimeDefault"),
        json!("Localhost"),
        json!("Unconfined"),
    ])
}

fn se_linux() -> BoxedStrategy<Value> {
    object(vec![
        (
            "type",
            one_of(vec![
                json!("container_t"),
                json!("container_engine_t"),
                json!("spc_t"),
                json!(""),
            ]),
        ),
        ("user", one_of(vec![json!(""), json!("system_u")])),
        ("role", one_of(vec![json!(""), json!("system_r")])),
        ("level", one_of(vec![json!("s0:c1,c2")])),
    ])
}

fn windows_options() -> BoxedStrategy<Value> {
    object(vec![("hostProcess", boolean())])
}

fn run_as_user() -> BoxedStrategy<Value> {
    one_of(vec![
        json!(0),
        json!(1000),
        json!(-1),
        json!("0"),
        json!(0.0),
    ])
}

fn container_security_context() -> BoxedStrategy<Value> {
    object(vec![
        ("privileged", boolean()),
        ("allowPrivilegeEscalation", boolean()),
        ("capabilities", capabilities()),
        ("runAsNonRoot", boolean()),
        ("runAsUser", run_as_user()),
        (
            "procMount",
            one_of(vec![json!("Default"), json!("Unmasked"), json!("")]),
        ),
        ("seccompProfile", seccomp()),
        ("seLinuxOptions", se_linux()),
        ("appArmorProfile", app_armor()),
        ("windowsOptions", windows_options()),
        ("readOnlyRootFilesystem", boolean()),
    ])
}

fn handler() -> BoxedStrategy<Value> {
    let host = || one_of(vec![json!(""), json!("localhost"), json!(1)]);
    object(vec![
        (
            "httpGet",
            object(vec![("host", host()), ("port", Just(json!(80)).boxed())]),
        ),
        (
            "tcpSocket",
            object(vec![("host", host()), ("port", Just(json!(80)).boxed())]),
        ),
    ])
}

fn container() -> BoxedStrategy<Value> {
    object(vec![
        ("name", one_of(vec![json!("a"), json!("b")])),
        ("securityContext", container_security_context()),
        (
            "ports",
            list(
                object(vec![
                    ("containerPort", Just(json!(8080)).boxed()),
                    ("hostPort", one_of(vec![json!(0), json!(80), json!("80")])),
                ]),
                2,
            ),
        ),
        ("livenessProbe", handler()),
        ("startupProbe", handler()),
        (
            "lifecycle",
            object(vec![("postStart", handler()), ("preStop", handler())]),
        ),
    ])
}

const ALLOWED_SOURCES: &[&str] = super::restricted_volumes::ALLOWED;
const RESTRICTED_SOURCES: &[&str] = super::restricted_volumes::RESTRICTED;

/// A volume with one source, sometimes two, sometimes none.
fn volume() -> BoxedStrategy<Value> {
    let sources: Vec<&'static str> = ALLOWED_SOURCES
        .iter()
        .chain(RESTRICTED_SOURCES)
        .copied()
        .chain(["unknownSource"])
        .collect();
    (
        select(sources.clone()),
        proptest::option::of(select(sources)),
    )
        .prop_map(|(first, second)| {
            let mut volume = json!({ "name": "v", first: {} });
            if let Some(second) = second {
                volume[second] = json!({});
            }
            volume
        })
        .boxed()
}

fn pod_security_context() -> BoxedStrategy<Value> {
    object(vec![
        ("runAsNonRoot", boolean()),
        ("runAsUser", run_as_user()),
        ("seccompProfile", seccomp()),
        ("seLinuxOptions", se_linux()),
        ("appArmorProfile", app_armor()),
        ("windowsOptions", windows_options()),
        (
            "sysctls",
            list(
                object(vec![(
                    "name",
                    one_of(vec![
                        json!("net.ipv4.tcp_rmem"),
                        json!("kernel.shm_rmid_forced"),
                        json!("kernel.msgmax"),
                    ]),
                )]),
                2,
            ),
        ),
    ])
}

fn spec() -> BoxedStrategy<Value> {
    object(vec![
        ("hostNetwork", boolean()),
        ("hostPID", boolean()),
        ("hostIPC", boolean()),
        ("hostUsers", boolean()),
        (
            "os",
            object(vec![(
                "name",
                one_of(vec![json!("linux"), json!("windows")]),
            )]),
        ),
        ("securityContext", pod_security_context()),
        ("volumes", list(volume(), 2)),
        ("initContainers", list(container(), 1)),
        ("containers", list(container(), 2)),
        ("ephemeralContainers", list(container(), 1)),
    ])
}

fn template() -> BoxedStrategy<Value> {
    let annotations = object(vec![
        (
            "container.apparmor.security.beta.kubernetes.io/a",
            one_of(vec![
                json!("runtime/default"),
                json!("localhost/p"),
                json!("unconfined"),
            ]),
        ),
        (
            "seccomp.security.alpha.kubernetes.io/pod",
            one_of(vec![json!("unconfined")]),
        ),
    ]);
    (annotations, spec())
        .prop_map(|(annotations, spec)| {
            json!({ "metadata": { "annotations": annotations }, "spec": spec })
        })
        .boxed()
}

// --- Restricted templates and one forbidden change ------------------------------------------

fn fixed(value: Value) -> BoxedStrategy<Value> {
    Just(value).boxed()
}

fn restricted_container() -> BoxedStrategy<Value> {
    let security_context = object(vec![
        ("privileged", fixed(json!(false))),
        ("runAsNonRoot", fixed(json!(true))),
        ("runAsUser", fixed(json!(1000))),
        ("procMount", fixed(json!("Default"))),
        // A seccomp or AppArmor profile, when present, must name its type: `{}` is type "",
        // which upstream forbids (for seccomp even under a pod-level RuntimeDefault).
        (
            "seccompProfile",
            one_of(vec![
                json!({ "type": "RuntimeDefault" }),
                json!({ "type": "Localhost" }),
            ]),
        ),
        (
            "seLinuxOptions",
            typed(vec![json!("container_t"), json!("")]),
        ),
        (
            "appArmorProfile",
            one_of(vec![
                json!({ "type": "RuntimeDefault" }),
                json!({ "type": "Localhost" }),
            ]),
        ),
        ("windowsOptions", fixed(json!({ "hostProcess": false }))),
        ("readOnlyRootFilesystem", boolean()),
    ]);
    (
        security_context,
        any::<bool>(),
        object(vec![
            (
                "ports",
                fixed(json!([{ "containerPort": 80, "hostPort": 0 }])),
            ),
            ("livenessProbe", fixed(json!({ "httpGet": { "port": 80 } }))),
        ]),
    )
        .prop_map(|(mut security_context, add_net_bind, mut container)| {
            security_context["allowPrivilegeEscalation"] = json!(false);
            security_context["capabilities"] = if add_net_bind {
                json!({ "drop": ["ALL"], "add": ["NET_BIND_SERVICE"] })
            } else {
                json!({ "drop": ["ALL"] })
            };
            container["securityContext"] = security_context;
            container
        })
        .boxed()
}

fn restricted_template() -> BoxedStrategy<Value> {
    let volume = select(ALLOWED_SOURCES.to_vec()).prop_map(|s| json!({ "name": "v", s: {} }));
    let pod_security_context = object(vec![
        ("runAsUser", fixed(json!(1000))),
        ("seLinuxOptions", typed(vec![json!("container_engine_t")])),
        (
            "appArmorProfile",
            fixed(json!({ "type": "RuntimeDefault" })),
        ),
        (
            "sysctls",
            fixed(json!([{ "name": "net.ipv4.ip_local_port_range", "value": "1024 65535" }])),
        ),
    ]);
    (
        pod_security_context,
        vec(restricted_container(), 0..=1),
        vec(restricted_container(), 1..=2),
        vec(restricted_container(), 0..=1),
        vec(volume, 0..=2),
        object(vec![
            ("hostNetwork", fixed(json!(false))),
            ("hostUsers", fixed(json!(true))),
            ("os", fixed(json!({ "name": "linux" }))),
        ]),
    )
        .prop_map(|(mut sc, init, containers, ephemeral, volumes, mut spec)| {
            sc["runAsNonRoot"] = json!(true);
            sc["seccompProfile"] = json!({ "type": "RuntimeDefault" });
            spec["securityContext"] = sc;
            for (key, list) in [
                ("initContainers", init),
                ("containers", containers),
                ("ephemeralContainers", ephemeral),
            ] {
                let named: Vec<Value> = list
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut c)| {
                        c["name"] = json!(format!("{key}-{i}"));
                        c
                    })
                    .collect();
                spec[key] = Value::Array(named);
            }
            spec["volumes"] = Value::Array(volumes);
            json!({ "metadata": { "labels": { "app": "x" } }, "spec": spec })
        })
        .boxed()
}

/// One forbidden change: set (or append to) a field under the spec or a container.
#[derive(Debug, Clone)]
enum Change {
    /// Set `spec.<path>`.
    Spec(&'static [&'static str], Value),
    /// Append to the list at `spec.<path>`; the offending field is the new element's `suffix`.
    SpecPush(&'static [&'static str], Value, &'static str),
    /// Set `<container>.<path>`.
    Container(Index, &'static [&'static str], Value),
    /// Append to the list at `<container>.<path>`.
    ContainerPush(Index, &'static [&'static str], Value, &'static str),
    /// Set an annotation.
    Annotation(&'static str, Value),
}

fn change() -> impl Strategy<Value = Change> {
    let spec: Vec<(&'static [&'static str], Value)> = vec![
        (&["hostNetwork"], json!(true)),
        (&["hostPID"], json!(true)),
        (&["hostIPC"], json!(true)),
        (&["hostUsers"], json!("false")),
        (&["securityContext", "runAsNonRoot"], json!(false)),
        (&["securityContext", "runAsUser"], json!(0)),
        (
            &["securityContext", "seccompProfile", "type"],
            json!("Unconfined"),
        ),
        (
            &["securityContext", "seLinuxOptions", "type"],
            json!("spc_t"),
        ),
        (
            &["securityContext", "seLinuxOptions", "user"],
            json!("root"),
        ),
        (
            &["securityContext", "appArmorProfile", "type"],
            json!("Unconfined"),
        ),
        (
            &["securityContext", "windowsOptions", "hostProcess"],
            json!(true),
        ),
        (&["securityContext", "runAsNonRoot"], json!(1)),
    ];
    let spec_push: Vec<(&'static [&'static str], Value, &'static str)> = vec![
        (
            &["volumes"],
            json!({ "name": "h", "hostPath": { "path": "/" } }),
            "hostPath",
        ),
        (
            &["volumes"],
            json!({ "name": "n", "nfs": { "server": "s", "path": "/" } }),
            "nfs",
        ),
        (
            &["volumes"],
            json!({ "name": "g", "gitRepo": { "repository": "r" } }),
            "gitRepo",
        ),
        (&["volumes"], json!({ "name": "u" }), ""),
        (
            &["securityContext", "sysctls"],
            json!({ "name": "kernel.msgmax", "value": "1" }),
            "name",
        ),
    ];
    let container: Vec<(&'static [&'static str], Value)> = vec![
        (&["securityContext", "privileged"], json!(true)),
        (&["securityContext", "privileged"], json!("false")),
        (
            &["securityContext", "allowPrivilegeEscalation"],
            json!(true),
        ),
        (
            &["securityContext", "capabilities", "drop"],
            json!(["NET_RAW"]),
        ),
        (&["securityContext", "procMount"], json!("Unmasked")),
        (&["securityContext", "runAsNonRoot"], json!(false)),
        (&["securityContext", "runAsUser"], json!(0)),
        (
            &["securityContext", "seccompProfile", "type"],
            json!("Unconfined"),
        ),
        (&["securityContext", "seccompProfile", "type"], json!(5)),
        (
            &["securityContext", "seLinuxOptions", "type"],
            json!("spc_t"),
        ),
        (
            &["securityContext", "seLinuxOptions", "role"],
            json!("sysadm_r"),
        ),
        (
            &["securityContext", "appArmorProfile", "type"],
            json!("Unconfined"),
        ),
        (
            &["securityContext", "windowsOptions", "hostProcess"],
            json!(true),
        ),
        (&["securityContext"], json!("privileged")),
        (&["livenessProbe", "httpGet", "host"], json!("localhost")),
        (
            &["lifecycle", "preStop", "tcpSocket", "host"],
            json!("10.0.0.1"),
        ),
    ];
    let container_push: Vec<(&'static [&'static str], Value, &'static str)> = vec![
        (
            &["securityContext", "capabilities", "add"],
            json!("SYS_ADMIN"),
            "",
        ),
        (
            &["ports"],
            json!({ "containerPort": 80, "hostPort": 8080 }),
            "hostPort",
        ),
    ];
    prop_oneof![
        select(spec).prop_map(|(path, value)| Change::Spec(path, value)),
        select(spec_push).prop_map(|(path, value, suffix)| Change::SpecPush(path, value, suffix)),
        (any::<Index>(), select(container))
            .prop_map(|(index, (path, value))| Change::Container(index, path, value)),
        (any::<Index>(), select(container_push)).prop_map(|(index, (path, value, suffix))| {
            Change::ContainerPush(index, path, value, suffix)
        }),
        select(vec![
            json!("unconfined"),
            json!("bogus"),
            json!(["runtime/default"])
        ])
        .prop_map(|value| Change::Annotation(
            "container.apparmor.security.beta.kubernetes.io/c",
            value
        )),
    ]
}

/// The field at `path` under `value`, made an object on the way where it is not one.
fn field<'v>(mut value: &'v mut Value, path: &[&str]) -> &'v mut Value {
    for key in path {
        if !value.is_object() {
            *value = Value::Object(Map::new());
        }
        value = value
            .as_object_mut()
            .expect("made an object above")
            .entry(*key)
            .or_insert(Value::Null);
    }
    value
}

/// Appends to the list at `path`; returns the new element's index.
fn push(value: &mut Value, path: &[&str], element: Value) -> usize {
    let list = field(value, path);
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let items = list.as_array_mut().expect("made an array above");
    items.push(element);
    items.len() - 1
}

fn join(prefix: String, path: &[&str]) -> String {
    path.iter().fold(prefix, |out, key| format!("{out}.{key}"))
}

/// Applies the change; returns the path of the field it made forbidden.
fn apply(template: &mut Value, change: &Change) -> String {
    let containers: Vec<(&str, usize)> = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|list| {
            let count = template["spec"][list].as_array().map_or(0, Vec::len);
            (0..count).map(move |i| (list, i))
        })
        .collect();
    let pick = |index: &Index| containers[index.index(containers.len())];
    match change {
        Change::Spec(path, value) => {
            *field(&mut template["spec"], path) = value.clone();
            join("spec".into(), path)
        }
        Change::SpecPush(path, value, suffix) => {
            let i = push(&mut template["spec"], path, value.clone());
            let list = join("spec".into(), path);
            if suffix.is_empty() {
                format!("{list}[{i}]")
            } else {
                format!("{list}[{i}].{suffix}")
            }
        }
        Change::Container(index, path, value) => {
            let (list, i) = pick(index);
            *field(&mut template["spec"][list][i], path) = value.clone();
            join(format!("spec.{list}[{i}]"), path)
        }
        Change::ContainerPush(index, path, value, suffix) => {
            let (list, i) = pick(index);
            let k = push(&mut template["spec"][list][i], path, value.clone());
            let at = join(format!("spec.{list}[{i}]"), path);
            if suffix.is_empty() {
                format!("{at}[{k}]")
            } else {
                format!("{at}[{k}].{suffix}")
            }
        }
        Change::Annotation(key, value) => {
            *field(template, &["metadata", "annotations", key]) = value.clone();
            format!("metadata.annotations[{key}]")
        }
    }
}

// --- Arbitrary JSON -------------------------------------------------------------------------

/// Keys the checks read, and some they do not.
const KEYS: &[&str] = &[
    "metadata",
    "annotations",
    "spec",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "securityContext",
    "privileged",
    "capabilities",
    "add",
    "drop",
    "volumes",
    "hostPath",
    "emptyDir",
    "name",
    "type",
    "os",
    "hostUsers",
    "hostNetwork",
    "ports",
    "hostPort",
    "livenessProbe",
    "lifecycle",
    "preStop",
    "httpGet",
    "host",
    "seccompProfile",
    "seLinuxOptions",
    "appArmorProfile",
    "sysctls",
    "windowsOptions",
    "hostProcess",
    "procMount",
    "runAsUser",
    "runAsNonRoot",
    "allowPrivilegeEscalation",
    "container.apparmor.security.beta.kubernetes.io/x",
];

fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(KEYS).prop_map(str::to_string),
        1 => "[a-zA-Z]{1,6}",
    ]
    .boxed()
}

fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        select(vec![
            "windows",
            "Unmasked",
            "ALL",
            "SYS_ADMIN",
            "RuntimeDefault",
            "Unconfined",
            "localhost/x",
            "spc_t",
            "",
        ])
        .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 96, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec((key(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A template whose known fields hold arbitrary JSON.
fn shaped_json() -> BoxedStrategy<Value> {
    let arbitrary = || json_value();
    let container = object(vec![
        ("name", arbitrary()),
        ("securityContext", arbitrary()),
        ("ports", arbitrary()),
        ("livenessProbe", arbitrary()),
        ("lifecycle", arbitrary()),
    ]);
    let spec = object(vec![
        ("securityContext", arbitrary()),
        ("containers", list(container.clone(), 2)),
        ("initContainers", list(container, 1)),
        ("ephemeralContainers", arbitrary()),
        ("volumes", arbitrary()),
        ("os", arbitrary()),
        ("hostUsers", arbitrary()),
        ("hostPID", arbitrary()),
    ]);
    object(vec![("metadata", arbitrary()), ("spec", spec)])
}

// --- Properties -----------------------------------------------------------------------------

fn paths(violations: &[Violation]) -> std::collections::BTreeSet<&str> {
    violations
        .iter()
        .flat_map(|v| v.paths.iter().map(String::as_str))
        .collect()
}

/// Privileged allows everything; what restricted allows, baseline allows; and every field
/// baseline names, restricted names too.
fn assert_levels_nest(template: &Value) -> Result<(), TestCaseError> {
    let privileged = check_pod_template(Level::Privileged, template);
    let baseline = check_pod_template(Level::Baseline, template);
    let restricted = check_pod_template(Level::Restricted, template);
    prop_assert!(privileged.is_empty());
    if restricted.is_empty() {
        prop_assert!(
            baseline.is_empty(),
            "allowed by restricted only: {baseline:?}"
        );
    }
    let (baseline_paths, restricted_paths) = (paths(&baseline), paths(&restricted));
    prop_assert!(
        baseline_paths.is_subset(&restricted_paths),
        "baseline names {:?} that restricted does not",
        baseline_paths
            .difference(&restricted_paths)
            .collect::<Vec<_>>()
    );
    for violation in baseline.iter().chain(&restricted) {
        prop_assert!(!violation.paths.is_empty(), "{violation:?}");
        prop_assert!(!violation.to_string().is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn levels_nest_on_the_grammar(template in template()) {
        assert_levels_nest(&template)?;
    }

    #[test]
    fn levels_nest_on_changed_restricted_templates(
        mut template in restricted_template(),
        changes in vec(change(), 0..3),
    ) {
        for change in &changes {
            apply(&mut template, change);
        }
        assert_levels_nest(&template)?;
    }

    #[test]
    fn one_forbidden_field_fails_restricted_and_is_named(
        mut template in restricted_template(),
        change in change(),
    ) {
        let before = check_pod_template(Level::Restricted, &template);
        prop_assert!(before.is_empty(), "the base is not restricted: {before:?}");
        let path = apply(&mut template, &change);
        let after = check_pod_template(Level::Restricted, &template);
        prop_assert!(
            after.iter().any(|v| v.paths.contains(&path)),
            "{change:?} should name {path}: {after:?}"
        );
    }

    #[test]
    fn arbitrary_json_never_panics(template in json_value()) {
        assert_levels_nest(&template)?;
    }

    #[test]
    fn arbitrary_fields_never_panic(template in shaped_json()) {
        assert_levels_nest(&template)?;
    }
}
