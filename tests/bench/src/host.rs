//! One `wasmop run` process under measurement: started with a benchmark identity's kubeconfig,
//! read from `/proc` (CPU seconds, resident and peak memory) and from its `/metrics`, and killed
//! the way a node loses a Pod (`SIGKILL`) or stopped the way the kubelet stops one (`SIGTERM`).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// How a host is started.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// The `wasmop` binary (release build; the native variant's own build).
    pub binary: PathBuf,
    /// The kubeconfig of the benchmark identity the host acts as (the audit log counts its
    /// requests).
    pub kubeconfig: PathBuf,
    /// The namespace it watches; it names the host's log and its Pod.
    pub namespace: String,
    /// Namespaces it watches besides (`--namespace a,b`): the bound-kinds scenario's Apps.
    pub more_namespaces: Vec<String>,
    /// `--binding-selector`: the PluginBindings it serves. Without it a host serves every
    /// binding in the cluster, another run's or test's too.
    pub binding_selector: Option<String>,
    /// Its compiled-plugin cache, kept across restarts.
    pub cache_dir: PathBuf,
    /// The key of that cache, so that a restarted host trusts what the last one compiled.
    pub cache_key_file: PathBuf,
    /// `--concurrency`.
    pub concurrency: u16,
    /// Where its log goes.
    pub log: PathBuf,
    /// Its Pod name (the leader election's identity), `bench-<namespace>` if `None`.
    pub pod_name: Option<String>,
    /// Arguments besides (`--leader-elect` ...).
    pub extra_args: Vec<String>,
}

/// A running host.
pub struct Host {
    child: tokio::process::Child,
    port: u16,
    /// When the process was spawned.
    pub started: Instant,
}

impl Host {
    /// Starts the host and waits until `/readyz` answers (its caches synced).
    pub async fn start(spec: &HostSpec) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .with_context(|| format!("opening {}", spec.log.display()))?;
        let namespaces = std::iter::once(&spec.namespace)
            .chain(&spec.more_namespaces)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(",");
        // WASMOP_BENCH_HOST_WRAPPER, a command the host runs under (tests/bench/heap.sh runs it
        // under heaptrack), split at spaces.
        let wrapper = std::env::var("WASMOP_BENCH_HOST_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut command = match words.next() {
            Some(program) => {
                let mut command = tokio::process::Command::new(program);
                command.args(words).arg(&spec.binary);
                command
            }
            None => tokio::process::Command::new(&spec.binary),
        };
        command
            .args(["run", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--namespace", &namespaces]);
        if let Some(selector) = &spec.binding_selector {
            command.args(["--binding-selector", selector]);
        }
        let started = Instant::now();
        let child = command
            .args(["--poll-interval", "1s"])
            .args(["--concurrency", &spec.concurrency.to_string()])
            .arg("--cache-dir")
            .arg(&spec.cache_dir)
            .arg("--cache-key-file")
            .arg(&spec.cache_key_file)
            .args(["--insecure-registry", "127.0.0.1"])
            // The local registry is on loopback, a private address the host refuses unless told.
            .args(["--allow-private-registries", "127.0.0.0/8"])
            .args(["--log-format", "json"])
            .env("KUBECONFIG", &spec.kubeconfig)
            .args(&spec.extra_args)
            .env(
                "POD_NAME",
                spec.pod_name
                    .clone()
                    .unwrap_or_else(|| format!("bench-{}", spec.namespace)),
            )
            // The controller's per-App "reconciled" line is how the restart scenario tells that
            // every App was reconciled once; nothing else is logged below info.
            .env("RUST_LOG", "info,wasmop_host::controller=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", spec.binary.display()))?;
        let host = Self {
            child,
            port,
            started,
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = http.get(host.url("/readyz")).send().await
                && r.status().is_success()
            {
                return Ok(host);
            }
            if Instant::now() > deadline {
                bail!(
                    "the host for {} was not ready after 120 s; see {}",
                    spec.namespace,
                    spec.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the host has exited")
    }

    /// User plus system CPU seconds the process used so far.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        cpu_seconds_of(self.pid()?)
    }

    /// Resident memory now, in MiB, split by what backs it.
    pub fn memory_mib(&self) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?))?;
        let field = |name: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<f64>().ok())
                .unwrap_or(0.0)
                / 1024.0
        };
        Ok(Memory {
            rss: field("VmRSS:"),
            peak: field("VmHWM:"),
            anon: field("RssAnon:"),
            file: field("RssFile:"),
        })
    }

    /// With `WASMOP_BENCH_SMAPS=DIR`, copies the host's `/proc/PID/smaps` to `DIR/NAME.smaps`
    /// (for `tests/bench/smaps_breakdown.py`, which says what backs the resident memory).
    pub fn save_smaps(&self, name: &str) -> anyhow::Result<()> {
        let Some(dir) = std::env::var_os("WASMOP_BENCH_SMAPS") else {
            return Ok(());
        };
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let to = dir.join(format!("{name}.smaps"));
        std::fs::copy(format!("/proc/{}/smaps", self.pid()?), &to)
            .with_context(|| format!("copying the host's smaps to {}", to.display()))?;
        Ok(())
    }

    /// The sum over label sets of the series `name` in `/metrics`.
    pub async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let text = reqwest::get(self.url("/metrics"))
            .await?
            .error_for_status()?
            .text()
            .await?;
        Ok(metric_sum(&text, name))
    }

    /// `SIGKILL`, as a node losing the Pod.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing the host")?;
        Ok(())
    }

    /// `SIGTERM`, then waits for the exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.pid()?;
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// The sum over label sets of the Prometheus series `name` in `text`.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| series.split('{').next() == Some(name))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux this runs on; `getconf` says if not.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The Apps `log` (from byte `from_byte` on) says were reconciled after their plugin loaded:
/// a reconcile before that only held. `plugin_of` names an App's plugin from its log name.
pub fn reconciled_apps(
    log: &Path,
    from_byte: u64,
    plugin_of: impl Fn(&str) -> &'static str,
) -> anyhow::Result<std::collections::HashSet<String>> {
    reconciled_after(log, from_byte, from_byte, plugin_of)
}

/// As [`reconciled_apps`], the plugin loads counted from byte `loaded_from` and the reconciles
/// from byte `served_from` on: a warm standby loaded its plugins before it led.
pub fn reconciled_after(
    log: &Path,
    loaded_from: u64,
    served_from: u64,
    plugin_of: impl Fn(&str) -> &'static str,
) -> anyhow::Result<std::collections::HashSet<String>> {
    use std::io::{Read, Seek};
    let mut file = std::fs::File::open(log)?;
    file.seek(std::io::SeekFrom::Start(loaded_from))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut loaded = std::collections::HashSet::new();
    let mut served = std::collections::HashSet::new();
    let mut at = loaded_from;
    for raw in text.lines() {
        let counts = at >= served_from;
        at += raw.len() as u64 + 1;
        let Ok(line) = serde_json::from_str::<serde_json::Value>(raw) else {
            continue;
        };
        match line["message"].as_str() {
            Some("plugin loaded") => {
                loaded.insert(line["plugin"].as_str().unwrap_or_default().to_string());
            }
            Some("reconciled") if counts => {
                let app = line["app"].as_str().unwrap_or_default();
                if loaded.contains(plugin_of(app)) {
                    served.insert(app.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(served)
}

/// The byte offset in `log` (from `from_byte` on) of the first line whose message is
/// `message`, if there is one yet.
pub fn offset_of(log: &Path, from_byte: u64, message: &str) -> anyhow::Result<Option<u64>> {
    use std::io::{Read, Seek};
    let mut file = std::fs::File::open(log)?;
    file.seek(std::io::SeekFrom::Start(from_byte))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut at = from_byte;
    for raw in text.lines() {
        if serde_json::from_str::<serde_json::Value>(raw)
            .is_ok_and(|line| line["message"] == message)
        {
            return Ok(Some(at));
        }
        at += raw.len() as u64 + 1;
    }
    Ok(None)
}

/// Whether the host loaded `plugin` (by its metadata name) from its compiled cache, as the first
/// "plugin loaded" line of `log` from byte `from_byte` on says (`false`: compiled); `None`
/// when there is no such line.
pub fn plugin_loaded_from_cache(
    log: &Path,
    from_byte: u64,
    plugin: &str,
) -> anyhow::Result<Option<bool>> {
    use std::io::{Read, Seek};
    let mut file =
        std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
    file.seek(std::io::SeekFrom::Start(from_byte))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "plugin loaded" && l["plugin"] == plugin)
        .and_then(|l| l["cached"].as_bool()))
}

/// A process's resident memory, MiB.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Memory {
    /// Resident now (`VmRSS`).
    pub rss: f64,
    /// Peak resident (`VmHWM`).
    pub peak: f64,
    /// Resident anonymous memory (heap, stacks, plugin instances' linear memories).
    pub anon: f64,
    /// Resident file-backed pages: the binary's own code and the mapped compiled plugins,
    /// shared with every other process mapping the same files.
    pub file: f64,
}

/// User plus system CPU seconds process `pid` and its exited children used so far.
pub fn cpu_seconds_of(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("/proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime and cstime are fields 14-17 of stat(5), 12-15 after the name:
    // the host and its compile workers (children that have exited).
    let ticks: f64 = fields
        .get(11..15)
        .context("/proc/PID/stat is short")?
        .iter()
        .map(|f| f.parse::<f64>().unwrap_or(0.0))
        .sum();
    Ok(ticks / clock_ticks())
}
