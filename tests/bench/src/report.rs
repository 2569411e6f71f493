//! The run's results as files, named by the run's start (`<stamp>`: `2026-12-07-0704`, UTC, so
//! that a second run the same day keeps the first): `<out>/<stamp>.json` (everything),
//! `<out>/<stamp>.md` (the tables the README quotes, under a line naming the machine and the
//! commit) and two plots, `<stamp>-converge.svg` and `<stamp>-writes.svg` (seconds and API
//! writes against N, one line per variant).

use std::{fmt::Write as _, path::Path};

use anyhow::Context;

use crate::scenarios::{BoundKinds, Results, Run};

/// Writes the JSON, the Markdown table and the plots, and prints the table.
pub fn write(out: &Path, results: &Results) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let day = results.date.get(..10).unwrap_or("undated");
    let stamp = stamp(&results.date);
    let base = out.join(&stamp);
    let json = base.with_extension("json");
    std::fs::write(&json, serde_json::to_string_pretty(results)?)?;
    let table = markdown(results, day);
    std::fs::write(base.with_extension("md"), &table)?;
    let plot = |file: String, title: &str, y: &str, value: &dyn Fn(&Run) -> f64| {
        std::fs::write(out.join(file), svg(results, title, y, value))
    };
    plot(
        format!("{stamp}-converge.svg"),
        "Converge: until every App is reconciled at its generation",
        "seconds",
        &|r| r.converge_s,
    )?;
    plot(
        format!("{stamp}-writes.svg"),
        "API writes until Ready (all resources)",
        "writes",
        &|r| r.requests.writes() as f64,
    )?;
    println!("{table}");
    eprintln!("[bench] results in {}", json.display());
    Ok(())
}

/// `2026-12-07-0704` of an RFC 3339 time `2026-12-07T07:04:31Z`; `undated` of anything else.
fn stamp(date: &str) -> String {
    match (date.get(..10), date.get(11..13), date.get(14..16)) {
        (Some(day), Some(hour), Some(minute))
            if date.as_bytes().get(10) == Some(&b'T')
                && (hour.bytes().chain(minute.bytes())).all(|b| b.is_ascii_digit()) =>
        {
            format!("{day}-{hour}{minute}")
        }
        _ => "undated".into(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "–".into())
}

fn markdown(results: &Results, day: &str) -> String {
    let m = &results.machine;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Run {} at {}, commit {}: {} CPUs ({}), {:.0} GiB, Linux {}; concurrency {}; the wasm host's allocator: {}.\n",
        day,
        results.date,
        results.revision,
        m.cpus,
        m.cpu,
        m.memory_gib,
        m.kernel,
        results.concurrency,
        results.allocator
    );
    if let Some(baseline) = &results.baseline {
        let _ = writeln!(
            s,
            "The `baseline` variant is the wasm host built from commit {baseline}.\n"
        );
    }
    let _ = writeln!(
        s,
        "| N hello + kvstore | variant | converge s | objects written s | Ready s | × bare (converge / objects / Ready) | requests per App | CPU s until converged: host / API server + etcd | host CPU s until Ready | RSS MiB (peak; anon + file) | cached objects (JSON MiB) | object writes per planned object | status writes per App | events per App | all writes | reconciles | plugin calls |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for run in &results.runs {
        let bare = results
            .runs
            .iter()
            .find(|b| b.variant == "bare" && b.hello == run.hello);
        let ratio = match bare {
            Some(b) if run.variant != "bare" => format!(
                "{:.2} / {} / {:.2}",
                run.converge_s / b.converge_s,
                match (run.objects_s, b.objects_s) {
                    (Some(o), Some(bo)) => format!("{:.2}", o / bo),
                    _ => "–".into(),
                },
                run.ready_s / b.ready_s
            ),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} + {} | {} | {:.1} | {} | {:.1} | {} | {:.2} | {} / {} | {} | {} ({}; {} + {}) | {} ({}) | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            run.hello,
            run.kvstore,
            run.variant,
            run.converge_s,
            opt(run.objects_s, 1),
            run.ready_s,
            ratio,
            per_app(run, run.requests.total()),
            opt(run.converge_host_cpu_s, 1),
            opt(run.control_plane_cpu_s, 1),
            opt(run.host_cpu_s, 1),
            opt(run.rss_mib, 0),
            opt(run.rss_peak_mib, 0),
            opt(run.rss_anon_mib, 0),
            opt(run.rss_file_mib, 0),
            opt(run.cache_objects, 0),
            opt(run.cache_mib, 1),
            run.object_writes_per_object,
            run.status_writes_per_app,
            run.event_writes_per_app,
            run.requests.writes(),
            opt(run.reconciles, 0),
            // The native variant calls no component: no plugin call is counted.
            opt(run.plugin_calls.filter(|_| run.variant != "native"), 0),
        );
    }
    requests_by_kind(&mut s, results);
    let hosts: Vec<&Run> = results.runs.iter().filter(|r| r.idle.is_some()).collect();
    if !hosts.is_empty() {
        let _ = writeln!(
            s,
            "\n| N | variant | idle CPU s/min | idle requests/min | idle writes/min | swap storm s (× converge) | swap writes | restart: ready s | restart: all reconciled s (list s, × list) | restart writes |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for run in hosts {
            let (Some(idle), Some(swap), Some(restart)) = (&run.idle, &run.swap, &run.restart)
            else {
                continue;
            };
            let list = run.list_s.unwrap_or(f64::NAN);
            let _ = writeln!(
                s,
                "| {} + {} | {} | {:.2} | {:.1} | {:.1} | {:.1} ({:.2}) | {} | {:.1} | {:.1} ({:.2} s, ×{:.1}) | {} |",
                run.hello,
                run.kvstore,
                run.variant,
                idle.cpu_s_per_min,
                idle.requests_per_min,
                idle.writes_per_min,
                swap.seconds,
                swap.seconds / run.converge_s,
                swap.writes,
                restart.ready_s,
                restart.all_reconciled_s,
                list,
                restart.all_reconciled_s / list,
                restart.writes,
            );
        }
    }
    let failovers: Vec<&Run> = results
        .runs
        .iter()
        .filter(|r| !r.failover.is_empty())
        .collect();
    if !failovers.is_empty() {
        let _ = writeln!(
            s,
            "\nLeader `kill -9` with a standby waiting (lease 15 s):\n\n| N | variant | standby | standby ready s | standby RSS MiB | led s after the kill | every App reconciled s after leading |\n|---|---|---|---|---|---|---|"
        );
        for run in failovers {
            for f in &run.failover {
                let _ = writeln!(
                    s,
                    "| {} + {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.2} |",
                    run.hello,
                    run.kvstore,
                    run.variant,
                    if f.warm { "warm" } else { "cold" },
                    f.standby_ready_s,
                    f.standby_rss_mib,
                    f.led_after_kill_s,
                    f.all_reconciled_s,
                );
            }
        }
    }
    if !results.plugins.is_empty() {
        let _ = writeln!(s, "\n| distinct plugins | host RSS MiB |\n|---|---|");
        for step in &results.plugins {
            let _ = writeln!(s, "| {} | {:.1} |", step.plugins, step.rss_mib);
        }
        if let (Some(first), Some(last)) = (results.plugins.first(), results.plugins.last())
            && last.plugins > first.plugins
        {
            let _ = writeln!(
                s,
                "\nEach further plugin: {:.2} MiB.",
                (last.rss_mib - first.rss_mib) / (last.plugins - first.plugins) as f64
            );
        }
    }
    if let Some(bound) = &results.bound_kinds {
        bound_kinds(&mut s, bound);
    }
    for why in &results.skipped {
        let _ = writeln!(s, "\nSkipped: {why}");
    }
    for why in &results.failed {
        let _ = writeln!(s, "\nFailed: {why}");
    }
    s
}

/// `count` per App of `run`.
fn per_app(run: &Run, count: u64) -> f64 {
    count as f64 / (run.hello + run.kvstore).max(1) as f64
}

/// Where the requests of the converge go, per App, for each N: a row per verb and resource, a
/// column per variant.
fn requests_by_kind(s: &mut String, results: &Results) {
    let mut sizes: Vec<(usize, usize)> =
        results.runs.iter().map(|r| (r.hello, r.kvstore)).collect();
    sizes.dedup();
    for (hello, kvstore) in sizes {
        let runs: Vec<&Run> = results
            .runs
            .iter()
            .filter(|r| (r.hello, r.kvstore) == (hello, kvstore))
            .collect();
        let kinds: std::collections::BTreeSet<&String> =
            runs.iter().flat_map(|r| r.requests.0.keys()).collect();
        let _ = writeln!(
            s,
            "\nRequests per App while converging {hello} + {kvstore}, by verb and resource:\n"
        );
        let _ = writeln!(
            s,
            "| request | {} |",
            runs.iter()
                .map(|r| r.variant.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(s, "|---|{}", "---|".repeat(runs.len()));
        for kind in kinds {
            let cells: Vec<String> = runs
                .iter()
                .map(|r| {
                    format!(
                        "{:.2}",
                        per_app(r, r.requests.0.get(kind).copied().unwrap_or(0))
                    )
                })
                .collect();
            let _ = writeln!(s, "| {} | {} |", kind.trim(), cells.join(" | "));
        }
    }
}

/// The bound-kinds scenario: the host's memory step by step, what each step added per item,
/// and the summary against Apps.
fn bound_kinds(s: &mut String, bound: &BoundKinds) {
    let _ = writeln!(
        s,
        "\nBound kinds (one host watching {} namespaces; every kind bound to the same kvstore image):\n\n\
         | step | host RSS MiB (anon) | added MiB (anon) | per item MiB (anon) | Valid / Ready s |\n\
         |---|---|---|---|---|",
        bound.namespaces
    );
    let mut before = None;
    for step in &bound.steps {
        let m = &step.memory;
        let added = before
            .map(|b: &crate::host::Memory| {
                format!("{:+.1} ({:+.1})", m.rss - b.rss, m.anon - b.anon)
            })
            .unwrap_or_else(|| "–".into());
        let per = match (step.per_item_mib, step.per_item_anon_mib) {
            (Some(rss), Some(anon)) => format!("{rss:.2} ({anon:.2})"),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} ({:.1}) | {added} | {per} | {} |",
            step.step,
            m.rss,
            m.anon,
            opt(step.ready_s, 1)
        );
        before = Some(m);
    }
    let cache = match bound.first_ready_loading.from_cache {
        Some(true) => "from the compiled cache",
        Some(false) => "compiled",
        None => "how, the host's log did not say",
    };
    let _ = writeln!(
        s,
        "\nPer bound kind with no instance: {} MiB. A binding for a kind with an instance \
         waiting: Valid after {:.2} s, the instance Ready after {:.2} s with the plugin loaded \
         ({:.2} s and {:.2} s when loading it, {cache}).",
        opt(bound.per_kind_mib, 2),
        bound.first_ready.valid_s,
        bound.first_ready.ready_s,
        bound.first_ready_loading.valid_s,
        bound.first_ready_loading.ready_s,
    );
    if let (Some(instance), Some(app)) = (bound.per_instance_mib, bound.per_app_mib) {
        // RSS that fell while parents were added is the allocator giving memory back, not a
        // cost below zero: no ratio is made of it.
        let ratio = match (instance > 0.0, app > 0.0) {
            (true, true) => opt(bound.instance_to_app, 2),
            _ => "not measured (RSS fell over a step: the allocator returned memory)".to_string(),
        };
        let _ = writeln!(
            s,
            "Per instance of a bound kind: {instance:.3} MiB; per kvstore App: {app:.3} MiB; \
             instance / App: {ratio}.",
        );
    }
}

/// A line plot of `value` against N (hello Apps), one line per variant, in plain SVG.
fn svg(results: &Results, title: &str, y_label: &str, value: &dyn Fn(&Run) -> f64) -> String {
    const W: f64 = 640.0;
    const H: f64 = 400.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 130.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 50.0;
    let mut variants: Vec<&str> = results.runs.iter().map(|r| r.variant.as_str()).collect();
    variants.dedup();
    variants.sort_unstable();
    variants.dedup();
    let x_max = results
        .runs
        .iter()
        .map(|r| r.hello)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let y_max = results
        .runs
        .iter()
        .map(value)
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |n: f64| LEFT + n / x_max * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / y_max * (H - TOP - BOTTOM);
    let colours = ["#1b6ac9", "#d1495b", "#2e9e5b", "#8e44ad"];
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{LEFT}" y="20" font-size="14">{title}</text>
<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">hello Apps (N; plus N/10 kvstore)</text>
<text x="15" y="{}" transform="rotate(-90 15 {})" text-anchor="middle">{y_label}</text>
"#,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM,
        H - BOTTOM,
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0,
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0,
    );
    for i in 0..=4 {
        let v = y_max * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#ddd"/>"##,
            LEFT - 6.0,
            y(v) + 4.0,
            short(v),
            y(v),
            W - RIGHT,
            y(v)
        );
    }
    let mut ns: Vec<usize> = results.runs.iter().map(|r| r.hello).collect();
    ns.sort_unstable();
    ns.dedup();
    for n in &ns {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{n}</text>"#,
            x(*n as f64),
            H - BOTTOM + 16.0
        );
    }
    for (i, variant) in variants.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let mut points: Vec<(f64, f64)> = results
            .runs
            .iter()
            .filter(|r| r.variant == *variant)
            .map(|r| (x(r.hello as f64), y(value(r))))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points
            .iter()
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (a, b) in &points {
            let _ = writeln!(
                s,
                r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{colour}"/>"#
            );
        }
        let ly = TOP + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{variant}</text>"#,
            W - RIGHT + 15.0,
            W - RIGHT + 35.0,
            W - RIGHT + 40.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn short(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::{markdown, stamp};
    use crate::{
        host::Memory,
        scenarios::{
            BoundKinds, Machine, Results,
            bound::{BoundStep, FirstReady},
        },
    };

    fn step(step: &str, items: usize, rss: f64, per: Option<f64>) -> BoundStep {
        BoundStep {
            step: step.into(),
            items,
            memory: Memory {
                rss,
                peak: rss,
                anon: rss - 30.0,
                file: 30.0,
            },
            per_item_mib: per,
            per_item_anon_mib: per,
            ready_s: None,
        }
    }

    #[test]
    fn results_are_named_by_the_minute_the_run_started() {
        assert_eq!(stamp("2026-12-07T07:04:31.123Z"), "2026-12-07-0704");
        assert_eq!(stamp("2026-12-07"), "undated");
        assert_eq!(stamp("2026-12-07 07:04"), "undated");
    }

    #[test]
    fn the_bound_kinds_table_has_a_row_per_step_and_the_ratio() {
        let results = Results {
            date: "2026-12-07T02:00:00Z".into(),
            machine: Machine {
                cpus: 2,
                memory_gib: 24.0,
                cpu: "test".into(),
                kernel: "6.18".into(),
            },
            revision: "abc1234".into(),
            concurrency: 8,
            allocator: "mimalloc".into(),
            baseline: None,
            runs: Vec::new(),
            plugins: Vec::new(),
            bound_kinds: Some(BoundKinds {
                kinds: 10,
                instances: 200,
                namespaces: 2,
                steps: vec![
                    step("the host, no kind bound", 0, 60.0, None),
                    step("10 kinds bound, no instance", 10, 65.0, Some(0.5)),
                    step("1 more kind bound, its one instance Ready", 0, 70.0, None),
                    step("200 instances of one kind", 200, 90.0, Some(0.1)),
                    step("200 kvstore Apps, the same spec", 200, 110.0, Some(0.1)),
                ],
                per_kind_mib: Some(0.5),
                first_ready_loading: FirstReady {
                    valid_s: 0.4,
                    ready_s: 2.5,
                    from_cache: Some(true),
                },
                first_ready: FirstReady {
                    valid_s: 0.3,
                    ready_s: 1.2,
                    from_cache: None,
                },
                per_instance_mib: Some(0.1),
                per_app_mib: Some(0.1),
                instance_to_app: Some(1.0),
            }),
            skipped: Vec::new(),
            failed: vec!["nothing, in truth".into()],
        };
        let text = markdown(&results, "2026-12-07");
        assert!(
            text.contains(
                "| 10 kinds bound, no instance | 65.0 (35.0) | +5.0 (+5.0) | 0.50 (0.50) | – |"
            ),
            "{text}"
        );
        assert!(
            text.contains("Per bound kind with no instance: 0.50 MiB."),
            "{text}"
        );
        assert!(text.contains("from the compiled cache"), "{text}");
        assert!(text.contains("instance / App: 1.00."), "{text}");
        assert!(text.contains("Failed: nothing, in truth"), "{text}");
    }
}
