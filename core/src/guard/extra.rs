//! The guard's rules for the bodies of extra kinds (a policy's `extraKinds`) that can reach past
//! the App from inside its own namespace: an Ingress that serves another team's host or hands
//! its controller raw configuration, a monitor that makes Prometheus read its own files or
//! scrape other namespaces, an autoscaler that scales another App's workload. [`TABLE`] lists
//! the kinds whose bodies the host knows how to check, one function per kind, each returning
//! the first [`Breach`] with its field path and rule `wasmop/<rule>`:
//!
//! - **Ingress** (`networking.k8s.io/v1`, [`ingress`]): no annotation that copies raw
//!   configuration into a controller (`wasmop/ingressSnippet`: ingress-nginx `*-snippet`, NGINX
//!   Inc `nginx.org/*-snippets`, HAProxy `haproxy.org/*-snippet`, HAProxy Ingress `config-*`);
//!   no ingress-nginx value that ends an nginx directive, nor an AWS load balancer group
//!   (`wasmop/ingressAnnotation`); ingress-nginx `auth-url`/`mirror-target` only to a Service of
//!   the namespace (`wasmop/ingressTarget`); no ingress-nginx reference to, or Traefik
//!   middleware of, another namespace (`wasmop/ingressReference`); hosts (rules, TLS,
//!   `server-alias`) and catch-alls (rules without a host, `defaultBackend`) only as the
//!   policy's `ingressHosts` lists them (`wasmop/ingressHost`, default: none); classes only from
//!   `ingressClasses` when it is set (`wasmop/ingressClass`); Service backends only
//!   (`wasmop/ingressBackend`); paths that end no directive (`wasmop/ingressPath`).
//! - **ServiceMonitor, PodMonitor** (`monitoring.coreos.com/v1`, [`monitor`]): no `*File` field
//!   (`wasmop/monitorFile`); its own namespace only (`wasmop/monitorNamespace`); Secret
//!   references only under `allowSecrets` (`wasmop/monitorSecret`); no `proxyUrl` and no target
//!   relabeling that can write `__address__` (`wasmop/monitorTarget`); no `scrapeClass`
//!   (`wasmop/monitorScrapeClass`).
//! - **NetworkPolicy** (`networking.k8s.io/v1`, [`network_policy`]): nothing to refuse; it
//!   governs only its own namespace's pods.
//! - **HorizontalPodAutoscaler** (`autoscaling/v2` and `v1`, [`autoscaler`]): it scales only a
//!   workload of the same plan (`wasmop/scaleTarget`), between `minReplicas` and `maxReplicas`
//!   of at most the policy's `maxReplicas` (`wasmop/maxReplicas`, [`super::replicas`]).
//! - **CronJob** (`batch/v1`, [`cron_job`]): a bound over time, which no bound on one
//!   workload's pods gives it. `concurrencyPolicy` must be `Forbid` or `Replace`
//!   (`wasmop/cronJobConcurrency`): under `Allow`, also what an unset field means, every
//!   schedule starts a new Job while the earlier ones still run, so Jobs that never end add up
//!   to `parallelism` pods each per run, without bound (`* * * * *` with `parallelism: 64` is
//!   64 more pods a minute, every one within `maxReplicas`); with `Forbid` or `Replace` at most
//!   one Job of it runs at a time. `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`
//!   are at most [`MAX_JOB_HISTORY`] (`wasmop/cronJobHistory`): each finished Job kept keeps
//!   its pods, and the CronJob controller deletes only those over the limits. Its pod
//!   template, job template metadata and `parallelism` are checked as the workload kinds' are
//!   (below, and [`super::replicas`]). Left to the cluster: `Replace` deletes the running Job
//!   before starting the next, and its pods stop within their `terminationGracePeriodSeconds`,
//!   which the guard does not bound (no more than for a Deployment's rollouts).
//!
//! A bare Job (`batch/v1`, plannable without a policy) needs none of the CronJob's rules: it is
//! one run the plan names once, not a series. At most `parallelism` of its pods run at once
//! (bounded by `maxReplicas`), however large `completions` or `backoffLimit` are: those only
//! make the run longer, as a Deployment runs for ever (failures are retried with a backoff of
//! up to six minutes). Its finished pods stay until the Job goes (pruned with the plan, or by
//! its `ttlSecondsAfterFinished`); how many finished pods the cluster keeps in all is bounded
//! by kube-controller-manager's terminated-pod garbage collector
//! (`--terminated-pod-gc-threshold`), not by the guard.
//!
//! The guard knows two more sorts of extra kind: the workload kinds (`DaemonSet`, `ReplicaSet`,
//! `CronJob`, a bare `Pod`, `ReplicationController`), whose pod templates [`super::pods`] checks
//! (and a CronJob's job template metadata, [`super::fields::metadata`]), and `Secret` (its type).
//! `Endpoints` and `EndpointSlice` are never plannable (CVE-2021-25740, see the host's `policy`
//! module). Any other extra kind goes unchecked, and the policy's `Valid` condition names it
//! ([`super::checks_body`]).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{Breach, PlanPolicy, replicas};

/// What a body check needs to know beyond the object itself.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scope<'a> {
    /// The App's namespace, which every object of the plan is in.
    pub namespace: &'a str,
    /// The workloads of the same plan an autoscaler may scale: `(apiVersion, kind, name)`.
    pub scalable: &'a BTreeSet<(String, String, String)>,
}

/// One object's body, as the checks read it.
pub(super) struct Body<'a> {
    /// The namespace's rules.
    pub policy: &'a PlanPolicy,
    /// The App and the rest of its plan.
    pub scope: Scope<'a>,
    /// The object's `metadata`.
    pub metadata: &'a Map<String, Value>,
    /// The object's `spec` (`null` when it has none).
    pub spec: &'a Value,
}

/// The check of one kind's body: its first breach.
pub(super) type Check = fn(&Body<'_>) -> Option<Breach>;

/// The extra kinds whose bodies the host checks, by `apiVersion` and kind.
const TABLE: &[(&str, &str, Check)] = &[
    ("networking.k8s.io/v1", "Ingress", ingress),
    ("networking.k8s.io/v1", "NetworkPolicy", network_policy),
    (
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        service_monitor,
    ),
    ("monitoring.coreos.com/v1", "PodMonitor", pod_monitor),
    ("autoscaling/v2", "HorizontalPodAutoscaler", autoscaler),
    ("autoscaling/v1", "HorizontalPodAutoscaler", autoscaler),
    ("batch/v1", "CronJob", cron_job),
];

/// The check of `api_version`/`kind`, if the table has one.
pub(super) fn check_of(api_version: &str, kind: &str) -> Option<Check> {
    TABLE
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, check)| *check)
}

/// Whether an autoscaler may target objects of `api_version`/`kind` (the workload kinds with a
/// `scale` subresource whose pods the guard checks).
pub(super) fn is_scalable(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("apps/v1", "Deployment" | "StatefulSet" | "ReplicaSet") | ("v1", "ReplicationController")
    )
}

fn breach(path: String, rule: &str, reason: String) -> Option<Breach> {
    Some(Breach {
        path,
        rule: rule.to_string(),
        reason,
    })
}

fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn list(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn is_set(value: &Value) -> bool {
    !matches!(value, Value::Null) && value != "" && value != false
}

// ---------------------------------------------------------------------------------------------
// Ingress

/// An Ingress: no annotation that hands a controller raw configuration or reaches past the
/// namespace, hosts and classes only from the policy's lists, Services as the only backends.
fn ingress(body: &Body<'_>) -> Option<Breach> {
    ingress_annotations(body)
        .or_else(|| ingress_class(body))
        .or_else(|| ingress_rules(body))
}

/// The ingress-nginx annotation prefix (a controller may be started with another one,
/// `--annotations-prefix`; the guard knows only the default).
const INGRESS_NGINX: &str = "nginx.ingress.kubernetes.io/";

/// How a controller's configuration annotations are named under a prefix.
#[derive(Clone, Copy)]
enum Named {
    /// `*-snippet` or `*-snippets`.
    Snippet,
    /// `config-*` (HAProxy Ingress: `config-backend`, `config-frontend`, `config-defaults`...).
    Config,
}

/// Annotations that copy their value into a controller's proxy configuration: whoever writes
/// one runs configuration, with the controller's rights, for every tenant the controller serves.
const CONFIGURATION_ANNOTATIONS: &[(&str, Named, &str)] = &[
    (
        INGRESS_NGINX,
        Named::Snippet,
        "ingress-nginx copies snippets into nginx.conf, where they read every Secret the \
         controller can, cluster-wide (CVE-2021-25742, and CVE-2025-1974's family); upstream \
         rates them Critical and refuses them by default since v1.12",
    ),
    (
        "nginx.org/",
        Named::Snippet,
        "NGINX Ingress Controller copies snippets into nginx.conf unvalidated",
    ),
    (
        "nginx.com/",
        Named::Snippet,
        "NGINX Ingress Controller copies snippets into nginx.conf unvalidated",
    ),
    (
        "haproxy.org/",
        Named::Snippet,
        "the HAProxy Kubernetes Ingress Controller copies snippets into haproxy.cfg",
    ),
    (
        "haproxy.com/",
        Named::Snippet,
        "the HAProxy Kubernetes Ingress Controller copies snippets into haproxy.cfg",
    ),
    (
        "ingress.kubernetes.io/",
        Named::Snippet,
        "the HAProxy controllers' legacy prefix: snippets are copied into haproxy.cfg",
    ),
    (
        "haproxy-ingress.github.io/",
        Named::Config,
        "HAProxy Ingress copies config-* annotations into haproxy.cfg",
    ),
    (
        "ingress.kubernetes.io/",
        Named::Config,
        "HAProxy Ingress's legacy prefix: config-* annotations are copied into haproxy.cfg",
    ),
];

/// Why `key` is a configuration annotation, if it is one.
fn configuration_annotation(key: &str) -> Option<&'static str> {
    CONFIGURATION_ANNOTATIONS
        .iter()
        .find(|(prefix, named, _)| {
            key.strip_prefix(prefix).is_some_and(|name| match named {
                Named::Snippet => name.ends_with("-snippet") || name.ends_with("-snippets"),
                Named::Config => name.starts_with("config-"),
            })
        })
        .map(|(_, _, why)| *why)
}

/// The first character of `text` that would end an nginx string, directive or block, or make
/// the next one an escape: the shape of every ingress-nginx injection (CVE-2023-5044
/// `permanent-redirect`; CVE-2025-1097 `auth-tls-match-cn`, CVE-2025-1098 `mirror-*`,
/// CVE-2025-24514 `auth-url`, which CVE-2025-1974 chains; paths: CVE-2021-25745,
/// CVE-2022-4886). `$` stays: nginx variables are what `rewrite-target: /$2` is for. A
/// backslash stays only before a visible character (regular expressions: `\d`, `\.`).
fn ends_a_directive(text: &str) -> Option<char> {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let bad = match c {
            // `#` comments out the rest of the line it lands on in the controller's config.
            '"' | '\'' | '`' | ';' | '{' | '}' | '#' => true,
            '\\' => !chars
                .peek()
                .is_some_and(|n| n.is_ascii_graphic() && *n != '\\'),
            c => c.is_control(),
        };
        if bad {
            return Some(c);
        }
    }
    None
}

fn ingress_annotations(body: &Body<'_>) -> Option<Breach> {
    let Some(Value::Object(annotations)) = body.metadata.get("annotations") else {
        return None;
    };
    for (key, value) in annotations {
        let at = format!("metadata.annotations[{key:?}]");
        if let Some(why) = configuration_annotation(key) {
            return breach(at, "wasmop/ingressSnippet", why.to_string());
        }
        // The API server holds annotation values to strings.
        let value = value.as_str().unwrap_or_default();
        let found = if let Some(name) = key.strip_prefix(INGRESS_NGINX) {
            ingress_nginx(body, name, value, &at)
        } else if let Some(name) = key.strip_prefix("traefik.ingress.kubernetes.io/") {
            traefik(body, name, value, &at)
        } else if key == "alb.ingress.kubernetes.io/group.name" {
            breach(
                at,
                "wasmop/ingressAnnotation",
                "an IngressGroup merges the rules of Ingresses from every namespace into one \
                 load balancer, where one may override another's; the AWS Load Balancer \
                 Controller's docs keep it to users within one trust boundary"
                    .into(),
            )
        } else {
            None
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// One ingress-nginx annotation (`name` after the prefix) other than a snippet.
fn ingress_nginx(body: &Body<'_>, name: &str, value: &str, at: &str) -> Option<Breach> {
    if let Some(c) = ends_a_directive(value) {
        return breach(
            at.to_string(),
            "wasmop/ingressAnnotation",
            format!(
                "{c:?} would end an nginx string or directive: the shape of the ingress-nginx \
                 annotation injections (CVE-2023-5044, CVE-2025-1097, CVE-2025-1098, \
                 CVE-2025-24514)"
            ),
        );
    }
    let namespace = body.scope.namespace;
    match name {
        // More names for the Ingress's server block: held to the hosts like `rules[].host`.
        "server-alias" => value
            .split([',', ' '])
            .filter(|alias| !alias.is_empty())
            .find_map(|alias| unlisted_host(body.policy, alias, at)),
        // The controller sends a request to this URL for each request it serves, from its own
        // network position: past the NetworkPolicies that hold the namespace's pods.
        "auth-url" | "mirror-target" => {
            let host = url_host(value).unwrap_or_default();
            let labels: Vec<&str> = host.split('.').collect();
            let own_service = matches!(
                labels.as_slice(),
                [service, ns, "svc"] | [service, ns, "svc", "cluster", "local"]
                    if !service.is_empty() && *ns == namespace
            );
            if own_service {
                None
            } else {
                breach(
                    at.to_string(),
                    "wasmop/ingressTarget",
                    format!(
                        "the controller would send requests to {value:?} from its own network \
                         position; it may reach only a Service of this namespace \
                         (http://NAME.{namespace}.svc/...)"
                    ),
                )
            }
        }
        // `namespace/name` references to Secrets and ConfigMaps the controller reads.
        _ if name.ends_with("-secret")
            || name.ends_with("-configmap")
            || matches!(name, "auth-proxy-set-headers" | "custom-headers") =>
        {
            match value.split_once('/') {
                Some((ns, _)) if ns != namespace => breach(
                    at.to_string(),
                    "wasmop/ingressReference",
                    format!(
                        "refers to namespace {ns:?}: the controller would read another \
                         namespace's object for this App"
                    ),
                ),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The host of an `http(s)` URL, lowercased; `None` for anything else, or with user info (which
/// would make the text before `@` look like the host).
fn url_host(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    };
    Some(host.to_ascii_lowercase())
}

/// Traefik's references to middlewares and TLS options: `<namespace>-<name>@kubernetescrd`
/// names a Middleware of any namespace (the Ingress provider has no `allowCrossNamespace`),
/// so one of the CRD provider must be of this namespace. Traefik joins namespace and name with
/// `-`, so `team-a-x` is also `a-x` of `team`: the check is on the prefix, the most the ID
/// says. References to other providers (`@file`) are the admin's own configuration.
fn traefik(body: &Body<'_>, name: &str, value: &str, at: &str) -> Option<Breach> {
    if !matches!(name, "router.middlewares" | "router.tls.options") {
        return None;
    }
    let own = format!("{}-", body.scope.namespace);
    value
        .split(',')
        .map(str::trim)
        .filter_map(|entry| entry.strip_suffix("@kubernetescrd"))
        .find(|id| id.strip_prefix(&own).is_none_or(str::is_empty))
        .and_then(|id| {
            breach(
                at.to_string(),
                "wasmop/ingressReference",
                format!(
                    "{id}@kubernetescrd is not a Middleware of this namespace ({own}NAME): \
                     Traefik would apply another namespace's"
                ),
            )
        })
}

/// The policy's classes, if it lists them: `spec.ingressClassName` and the older
/// `kubernetes.io/ingress.class` annotation must both be among them, and one must be set (the
/// API server gives an Ingress without one the cluster's default class, whatever that is).
fn ingress_class(body: &Body<'_>) -> Option<Breach> {
    const RULE: &str = "wasmop/ingressClass";
    let allowed = body.policy.ingress_classes.as_ref()?;
    let annotation = body
        .metadata
        .get("annotations")
        .and_then(|a| a.get("kubernetes.io/ingress.class"));
    let named = [
        (
            "spec.ingressClassName".to_string(),
            text(body.spec.get("ingressClassName")),
        ),
        (
            "metadata.annotations[\"kubernetes.io/ingress.class\"]".to_string(),
            text(annotation),
        ),
    ];
    let listed = || {
        if allowed.is_empty() {
            "ingressClasses is empty: no class".to_string()
        } else {
            format!("ingressClasses: {}", allowed.join(", "))
        }
    };
    let mut any = false;
    for (at, class) in named {
        let Some(class) = class else { continue };
        any = true;
        if !allowed.iter().any(|a| a == class) {
            return breach(
                at,
                RULE,
                format!("{class:?} is not a class the policy allows ({})", listed()),
            );
        }
    }
    if any {
        None
    } else {
        breach(
            "spec.ingressClassName".into(),
            RULE,
            format!(
                "must name a class: without one the cluster's default class applies, and the \
                 policy allows only some ({})",
                listed()
            ),
        )
    }
}

/// Whether the policy lets Ingresses catch every host (`ingressHosts: ["*"]`).
fn catches_all(policy: &PlanPolicy) -> bool {
    policy.ingress_hosts.iter().any(|h| h == "*")
}

/// Whether the policy's `ingressHosts` cover `host`, itself an exact name or a `*.` wildcard.
/// An entry `*.example.com` covers every name under `example.com` and the wildcards under it,
/// not `example.com` itself (the DNS convention); `*` covers everything.
pub(super) fn host_allowed(allowed: &[String], host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host.as_str()),
    };
    // A host is a DNS name, nothing a controller could read otherwise: ingress-nginx takes a
    // `server-alias` starting with `~` as an unanchored regular expression (`~.*` after an
    // allowed suffix would match every host), and a `*` inside a name as a wildcard.
    let dns_name = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !dns_name {
        return allowed.iter().any(|entry| entry == "*") && !host.starts_with('~');
    }
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        if entry == "*" {
            return true;
        }
        match entry.strip_prefix("*.") {
            Some(suffix) => {
                (wildcard && name == suffix)
                    || name
                        .strip_suffix(suffix)
                        .is_some_and(|head| head.ends_with('.') && head.len() > 1)
            }
            None => !wildcard && name == entry,
        }
    })
}

/// A breach at `at` if the policy does not list `host`.
fn unlisted_host(policy: &PlanPolicy, host: &str, at: &str) -> Option<Breach> {
    if host_allowed(&policy.ingress_hosts, host) {
        return None;
    }
    breach(
        at.to_string(),
        "wasmop/ingressHost",
        format!(
            "{host:?} is not a host the policy allows ({})",
            listed_hosts(policy)
        ),
    )
}

fn listed_hosts(policy: &PlanPolicy) -> String {
    if policy.ingress_hosts.is_empty() {
        "ingressHosts is empty: Ingresses may serve no host".into()
    } else {
        format!("ingressHosts: {}", policy.ingress_hosts.join(", "))
    }
}

/// A breach at `at` for a catch-all (which serves every host no other rule names) unless the
/// policy allows one.
fn catch_all(policy: &PlanPolicy, at: String, what: &str) -> Option<Breach> {
    if catches_all(policy) {
        return None;
    }
    breach(
        at,
        "wasmop/ingressHost",
        format!(
            "{what} serves every host no other Ingress names (the controller's catch-all); \
             only a policy with \"*\" in ingressHosts allows that ({})",
            listed_hosts(policy)
        ),
    )
}

/// A backend must be a Service: the Ingress API gives it no namespace, so it is this one's. A
/// `resource` backend hands the controller an object of a kind the host does not check.
fn backend(value: &Value, at: &str) -> Option<Breach> {
    value.get("resource").filter(|r| is_set(r)).and_then(|_| {
        breach(
            format!("{at}.resource"),
            "wasmop/ingressBackend",
            "a backend must be a Service of this namespace, not an object of another kind".into(),
        )
    })
}

fn ingress_rules(body: &Body<'_>) -> Option<Breach> {
    let policy = body.policy;
    let spec = body.spec;
    if let Some(default) = spec.get("defaultBackend").filter(|b| is_set(b)) {
        let found = backend(default, "spec.defaultBackend")
            .or_else(|| catch_all(policy, "spec.defaultBackend".into(), "a default backend"));
        if found.is_some() {
            return found;
        }
    }
    for (i, rule) in list(spec.get("rules")).iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        let found = match text(rule.get("host")) {
            Some(host) => unlisted_host(policy, host, &format!("{at}.host")),
            None => catch_all(policy, format!("{at}.host"), "a rule without a host"),
        };
        if found.is_some() {
            return found;
        }
        for (j, path) in list(rule.pointer("/http/paths")).iter().enumerate() {
            let at = format!("{at}.http.paths[{j}]");
            if let Some(found) = path
                .get("backend")
                .and_then(|b| backend(b, &format!("{at}.backend")))
            {
                return Some(found);
            }
            if let Some(c) = text(path.get("path")).and_then(ends_a_directive) {
                return breach(
                    format!("{at}.path"),
                    "wasmop/ingressPath",
                    format!(
                        "{c:?} would end an nginx string or directive (the ingress-nginx path \
                         injections, CVE-2021-25745, CVE-2022-4886)"
                    ),
                );
            }
        }
    }
    for (i, tls) in list(spec.get("tls")).iter().enumerate() {
        let hosts = list(tls.get("hosts"));
        if hosts.is_empty() {
            let found = catch_all(
                policy,
                format!("spec.tls[{i}].hosts"),
                "a TLS entry without hosts",
            );
            if found.is_some() {
                return found;
            }
        }
        for (j, host) in hosts.iter().enumerate() {
            let at = format!("spec.tls[{i}].hosts[{j}]");
            let found = match host.as_str() {
                Some(host) => unlisted_host(policy, host, &at),
                None => breach(at, "wasmop/ingressHost", "is not a string".into()),
            };
            if found.is_some() {
                return found;
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// NetworkPolicy

/// A NetworkPolicy: nothing is refused. It selects pods of its own namespace only, and can
/// only isolate them or let traffic reach them (`ingress`) or leave them (`egress`, `ipBlock`
/// included): it never changes what another namespace's pods accept. Because policies add up,
/// it can open this namespace's pods to what an admin's own NetworkPolicy in the namespace
/// denies; a floor tenants cannot lift belongs in cluster-scoped policy (AdminNetworkPolicy,
/// or the CNI's own, such as Calico's GlobalNetworkPolicy or Cilium's
/// CiliumClusterwideNetworkPolicy), which a namespaced NetworkPolicy cannot override.
fn network_policy(_: &Body<'_>) -> Option<Breach> {
    None
}

// ---------------------------------------------------------------------------------------------
// ServiceMonitor, PodMonitor

/// A ServiceMonitor: [`monitor`] over its `endpoints`.
fn service_monitor(body: &Body<'_>) -> Option<Breach> {
    monitor(body, "endpoints")
}

/// A PodMonitor: [`monitor`] over its `podMetricsEndpoints`.
fn pod_monitor(body: &Body<'_>) -> Option<Breach> {
    monitor(body, "podMetricsEndpoints")
}

/// Fields of the Prometheus Operator's monitors that name a Secret Prometheus reads and then
/// sends to the target, which is this App's: reading them is reading the Secret.
const MONITOR_SECRETS: &[&str] = &[
    "bearerTokenSecret",
    "basicAuth",
    // `authorization.credentials`, `oauth2.clientSecret`, `tlsConfig.keySecret`, and the
    // `secret` of a SecretOrConfigMap (`tlsConfig.ca`, `tlsConfig.cert`, `oauth2.clientId`).
    "credentials",
    "clientSecret",
    "keySecret",
    "secret",
    "proxyConnectHeader",
];

/// A monitor's `spec`: Prometheus reads no file of its own for it, scrapes only this
/// namespace's targets at their own addresses, and reads Secrets only if the policy lets pods.
/// Prometheus runs with its own credentials (its ServiceAccount token, the kubelet's and
/// etcd's client certificates are files in its pod), so a monitor that names a file makes
/// Prometheus send it to the App's endpoint (the Prometheus Operator refuses them only with
/// `arbitraryFSAccessThroughSMs.deny`, off by default). Under `allowSecrets`, `oauth2.tokenUrl`
/// stays an address of the plan's choosing, which Prometheus posts the App's own client
/// credentials to: Prometheus's egress policy, not the guard, bounds it.
fn monitor(body: &Body<'_>, endpoints: &str) -> Option<Breach> {
    let spec = body.spec;
    monitor_namespaces(spec, body.scope.namespace)
        .or_else(|| {
            spec.get("scrapeClass").filter(|c| is_set(c)).and_then(|_| {
                breach(
                    "spec.scrapeClass".into(),
                    "wasmop/monitorScrapeClass",
                    "a scrape class is the Prometheus admin's and may carry Prometheus's own \
                     TLS files and credentials; the default class still applies"
                        .into(),
                )
            })
        })
        .or_else(|| {
            list(spec.get(endpoints))
                .iter()
                .enumerate()
                .find_map(|(i, endpoint)| {
                    let at = format!("spec.{endpoints}[{i}]");
                    walk_monitor(body.policy, endpoint, &at)
                        .or_else(|| scrape_target(endpoint, &at))
                })
        })
}

/// `namespaceSelector`: without one a monitor selects its own namespace; `any` selects all of
/// them, and `matchNames` may name only this one.
fn monitor_namespaces(spec: &Value, namespace: &str) -> Option<Breach> {
    const RULE: &str = "wasmop/monitorNamespace";
    let selector = spec.get("namespaceSelector")?;
    if selector.get("any").is_some_and(|any| any == true) {
        return breach(
            "spec.namespaceSelector.any".into(),
            RULE,
            "would scrape every namespace's targets; a monitor may select only its own".into(),
        );
    }
    list(selector.get("matchNames"))
        .iter()
        .enumerate()
        .find(|(_, name)| name.as_str() != Some(namespace))
        .and_then(|(i, name)| {
            breach(
                format!("spec.namespaceSelector.matchNames[{i}]"),
                RULE,
                format!("{name} is not this namespace {namespace:?}"),
            )
        })
}

/// Every field of an endpoint `value` at `at`: no `*File` (`bearerTokenFile`,
/// `tlsConfig.caFile`, `certFile`, `keyFile`, `credentialsFile`, `password_file`, and whatever a
/// later version adds), and no Secret reference unless the policy allows Secrets. `params` are
/// the scrape's query parameters, named freely.
fn walk_monitor(policy: &PlanPolicy, value: &Value, at: &str) -> Option<Breach> {
    match value {
        Value::Object(fields) => fields.iter().find_map(|(key, value)| {
            let path = format!("{at}.{key}");
            if !is_set(value) || key == "params" {
                return None;
            }
            if key.ends_with("File") || key.ends_with("_file") {
                return breach(
                    path,
                    "wasmop/monitorFile",
                    "names a file in Prometheus's own pod, which holds Prometheus's \
                     credentials; Prometheus would send it to this App's endpoint"
                        .into(),
                );
            }
            if !policy.allow_secrets && MONITOR_SECRETS.contains(&key.as_str()) {
                return breach(
                    path,
                    "wasmop/monitorSecret",
                    "Prometheus would read this Secret and send it to this App's endpoint: \
                     the policy does not let plugins use Secrets"
                        .into(),
                );
            }
            walk_monitor(policy, value, &path)
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| walk_monitor(policy, item, &format!("{at}[{i}]"))),
        _ => None,
    }
}

/// One endpoint: Prometheus connects to the target the monitor selected, at its own address.
/// `proxyUrl` sends the scrape elsewhere, and a target relabeling that writes `__address__`
/// (directly, or by `labelmap`, whose output names cannot be bounded) scrapes any address from
/// Prometheus's network position, the Endpoints problem (CVE-2021-25740) again. Copy labels
/// onto targets with `targetLabels`/`podTargetLabels`; `metricRelabelings` run after the
/// scrape and stay free.
fn scrape_target(endpoint: &Value, at: &str) -> Option<Breach> {
    const RULE: &str = "wasmop/monitorTarget";
    if endpoint.get("proxyUrl").is_some_and(is_set) {
        return breach(
            format!("{at}.proxyUrl"),
            RULE,
            "would send Prometheus's scrapes through an address the plan chooses".into(),
        );
    }
    for (i, relabel) in list(endpoint.get("relabelings")).iter().enumerate() {
        let at = format!("{at}.relabelings[{i}]");
        if text(relabel.get("targetLabel")) == Some("__address__") {
            return breach(
                format!("{at}.targetLabel"),
                RULE,
                "would point Prometheus at an address of the plan's choosing".into(),
            );
        }
        if text(relabel.get("action")).is_some_and(|a| a.eq_ignore_ascii_case("labelmap")) {
            return breach(
                format!("{at}.action"),
                RULE,
                "labelmap in target relabelings can write __address__; use targetLabels or \
                 podTargetLabels to copy labels"
                    .into(),
            );
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// HorizontalPodAutoscaler

/// An autoscaler scales only a workload its own plan creates (not another App's in the
/// namespace), to at most the policy's `maxReplicas`: a planned workload's size is what the
/// plugin writes on each reconcile, an autoscaler's grows without a plan, on load that whoever
/// reaches the App can drive (the namespace's ResourceQuota remains the real bound on what that
/// costs). Its metrics are read by the cluster's
/// metrics adapters with their own rules; an `External` metric may show, in the autoscaler's
/// status, a value the adapter does not scope to the namespace (the adapter's admin decides).
fn autoscaler(body: &Body<'_>) -> Option<Breach> {
    let target = body.spec.get("scaleTargetRef").unwrap_or(&Value::Null);
    let kind = text(target.get("kind"));
    let name = text(target.get("name"));
    let api_version = text(target.get("apiVersion"));
    let planned = body.scope.scalable.iter().any(|(v, k, n)| {
        Some(k.as_str()) == kind && Some(n.as_str()) == name && api_version.is_none_or(|a| a == v)
    });
    if !planned {
        return breach(
            "spec.scaleTargetRef".into(),
            "wasmop/scaleTarget",
            format!(
                "{}/{} is not a Deployment, StatefulSet, ReplicaSet or ReplicationController of \
                 this plan: an autoscaler may scale only what its own plan creates",
                kind.unwrap_or("(no kind)"),
                name.unwrap_or("(no name)")
            ),
        );
    }
    replicas::check(body.policy.max_replicas, replicas::AUTOSCALER, body.spec)
}

// ---------------------------------------------------------------------------------------------
// CronJob

/// The most finished Jobs a CronJob may keep of each outcome (`successfulJobsHistoryLimit`,
/// `failedJobsHistoryLimit`; Kubernetes keeps 3 and 1 when they are unset): enough to read the
/// last runs' logs, each Job kept keeping its pods.
const MAX_JOB_HISTORY: u64 = 10;

/// A CronJob: one Job at a time, and a short history.
fn cron_job(body: &Body<'_>) -> Option<Breach> {
    cron_job_concurrency(body.spec).or_else(|| cron_job_history(body.spec))
}

/// `concurrencyPolicy`: `Forbid` or `Replace`; `Allow`, what an unset field means, lets runs
/// pile up.
fn cron_job_concurrency(spec: &Value) -> Option<Breach> {
    const WHY: &str = "Allow starts a new Job on every schedule while earlier ones still run, \
                       so Jobs that do not end add their pods (up to parallelism each) without \
                       bound; Forbid skips a run while one is active, Replace stops it first";
    let reason = match spec.get("concurrencyPolicy").unwrap_or(&Value::Null) {
        Value::String(p) if p == "Forbid" || p == "Replace" => return None,
        Value::Null => format!("unset means Allow; it must be Forbid or Replace: {WHY}"),
        other => format!("{other} is not Forbid or Replace: {WHY}"),
    };
    breach(
        "spec.concurrencyPolicy".into(),
        "wasmop/cronJobConcurrency",
        reason,
    )
}

/// `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`: unset (Kubernetes' 3 and 1) or a
/// whole number up to [`MAX_JOB_HISTORY`].
fn cron_job_history(spec: &Value) -> Option<Breach> {
    ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"]
        .into_iter()
        .find_map(|field| {
            let value = spec.get(field).filter(|v| !v.is_null())?;
            let count = match value {
                Value::Number(n) => n
                    .as_u64()
                    .or_else(|| {
                        n.as_f64()
                            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                            .map(|f| f.min(u64::MAX as f64) as u64)
                    })
                    .ok_or_else(|| format!("{n} is not a count of Jobs")),
                other => Err(format!("{other} is not a number")),
            };
            let reason = match count {
                Ok(count) if count <= MAX_JOB_HISTORY => return None,
                Ok(_) => format!("{value} is over {MAX_JOB_HISTORY}"),
                Err(reason) => reason,
            };
            breach(
                format!("spec.{field}"),
                "wasmop/cronJobHistory",
                format!(
                    "{reason}: a CronJob keeps at most {MAX_JOB_HISTORY} finished Jobs of each \
                     outcome (Kubernetes keeps 3 successful and 1 failed when unset), since \
                     every Job kept keeps its pods"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The breach of `kind`'s check on `object` (`metadata` and `spec`) in namespace `ns`,
    /// whose plan also holds the StatefulSet `db`.
    fn run(policy: &PlanPolicy, api_version: &str, kind: &str, object: Value) -> Option<Breach> {
        let check = check_of(api_version, kind).expect("a kind of the table");
        let scalable = BTreeSet::from([(
            "apps/v1".to_string(),
            "StatefulSet".to_string(),
            "db".to_string(),
        )]);
        let metadata = object
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        check(&Body {
            policy,
            scope: Scope {
                namespace: "ns",
                scalable: &scalable,
            },
            metadata: &metadata,
            spec: &spec,
        })
    }

    fn hosts(hosts: &[&str]) -> PlanPolicy {
        PlanPolicy {
            ingress_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..PlanPolicy::default()
        }
    }

    /// An Ingress for `shop.example.com` to the Service `web`, with `change` applied.
    fn an_ingress(change: impl FnOnce(&mut Value)) -> Value {
        let mut object = json!({
            "metadata": {"name": "web", "annotations": {
                "nginx.ingress.kubernetes.io/rewrite-target": "/$2",
                "nginx.ingress.kubernetes.io/canary-by-header-pattern": "^v\\d+$",
            }},
            "spec": {
                "ingressClassName": "public",
                "rules": [{"host": "shop.example.com", "http": {"paths": [
                    {"path": "/api(/|$)(.*)", "pathType": "ImplementationSpecific",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                ]}}],
                "tls": [{"hosts": ["shop.example.com"], "secretName": "web-tls"}],
            },
        });
        change(&mut object);
        object
    }

    fn annotate(key: &str, value: &str) -> impl FnOnce(&mut Value) {
        let (key, value) = (key.to_string(), value.to_string());
        move |o: &mut Value| o["metadata"]["annotations"][key] = json!(value)
    }

    #[test]
    fn ingresses_are_refused_with_field_and_rule() {
        let policy = hosts(&["shop.example.com", "*.apps.example.com"]);
        let v1 = "networking.k8s.io/v1";
        assert_eq!(run(&policy, v1, "Ingress", an_ingress(|_| {})), None);
        let annotation = |key: &str| format!("metadata.annotations[{key:?}]");
        type Change = Box<dyn FnOnce(&mut Value)>;
        let cases: Vec<(Change, &str, String)> = vec![
            // Snippets of every controller the guard knows.
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/configuration-snippet",
                    "more_set_headers x;",
                )),
                "wasmop/ingressSnippet",
                annotation("nginx.ingress.kubernetes.io/configuration-snippet"),
            ),
            (
                Box::new(annotate("nginx.ingress.kubernetes.io/server-snippet", "x")),
                "wasmop/ingressSnippet",
                annotation("nginx.ingress.kubernetes.io/server-snippet"),
            ),
            (
                Box::new(annotate("nginx.ingress.kubernetes.io/auth-snippet", "x")),
                "wasmop/ingressSnippet",
                annotation("nginx.ingress.kubernetes.io/auth-snippet"),
            ),
            (
                Box::new(annotate("nginx.ingress.kubernetes.io/stream-snippet", "x")),
                "wasmop/ingressSnippet",
                annotation("nginx.ingress.kubernetes.io/stream-snippet"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/modsecurity-snippet",
                    "x",
                )),
                "wasmop/ingressSnippet",
                annotation("nginx.ingress.kubernetes.io/modsecurity-snippet"),
            ),
            (
                Box::new(annotate("nginx.org/server-snippets", "x")),
                "wasmop/ingressSnippet",
                annotation("nginx.org/server-snippets"),
            ),
            (
                Box::new(annotate("nginx.org/location-snippets", "x")),
                "wasmop/ingressSnippet",
                annotation("nginx.org/location-snippets"),
            ),
            (
                Box::new(annotate("haproxy.org/backend-config-snippet", "x")),
                "wasmop/ingressSnippet",
                annotation("haproxy.org/backend-config-snippet"),
            ),
            (
                Box::new(annotate("haproxy-ingress.github.io/config-backend", "x")),
                "wasmop/ingressSnippet",
                annotation("haproxy-ingress.github.io/config-backend"),
            ),
            (
                Box::new(annotate("ingress.kubernetes.io/config-frontend", "x")),
                "wasmop/ingressSnippet",
                annotation("ingress.kubernetes.io/config-frontend"),
            ),
            // ingress-nginx values that end a directive (CVE-2025-1097, CVE-2023-5044).
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-tls-match-cn",
                    "CN=x\"\n}\nlocation /x {",
                )),
                "wasmop/ingressAnnotation",
                annotation("nginx.ingress.kubernetes.io/auth-tls-match-cn"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/permanent-redirect",
                    "https://x;return 200",
                )),
                "wasmop/ingressAnnotation",
                annotation("nginx.ingress.kubernetes.io/permanent-redirect"),
            ),
            (
                Box::new(annotate("nginx.ingress.kubernetes.io/mirror-host", "x\\")),
                "wasmop/ingressAnnotation",
                annotation("nginx.ingress.kubernetes.io/mirror-host"),
            ),
            // Requests from the controller's network position.
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-url",
                    "http://169.254.169.254/latest/meta-data/",
                )),
                "wasmop/ingressTarget",
                annotation("nginx.ingress.kubernetes.io/auth-url"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-url",
                    "http://api.other.svc.cluster.local/auth",
                )),
                "wasmop/ingressTarget",
                annotation("nginx.ingress.kubernetes.io/auth-url"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-url",
                    "http://auth.ns.svc.evil.example/x",
                )),
                "wasmop/ingressTarget",
                annotation("nginx.ingress.kubernetes.io/auth-url"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/mirror-target",
                    "https://auth.ns.svc@10.0.0.1/",
                )),
                "wasmop/ingressTarget",
                annotation("nginx.ingress.kubernetes.io/mirror-target"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-url",
                    "https://$host/oauth2/auth",
                )),
                "wasmop/ingressTarget",
                annotation("nginx.ingress.kubernetes.io/auth-url"),
            ),
            // Other namespaces' objects.
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-tls-secret",
                    "team-b/ca",
                )),
                "wasmop/ingressReference",
                annotation("nginx.ingress.kubernetes.io/auth-tls-secret"),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/auth-proxy-set-headers",
                    "team-b/headers",
                )),
                "wasmop/ingressReference",
                annotation("nginx.ingress.kubernetes.io/auth-proxy-set-headers"),
            ),
            (
                Box::new(annotate(
                    "traefik.ingress.kubernetes.io/router.middlewares",
                    "ns-strip@kubernetescrd,team-b-auth@kubernetescrd",
                )),
                "wasmop/ingressReference",
                annotation("traefik.ingress.kubernetes.io/router.middlewares"),
            ),
            (
                Box::new(annotate("alb.ingress.kubernetes.io/group.name", "shared")),
                "wasmop/ingressAnnotation",
                annotation("alb.ingress.kubernetes.io/group.name"),
            ),
            // Hosts.
            (
                Box::new(|o: &mut Value| o["spec"]["rules"][0]["host"] = json!("bank.example.com")),
                "wasmop/ingressHost",
                "spec.rules[0].host".into(),
            ),
            (
                Box::new(|o: &mut Value| o["spec"]["rules"][0]["host"] = json!("apps.example.com")),
                "wasmop/ingressHost",
                "spec.rules[0].host".into(),
            ),
            (
                Box::new(|o: &mut Value| o["spec"]["rules"][0]["host"] = json!("*.example.com")),
                "wasmop/ingressHost",
                "spec.rules[0].host".into(),
            ),
            (
                Box::new(|o: &mut Value| {
                    if let Some(rule) = o["spec"]["rules"][0].as_object_mut() {
                        rule.remove("host");
                    }
                }),
                "wasmop/ingressHost",
                "spec.rules[0].host".into(),
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["defaultBackend"] =
                        json!({"service": {"name": "web", "port": {"number": 80}}})
                }),
                "wasmop/ingressHost",
                "spec.defaultBackend".into(),
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["tls"][0]["hosts"][0] = json!("bank.example.com")
                }),
                "wasmop/ingressHost",
                "spec.tls[0].hosts[0]".into(),
            ),
            (
                Box::new(|o: &mut Value| o["spec"]["tls"][0]["hosts"] = json!([])),
                "wasmop/ingressHost",
                "spec.tls[0].hosts".into(),
            ),
            (
                Box::new(annotate(
                    "nginx.ingress.kubernetes.io/server-alias",
                    "a.apps.example.com, bank.example.com",
                )),
                "wasmop/ingressHost",
                annotation("nginx.ingress.kubernetes.io/server-alias"),
            ),
            // Backends and paths.
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["rules"][0]["http"]["paths"][0]["backend"] = json!(
                        {"resource": {"apiGroup": "example.com", "kind": "Bucket", "name": "b"}})
                }),
                "wasmop/ingressBackend",
                "spec.rules[0].http.paths[0].backend.resource".into(),
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["rules"][0]["http"]["paths"][0]["path"] =
                        json!("/x { alias /var/run/secrets/; }")
                }),
                "wasmop/ingressPath",
                "spec.rules[0].http.paths[0].path".into(),
            ),
        ];
        for (change, rule, path) in cases {
            let breach = run(&policy, v1, "Ingress", an_ingress(change))
                .unwrap_or_else(|| panic!("{path} must be refused"));
            assert_eq!(
                (breach.rule.as_str(), breach.path.as_str()),
                (rule, path.as_str()),
                "{breach:?}"
            );
        }
    }

    #[test]
    fn ingresses_within_the_policy_pass() {
        let v1 = "networking.k8s.io/v1";
        let policy = hosts(&["shop.example.com", "*.apps.example.com"]);
        for change in [
            annotate(
                "nginx.ingress.kubernetes.io/auth-url",
                "http://oauth2-proxy.ns.svc.cluster.local:4180/oauth2/auth",
            ),
            annotate(
                "nginx.ingress.kubernetes.io/mirror-target",
                "https://mirror.ns.svc/$request_uri",
            ),
            annotate("nginx.ingress.kubernetes.io/auth-secret", "ns/basic"),
            annotate("nginx.ingress.kubernetes.io/auth-tls-secret", "ca"),
            annotate(
                "nginx.ingress.kubernetes.io/server-alias",
                "a.apps.example.com,b.c.apps.example.com",
            ),
            annotate(
                "traefik.ingress.kubernetes.io/router.middlewares",
                "ns-strip@kubernetescrd, headers@file",
            ),
            annotate("haproxy.router.openshift.io/timeout", "5s"),
        ] {
            assert_eq!(run(&policy, v1, "Ingress", an_ingress(change)), None);
        }
        let wildcard = an_ingress(|o| {
            o["spec"]["rules"][0]["host"] = json!("*.apps.example.com");
            o["spec"]["tls"][0]["hosts"] = json!(["*.apps.example.com", "x.apps.example.com"]);
        });
        assert_eq!(run(&policy, v1, "Ingress", wildcard), None);
        // "*" allows every host and the catch-alls.
        let everything = hosts(&["*"]);
        let catch_all = an_ingress(|o| {
            if let Some(rule) = o["spec"]["rules"][0].as_object_mut() {
                rule.remove("host");
            }
            o["spec"]["defaultBackend"] =
                json!({"service": {"name": "web", "port": {"number": 80}}});
        });
        assert_eq!(run(&everything, v1, "Ingress", catch_all), None);
        // By default, no host at all.
        let breach =
            run(&PlanPolicy::default(), v1, "Ingress", an_ingress(|_| {})).expect("no hosts");
        assert!(
            breach.reason.contains("ingressHosts is empty"),
            "{breach:?}"
        );
    }

    #[test]
    fn host_lists_cover_exact_names_and_what_is_under_a_wildcard() {
        let allowed = ["shop.example.com".to_string(), "*.apps.example.com".into()];
        for (host, covered) in [
            ("shop.example.com", true),
            ("SHOP.example.com", true),
            ("www.shop.example.com", false),
            ("*.shop.example.com", false),
            ("a.apps.example.com", true),
            ("a.b.apps.example.com", true),
            ("*.apps.example.com", true),
            ("*.x.apps.example.com", true),
            ("apps.example.com", false),
            ("evilapps.example.com", false),
            ("*.example.com", false),
            (".apps.example.com", false),
            // ingress-nginx reads a `~` server-alias as an unanchored regular expression.
            ("~.*.apps.example.com", false),
            ("a*.apps.example.com", false),
        ] {
            assert_eq!(host_allowed(&allowed, host), covered, "{host}");
        }
        assert!(host_allowed(&["*".into()], "anything.example"));
        assert!(!host_allowed(&[], "shop.example.com"));
    }

    #[test]
    fn classes_come_from_the_policy_list_when_it_has_one() {
        let v1 = "networking.k8s.io/v1";
        let mut policy = hosts(&["shop.example.com"]);
        // No list: any class, or none.
        let classless = an_ingress(|o| {
            if let Some(spec) = o["spec"].as_object_mut() {
                spec.remove("ingressClassName");
            }
        });
        assert_eq!(run(&policy, v1, "Ingress", classless.clone()), None);
        policy.ingress_classes = Some(vec!["public".into()]);
        assert_eq!(run(&policy, v1, "Ingress", an_ingress(|_| {})), None);
        for (object, path) in [
            (
                an_ingress(|o| o["spec"]["ingressClassName"] = json!("internal")),
                "spec.ingressClassName",
            ),
            (classless.clone(), "spec.ingressClassName"),
            (
                an_ingress(annotate("kubernetes.io/ingress.class", "internal")),
                "metadata.annotations[\"kubernetes.io/ingress.class\"]",
            ),
        ] {
            let breach = run(&policy, v1, "Ingress", object).expect(path);
            assert_eq!(
                (breach.rule.as_str(), breach.path.as_str()),
                ("wasmop/ingressClass", path)
            );
        }
    }

    /// A ServiceMonitor of `web`'s metrics port, with `change` applied.
    fn a_service_monitor(change: impl FnOnce(&mut Value)) -> Value {
        let mut object = json!({
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "namespaceSelector": {"matchNames": ["ns"]},
                "endpoints": [{
                    "port": "metrics", "interval": "30s",
                    "tlsConfig": {"serverName": "web", "ca": {"configMap": {"name": "ca", "key": "ca.crt"}}},
                    "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"}],
                    "metricRelabelings": [{"action": "labelmap", "regex": "x_(.+)"}],
                }],
            },
        });
        change(&mut object);
        object
    }

    #[test]
    fn monitors_are_refused_with_field_and_rule() {
        let policy = PlanPolicy::default();
        let v1 = "monitoring.coreos.com/v1";
        assert_eq!(
            run(&policy, v1, "ServiceMonitor", a_service_monitor(|_| {})),
            None
        );
        let endpoint = |field: &'static str, value: Value| {
            move |o: &mut Value| o["spec"]["endpoints"][0][field] = value
        };
        type Change = Box<dyn FnOnce(&mut Value)>;
        let cases: Vec<(Change, &str, &str)> = vec![
            (
                Box::new(endpoint(
                    "bearerTokenFile",
                    json!("/var/run/secrets/kubernetes.io/serviceaccount/token"),
                )),
                "wasmop/monitorFile",
                "spec.endpoints[0].bearerTokenFile",
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["endpoints"][0]["tlsConfig"]["keyFile"] =
                        json!("/etc/prometheus/secrets/etcd/key")
                }),
                "wasmop/monitorFile",
                "spec.endpoints[0].tlsConfig.keyFile",
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["endpoints"][0]["tlsConfig"]["caFile"] = json!("/etc/ca")
                }),
                "wasmop/monitorFile",
                "spec.endpoints[0].tlsConfig.caFile",
            ),
            (
                Box::new(endpoint(
                    "authorization",
                    json!({"type": "Bearer", "credentialsFile": "/token"}),
                )),
                "wasmop/monitorFile",
                "spec.endpoints[0].authorization.credentialsFile",
            ),
            (
                Box::new(|o: &mut Value| o["spec"]["namespaceSelector"] = json!({"any": true})),
                "wasmop/monitorNamespace",
                "spec.namespaceSelector.any",
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["namespaceSelector"] = json!({"matchNames": ["ns", "team-b"]})
                }),
                "wasmop/monitorNamespace",
                "spec.namespaceSelector.matchNames[1]",
            ),
            (
                Box::new(endpoint(
                    "bearerTokenSecret",
                    json!({"name": "db", "key": "token"}),
                )),
                "wasmop/monitorSecret",
                "spec.endpoints[0].bearerTokenSecret",
            ),
            (
                Box::new(endpoint(
                    "basicAuth",
                    json!({"username": {"name": "db", "key": "u"}}),
                )),
                "wasmop/monitorSecret",
                "spec.endpoints[0].basicAuth",
            ),
            (
                Box::new(endpoint(
                    "authorization",
                    json!({"credentials": {"name": "db", "key": "t"}}),
                )),
                "wasmop/monitorSecret",
                "spec.endpoints[0].authorization.credentials",
            ),
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["endpoints"][0]["tlsConfig"]["keySecret"] =
                        json!({"name": "db", "key": "k"})
                }),
                "wasmop/monitorSecret",
                "spec.endpoints[0].tlsConfig.keySecret",
            ),
            (
                Box::new(endpoint(
                    "oauth2",
                    json!({"clientId": {"secret": {"name": "db", "key": "id"}}}),
                )),
                "wasmop/monitorSecret",
                "spec.endpoints[0].oauth2.clientId.secret",
            ),
            (
                Box::new(endpoint("proxyUrl", json!("http://10.0.0.1:3128"))),
                "wasmop/monitorTarget",
                "spec.endpoints[0].proxyUrl",
            ),
            (
                Box::new(endpoint(
                    "relabelings",
                    json!([{"replacement": "kubernetes.default.svc:443", "targetLabel": "__address__"}]),
                )),
                "wasmop/monitorTarget",
                "spec.endpoints[0].relabelings[0].targetLabel",
            ),
            (
                Box::new(endpoint(
                    "relabelings",
                    json!([{"action": "labelmap", "regex": ".*a(__address__)a", "replacement": "$1"}]),
                )),
                "wasmop/monitorTarget",
                "spec.endpoints[0].relabelings[0].action",
            ),
            (
                Box::new(|o: &mut Value| o["spec"]["scrapeClass"] = json!("kubelet")),
                "wasmop/monitorScrapeClass",
                "spec.scrapeClass",
            ),
        ];
        for (change, rule, path) in cases {
            let breach = run(&policy, v1, "ServiceMonitor", a_service_monitor(change))
                .unwrap_or_else(|| panic!("{path} must be refused"));
            assert_eq!(
                (breach.rule.as_str(), breach.path.as_str()),
                (rule, path),
                "{breach:?}"
            );
        }
        // A policy that lets pods use Secrets lets Prometheus read them too; files stay refused.
        let secrets = PlanPolicy {
            allow_secrets: true,
            ..PlanPolicy::default()
        };
        let with_token = a_service_monitor(|o| {
            o["spec"]["endpoints"][0]["bearerTokenSecret"] = json!({"name": "db", "key": "token"})
        });
        assert_eq!(run(&secrets, v1, "ServiceMonitor", with_token), None);
        let with_file =
            a_service_monitor(|o| o["spec"]["endpoints"][0]["bearerTokenFile"] = json!("/token"));
        let breach = run(&secrets, v1, "ServiceMonitor", with_file).expect("a file");
        assert_eq!(breach.rule, "wasmop/monitorFile");
    }

    #[test]
    fn pod_monitors_get_the_same_rules_over_their_endpoints() {
        let v1 = "monitoring.coreos.com/v1";
        let monitor = |endpoint: Value| {
            json!({"metadata": {"name": "p"}, "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "podMetricsEndpoints": [endpoint],
            }})
        };
        let policy = PlanPolicy::default();
        assert_eq!(
            run(
                &policy,
                v1,
                "PodMonitor",
                monitor(json!({"port": "metrics"}))
            ),
            None
        );
        for (endpoint, rule, path) in [
            (
                json!({"port": "m", "bearerTokenSecret": {"name": "s", "key": "k"}}),
                "wasmop/monitorSecret",
                "spec.podMetricsEndpoints[0].bearerTokenSecret",
            ),
            (
                json!({"port": "m", "relabelings": [{"targetLabel": "__address__", "replacement": "10.0.0.1:80"}]}),
                "wasmop/monitorTarget",
                "spec.podMetricsEndpoints[0].relabelings[0].targetLabel",
            ),
            (
                json!({"port": "m", "tlsConfig": {"certFile": "/etc/prometheus/certs/client.crt"}}),
                "wasmop/monitorFile",
                "spec.podMetricsEndpoints[0].tlsConfig.certFile",
            ),
        ] {
            let breach = run(&policy, v1, "PodMonitor", monitor(endpoint)).expect(path);
            assert_eq!((breach.rule.as_str(), breach.path.as_str()), (rule, path));
        }
    }

    #[test]
    fn autoscalers_scale_only_their_own_plans_workloads_within_the_cap() {
        let hpa = |target: Value, max: Value| {
            json!({"metadata": {"name": "h"}, "spec": {
                "scaleTargetRef": target, "minReplicas": 1, "maxReplicas": max}})
        };
        let policy = PlanPolicy::default();
        let own = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"});
        for version in ["autoscaling/v2", "autoscaling/v1"] {
            let kind = "HorizontalPodAutoscaler";
            assert_eq!(
                run(&policy, version, kind, hpa(own.clone(), json!(10))),
                None
            );
            assert_eq!(
                run(
                    &policy,
                    version,
                    kind,
                    hpa(json!({"kind": "StatefulSet", "name": "db"}), json!(64))
                ),
                None
            );
            // The bound is the policy's maxReplicas.
            let wide = PlanPolicy {
                max_replicas: 100,
                ..PlanPolicy::default()
            };
            assert_eq!(
                run(&wide, version, kind, hpa(own.clone(), json!(100))),
                None
            );
            assert!(run(&wide, version, kind, hpa(own.clone(), json!(101))).is_some());
            let low = json!({"metadata": {"name": "h"}, "spec": {
                "scaleTargetRef": own, "minReplicas": 1000, "maxReplicas": 10}});
            let breach = run(&policy, version, kind, low).expect("minReplicas over");
            assert_eq!(
                (breach.rule.as_str(), breach.path.as_str()),
                ("wasmop/maxReplicas", "spec.minReplicas")
            );
            for (target, max, rule, path) in [
                (
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "other-app"}),
                    json!(3),
                    "wasmop/scaleTarget",
                    "spec.scaleTargetRef",
                ),
                (
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "db"}),
                    json!(3),
                    "wasmop/scaleTarget",
                    "spec.scaleTargetRef",
                ),
                (
                    json!({"apiVersion": "example.com/v1", "kind": "StatefulSet", "name": "db"}),
                    json!(3),
                    "wasmop/scaleTarget",
                    "spec.scaleTargetRef",
                ),
                (
                    json!(null),
                    json!(3),
                    "wasmop/scaleTarget",
                    "spec.scaleTargetRef",
                ),
                (
                    own.clone(),
                    json!(65),
                    "wasmop/maxReplicas",
                    "spec.maxReplicas",
                ),
                (
                    own.clone(),
                    json!("1000"),
                    "wasmop/maxReplicas",
                    "spec.maxReplicas",
                ),
                (
                    own.clone(),
                    json!(10.5),
                    "wasmop/maxReplicas",
                    "spec.maxReplicas",
                ),
                (
                    own.clone(),
                    json!(1e12),
                    "wasmop/maxReplicas",
                    "spec.maxReplicas",
                ),
            ] {
                let breach = run(&policy, version, kind, hpa(target, max)).expect(path);
                assert_eq!((breach.rule.as_str(), breach.path.as_str()), (rule, path));
            }
        }
    }

    #[test]
    fn network_policies_pass_whatever_they_allow() {
        let open = json!({"metadata": {"name": "n"}, "spec": {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{}], "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
        }});
        assert_eq!(
            run(
                &PlanPolicy::default(),
                "networking.k8s.io/v1",
                "NetworkPolicy",
                open
            ),
            None
        );
    }

    /// A CronJob that runs one Job at a time and keeps Kubernetes' default history, with
    /// `change` applied.
    fn a_cron_job(change: impl FnOnce(&mut Value)) -> Value {
        let mut object = json!({
            "metadata": {"name": "backup"},
            "spec": {
                "schedule": "*/5 * * * *",
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"parallelism": 1, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "i"}],
                }}}},
            },
        });
        change(&mut object);
        object
    }

    #[test]
    fn cron_jobs_are_refused_with_field_and_rule() {
        let policy = PlanPolicy::default();
        let v1 = "batch/v1";
        let set = |field: &'static str, value: Value| move |o: &mut Value| o["spec"][field] = value;
        type Change = Box<dyn FnOnce(&mut Value)>;
        let concurrency = "spec.concurrencyPolicy";
        let cases: Vec<(Change, &str, &str, &str)> = vec![
            // The review's attack: a run a minute, each never ending, none replaced.
            (
                Box::new(|o: &mut Value| {
                    o["spec"]["schedule"] = json!("* * * * *");
                    o["spec"]["concurrencyPolicy"] = json!("Allow");
                    o["spec"]["jobTemplate"]["spec"]["parallelism"] = json!(64);
                    o["spec"]["successfulJobsHistoryLimit"] = json!(1000);
                    o["spec"]["failedJobsHistoryLimit"] = json!(1000);
                }),
                "wasmop/cronJobConcurrency",
                concurrency,
                "\"Allow\" is not Forbid or Replace: Allow starts a new Job on every schedule",
            ),
            // Unset is Allow.
            (
                Box::new(|o: &mut Value| {
                    o["spec"]
                        .as_object_mut()
                        .map(|s| s.remove("concurrencyPolicy"));
                }),
                "wasmop/cronJobConcurrency",
                concurrency,
                "unset means Allow; it must be Forbid or Replace",
            ),
            (
                Box::new(set("concurrencyPolicy", json!(null))),
                "wasmop/cronJobConcurrency",
                concurrency,
                "unset means Allow",
            ),
            // The API server defaults an empty value to Allow, and refuses other spellings.
            (
                Box::new(set("concurrencyPolicy", json!(""))),
                "wasmop/cronJobConcurrency",
                concurrency,
                "\"\" is not Forbid or Replace",
            ),
            (
                Box::new(set("concurrencyPolicy", json!("forbid"))),
                "wasmop/cronJobConcurrency",
                concurrency,
                "\"forbid\" is not Forbid or Replace",
            ),
            (
                Box::new(set("concurrencyPolicy", json!(["Forbid"]))),
                "wasmop/cronJobConcurrency",
                concurrency,
                "[\"Forbid\"] is not Forbid or Replace",
            ),
            // History: each Job kept keeps its pods.
            (
                Box::new(set("successfulJobsHistoryLimit", json!(1000))),
                "wasmop/cronJobHistory",
                "spec.successfulJobsHistoryLimit",
                "1000 is over 10: a CronJob keeps at most 10 finished Jobs of each outcome",
            ),
            (
                Box::new(set("failedJobsHistoryLimit", json!(11))),
                "wasmop/cronJobHistory",
                "spec.failedJobsHistoryLimit",
                "11 is over 10",
            ),
            (
                Box::new(set("failedJobsHistoryLimit", json!(1e3))),
                "wasmop/cronJobHistory",
                "spec.failedJobsHistoryLimit",
                "1000.0 is over 10",
            ),
            (
                Box::new(set("successfulJobsHistoryLimit", json!(1e300))),
                "wasmop/cronJobHistory",
                "spec.successfulJobsHistoryLimit",
                "1e+300 is over 10",
            ),
            (
                Box::new(set("successfulJobsHistoryLimit", json!("1000"))),
                "wasmop/cronJobHistory",
                "spec.successfulJobsHistoryLimit",
                "\"1000\" is not a number",
            ),
            (
                Box::new(set("failedJobsHistoryLimit", json!(-1))),
                "wasmop/cronJobHistory",
                "spec.failedJobsHistoryLimit",
                "-1 is not a count of Jobs",
            ),
            (
                Box::new(set("failedJobsHistoryLimit", json!(2.5))),
                "wasmop/cronJobHistory",
                "spec.failedJobsHistoryLimit",
                "2.5 is not a count of Jobs",
            ),
        ];
        for (change, rule, path, reason) in cases {
            let breach = run(&policy, v1, "CronJob", a_cron_job(change))
                .unwrap_or_else(|| panic!("{path} ({reason}) must be refused"));
            assert_eq!(
                (breach.rule.as_str(), breach.path.as_str()),
                (rule, path),
                "{breach:?}"
            );
            assert!(breach.reason.starts_with(reason), "{breach:?}");
        }
    }

    #[test]
    fn cron_jobs_that_run_one_job_at_a_time_with_a_short_history_pass() {
        let v1 = "batch/v1";
        let policy = PlanPolicy::default();
        type Change = Box<dyn FnOnce(&mut Value)>;
        let fine: Vec<Change> = vec![
            Box::new(|_| {}),
            Box::new(|o| o["spec"]["concurrencyPolicy"] = json!("Replace")),
            // Kubernetes' defaults, the bound, none kept, and whole numbers written as floats.
            Box::new(|o| {
                o["spec"]["successfulJobsHistoryLimit"] = json!(3);
                o["spec"]["failedJobsHistoryLimit"] = json!(1);
            }),
            Box::new(|o| {
                o["spec"]["successfulJobsHistoryLimit"] = json!(MAX_JOB_HISTORY);
                o["spec"]["failedJobsHistoryLimit"] = json!(MAX_JOB_HISTORY);
            }),
            Box::new(|o| {
                o["spec"]["successfulJobsHistoryLimit"] = json!(0);
                o["spec"]["failedJobsHistoryLimit"] = json!(null);
            }),
            Box::new(|o| o["spec"]["successfulJobsHistoryLimit"] = json!(1e1)),
            // One run at a time bounds it: schedule, completions and backoff only make it
            // longer (parallelism is held to maxReplicas by `replicas`, after this check).
            Box::new(|o| {
                o["spec"]["schedule"] = json!("* * * * *");
                o["spec"]["jobTemplate"]["spec"]["completions"] = json!(1_000_000);
                o["spec"]["jobTemplate"]["spec"]["backoffLimit"] = json!(1_000_000);
            }),
        ];
        for change in fine {
            let object = a_cron_job(change);
            assert_eq!(
                run(&policy, v1, "CronJob", object.clone()),
                None,
                "{object}"
            );
        }
    }

    #[test]
    fn the_table_knows_its_kinds_and_the_scalable_ones() {
        assert!(check_of("networking.k8s.io/v1", "Ingress").is_some());
        assert!(check_of("networking.k8s.io/v1beta1", "Ingress").is_none());
        assert!(check_of("example.com/v1", "Widget").is_none());
        assert!(check_of("batch/v1", "CronJob").is_some());
        // A Job is one run: its pods at once are `parallelism`, bounded by `replicas`.
        assert!(check_of("batch/v1", "Job").is_none());
        assert!(is_scalable("apps/v1", "StatefulSet"));
        assert!(!is_scalable("apps/v1", "DaemonSet"));
    }
}
