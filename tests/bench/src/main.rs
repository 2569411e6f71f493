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
//! compiled cache with the registry down; and once, RSS with 1, 10 and 50 distinct plugins, and
//! bound kinds (issue 40): RSS per kind a `PluginBinding` binds, with no instance and per
//! instance against a kvstore App, and the time from a binding to its kind's first Ready
//! instance.
//!
//! Requests are counted from the API server's audit log, by identity (each variant has its own
//! user). Results go to `bench/results/<date>-<HHMM>.json`, `.md` and two SVG plots. Run it through
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
    /// Empty or 0 skips the converge runs (to run only the scenarios after them).
    #[arg(long, value_delimiter = ',', value_parser = count, default_value = "100,1000")]
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
    /// Distinct plugin counts for the memory-per-plugin scenario; empty or 0 skips it.
    #[arg(long, value_delimiter = ',', value_parser = count, default_value = "1,10,50")]
    pub plugins: Vec<usize>,
    /// Kinds bound for the bound-kinds scenario (memory per bound kind with no instance), each
    /// its own CRD and PluginBinding; two more are bound besides, each timed from its binding to
    /// its one instance Ready (loading the plugin, then with it loaded). 0 skips the scenario.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(0..=MAX_BOUND_KINDS))]
    pub bound_kinds: u16,
    /// Instances of one bound kind, then as many kvstore Apps, in the bound-kinds scenario
    /// (memory per instance against per App); 0 skips that part.
    #[arg(long, default_value_t = 200)]
    pub bound_instances: usize,
    /// Where results go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// How long one phase (converge, ready, swap, restart) may take before the run fails.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// A development loop's run, a few minutes: N = 100 Apps, 1 and 10 plugins, 2 bound kinds
    /// with 20 instances, 10 s idle (for figures worth keeping, the defaults).
    #[arg(long, conflicts_with_all = ["apps", "plugins", "bound_kinds", "bound_instances", "idle_secs"])]
    pub quick: bool,
}

impl Args {
    /// The arguments with `--quick`'s counts in place of the defaults.
    fn resolved(mut self) -> Self {
        if self.quick {
            self.apps = vec![100];
            self.plugins = vec![1, 10];
            self.bound_kinds = 2;
            self.bound_instances = 20;
            self.idle_secs = 10;
        }
        self
    }
}

/// Most kinds `--bound-kinds` may ask for: a host serves at most 64 (`MAX_BOUND_KINDS` in
/// host/src/binding/serve.rs), and the scenario binds two more than it measures.
const MAX_BOUND_KINDS: i64 = 62;

/// One count of a comma-separated list; an empty one (`--plugins ''`) is 0, which the
/// scenarios skip, so that a list can be emptied from the command line.
fn count(text: &str) -> Result<usize, std::num::ParseIntError> {
    match text.trim() {
        "" => Ok(0),
        n => n.parse(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse().resolved();
    let results = scenarios::run(&args).await?;
    report::write(&args.out, &results)?;
    if !results.failed.is_empty() {
        anyhow::bail!("failed: {}", results.failed.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("wasmop-bench").chain(args.iter().copied()))
    }

    #[test]
    fn an_empty_or_zero_count_skips_a_scenario() -> anyhow::Result<()> {
        let args = parse(&["--apps", "", "--plugins", "0", "--bound-kinds", "10"])?;
        assert_eq!(args.apps, [0]);
        assert_eq!(args.plugins, [0]);
        assert_eq!((args.bound_kinds, args.bound_instances), (10, 200));
        let args = parse(&["--apps=0", "--plugins=", "--bound-kinds=0"])?;
        assert_eq!((args.apps, args.plugins), (vec![0], vec![0]));
        assert_eq!(args.bound_kinds, 0);
        assert_eq!(parse(&["--plugins", "1,10,50"])?.plugins, [1, 10, 50]);
        assert!(parse(&["--plugins", "1,x"]).is_err());
        Ok(())
    }

    #[test]
    fn quick_is_a_hundred_apps_and_small_scenarios_and_takes_no_counts_besides()
    -> anyhow::Result<()> {
        let quick = parse(&["--quick"])?.resolved();
        assert_eq!((quick.apps, quick.plugins), (vec![100], vec![1, 10]));
        assert_eq!((quick.bound_kinds, quick.bound_instances), (2, 20));
        assert_eq!(quick.idle_secs, 10);
        assert_eq!(parse(&[])?.resolved().apps, [100, 1000]);
        assert!(parse(&["--quick", "--apps", "5000"]).is_err());
        Ok(())
    }

    #[test]
    fn bound_kinds_leave_the_host_room_for_the_two_timed_ones() -> anyhow::Result<()> {
        assert_eq!(parse(&["--bound-kinds", "62"])?.bound_kinds, 62);
        assert!(parse(&["--bound-kinds", "63"]).is_err());
        Ok(())
    }
}
