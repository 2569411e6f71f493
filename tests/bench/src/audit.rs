//! What one benchmark identity asked of the API server in a window of time, from the API
//! server's audit log (`deploy/local/cluster.sh` logs the requests of the `wasmop-bench-*`
//! users only, at the Metadata level).

use std::{
    collections::{BTreeMap, HashSet},
    io::{BufRead, BufReader},
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use serde::Deserialize;

/// Requests counted by `verb resource[/subresource]`, e.g. `patch deployments` or
/// `patch apps/status`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Requests(pub BTreeMap<String, u64>);

impl Requests {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Requests that change something: create, update, patch, delete.
    pub fn writes(&self) -> u64 {
        self.matching(|verb, _| is_write(verb))
    }

    /// Writes to the objects a plan holds (not the App, its status, or Events).
    pub fn object_writes(&self) -> u64 {
        self.matching(is_object_write)
    }

    /// Writes to `apps/status`.
    pub fn status_writes(&self) -> u64 {
        self.matching(|verb, resource| is_write(verb) && resource == "apps/status")
    }

    /// Event creates and patches.
    pub fn event_writes(&self) -> u64 {
        self.matching(|verb, resource| is_write(verb) && resource == "events")
    }

    fn matching(&self, keep: impl Fn(&str, &str) -> bool) -> u64 {
        self.0
            .iter()
            .filter(|(key, _)| {
                let (verb, resource) = key.split_once(' ').unwrap_or((key, ""));
                keep(verb, resource)
            })
            .map(|(_, n)| n)
            .sum()
    }
}

/// A write to an object a plan holds: not to an App (`apps`, `apps/status`) or an Event.
fn is_object_write(verb: &str, resource: &str) -> bool {
    is_write(verb) && !resource.starts_with("apps") && !resource.starts_with("events")
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    #[serde(rename = "auditID")]
    audit_id: String,
    verb: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    request_received_timestamp: String,
}

#[derive(Deserialize)]
struct User {
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    subresource: Option<String>,
}

/// The audit log of the local API server.
pub struct AuditLog {
    path: std::path::PathBuf,
}

impl AuditLog {
    /// The log at `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
        }
    }

    /// The requests of `user` received in `[from, to]`, each counted once (a watch is logged
    /// when its response starts and when it ends).
    pub async fn requests(
        &self,
        user: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Requests> {
        let mut out = Requests::default();
        for (_, key) in self.window(user, from, to).await? {
            *out.0.entry(key).or_default() += 1;
        }
        Ok(out)
    }

    /// When `user`'s last write of a planned object ([`Requests::object_writes`]) in
    /// `[from, to]` was received: how long the objects took, whatever the statuses did.
    pub async fn last_object_write(
        &self,
        user: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Option<SystemTime>> {
        Ok(self
            .window(user, from, to)
            .await?
            .into_iter()
            .filter(|(_, key)| {
                let (verb, resource) = key.split_once(' ').unwrap_or((key, ""));
                is_object_write(verb, resource)
            })
            .map(|(at, _)| at)
            .max()
            .map(|at| UNIX_EPOCH + Duration::from_micros(at.max(0) as u64)))
    }

    /// `user`'s requests received in `[from, to]`, each once: when (microseconds since the
    /// epoch) and what (`verb resource[/subresource]`).
    async fn window(
        &self,
        user: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Vec<(i64, String)>> {
        // The API server writes the log in batches: let the window's last requests land.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let micros = |t: SystemTime| -> i64 {
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0)
        };
        let (from, to) = (micros(from), micros(to));
        if !self.path.exists() {
            anyhow::bail!(
                "{} is missing: restart the cluster (deploy/local/cluster.sh down; up) so that the API server writes it",
                self.path.display()
            );
        }
        // The log and its rotated backups (`audit-<time>.log` beside it).
        let dir = self.path.parent().context("the audit log's directory")?;
        let mut files = vec![];
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("audit") && name.ends_with(".log") {
                files.push(path);
            }
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let lines = files
            .iter()
            .map(std::fs::File::open)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flat_map(|f| BufReader::new(f).lines());
        for line in lines {
            let line = line?;
            if !line.contains(user) {
                continue;
            }
            let Ok(entry) = serde_json::from_str::<Line>(&line) else {
                continue;
            };
            if entry.user.username != user {
                continue;
            }
            let Ok(at) = entry
                .request_received_timestamp
                .parse::<k8s_openapi::jiff::Timestamp>()
            else {
                continue;
            };
            let at = at.as_microsecond();
            if at < from || at > to || !seen.insert(entry.audit_id) {
                continue;
            }
            let object = entry.object_ref.as_ref();
            let resource = object.and_then(|o| o.resource.clone()).unwrap_or_default();
            let key = match object.and_then(|o| o.subresource.as_deref()) {
                Some(sub) => format!("{} {resource}/{sub}", entry.verb),
                None => format!("{} {resource}", entry.verb),
            };
            out.push((at, key));
        }
        Ok(out)
    }
}
