//! Structured logging set-up: text for people, JSON for log pipelines, filtered by `RUST_LOG`.

use anyhow::Context;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

/// Installs the global tracing subscriber; `RUST_LOG` overrides the default `info` level.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        // Colours only on a terminal: in a file or a pipe the escape codes are noise.
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    result.context("installing the tracing subscriber")
}
