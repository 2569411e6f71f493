//! The run's figures as markdown: what ran where, then one table per measurement, with the
//! added latency of the webhook against the same request without it.

use std::{fmt::Write as _, path::Path};

use crate::measure::{Admission, Conversion, REFUSED_NAME, Read, Stats};

/// What ran, and where.
pub struct Run {
    /// When it started, UTC.
    pub started: k8s_openapi::jiff::Timestamp,
    /// The command line.
    pub command: String,
    /// The commit the host was built from (by default the repository's, marked when tracked
    /// files differed from it).
    pub commit: String,
    /// The `wasmop` binary measured.
    pub wasmop: String,
    /// N, M, R and the untimed creates before the timed ones.
    pub creates: usize,
    /// M.
    pub objects: usize,
    /// R.
    pub lists: usize,
    /// Untimed dry-run creates per variant.
    pub warmup: usize,
}

/// The commit of `root` (`git rev-parse --short HEAD`), marked when tracked files differ.
pub fn commit(root: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{head} (with uncommitted changes)"),
        _ => head,
    }
}

/// `nproc`, memory and CPU model, from `/proc`.
fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
        / 1024.0;
    let model = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    format!("{cpus} CPUs ({model}), {memory_gib:.1} GiB")
}

/// `release` or `debug`, from the directory cargo put `binary` in.
fn profile_of(binary: &str) -> &'static str {
    if binary.contains("/release/") {
        "release"
    } else if binary.contains("/debug/") {
        "debug"
    } else {
        "unknown"
    }
}

/// When `binary` was last written, UTC: which source it was built from is the commit's, or the
/// working tree's at that time.
fn built(binary: &str) -> String {
    std::fs::metadata(binary)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| k8s_openapi::jiff::Timestamp::try_from(t).ok())
        .map_or_else(
            || "at an unknown time".into(),
            |t| t.strftime("%Y-%m-%d %H:%M UTC").to_string(),
        )
}

/// A row of times: p50, p90, p99, mean.
fn times(stats: &Stats) -> String {
    format!(
        "{:.2} | {:.2} | {:.2} | {:.2}",
        stats.p50, stats.p90, stats.p99, stats.mean
    )
}

/// `+x.xx / +y.yy`: p50 and mean of `stats` less those of `base`.
fn added(stats: &Stats, base: &Stats) -> String {
    format!(
        "{:+.2} / {:+.2}",
        stats.p50 - base.p50,
        stats.mean - base.mean
    )
}

/// The markdown of the run.
pub fn markdown(run: &Run, admission: &Admission, conversion: &Conversion) -> String {
    let mut out = String::new();
    let bench = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let _ = writeln!(
        out,
        "| run | |\n|---|---|\n\
         | date (UTC) | {} |\n\
         | machine | {} |\n\
         | commit | {} |\n\
         | builds | host: {} (`{}`, built {}); benchmark: {bench} |\n\
         | N / M / R | {} dry-run creates per variant (after {} untimed) / {} objects per kind / {} rounds of reads (2 LISTs, 2 × M GETs) |\n\
         | command | `{}` |\n",
        run.started.strftime("%Y-%m-%d %H:%M"),
        machine(),
        run.commit,
        profile_of(&run.wasmop),
        run.wasmop,
        built(&run.wasmop),
        run.creates,
        run.warmup,
        run.objects,
        run.lists,
        run.command,
    );
    let a = admission;
    let _ = writeln!(
        out,
        "| dry-run create, one at a time ({} each) | p50 ms | p90 ms | p99 ms | mean ms | added ms (p50 / mean) |\n\
         |---|---|---|---|---|---|\n\
         | plain kind, no webhook | {} | – |\n\
         | bound kind, admitted by the plugin | {} | {} |\n\
         | bound kind, refused by the plugin (`{REFUSED_NAME}`) | {} | {} |\n",
        a.plain.n,
        times(&a.plain),
        times(&a.allowed),
        added(&a.allowed, &a.plain),
        times(&a.refused),
        added(&a.refused, &a.plain),
    );
    let _ = writeln!(
        out,
        "The host answered {:.0} validate reviews over the timed creates, in {:.3} ms each on \
         average (its own share of the added time; the rest is the API server's call to it).\n",
        a.host.reviews, a.host.mean_ms
    );
    let c = conversion;
    let m = run.objects as f64;
    let row = |what: &str, read: &Read, base: Option<&Read>| {
        let added = base.map_or_else(
            || "–".to_string(),
            |b| format!("{:+.2}", read.stats.p50 - b.stats.p50),
        );
        let host = if read.reviews_per_read > 0.0 {
            format!("{:.2}", read.host_ms_per_review)
        } else {
            "–".into()
        };
        format!(
            "| {what} | {} | {added} | {:.2} | {host} |\n",
            times(&read.stats),
            read.reviews_per_read
        )
    };
    let _ = writeln!(
        out,
        "| read, one at a time ({} LISTs each, {} GETs each) | p50 ms | p90 ms | p99 ms | mean ms | added p50 ms | convert reviews per read | host ms per review |\n\
         |---|---|---|---|---|---|---|---|\n\
         {}{}{}{}",
        c.list_v1.stats.n,
        c.get_v1.stats.n,
        row(
            &format!(
                "LIST of the bound kind's {} objects at v1 (storage version)",
                run.objects
            ),
            &c.list_v1,
            None
        ),
        row(
            "the same LIST at v1alpha1",
            &c.list_v1alpha1,
            Some(&c.list_v1)
        ),
        row("GET of one object of the bound kind at v1", &c.get_v1, None),
        row("the same GET at v1alpha1", &c.get_v1alpha1, Some(&c.get_v1)),
    );
    let _ = writeln!(
        out,
        "Per object read at v1alpha1 against v1 (p50): {:+.0} µs in a LIST of {} (the difference \
         over {}), {:+.0} µs in a GET. From the first create of the {} objects until they were \
         all Ready ({:.1} s), the host answered {:.0} convert reviews \
         ({:.1} per object, {:.2} ms each on average).",
        (c.list_v1alpha1.stats.p50 - c.list_v1.stats.p50) * 1e3 / m,
        run.objects,
        run.objects,
        (c.get_v1alpha1.stats.p50 - c.get_v1.stats.p50) * 1e3,
        run.objects,
        c.ready_s,
        c.writes.reviews,
        c.writes.reviews / m,
        c.writes.mean_ms,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::profile_of;

    #[test]
    fn the_profile_is_cargos_directory() {
        assert_eq!(profile_of("/t/release/wasmop"), "release");
        assert_eq!(profile_of("/t/debug/wasmop"), "debug");
        assert_eq!(profile_of("/usr/bin/wasmop"), "unknown");
    }
}
