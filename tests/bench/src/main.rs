//! `wasmop-bench`: wasmop at scale against the local control plane, side by side with the floor.
//!
//! For each N it runs the same workload (N hello Apps and N/10 kvstore Apps) through:
//! - **bare**: the objects the plugins plan (linked natively), server-side-applied directly with
//!   the same client library and concurrency: no plugin, no App, no status. The floor: what this
//!   API server can do.
//! - **wasm**: the release `wasmop` host with the plugins as Wasm components from the registry.
//! - **native**: the same host built with `--features native-plugins`, which calls the plugins'
//!   Rust code linked into the binary instead of the components: the Wasm tax on a whole
//!   reconcile.
//!
//! and, for the host variants, the scenarios after the converge: idle (CPU and requests per
//! minute), a swap storm (a new digest for the plugin all hello Apps use), a restart from the
//! compiled cache with the registry down; and once, RSS with 1, 10 and 50 distinct plugins.
//!
//! Requests are counted from the API server's audit log, by identity (each variant has its own
//! user). Results go to `bench/results/<date>.json`, `.md` and two SVG plots. Run it through
//! `tests/bench/run.sh`, which builds everything and makes the identities.

mod audit;
mod host;
mod report;
mod scenarios;
mod workload;

use std::path::PathBuf;

use clap::Parser;

/// The command line.
#[derive(Parser, Debug, Clone)]
#[command(about = "wasmop at scale, side by side with a bare applier (see tests/bench/run.sh)")]
pub struct Args {
    /// Hello App counts to run, comma separated; each runs with one kvstore App per --kv-every.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    pub apps: Vec<usize>,
    /// One kvstore App per this many hello Apps.
    #[arg(long, default_value_t = 10)]
    pub kv_every: usize,
    /// Reconciles (host) and applies (bare) in flight at once; the Apps are created with it too.
    #[arg(long, default_value_t = 8)]
    pub concurrency: u16,
    /// Seconds to measure an idle host with every App Ready.
    #[arg(long, default_value_t = 60)]
    pub idle_secs: u64,
    /// Variants, comma separated: bare, wasm, native.
    #[arg(long, value_delimiter = ',', default_value = "bare,wasm,native")]
    pub variants: Vec<scenarios::Variant>,
    /// Distinct plugin counts for the memory-per-plugin scenario; empty skips it.
    #[arg(long, value_delimiter = ',', default_value = "1,10,50")]
    pub plugins: Vec<usize>,
    /// Where results go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// How long one phase (converge, ready, swap, restart) may take before the run fails.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let results = scenarios::run(&args).await?;
    report::write(&args.out, &results)?;
    Ok(())
}
