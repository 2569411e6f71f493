//! `wasmop plugin ...`: the plugin author's loop — scaffold, build, inspect, run against
//! fixtures, push, pull. Everything runs the host's own pipeline (verify, compile, validate,
//! sandboxed calls, guard), so what passes here behaves the same in the host.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{
    cli::{PluginCommand, RunCapability},
    plugin::{
        Capability, Digest, bindings,
        compile::CompiledPlugin,
        engine::PluginEngine,
        input::AppContext,
        limits::CallLimits,
        sandbox::CallTags,
        source::{OciRef, SourceRef, oci::OciSource},
    },
    reconcile::{fetch::BACKUP_SLOT_LABEL, guard},
};

/// The template `plugin new` copies, with `hello`/`Hello` renamed.
const TEMPLATE_LIB: &str = include_str!("../../plugins/hello/src/lib.rs");

/// Runs one `wasmop plugin` subcommand.
pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::New { name, dir, sdk } => scaffold(&name, dir, sdk),
        PluginCommand::Build { path } => {
            blocking(move || build(&path.unwrap_or_else(|| PathBuf::from(".")))).await
        }
        PluginCommand::Inspect { plugin, json } => inspect(&plugin, json).await,
        PluginCommand::Run {
            plugin,
            app,
            observed,
            capability,
            now,
            policy,
            json,
        } => {
            let policy = match policy {
                Some(path) => read_policy(&path)?,
                None => guard::Policy::default(),
            };
            let request = RunRequest {
                app,
                observed,
                which: capability,
                now,
                policy,
                json,
            };
            run_capabilities(&plugin, request).await
        }
        PluginCommand::Push {
            file,
            reference,
            insecure,
        } => {
            let bytes = read(&file)?;
            // Refuse to publish what the host would refuse to load.
            let (label, checked) = (file.display().to_string(), bytes.clone());
            blocking(move || prepare(&label, &checked).map(drop)).await?;
            let digest = oci(&reference, insecure)?.push(&reference, &bytes).await?;
            let parsed: oci_client::Reference = reference.parse()?;
            println!(
                "{}/{}@{digest}",
                parsed.resolve_registry(),
                parsed.repository()
            );
            Ok(())
        }
        PluginCommand::Pull {
            reference,
            output,
            insecure,
        } => {
            let target = OciRef::with_host_credentials(reference.clone());
            let source = SourceRef::Oci(target.clone());
            let (_, fetched) = oci(&reference, insecure)?.fetch(&source, &target).await?;
            std::fs::write(&output, &fetched.bytes)
                .with_context(|| format!("writing {}", output.display()))?;
            println!(
                "{} {} bytes {}",
                output.display(),
                fetched.bytes.len(),
                fetched.digest
            );
            Ok(())
        }
    }
}

fn oci(reference: &str, insecure: bool) -> anyhow::Result<OciSource> {
    let parsed: oci_client::Reference = reference
        .parse()
        .with_context(|| format!("invalid OCI reference {reference:?}"))?;
    let insecure = if insecure {
        vec![parsed.resolve_registry().to_string()]
    } else {
        vec![]
    };
    OciSource::new(None, insecure)
}

fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("reading {}", file.display()))
}

/// A file path if it exists, else an OCI reference to pull.
async fn load_bytes(plugin: &str) -> anyhow::Result<Vec<u8>> {
    let path = Path::new(plugin);
    if path.exists() {
        return read(path);
    }
    let target = OciRef::with_host_credentials(plugin);
    let source = SourceRef::Oci(target.clone());
    let (_, fetched) = oci(plugin, false)
        .with_context(|| format!("{plugin} is neither a file nor an OCI reference"))?
        .fetch(&source, &target)
        .await?;
    Ok(fetched.bytes)
}

/// Runs plugin work on a blocking thread: wasmtime calls are synchronous, and WASI's stdio
/// must not block a runtime worker.
async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<R> + Send + 'static,
) -> anyhow::Result<R> {
    tokio::task::spawn_blocking(work)
        .await
        .context("plugin work panicked")?
}

/// The engine stays in its `Arc`: its epoch ticker (the deadlines) lives as long as it does.
fn prepare(
    label: &str,
    bytes: &[u8],
) -> anyhow::Result<(std::sync::Arc<PluginEngine>, CompiledPlugin)> {
    let engine = PluginEngine::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let plugin = CompiledPlugin::prepare(&engine, None, label, bytes, Digest::of(bytes))?;
    Ok((engine, plugin))
}

async fn inspect(plugin: &str, json: bool) -> anyhow::Result<()> {
    let bytes = load_bytes(plugin).await?;
    let label = plugin.to_string();
    blocking(move || inspect_bytes(&label, &bytes, json)).await
}

fn inspect_bytes(plugin: &str, bytes: &[u8], json: bool) -> anyhow::Result<()> {
    let (_engine, compiled) = prepare(plugin, bytes)?;
    let m = &compiled.metadata;
    let capabilities: Vec<&str> = compiled
        .capabilities
        .iter()
        .map(|c| c.interface())
        .collect();
    let world = format!("{}@{}", bindings::PACKAGE, bindings::WORLD_VERSION);
    if json {
        let out = json!({
            "name": m.name, "version": m.version, "description": m.description,
            "capabilities": capabilities, "world": world, "size": bytes.len(),
            "digest": compiled.digest.as_str(), "owns": m.owns, "observes": m.observes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("name:         {}", m.name);
        println!("version:      {}", m.version);
        println!("description:  {}", m.description);
        println!("capabilities: {}", capabilities.join(", "));
        println!("world:        {world}");
        println!("size:         {} bytes", bytes.len());
        println!("digest:       {}", compiled.digest);
        println!("owns:         {}", m.owns.join(", "));
    }
    Ok(())
}

/// Reads YAML or JSON documents: one object, a list, a `kind: List`, or several documents.
fn read_objects(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in
            std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?
        {
            let file = entry?.path();
            if file
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            {
                files.push(file);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document)
                .with_context(|| format!("parsing {}", file.display()))?;
            match value {
                Value::Null => {}
                Value::Array(items) => objects.extend(items),
                Value::Object(ref map)
                    if map.get("kind").and_then(Value::as_str) == Some("List") =>
                {
                    objects.extend(
                        map.get("items")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default(),
                    );
                }
                other => objects.push(other),
            }
        }
    }
    Ok(objects)
}

/// What `wasmop plugin run` was asked to do.
struct RunRequest {
    /// The App file.
    app: PathBuf,
    /// The observed objects' file or directory.
    observed: Option<PathBuf>,
    which: RunCapability,
    /// `--now`, RFC 3339.
    now: Option<String>,
    policy: guard::Policy,
    json: bool,
}

async fn run_capabilities(plugin: &str, request: RunRequest) -> anyhow::Result<()> {
    let bytes = load_bytes(plugin).await?;
    let label = plugin.to_string();
    blocking(move || run_sync(&label, &bytes, &request)).await
}

/// The rules of the one PluginPolicy in `path`.
fn read_policy(path: &Path) -> anyhow::Result<guard::Policy> {
    let mut docs = read_objects(path)?;
    if docs.len() != 1 {
        bail!(
            "{} must hold exactly one PluginPolicy, found {} objects",
            path.display(),
            docs.len()
        );
    }
    let policy: crate::policy::PluginPolicy = serde_json::from_value(docs.remove(0))
        .with_context(|| format!("{} is not a valid PluginPolicy", path.display()))?;
    Ok(policy.spec.rules())
}

fn run_sync(plugin: &str, bytes: &[u8], request: &RunRequest) -> anyhow::Result<()> {
    let RunRequest {
        app: app_path,
        observed,
        which,
        now,
        policy,
        json: json_out,
    } = request;
    let (observed, now, which, json_out) = (observed.as_deref(), now.as_deref(), *which, *json_out);
    let (engine, compiled) = prepare(plugin, bytes)?;
    let mut apps = read_objects(app_path)?;
    if apps.len() != 1 {
        bail!(
            "{} must hold exactly one App, found {} objects",
            app_path.display(),
            apps.len()
        );
    }
    let mut app = apps.remove(0);
    if app.get("kind").and_then(Value::as_str) != Some("App") {
        bail!("{}: kind must be App", app_path.display());
    }
    // The host hands plugins the App as the API server stores it: with namespace and uid.
    let metadata = app
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .context("the App has no metadata")?;
    metadata.entry("namespace").or_insert(json!("default"));
    metadata
        .entry("uid")
        .or_insert(json!("00000000-0000-0000-0000-000000000000"));
    metadata.entry("generation").or_insert(json!(1));
    let namespace = app
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let app_name = app
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .context("the App has no metadata.name")?
        .to_string();
    let desired = app
        .pointer("/spec/version")
        .and_then(Value::as_str)
        .context("the App has no spec.version")?
        .to_string();
    let rolled_out = app
        .pointer("/status/version")
        .and_then(Value::as_str)
        .map(str::to_string);
    let observed = match observed {
        Some(path) => read_objects(path)?,
        None => Vec::new(),
    };
    let now_ms = match now {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text)
            .with_context(|| format!("--now {text:?} is not RFC 3339"))?
            .timestamp_millis(),
        None => chrono::Utc::now().timestamp_millis(),
    };
    let limits = CallLimits::with_overrides(
        app.pointer("/spec/limits/timeoutMs")
            .and_then(Value::as_u64)
            .map(|v| v.min(u64::from(u32::MAX)) as u32),
        app.pointer("/spec/limits/memoryMib")
            .and_then(Value::as_u64)
            .map(|v| v.min(u64::from(u32::MAX)) as u32),
    );
    if which == RunCapability::Reconcile {
        let decision = reconcile_once(ReconcileOnce {
            plugin,
            engine: &engine,
            compiled: &compiled,
            app: &app,
            observed: &observed,
            now_ms,
            limits,
            policy,
        })?;
        return print_value(&decision, json_out);
    }
    let cx = AppContext::new(&app, &observed, now_ms);
    let tags = || CallTags {
        plugin: compiled.label(),
        app: format!("{namespace}/cli"),
    };
    let wanted = |c: Capability, r: RunCapability| {
        which == r || (which == RunCapability::All && compiled.capabilities.contains(&c))
    };
    if which != RunCapability::All {
        let capability = match which {
            RunCapability::Plan => Capability::SpecDiff,
            RunCapability::Health => Capability::Health,
            RunCapability::Backup => Capability::Backup,
            RunCapability::Upgrade => Capability::Upgrade,
            RunCapability::Finalize => Capability::Finalize,
            RunCapability::All | RunCapability::Reconcile => unreachable!("handled above"),
        };
        if !compiled.capabilities.contains(&capability) {
            bail!("{} does not implement {capability}", compiled.label());
        }
    }

    let mut out = serde_json::Map::new();
    if wanted(Capability::SpecDiff, RunCapability::Plan) {
        let plan = compiled.call_plan(
            &engine,
            &limits,
            tags(),
            &cx,
            rolled_out.as_deref(),
            &desired,
        )?;
        let guarded = guard::check(
            policy,
            &app_name,
            &namespace,
            &compiled.metadata.owns,
            plan.objects,
        )?;
        let objects: Vec<Value> = guarded.into_iter().map(|g| g.object.to_value()).collect();
        out.insert("plan".into(), json!({"objects": objects, "requeueAfterMs": plan.requeue_after.map(|d| d.as_millis() as u64)}));
    }
    if wanted(Capability::Health, RunCapability::Health) {
        let version = rolled_out.clone().unwrap_or_else(|| desired.clone());
        let report = compiled.call_health(&engine, &limits, tags(), &cx, &version)?;
        let conditions: Vec<Value> = report
            .conditions
            .iter()
            .map(|c| json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message}))
            .collect();
        out.insert(
            "health".into(),
            json!({
                "state": format!("{:?}", report.state), "message": report.message,
                "rolloutComplete": report.rollout_complete, "conditions": conditions,
            }),
        );
    }
    if wanted(Capability::Backup, RunCapability::Backup) {
        let last = last_completed_slot(&observed);
        let decision = compiled.call_backup(&engine, &limits, tags(), &cx, last.as_deref())?;
        if let Some((slot, job)) = &decision.run {
            let accounts: std::collections::BTreeSet<String> = observed
                .iter()
                .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ServiceAccount"))
                .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            guard::check_job(policy, &app_name, slot, job, &accounts)?;
        }
        out.insert(
            "backup".into(),
            json!({
                "run": decision.run.map(|(slot, job)| json!({"slot": slot, "job": job.to_value()})),
                "expire": decision.expire,
                "requeueAfterMs": decision.requeue_after.map(|d| d.as_millis() as u64),
            }),
        );
    }
    if wanted(Capability::Upgrade, RunCapability::Upgrade) {
        let from = rolled_out.clone().unwrap_or_else(|| desired.clone());
        let decision = compiled.call_upgrade(&engine, &limits, tags(), &cx, &from, &desired)?;
        out.insert(
            "upgrade".into(),
            json!({"from": from, "to": desired, "decision": format!("{decision:?}")}),
        );
    }
    if wanted(Capability::Finalize, RunCapability::Finalize) {
        let claims: Vec<Value> = observed
            .iter()
            .filter(|o| o.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim"))
            .cloned()
            .collect();
        let decision =
            compiled.call_finalize(&engine, &limits, tags(), &cx.with_observed(&claims))?;
        let names = |refs: &[crate::plugin::call::ObjectRef]| {
            refs.iter()
                .map(|r| format!("{}/{}", r.kind, r.name))
                .collect::<Vec<_>>()
        };
        out.insert(
            "finalize".into(),
            json!({"delete": names(&decision.delete), "keep": names(&decision.keep)}),
        );
    }
    print_value(&Value::Object(out), json_out)
}

fn print_value(out: &Value, json_out: bool) -> anyhow::Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(out)?);
    } else {
        print!("{}", serde_yaml::to_string(out)?);
    }
    Ok(())
}

/// What `plugin run --capability reconcile` decides on.
struct ReconcileOnce<'a> {
    plugin: &'a str,
    engine: &'a PluginEngine,
    compiled: &'a CompiledPlugin,
    app: &'a Value,
    observed: &'a [Value],
    now_ms: i64,
    limits: CallLimits,
    policy: &'a guard::Policy,
}

/// The host's decision for the App, as the host makes it ([`wasmop_core::decide`] with the
/// host's guard): the objects it would apply (stamped), prune, the backup Job, the status, the
/// events. The observed objects stand for the cluster: a planned object found there but not
/// owned by the App is refused as the host refuses it. A decision the host would back off
/// from (a plugin fault, a rejected plan) is an error naming the cause.
fn reconcile_once(run: ReconcileOnce<'_>) -> anyhow::Result<Value> {
    use wasmop_core::{
        Requeue, Snapshot,
        decide::{self, PluginState},
        observed::{ObservedObject, visible_to},
        stamp::AppRef,
        status::{AppStatus, PluginStatus},
    };
    let text = |p: &str| {
        run.app
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let app_ref = AppRef {
        name: text("/metadata/name"),
        namespace: text("/metadata/namespace"),
        uid: text("/metadata/uid"),
        generation: run
            .app
            .pointer("/metadata/generation")
            .and_then(Value::as_i64),
    };
    let previous: AppStatus = match run.app.get("status") {
        Some(status) => serde_json::from_value(status.clone())
            .context("the App's status is not a valid App status")?,
        None => AppStatus::default(),
    };
    let observed: Vec<ObservedObject> = run
        .observed
        .iter()
        .filter_map(|o| ObservedObject::from_value(o.clone(), &app_ref.uid))
        .collect();
    let metadata = &run.compiled.metadata;
    let visible = visible_to(
        &observed,
        &metadata.owns,
        &metadata.observes,
        run.compiled.capabilities.contains(&Capability::Backup),
    );
    let cx = AppContext::new(run.app, visible.map(|o| &o.json), run.now_ms);
    let snapshot = Snapshot {
        app: app_ref.clone(),
        desired_version: text("/spec/version"),
        previous,
        observed,
        now: k8s_openapi::jiff::Timestamp::from_millisecond(run.now_ms)
            .context("--now is out of range")?,
        plugin: PluginState::Serving {
            label: run.compiled.label(),
            status: PluginStatus {
                reference: run.plugin.to_string(),
                digest: run.compiled.digest.to_string(),
                short_digest: run.compiled.digest.short().to_string(),
                capabilities: run
                    .compiled
                    .capabilities
                    .iter()
                    .map(|c| c.interface().to_string())
                    .collect(),
                loaded_at: None,
            },
            newer_refused: None,
        },
    };
    let check = guard::AppCheck {
        policy: run.policy.clone(),
        policy_name: "the given policy".into(),
        app: app_ref.name.clone(),
        namespace: app_ref.namespace.clone(),
        owns: metadata.owns.clone(),
    };
    let mut calls = CliCalls {
        compiled: run.compiled,
        engine: run.engine,
        limits: run.limits,
        tags: CallTags {
            plugin: run.compiled.label(),
            app: format!("{}/cli", app_ref.namespace),
        },
        cx: &cx,
    };
    let mut decision = decide::decide(&snapshot, &mut calls, &check);
    // The observed objects are the cluster: adopting one that exists and is not the App's is
    // refused, as the host's executor refuses it.
    if let Some(foreign) = decision.adopt.iter().find(|key| {
        snapshot
            .observed
            .iter()
            .any(|o| o.api_version == key.api_version && o.kind == key.kind && o.name == key.name)
    }) {
        let failure = wasmop_core::Failure::new(
            "PlanRejected",
            format!("plan rejected: {foreign} already exists and is not managed by this App"),
        );
        decision = decide::failed(&snapshot, failure);
    }
    if decision.requeue == Requeue::Backoff {
        let degraded = decision
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default();
        bail!("{degraded}");
    }
    let keys = |keys: &[wasmop_core::ObjectKey]| -> Vec<String> {
        keys.iter().map(ToString::to_string).collect()
    };
    Ok(json!({
        "apply": decision.apply,
        "inPlace": decision.in_place,
        "prune": keys(&decision.prune),
        "backup": decision.backup_start.as_ref().map(|(slot, job)| json!({"slot": slot, "job": job})),
        "expire": keys(&decision.backup_expire),
        "status": decision.status,
        "events": decision.events.iter().map(|e| json!({
            "type": if e.warning { "Warning" } else { "Normal" },
            "reason": e.reason,
            "note": e.note,
        })).collect::<Vec<_>>(),
        "requeueAfterSeconds": match decision.requeue {
            Requeue::After(after) => after.as_secs(),
            Requeue::Backoff => 0,
        },
    }))
}

/// The decision core's plugin calls over a component compiled for the CLI: the host's sandbox
/// and limits, called on this thread.
struct CliCalls<'a> {
    compiled: &'a CompiledPlugin,
    engine: &'a PluginEngine,
    limits: CallLimits,
    tags: CallTags,
    cx: &'a AppContext,
}

impl wasmop_core::PluginCalls for CliCalls<'_> {
    fn capabilities(&self) -> &std::collections::BTreeSet<Capability> {
        &self.compiled.capabilities
    }

    fn gate(
        &mut self,
        from: &str,
        to: &str,
    ) -> Result<crate::plugin::call::GateDecision, wasmop_core::Failure> {
        let r = self.compiled.call_upgrade(
            self.engine,
            &self.limits,
            self.tags.clone(),
            self.cx,
            from,
            to,
        );
        r.map_err(failure)
    }

    fn plan(
        &mut self,
        current: Option<&str>,
        target: &str,
    ) -> Result<crate::plugin::call::Plan, wasmop_core::Failure> {
        let r = self.compiled.call_plan(
            self.engine,
            &self.limits,
            self.tags.clone(),
            self.cx,
            current,
            target,
        );
        r.map_err(failure)
    }

    fn health(
        &mut self,
        version: &str,
    ) -> Result<crate::plugin::call::HealthReport, wasmop_core::Failure> {
        let r = self.compiled.call_health(
            self.engine,
            &self.limits,
            self.tags.clone(),
            self.cx,
            version,
        );
        r.map_err(failure)
    }

    fn backup(
        &mut self,
        last_completed: Option<&str>,
    ) -> Result<crate::plugin::call::BackupDecision, wasmop_core::Failure> {
        let r = self.compiled.call_backup(
            self.engine,
            &self.limits,
            self.tags.clone(),
            self.cx,
            last_completed,
        );
        r.map_err(failure)
    }
}

fn failure(err: crate::plugin::CallError) -> wasmop_core::Failure {
    wasmop_core::Failure::new(err.reason(), err.to_string())
}

/// The newest slot among observed backup Jobs that succeeded.
fn last_completed_slot(observed: &[Value]) -> Option<String> {
    observed
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Job"))
        .filter(|o| {
            o.pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > 0
        })
        .filter_map(|o| {
            o.pointer(&format!(
                "/metadata/labels/{}",
                BACKUP_SLOT_LABEL.replace('/', "~1")
            ))
        })
        .filter_map(|slot| slot.as_str().map(str::to_string))
        .max()
}

/// Builds the plugin crate at `path` for wasm32-wasip2 (release) and reports the component.
fn build(path: &Path) -> anyhow::Result<()> {
    let manifest = path.join("Cargo.toml");
    if !manifest.is_file() {
        bail!("{} has no Cargo.toml", path.display());
    }
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo")?;
    if !output.status.success() {
        bail!("cargo build of {} failed", manifest.display());
    }
    let wasm = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m.get("reason").and_then(Value::as_str) == Some("compiler-artifact"))
        .filter(|m| {
            m.pointer("/target/kind")
                .and_then(Value::as_array)
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            m.get("filenames")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .rfind(|f| f.extension().is_some_and(|e| e == "wasm"))
        .context("cargo built no .wasm cdylib; is crate-type = [\"cdylib\"] set?")?;
    let bytes = read(&wasm)?;
    let (_engine, compiled) = prepare(&wasm.display().to_string(), &bytes)?;
    let capabilities: Vec<&str> = compiled
        .capabilities
        .iter()
        .map(|c| c.interface())
        .collect();
    println!("{}", wasm.display());
    println!("size:         {} bytes", bytes.len());
    println!("digest:       {}", compiled.digest);
    println!("capabilities: {}", capabilities.join(", "));
    Ok(())
}

/// `my-plugin` -> `MyPlugin`.
fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn scaffold(name: &str, dir: Option<PathBuf>, sdk: Option<PathBuf>) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        bail!(
            "plugin name {name:?} must be lower-case letters, digits and '-', starting with a letter"
        );
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let sdk = sdk.unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk")));
    let sdk = sdk
        .canonicalize()
        .with_context(|| format!("the SDK at {} (pass --sdk)", sdk.display()))?;
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let ty = type_name(name);
    let lib = TEMPLATE_LIB
        .replace("Hello", &ty)
        .replace("\"hello\"", &format!("\"{name}\""))
        .replace("`hello`", &format!("`{name}`"))
        .replace("wasmop/hello:", &format!("wasmop/{name}:"))
        .replace("a hello App", &format!("a {name} App"));
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# A wasm32-wasip2 component; `cargo test` runs the logic natively.
crate-type = ["cdylib"]

[dependencies]
serde = {{ version = "1", features = ["derive"] }}
wasmop-sdk = {{ path = "{sdk}" }}

[dev-dependencies]
serde_json = "1"

# Small, for a ConfigMap's 1 MiB; one codegen unit and whole-program LTO let the SDK, serde_json
# and k8s-openapi inline into the plugin, which makes calls faster (kvstore: 12-18%).
[profile.release]
opt-level = "s"
strip = true
lto = true
codegen-units = 1

# Optimised dependencies keep native test runs quick.
[profile.dev.package."*"]
opt-level = 1

# A plugin is its own workspace.
[workspace]
"#,
        sdk = sdk.display()
    );
    std::fs::write(dir.join("Cargo.toml"), cargo)?;
    std::fs::write(dir.join("src/lib.rs"), lib)?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    println!("created plugin {name} in {}", dir.display());
    println!("  cargo test --manifest-path {}/Cargo.toml", dir.display());
    println!("  wasmop plugin build {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_camel_case() {
        assert_eq!(type_name("my-cache"), "MyCache");
        assert_eq!(type_name("kv"), "Kv");
    }

    #[test]
    fn bad_plugin_names_are_refused() {
        let err = scaffold("My Plugin", Some(std::env::temp_dir().join("never")), None)
            .expect_err("invalid");
        assert!(err.to_string().contains("lower-case"), "{err}");
    }

    #[test]
    fn backup_slot_label_is_read_from_jobs() {
        let jobs = vec![
            json!({"kind": "Job", "metadata": {"labels": {BACKUP_SLOT_LABEL: "20261202-000000"}}, "status": {"succeeded": 1}}),
            json!({"kind": "Job", "metadata": {"labels": {BACKUP_SLOT_LABEL: "20261202-060000"}}, "status": {}}),
        ];
        assert_eq!(
            last_completed_slot(&jobs).as_deref(),
            Some("20261202-000000")
        );
    }
}
