//! Command-line interface of the `wasmop` binary.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    Run(RunArgs),
    /// Print the CustomResourceDefinitions the host owns, as YAML.
    Crds,
}

/// Options of `wasmop run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "WASMOP_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Log format on stderr.
    #[arg(long, env = "WASMOP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Do not create or update the CRDs at start-up (for clusters where they are installed
    /// separately and the host lacks the permission).
    #[arg(long)]
    pub skip_crd_install: bool,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}
