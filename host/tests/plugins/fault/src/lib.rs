//! A plugin that misbehaves on request, to prove the host's sandbox: each fault must become its
//! own specific error, within its deadline, without touching other plugins. Its `validate` and
//! `convert` misanswer as an instance's `spec.fault` says, to prove the host's checks on the
//! webhooks' answers.

// The aliasing modes build Strings that share one buffer, which only unsafe code can do.
#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicU32, Ordering},
};

use wasmop_sdk::wit::{
    base::exports::wasmop::plugin::metadata::{self, ApiVersion, Capability, Info, KindRef},
    convert::exports::wasmop::plugin::convert,
    spec_diff::exports::wasmop::plugin::spec_diff::{
        self, Desired, ErrorKind, PlanInput, PluginError,
    },
    validate::exports::wasmop::plugin::validate,
};

struct Fault;

/// Never frees. The aliasing modes return many Strings over one buffer, which the bindings free
/// one by one after the call (a double free to a real allocator); with this one that is
/// harmless, so whatever the host reports is the host's own doing. An instance lives for one
/// call, so nothing leaks past it.
struct NeverFree;

// SAFETY: allocation is System's; not freeing is always sound.
unsafe impl GlobalAlloc for NeverFree {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: NeverFree = NeverFree;

/// `count` Strings that all are the same `len` bytes: what the canonical ABI lets a guest hand
/// the host, `count * len` bytes to copy out of `len` bytes of memory.
fn aliased(count: usize, len: usize) -> Vec<String> {
    let buffer: &'static mut [u8] = Box::leak(vec![b'x'; len].into_boxed_slice());
    let ptr = buffer.as_mut_ptr();
    (0..count)
        // SAFETY: the bytes are ASCII and live forever; no String is ever freed (NeverFree)
        // and none is written through.
        .map(|_| unsafe { String::from_raw_parts(ptr, len, len) })
        .collect()
}

/// Survives between calls only if the host reuses instances, which it must not.
static CALLS: AtomicU32 = AtomicU32::new(0);

impl metadata::Guest for Fault {
    fn get() -> Info {
        Info {
            name: "fault".into(),
            version: "0.1.0".into(),
            description: "misbehaves on request".into(),
            capabilities: vec![
                Capability::SpecDiff,
                Capability::Validate,
                Capability::Convert,
            ],
            // Hostile: it declares every kind it may plan, so that what stops its attacks is
            // the guard's rules, not the declaration.
            owns: [
                ("v1", "ConfigMap"),
                ("apps/v1", "Deployment"),
                ("batch/v1", "Job"),
                ("v1", "Service"),
                ("v1", "PersistentVolumeClaim"),
                ("v1", "ServiceAccount"),
                ("apps/v1", "StatefulSet"),
                // Not built-in kinds: planned only where a PluginPolicy adds them.
                ("networking.k8s.io/v1", "NetworkPolicy"),
                ("networking.k8s.io/v1", "Ingress"),
                ("monitoring.coreos.com/v1", "ServiceMonitor"),
            ]
            .into_iter()
            .map(|(api_version, kind)| KindRef {
                api_version: api_version.into(),
                kind: kind.into(),
            })
            .collect(),
            observes: vec![],
            config_schema: Some(CONFIG_SCHEMA.into()),
            printer_columns: vec![metadata::PrinterColumn {
                name: "Fault".into(),
                column_type: metadata::ColumnType::String,
                json_path: ".spec.fault".into(),
                description: "The fault it commits".into(),
            }],
            // Two versions to convert between, free-form.
            versions: ["v1alpha1", "v1"]
                .into_iter()
                .map(|name| ApiVersion {
                    name: name.into(),
                    config_schema: None,
                })
                .collect(),
        }
    }
}

/// The fault a webhook's call commits: an instance's `spec.fault`, or none.
fn instance_fault(object: &str) -> String {
    serde_json::from_str::<serde_json::Value>(object)
        .ok()
        .and_then(|o| o.pointer("/spec/fault")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl validate::Guest for Fault {
    fn validate(
        input: validate::ValidateInput,
    ) -> Result<validate::Verdict, validate::PluginError> {
        let refused = |field: &str| validate::Violation {
            field: field.into(),
            message: "refused on purpose".into(),
        };
        let (violations, warnings) = match instance_fault(&input.object).as_str() {
            "refuse" => (vec![refused("spec.fault")], vec!["warned".to_string()]),
            // An escape sequence for the user's terminal.
            "escape" => (vec![], vec!["\u{1b}[2Jcleared".to_string()]),
            "violations" => ((0..65).map(|_| refused("spec.fault")).collect(), vec![]),
            "rules" => (rules(&input), vec![]),
            "panic" => panic!("the fault plugin panics on purpose"),
            "loop" => loop {
                std::hint::spin_loop();
            },
            _ => (vec![], vec![]),
        };
        Ok(validate::Verdict {
            violations,
            warnings,
        })
    }
}

/// Issue 41's example rules, both reported at once: at most 9 replicas, and on an update,
/// storage never less than before (a rule only the old object can tell).
fn rules(input: &validate::ValidateInput) -> Vec<validate::Violation> {
    let spec = |json: &str| {
        serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .and_then(|o| o.get("spec").cloned())
            .unwrap_or_default()
    };
    let new = spec(&input.object);
    let mut violations = Vec::new();
    if let Some(replicas) = new["replicas"].as_i64().filter(|r| *r > 9) {
        violations.push(validate::Violation {
            field: "spec.replicas".into(),
            message: format!("{replicas} replicas, at most 9"),
        });
    }
    let old = input.old_object.as_deref().map(spec).unwrap_or_default();
    if let (Some(from), Some(to)) = (old["storageGi"].as_i64(), new["storageGi"].as_i64())
        && to < from
    {
        violations.push(validate::Violation {
            field: "spec.storageGi".into(),
            message: format!("storage cannot shrink, from {from}Gi to {to}Gi"),
        });
    }
    violations
}

impl convert::Guest for Fault {
    fn convert(input: convert::ConvertInput) -> Result<String, convert::PluginError> {
        let mut object: serde_json::Value =
            serde_json::from_str(&input.object).map_err(|err| convert::PluginError {
                kind: convert::ErrorKind::InvalidInput,
                message: err.to_string(),
                field: None,
            })?;
        object["apiVersion"] = input.desired_api_version.into();
        match instance_fault(&input.object).as_str() {
            "uid" => object["metadata"]["uid"] = "someone-else".into(),
            "labels" => object["metadata"]["labels"]["converted"] = "yes".into(),
            _ => {}
        }
        Ok(object.to_string())
    }
}

/// Its configuration's schema, by hand: the runtime tests patch these bytes in the component
/// (`"object"` to `"string"`) to prove a bad schema refuses the version at load.
const CONFIG_SCHEMA: &str = r#"{"type":"object","properties":{"fault":{"type":"string","description":"The fault to commit"},"replicas":{"type":"integer","description":"At most 9 (fault rules)"},"storageGi":{"type":"integer","description":"Never less than before (fault rules)"}}}"#;

impl spec_diff::Guest for Fault {
    fn plan(input: PlanInput) -> Result<Desired, PluginError> {
        let app: serde_json::Value =
            serde_json::from_str(&input.app).map_err(|err| PluginError {
                kind: ErrorKind::InvalidInput,
                message: err.to_string(),
                field: None,
            })?;
        // An App's configuration is `spec.config`; a bound kind's instance's, its `spec`.
        let fault = app
            .pointer("/spec/config/fault")
            .or_else(|| app.pointer("/spec/fault"))
            .and_then(|f| f.as_str())
            .unwrap_or("none");
        let object = |data: String| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "fault"}, "data": {"payload": data}
            })
            .to_string()
        };
        let objects = match fault {
            "none" => vec![object("fine".into())],
            // `none`'s ConfigMap with one key more: an App moved from `extra` to `none` must
            // lose it (the host's create must not keep it).
            "extra" => vec![
                serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "fault"},
                    "data": {"payload": "fine", "extra": "planned once"}
                })
                .to_string(),
            ],
            "count" => vec![object(
                (CALLS.fetch_add(1, Ordering::SeqCst) + 1).to_string(),
            )],
            "panic" => panic!("the fault plugin panics on purpose"),
            "loop" => loop {
                std::hint::spin_loop();
            },
            // Waits through WASI clock subscriptions, which block the host thread in poll
            // rather than run guest code the epoch deadline can interrupt.
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                vec![object("slept".into())]
            }
            "nap" => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                vec![object("napped".into())]
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            // What the sandbox's wall clock and randomness give: the host's `now` and a fixed
            // sequence, never the machine's (same input, same answer).
            "clock" => {
                let since = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0);
                vec![object(since.to_string())]
            }
            "random" => {
                use std::hash::BuildHasher;
                // std seeds its hash keys from wasi:random.
                let keyed = std::collections::hash_map::RandomState::new().hash_one(0u8);
                vec![object(keyed.to_string())]
            }
            "huge-output" => vec![object("x".repeat(4 << 20))],
            // Aliased output: 64 objects that are one 1 MiB buffer (64 MiB to copy), and half
            // a million that are (512 GiB).
            "alias-output" => aliased(64, 1 << 20),
            "alias-list" => aliased(500_000, 1 << 20),
            // Aliased import arguments: a log record of 1000 fields whose values are one 1 MiB
            // buffer (1000 MiB to copy).
            "alias-log" => {
                use wasmop_sdk::wit::base::wasmop::plugin::log;
                let fields: Vec<log::Field> = aliased(1000, 1 << 20)
                    .into_iter()
                    .map(|value| log::Field {
                        key: "k".into(),
                        value,
                    })
                    .collect();
                log::emit(log::Level::Info, "aliased", &fields);
                vec![object("logged".into())]
            }
            // A new claim on every reconcile (named after the host's clock, which moves
            // between calls), as if to pile up claims, which are never pruned (issue 38).
            "claim-flood" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0);
                vec![
                    object("fine".into()),
                    serde_json::json!({
                        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": format!("flood-{now}")},
                        "spec": {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Mi"}}},
                    })
                    .to_string(),
                ]
            }
            // A StatefulSet whose claim template and name spell another App's claim
            // (`data-billing-db-0`), which the StatefulSet controller would take over.
            "claim-takeover" => vec![
                object("fine".into()),
                serde_json::json!({
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
                    "spec": {"replicas": 1, "serviceName": "db",
                        "selector": {"matchLabels": {"app": "db"}},
                        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                            "automountServiceAccountToken": false,
                            "securityContext": {"runAsNonRoot": true,
                                "seccompProfile": {"type": "RuntimeDefault"}},
                            "containers": [{"name": "main", "image": "busybox",
                                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}}}]}},
                        "volumeClaimTemplates": [{"metadata": {"name": "data-billing"},
                            "spec": {"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Mi"}}}}]},
                })
                .to_string(),
            ],
            // A ServiceAccount whose name an RBAC binding may already hold (`ci-deployer`).
            "account" => vec![
                object("fine".into()),
                serde_json::json!({
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "ci-deployer"},
                })
                .to_string(),
            ],
            // A kind only a policy's extraKinds allows.
            "network-policy" => vec![
                object("fine".into()),
                serde_json::json!({
                    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "deny-ingress"},
                    "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
                })
                .to_string(),
            ],
            "malformed-json" => vec!["{\"apiVersion\": \"v1\", \"kind\": ".to_string()],
            "not-an-object" => vec!["[1, 2, 3]".to_string()],
            "forbidden" => vec![
                object("fine".into()),
                serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "escape", "namespace": "kube-system"}
                })
                .to_string(),
            ],
            // What an attacker plans (issue 21's table): a good ConfigMap and one object the
            // guard must refuse, naming the field and the rule.
            hostile if HOSTILE.contains(&hostile) => vec![object("fine".into()), attack(hostile)],
            other => {
                return Err(PluginError {
                    kind: ErrorKind::InvalidConfig,
                    message: format!("unknown fault {other:?}"),
                    field: Some("spec.config.fault".into()),
                });
            }
        };
        Ok(Desired {
            objects,
            requeue_after: None,
        })
    }
}

/// The hostile modes, each one object past the trust boundary.
const HOSTILE: &[&str] = &[
    "privileged",
    "host-path",
    "host-network",
    "host-pid",
    "host-service-account",
    "root-job",
    "finalizers",
    "external-ips",
    "other-app",
    "secret-volume",
    "ingress-snippet",
    "service-monitor-file",
];

/// The object of hostile mode `mode`: a Deployment (or Job) whose pods would pass the
/// restricted level but for the one field the mode changes, or a ConfigMap or Service.
fn attack(mode: &str) -> String {
    use serde_json::json;
    let mut pod = json!({
        "metadata": {"labels": {"app": "evil"}},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": "busybox",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    });
    let spec = &mut pod["spec"];
    match mode {
        "privileged" => spec["containers"][0]["securityContext"]["privileged"] = json!(true),
        "host-path" => spec["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]),
        "host-network" => spec["hostNetwork"] = json!(true),
        "host-pid" => spec["hostPID"] = json!(true),
        "host-service-account" => spec["serviceAccountName"] = json!("wasmop"),
        "secret-volume" => {
            spec["volumes"] = json!([{"name": "s", "secret": {"secretName": "db-credentials"}}]);
        }
        "other-app" => pod["metadata"]["labels"]["wasmop.dev/app"] = json!("someone-else"),
        "root-job" => {
            return json!({
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "evil"},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "root", "image": "busybox",
                    "securityContext": {"privileged": true, "runAsUser": 0},
                }]}}},
            })
            .to_string();
        }
        // Extra kinds (issue 38), refused even under a policy that adds them and lists the
        // Ingress's host: a snippet that reads every Secret ingress-nginx can (CVE-2021-25742),
        // and a monitor that makes Prometheus send its own token to this App's endpoint.
        "ingress-snippet" => {
            return json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "evil", "annotations": {
                "nginx.ingress.kubernetes.io/configuration-snippet":
                    "location /t { alias /var/run/secrets/kubernetes.io/serviceaccount/; }",
            }},
            "spec": {"rules": [{"host": "evil.example.com", "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "evil", "port": {"number": 80}}},
            }]}}]}})
            .to_string();
        }
        "service-monitor-file" => {
            return json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "evil"},
            "spec": {"selector": {"matchLabels": {"app": "evil"}}, "endpoints": [{
                "port": "metrics",
                "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            }]}})
            .to_string();
        }
        "finalizers" => {
            return json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "evil", "finalizers": ["example.com/never"]}})
            .to_string();
        }
        _ => {
            return json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "evil"},
                "spec": {"externalIPs": ["8.8.8.8"], "ports": [{"port": 53}]}})
            .to_string();
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "evil"},
        "spec": {"selector": {"matchLabels": {"app": "evil"}}, "template": pod},
    })
    .to_string()
}

wasmop_sdk::wit::base::export!(Fault with_types_in wasmop_sdk::wit::base);
wasmop_sdk::wit::spec_diff::export!(Fault with_types_in wasmop_sdk::wit::spec_diff);
wasmop_sdk::wit::validate::export!(Fault with_types_in wasmop_sdk::wit::validate);
wasmop_sdk::wit::convert::export!(Fault with_types_in wasmop_sdk::wit::convert);
