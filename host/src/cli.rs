//! Command-line interface of the `wasmop` binary.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::plugin::source::oci::reach::PrivateNetworks;

/// wasmop: a Kubernetes operator host whose domain logic lives in sandboxed Wasm plugins.
#[derive(Debug, Parser)]
#[command(name = "wasmop", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `wasmop`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator host against the cluster of the current kubeconfig (or in-cluster config).
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions the host owns, as YAML.
    Crds,
    /// Write, build, inspect, run, push and pull plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Follow, pause, resume or abort a PluginBinding's progressive rollout.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Compile one component from stdin to a wasmtime artifact on stdout, within
    /// `--memory-bytes` of address space: what the host runs to compile (see
    /// `plugin::compiler`), not a command for people.
    #[command(hide = true)]
    CompileWorker {
        /// The worker's address-space limit, in bytes.
        #[arg(long)]
        memory_bytes: u64,
    },
}

/// `wasmop rollout ...`: a progressive PluginBinding's rollout, on the cluster of the current
/// kubeconfig.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Where the rollout is: phase, digests, instances on each, the shadow plans' findings.
    Status {
        /// The PluginBinding.
        binding: String,
    },
    /// Hold the rollout at its step (`spec.rollout.paused: true`).
    Pause {
        /// The PluginBinding.
        binding: String,
    },
    /// Let a paused rollout go on.
    Resume {
        /// The PluginBinding.
        binding: String,
    },
    /// Roll the digest rolling out back and mark it bad (a newer digest starts a new rollout).
    Abort {
        /// The PluginBinding.
        binding: String,
    },
}

/// `wasmop plugin ...`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Scaffold a plugin crate (a copy of the hello template) that builds and tests as is.
    New {
        /// Name of the plugin (a lower-case crate name, e.g. `my-cache`).
        name: String,
        /// Directory to create it in (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// A wasmop-sdk checkout to build against through `[patch.crates-io]` (default: the
        /// SDK this binary was built from, where it still exists; else crates.io alone).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build a plugin crate for wasm32-wasip2 and print the component's path, size and digest.
    Build {
        /// The plugin crate (default: the current directory).
        path: Option<PathBuf>,
    },
    /// Show a component's name, version, capabilities, world version, size and digest.
    Inspect {
        /// A `.wasm` file or an OCI reference.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a CustomResourceDefinition (YAML) for a kind served by a plugin: the plugin's
    /// configuration schema as `spec` (beside `spec.version`), wasmop's status as the status
    /// subresource, printer columns (Ready, Version, the plugin's, Age); then, after `---`, the
    /// ClusterRole the host needs to serve the kind (aggregated into the host's by its label).
    Crd {
        /// A `.wasm` file or an OCI reference.
        plugin: String,
        /// The kind's API group, a domain the team owns (e.g. `data.acme.io`).
        #[arg(long)]
        group: String,
        /// The kind, CamelCase (e.g. `KVStore`).
        #[arg(long)]
        kind: String,
        /// The API version, or several oldest first (`v1alpha1,v1`): the plugin's
        /// configuration schema of each, and its `convert` between them. Default: the versions
        /// the plugin declares, else `v1`.
        #[arg(long)]
        version: Option<String>,
        /// The version instances are stored in (default: the last of `--version`).
        #[arg(long)]
        storage: Option<String>,
        /// The resource's plural name (default: the kind in lower case, made plural).
        #[arg(long)]
        plural: Option<String>,
        /// A short name for `kubectl get` (repeatable).
        #[arg(long = "short-name", value_name = "NAME")]
        short_names: Vec<String>,
        /// Where instances live.
        #[arg(long, value_enum, default_value_t = CrdScope::Namespaced)]
        scope: CrdScope,
        /// Write the YAML to this file instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Run a plugin's capabilities on an App and observed objects, under the host's sandbox and
    /// guard; exits non-zero with the specific error on any fault or guard violation.
    Run {
        /// A `.wasm` file or an OCI reference.
        plugin: String,
        /// The App, as YAML or JSON: a `wasmop.dev/v1alpha1` App (the plugin reads its config
        /// from `spec.config`) or an instance of any kind bound to the plugin (config: its
        /// whole `spec` but `spec.version`). Owner references and the `wasmop.dev/parent-kind`
        /// label name the object's own apiVersion and kind.
        #[arg(long, required_unless_present = "live")]
        app: Option<PathBuf>,
        /// Observed objects: a YAML/JSON file (a list, a `kind: List` or several documents) or a
        /// directory of such files.
        #[arg(long, conflicts_with = "live")]
        observed: Option<PathBuf>,
        /// Read the App `NAMESPACE/NAME` and its objects from the cluster of the current
        /// kubeconfig instead of from files (the whole reconcile; nothing is written).
        #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with = "app")]
        live: Option<String>,
        /// With --live: print what the reconcile would change in the cluster, object by object
        /// and field by field (each planned object goes through a dry-run server-side apply).
        #[arg(long, requires = "live")]
        diff: bool,
        /// Which capability to run (with --live, always the whole reconcile).
        #[arg(long, value_enum, default_value_t = RunCapability::Reconcile, conflicts_with = "live")]
        capability: RunCapability,
        /// The clock the plugin sees (RFC 3339); default: now.
        #[arg(long)]
        now: Option<String>,
        /// Hold plans to this PluginPolicy (a YAML/JSON manifest), as if it governed the App's
        /// namespace; without it, the built-in default (with --live: the policy that governs
        /// the App's namespace in the cluster).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Print JSON instead of YAML.
        #[arg(long)]
        json: bool,
    },
    /// Push a component to an OCI registry as a Wasm artifact; prints the digest reference.
    Push {
        /// The `.wasm` component.
        file: PathBuf,
        /// Where to push, e.g. `127.0.0.1:15000/plugins/kvstore:1.0`.
        reference: String,
        /// Where the plugin's code lives (a URL), written as the
        /// `org.opencontainers.image.source` annotation; without it there is none.
        #[arg(long)]
        source: Option<String>,
        /// Plain HTTP and credentials.
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Pull a component from an OCI registry, verifying its digest.
    Pull {
        /// The OCI reference.
        reference: String,
        /// Where to write the component.
        #[arg(short, long)]
        output: PathBuf,
        /// Plain HTTP and credentials.
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

/// How `plugin push` and `plugin pull` reach a registry.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// Allow plain HTTP to this registry even if it is not on loopback.
    #[arg(long)]
    pub insecure: bool,
    /// A docker `config.json` with the registry's credentials (`auths`). By default
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, where it exists, as docker,
    /// oras and wkg read it.
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
}

/// The scope of a kind `wasmop plugin crd` defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrdScope {
    /// Instances live in a namespace, as the objects their plugin plans.
    #[value(name = "Namespaced")]
    Namespaced,
    /// Instances without a namespace: refused, since a plugin's objects live in its
    /// instance's namespace.
    #[value(name = "Cluster")]
    Cluster,
}

/// The capabilities `wasmop plugin run` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunCapability {
    /// `spec-diff.plan`, then the guard.
    Plan,
    /// `health.check`.
    Health,
    /// `backup.schedule`.
    Backup,
    /// `upgrade.gate` from `status.version` to `spec.version`.
    Upgrade,
    /// `finalize.cleanup` on the observed PersistentVolumeClaims.
    Finalize,
    /// Every capability the plugin has, each answer as the plugin gave it.
    All,
    /// One reconcile as the host would do it: the objects it would apply (stamped with the
    /// host's labels and owner reference), prune and create, the status and the events.
    Reconcile,
}

/// Options of `wasmop run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "WASMOP_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Answer `/debug/*` on `--listen` to every client, not only to loopback ones (it names
    /// every tenant's plugins and their last errors).
    #[arg(long, env = "WASMOP_DEBUG_FROM_ANYWHERE")]
    pub debug_from_anywhere: bool,

    /// Log format on stderr.
    #[arg(long, env = "WASMOP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Directory of the on-disk plugin cache (component bytes, compiled artifacts, resolved
    /// tags); the default is `$XDG_CACHE_HOME/wasmop/plugins` or `~/.cache/wasmop/plugins`.
    #[arg(long, env = "WASMOP_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// A file holding the install's cache key (32 bytes or more, e.g. a mounted Secret's
    /// `openssl rand -hex 32`): compiled plugins are reused across restarts only if their HMAC
    /// under it holds. Without the file, each process makes its own key and a restart
    /// recompiles.
    #[arg(long, env = "WASMOP_CACHE_KEY_FILE")]
    pub cache_key_file: Option<PathBuf>,

    /// Most the plugin cache may hold on disk; past it the least recently used entries go.
    #[arg(long, env = "WASMOP_CACHE_MAX_BYTES", default_value = "512Mi", value_parser = parse_bytes)]
    pub cache_max_bytes: u64,

    /// How often OCI tag references are checked for a new digest.
    #[arg(long, env = "WASMOP_POLL_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub poll_interval: Duration,

    /// A registry (`host[:port]`) that may be reached over plain HTTP; loopback registries
    /// always may. Repeatable.
    #[arg(
        long = "insecure-registry",
        env = "WASMOP_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,

    /// Private networks plugin registries may be reached in, as CIDRs (`10.0.0.0/8`,
    /// `127.0.0.1/32`, `fd00::/8`), comma-separated or repeated; empty: none. Without them, a
    /// registry (or a token service, or a redirect) at a private, loopback or CGNAT address is
    /// refused unless the App's PluginPolicy lists it in `registries`: an App's author must not
    /// reach the host's network through it. Link-local and metadata addresses are refused
    /// whatever this says.
    #[arg(
        long = "allow-private-registries",
        env = "WASMOP_ALLOW_PRIVATE_REGISTRIES",
        value_name = "CIDR,...",
        value_parser = PrivateNetworks::parse
    )]
    pub allow_private_registries: Vec<PrivateNetworks>,

    /// A docker `config.json` with registry credentials (mount a dockerconfigjson pull secret).
    #[arg(long, env = "WASMOP_REGISTRY_CONFIG")]
    pub registry_config: Option<PathBuf>,

    /// Honour `spec.plugin.file`, read as a path below this directory; only regular files
    /// there are read (development only). Without it, file sources are refused.
    #[arg(long, env = "WASMOP_FILE_ROOT")]
    pub file_root: Option<PathBuf>,

    /// Watch only this namespace (repeatable); without it the host watches the whole cluster.
    #[arg(
        long = "namespace",
        short = 'n',
        env = "WASMOP_NAMESPACES",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,

    /// Serve only the PluginBindings with these labels (`team=data,tier=gold`: equality terms):
    /// for a cluster where several hosts serve bindings of their own. Which binding serves a
    /// kind is still decided among all of them. Default: every binding.
    #[arg(long, env = "WASMOP_BINDING_SELECTOR")]
    pub binding_selector: Option<String>,

    /// Reconciles running at once (per watched namespace).
    #[arg(long, env = "WASMOP_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,

    /// How long changes to an App's objects (its Deployment, its Pods and their statuses) are
    /// gathered before the App is reconciled once for all of them. A new App's objects change
    /// several times within a second on their way to ready. The first change opens the window
    /// and later ones never extend it; App edits and plugin swaps are not delayed. `0s` turns
    /// it off.
    #[arg(long, env = "WASMOP_COALESCE", default_value = "1s", value_parser = parse_coalesce)]
    pub coalesce: Duration,

    /// Take a Lease before reconciling, so that only one of several replicas acts.
    #[arg(long)]
    pub leader_elect: bool,

    /// With --leader-elect: whether a replica waiting for the lease is a warm standby (its
    /// caches synced and kept current, its Apps' plugins loaded; ready only once warm), which
    /// reconciles every App the moment it leads. `false` starts everything only once leading:
    /// a cold takeover, for a standby that must hold no memory.
    #[arg(long, env = "WASMOP_WARM_STANDBY", default_value_t = true, action = clap::ArgAction::Set)]
    pub warm_standby: bool,

    /// Namespace of the leader-election Lease (default: the Pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// The host's own namespace (default: the Pod's): like kube-system, Apps there are refused
    /// unless a PluginPolicy names it.
    #[arg(long, env = "POD_NAMESPACE")]
    pub host_namespace: Option<String>,

    /// Do not create or update the CRDs at start-up (for clusters where they are installed
    /// separately and the host lacks the permission).
    #[arg(long)]
    pub skip_crd_install: bool,

    /// Most memory the plugin calls in flight may be capped at together (`512Mi`, `2Gi`, bytes);
    /// calls beyond it wait. Default: the cgroup limit (else the machine's memory) less a
    /// reserve for the host (a quarter, 192 MiB to 1 GiB).
    #[arg(long, env = "WASMOP_MEMORY_BUDGET", value_parser = parse_bytes)]
    pub memory_budget: Option<u64>,

    /// The address space a compile of a plugin may use (its own process's limit), so that a
    /// component built to exhaust the compiler fails to load instead of taking the host down.
    #[arg(long, env = "WASMOP_COMPILE_MEMORY", default_value = "1Gi", value_parser = parse_bytes)]
    pub compile_memory: u64,

    /// How long a compile of a plugin may take before it is stopped and the version refused.
    #[arg(long, env = "WASMOP_COMPILE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub compile_timeout: Duration,

    /// How long a watch or the API server's own `/readyz` may fail before `/readyz` reports
    /// not-ready (so a host that has lost its watches is seen, not trusted).
    #[arg(long, env = "WASMOP_UNREADY_AFTER", default_value = "10s", value_parser = parse_duration)]
    pub unready_after: Duration,

    /// How long a watch may fail, or one reconcile run, before `/healthz` fails and the kubelet
    /// restarts the host.
    #[arg(long, env = "WASMOP_UNHEALTHY_AFTER", default_value = "5m", value_parser = parse_duration)]
    pub unhealthy_after: Duration,

    /// Serve the validating and conversion webhooks of bound kinds whose plugins export
    /// `validate` or `convert` on this address (e.g. `0.0.0.0:9443`; port 0 picks one). Every
    /// replica serves them, standbys too. Without it no webhook is served or registered.
    #[arg(long, env = "WASMOP_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<SocketAddr>,

    /// The Service (in the host's namespace, port 443) through which the API server calls the
    /// webhooks. Without it, or `--webhook-url`, the API server is given the URL of
    /// `--webhook-listen` itself (a host outside the cluster, on the API server's machine).
    #[arg(long, env = "WASMOP_WEBHOOK_SERVICE", requires = "webhook_listen")]
    pub webhook_service: Option<String>,

    /// The `https://` URL through which the API server calls the webhooks, instead of a
    /// Service.
    #[arg(
        long,
        env = "WASMOP_WEBHOOK_URL",
        requires = "webhook_listen",
        conflicts_with = "webhook_service"
    )]
    pub webhook_url: Option<String>,

    /// Serve the certificate of this directory (`tls.crt`, `tls.key` and, if present, `ca.crt`,
    /// the bundle given to the API server), as a cert-manager Secret mounted here lays them
    /// out, reloaded within seconds of a change, instead of certificates the host makes.
    #[arg(long, env = "WASMOP_WEBHOOK_CERT_DIR", requires = "webhook_listen")]
    pub webhook_cert_dir: Option<PathBuf>,

    /// The Secret, in the host's namespace, holding the certificates the host makes.
    #[arg(
        long,
        env = "WASMOP_WEBHOOK_SECRET",
        default_value = "wasmop-webhook-tls"
    )]
    pub webhook_secret: String,

    /// The serving certificate's lifetime (the CA's is three times as long, CA rotation steps
    /// a tenth of it apart): for tests that watch certificates rotate. Default: 30 days.
    #[arg(long, hide = true, value_parser = parse_duration)]
    pub webhook_cert_lifetime: Option<Duration>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Parses a size: bytes, or a number with `Ki`, `Mi` or `Gi` as Kubernetes quantities write it.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use Ki, Mi or Gi)"
            ));
        }
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 512Mi"))?;
    value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// The longest `--coalesce`: a window delays the correction of drift by as much.
const MAX_COALESCE: Duration = Duration::from_secs(60);

fn parse_coalesce(text: &str) -> Result<Duration, String> {
    let window = parse_duration(text)?;
    if window > MAX_COALESCE {
        return Err(format!(
            "{text:?} is longer than {}s: drift would wait that long to be corrected",
            MAX_COALESCE.as_secs()
        ));
    }
    Ok(window)
}

/// Parses `250ms`, `10s`, `5m` or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 10s or 5m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value * 60)),
        _ => Err(format!(
            "{text:?} has unknown unit {unit:?}; use ms, s or m"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_quantities() {
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("2Gi"), Ok(2 << 30));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("1GB").is_err_and(|e| e.contains("unknown unit")));
        assert!(parse_bytes("Mi").is_err());
        assert!(parse_bytes("99999999999999Gi").is_err_and(|e| e.contains("too large")));
    }

    #[test]
    fn private_registry_networks_parse_and_a_bad_entry_is_named() {
        let run = |args: &[&str]| {
            let mut argv = vec!["wasmop", "run"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv).map(|cli| match cli.command {
                Command::Run(args) => {
                    PrivateNetworks::union(args.allow_private_registries).to_string()
                }
                other => panic!("not run: {other:?}"),
            })
        };
        for (args, want) in [
            (&[][..], "none"),
            (&["--allow-private-registries="][..], "none"),
            (
                &["--allow-private-registries", "127.0.0.0/8"][..],
                "127.0.0.0/8",
            ),
            // A list, an address alone, host bits past the prefix, IPv6, the flag repeated.
            (
                &[
                    "--allow-private-registries=10.1.2.3/8,192.168.1.7",
                    "--allow-private-registries",
                    "fd00::/8",
                ][..],
                "10.0.0.0/8,192.168.1.7/32,fd00::/8",
            ),
        ] {
            assert_eq!(run(args).expect("valid"), want, "{args:?}");
        }
        for (bad, named) in [
            ("10.0.0.0/8,10.0.0/8", "\"10.0.0/8\""),
            ("10.0.0.0/33", "\"10.0.0.0/33\""),
            ("registry.internal", "\"registry.internal\""),
        ] {
            let err = run(&["--allow-private-registries", bad])
                .expect_err(bad)
                .to_string();
            assert!(
                err.contains(named) && err.contains("is not a CIDR"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(
            parse_duration("10h")
                .expect_err("hours")
                .contains("unknown unit")
        );
        assert!(parse_duration("fast").is_err());
    }
}
