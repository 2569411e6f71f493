//! Structured logging through the host's `log` import.
//!
//! In a component the records go to the host. Natively (unit tests) they are
//! kept per thread so [`testing::take_logs`](crate::testing::take_logs) can
//! assert on them; there is no host to call.

use std::fmt::Display;

/// Severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very fine detail.
    Trace,
    /// Detail for debugging.
    Debug,
    /// Normal events.
    Info,
    /// Something unexpected, handled.
    Warn,
    /// Something failed.
    Error,
}

/// One log record, as captured natively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Key/value pairs, values rendered with `Display`.
    pub fields: Vec<(String, String)>,
}

/// Writes one record with structured fields:
/// `log::emit(Level::Info, "planned", &[("objects", &5)])`.
pub fn emit(level: Level, message: &str, fields: &[(&str, &dyn Display)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.to_string()))
        .collect();
    sink::write(Record {
        level,
        message: message.to_string(),
        fields,
    });
}

/// [`emit`] at [`Level::Trace`].
pub fn trace(message: &str, fields: &[(&str, &dyn Display)]) {
    emit(Level::Trace, message, fields);
}

/// [`emit`] at [`Level::Debug`].
pub fn debug(message: &str, fields: &[(&str, &dyn Display)]) {
    emit(Level::Debug, message, fields);
}

/// [`emit`] at [`Level::Info`].
pub fn info(message: &str, fields: &[(&str, &dyn Display)]) {
    emit(Level::Info, message, fields);
}

/// [`emit`] at [`Level::Warn`].
pub fn warn(message: &str, fields: &[(&str, &dyn Display)]) {
    emit(Level::Warn, message, fields);
}

/// [`emit`] at [`Level::Error`].
pub fn error(message: &str, fields: &[(&str, &dyn Display)]) {
    emit(Level::Error, message, fields);
}

#[cfg(target_arch = "wasm32")]
mod sink {
    use super::{Level, Record};
    use crate::wit::base::wasmop::plugin::log as wit;

    pub(super) fn write(record: Record) {
        let level = match record.level {
            Level::Trace => wit::Level::Trace,
            Level::Debug => wit::Level::Debug,
            Level::Info => wit::Level::Info,
            Level::Warn => wit::Level::Warn,
            Level::Error => wit::Level::Error,
        };
        let fields: Vec<wit::Field> = record
            .fields
            .into_iter()
            .map(|(key, value)| wit::Field { key, value })
            .collect();
        wit::emit(level, &record.message, &fields);
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod sink {
    use std::cell::RefCell;

    use super::Record;

    thread_local! {
        // Per thread, so parallel tests see only their own records.
        static CAPTURED: RefCell<Vec<Record>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn write(record: Record) {
        CAPTURED.with(|c| c.borrow_mut().push(record));
    }

    pub(crate) fn take() -> Vec<Record> {
        CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()))
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn records_are_captured_natively() {
        let _ = sink::take();
        info("planned", &[("objects", &5), ("version", &"7.2.4")]);
        warn("slow", &[]);
        let logs = sink::take();
        assert_eq!(logs.len(), 2);
        assert_eq!(logs[0].level, Level::Info);
        assert_eq!(
            logs[0].fields,
            [
                ("objects".into(), "5".into()),
                ("version".into(), "7.2.4".into())
            ]
        );
        assert!(sink::take().is_empty());
    }
}
