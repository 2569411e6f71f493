//! The per-call sandbox: what one Store holds. WASI is deny-by-default (no preopens, env, args
//! or sockets); stdout, stderr and the `log` import go to host tracing, tagged with the plugin
//! and the App; linear memory is capped; the monotonic clock is the call's own [`CallClock`],
//! whose waits cannot outlast the deadline.

use std::time::Duration;

use wasmtime::{ResourceLimiter, component::ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView, p2::pipe::MemoryOutputPipe};

use super::{
    bindings::wasmop::plugin::log,
    clock::{CallClock, CallClockView},
    limits::{CallLimits, MAX_HOST_RESOURCES, MAX_STDIO_BYTES},
    log_limit,
};

/// Who is calling, for the tags on every line the plugin logs.
#[derive(Debug, Clone, Default)]
pub struct CallTags {
    /// Plugin name and short digest.
    pub plugin: String,
    /// `namespace/name` of the App the call is for, if any.
    pub app: String,
}

/// The data of one Store: one call's worth of state, dropped with the Store.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    clock: CallClock,
    memory: MemoryCap,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    tags: CallTags,
    /// Log records this call emitted, and how many of them were dropped.
    logged: u32,
    dropped: u32,
}

/// `wasi:clocks/wall-clock` for one call: the host's `now`, fixed.
struct FixedWallClock(Duration);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        self.0
    }
}

impl CallState {
    /// A fresh sandbox for a call with `limits`, whose monotonic clock starts now and whose
    /// wall clock reads `now_ms` (the `now` the host passes in) throughout.
    ///
    /// Neither clock nor randomness is ambient, as the WIT promises ("same input, same
    /// answer"): `wasi:clocks/wall-clock` is that fixed instant, and `wasi:random` (secure and
    /// insecure alike) is a generator with a fixed seed. A plugin therefore cannot make
    /// secrets or nonces, which it has no business making: it cannot plan Secrets either.
    pub fn new(tags: CallTags, limits: &CallLimits, now_ms: i64) -> Self {
        use rand::SeedableRng;
        let stdout = MemoryOutputPipe::new(MAX_STDIO_BYTES);
        let stderr = MemoryOutputPipe::new(MAX_STDIO_BYTES);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(FixedWallClock(Duration::from_millis(
                u64::try_from(now_ms).unwrap_or(0),
            )))
            .secure_random(rand::rngs::StdRng::seed_from_u64(0))
            .insecure_random(rand::rngs::StdRng::seed_from_u64(0))
            .insecure_random_seed(0)
            // The same bound as plugin output: no call needs more.
            .max_random_size(1 << 20)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HOST_RESOURCES);
        Self {
            wasi,
            table,
            clock: CallClock::start(limits.deadline),
            memory: MemoryCap {
                cap: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                exceeded: false,
            },
            stdout,
            stderr,
            tags,
            logged: 0,
            dropped: 0,
        }
    }

    /// Counts one record (a `log` call or a line of stdout/stderr) against the call's
    /// [`log_limit::MAX_RECORDS_PER_CALL`] and the plugin's token bucket; `false` when it is to
    /// be dropped (said once per call).
    fn admit_record(&mut self) -> bool {
        self.logged = self.logged.saturating_add(1);
        if self.logged <= log_limit::MAX_RECORDS_PER_CALL
            && log_limit::admit(&self.tags.plugin, std::time::Instant::now())
        {
            return true;
        }
        self.dropped = self.dropped.saturating_add(1);
        if self.dropped == 1 {
            tracing::warn!(
                plugin = %self.tags.plugin,
                app = %self.tags.app,
                "plugin logs too much: dropping its records (at most {} per call, {} a second)",
                log_limit::MAX_RECORDS_PER_CALL,
                log_limit::RATE_PER_SECOND
            );
        }
        false
    }

    /// The limiter to install with `Store::limiter`.
    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.memory
    }

    /// What the guest's `wasi:clocks/monotonic-clock` works on.
    pub fn clock(&mut self) -> CallClockView<'_> {
        CallClockView {
            clock: &self.clock,
            table: &mut self.table,
        }
    }

    /// Whether the guest tried to grow past its memory cap during the call.
    pub fn memory_exceeded(&self) -> bool {
        self.memory.exceeded
    }

    /// Forwards what the guest printed to tracing and returns its last words on stderr, which
    /// is where a Rust guest's panic message ends up. Each line is a record like one of the
    /// `log` import's, under the same bounds (cut to [`log_limit::MAX_MESSAGE_BYTES`], counted
    /// against the call's and the plugin's share), so printing is no way around them.
    pub fn flush_stdio(&mut self) -> Option<String> {
        let (out, err) = (self.stdout.contents(), self.stderr.contents());
        self.forward_stdio(&out, &err)
    }

    /// [`Self::flush_stdio`] of what the guest printed to stdout (`out`) and stderr (`err`).
    fn forward_stdio(&mut self, out: &[u8], err: &[u8]) -> Option<String> {
        for line in String::from_utf8_lossy(out)
            .lines()
            .filter(|l| !l.is_empty())
        {
            if self.admit_record() {
                let line = log_limit::truncate(line, log_limit::MAX_MESSAGE_BYTES);
                tracing::info!(plugin = %self.tags.plugin, app = %self.tags.app, stream = "stdout", "{line}");
            }
        }
        let err = String::from_utf8_lossy(err);
        for line in err.lines().filter(|l| !l.is_empty()) {
            if self.admit_record() {
                let line = log_limit::truncate(line, log_limit::MAX_MESSAGE_BYTES);
                tracing::warn!(plugin = %self.tags.plugin, app = %self.tags.app, stream = "stderr", "{line}");
            }
        }
        // A Rust panic prints "thread '..' panicked at file:line:col:" then the message, then a
        // hint about RUST_BACKTRACE that says nothing about the plugin.
        let words: Vec<&str> = err
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        let last = &words[words.len().saturating_sub(2)..];
        (!last.is_empty()).then(|| {
            log_limit::truncate(&last.join(" "), log_limit::MAX_MESSAGE_BYTES).into_owned()
        })
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The host implementation of the `log` import: structured events into tracing.
impl log::Host for CallState {
    fn emit(&mut self, level: log::Level, message: String, fields: Vec<log::Field>) {
        use super::log_limit::{MAX_FIELD_BYTES, MAX_FIELDS, MAX_MESSAGE_BYTES};
        // Plugins log on every call (kvstore's plan at debug); joining the fields for an event
        // nobody subscribed to would be work on every call.
        let enabled = match level {
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
        };
        if !enabled {
            return;
        }
        if !self.admit_record() {
            return;
        }
        let cut = fields.len().saturating_sub(MAX_FIELDS);
        let mut fields = fields
            .iter()
            .take(MAX_FIELDS)
            .map(|f| {
                format!(
                    "{}={}",
                    log_limit::truncate(&f.key, MAX_FIELD_BYTES),
                    log_limit::truncate(&f.value, MAX_FIELD_BYTES)
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        if cut > 0 {
            fields.push_str(&format!(" (+{cut} fields cut)"));
        }
        let message = log_limit::truncate(&message, MAX_MESSAGE_BYTES);
        let (plugin, app) = (&self.tags.plugin, &self.tags.app);
        match level {
            log::Level::Trace => tracing::trace!(%plugin, %app, %fields, "{message}"),
            log::Level::Debug => tracing::debug!(%plugin, %app, %fields, "{message}"),
            log::Level::Info => tracing::info!(%plugin, %app, %fields, "{message}"),
            log::Level::Warn => tracing::warn!(%plugin, %app, %fields, "{message}"),
            log::Level::Error => tracing::error!(%plugin, %app, %fields, "{message}"),
        }
    }
}

/// Caps linear memory and remembers that the cap was hit, so that the trap a refused growth
/// causes in the guest (Rust aborts on allocation failure) is reported as what it is.
struct MemoryCap {
    cap: usize,
    exceeded: bool,
}

/// Tables hold function references; no honest plugin needs more than this.
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.exceeded = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what a fmt subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged_at(max: tracing::Level, level: log::Level) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(max)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let tags = CallTags {
                plugin: "kvstore@abc".into(),
                app: "shop/cache".into(),
            };
            let mut state = CallState::new(tags, &CallLimits::default(), 0);
            log::Host::emit(
                &mut state,
                level,
                "planned kvstore".into(),
                vec![log::Field {
                    key: "objects".into(),
                    value: "6".into(),
                }],
            );
        });
        let bytes = captured.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn a_flood_of_huge_records_is_cut_and_capped_per_call() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let tags = CallTags {
                plugin: "flood@abc".into(),
                app: "shop/flood".into(),
            };
            let mut state = CallState::new(tags, &CallLimits::default(), 0);
            for _ in 0..1000 {
                let fields = (0..100)
                    .map(|i| log::Field {
                        key: format!("k{i}"),
                        value: "v".repeat(10_000),
                    })
                    .collect();
                log::Host::emit(&mut state, log::Level::Info, "x".repeat(1 << 20), fields);
            }
        });
        let bytes = captured.0.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        // 32 records and the one warning that the rest were dropped.
        assert_eq!(lines.len(), 33, "{}", lines.len());
        assert!(lines.iter().any(|l| l.contains("plugin logs too much")));
        let longest = lines.iter().map(|l| l.len()).max().unwrap_or(0);
        assert!(
            longest < 8 << 10,
            "a record of {longest} bytes reached the log"
        );
        assert!(text.contains("(+84 fields cut)"), "{}", &text[..500]);
    }

    #[test]
    fn printed_lines_are_held_to_the_same_bounds_as_log_records() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let last = tracing::subscriber::with_default(subscriber, || {
            let tags = CallTags {
                plugin: "printer@abc".into(),
                app: "shop/printer".into(),
            };
            let mut state = CallState::new(tags, &CallLimits::default(), 0);
            // As a guest's `println!` in a loop would: 64 KiB of short lines on stdout, and a
            // line far over a record's size on stderr.
            let out = "x\n".repeat(MAX_STDIO_BYTES / 2);
            state.forward_stdio(out.as_bytes(), "y".repeat(20_000).as_bytes())
        });
        let bytes = captured.0.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        // 32 records and the one warning that the rest were dropped.
        assert_eq!(lines.len(), 33, "{}", lines.len());
        assert!(lines.iter().any(|l| l.contains("plugin logs too much")));
        // The last words (which become an error message) are cut too.
        let last = last.unwrap_or_default();
        assert!(last.len() < 2 << 10, "last words of {} bytes", last.len());
    }

    #[test]
    fn plugin_logs_reach_tracing_tagged_and_only_at_enabled_levels() {
        let line = logged_at(tracing::Level::DEBUG, log::Level::Debug);
        for part in ["planned kvstore", "kvstore@abc", "shop/cache", "objects=6"] {
            assert!(line.contains(part), "{part} missing from {line:?}");
        }
        assert_eq!(logged_at(tracing::Level::INFO, log::Level::Debug), "");
        assert!(logged_at(tracing::Level::INFO, log::Level::Warn).contains("WARN"));
    }
}
