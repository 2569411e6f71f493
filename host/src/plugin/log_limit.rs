//! Bounds on what a plugin may log through `wasmop:plugin/log`, as the WIT allows ("the host may
//! truncate and rate-limit"): each record is truncated ([`MAX_MESSAGE_BYTES`], [`MAX_FIELDS`],
//! [`MAX_FIELD_BYTES`]), each call may emit [`MAX_RECORDS_PER_CALL`], and each plugin (by name
//! and digest) shares a token bucket of [`RATE_PER_SECOND`] records a second with bursts of
//! [`BURST`], so that a chatty or hostile plugin cannot flood the host's logs whatever its
//! number of Apps. What is dropped is counted and reported once per call.

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
    time::Instant,
};

/// Longest message kept, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Most fields kept per record.
pub const MAX_FIELDS: usize = 16;
/// Longest field key or value kept, in bytes.
pub const MAX_FIELD_BYTES: usize = 256;
/// Most records one call may emit.
pub const MAX_RECORDS_PER_CALL: u32 = 32;
/// Sustained records per second per plugin.
pub const RATE_PER_SECOND: f64 = 20.0;
/// Records a plugin may emit at once after being quiet.
pub const BURST: f64 = 100.0;
/// Plugins tracked at once; beyond it the quietest are forgotten (they start with a full bucket).
const MAX_TRACKED: usize = 1024;

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
pub fn truncate(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} bytes cut]", &text[..end], text.len() - end).into()
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

static BUCKETS: LazyLock<Mutex<HashMap<String, Bucket>>> = LazyLock::new(Default::default);

/// Takes one record from `plugin`'s bucket; `false` when it is empty.
pub fn admit(plugin: &str, now: Instant) -> bool {
    let mut buckets = BUCKETS.lock().unwrap_or_else(|p| p.into_inner());
    if buckets.len() >= MAX_TRACKED && !buckets.contains_key(plugin) {
        // Forget full buckets first: they carry no state a fresh one would not.
        buckets.retain(|_, b| {
            b.tokens + now.duration_since(b.at).as_secs_f64() * RATE_PER_SECOND < BURST
        });
        if buckets.len() >= MAX_TRACKED {
            buckets.clear();
        }
    }
    let bucket = buckets.entry(plugin.to_string()).or_insert(Bucket {
        tokens: BURST,
        at: now,
    });
    let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * RATE_PER_SECOND;
    bucket.tokens = (bucket.tokens + refill).min(BURST);
    bucket.at = now;
    if bucket.tokens >= 1.0 {
        bucket.tokens -= 1.0;
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate("ééééé", 3);
        assert_eq!(cut, "é…[8 bytes cut]");
    }

    #[test]
    fn a_plugin_gets_its_burst_then_its_rate() {
        let start = Instant::now();
        let plugin = "bucket-test@1";
        let admitted = (0..200).filter(|_| admit(plugin, start)).count();
        assert_eq!(admitted, BURST as usize);
        assert!(!admit(plugin, start));
        // One second later, RATE_PER_SECOND more.
        let later = start + Duration::from_secs(1);
        let admitted = (0..200).filter(|_| admit(plugin, later)).count();
        assert_eq!(admitted, RATE_PER_SECOND as usize);
        // Another plugin has its own bucket.
        assert!(admit("bucket-test@2", later));
    }
}
