//! The `wasmop` binary: parses the command line and hands over to the library.

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use wasmop_host::cli::{Cli, Command};

/// How long the exit waits for work still on blocking threads once `run` has returned, which
/// is after its in-flight reconciles finished. What can be left is a plugin being fetched or
/// compiled for a reconcile that will not happen: waiting for it (seconds for a large component,
/// several queued when the host watches many Apps) only delays the exit past the kubelet's grace
/// period. Cache writes go through a temporary file and a rename, so abandoning one loses nothing.
const BLOCKING_WORK_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    // SAFETY: the first thing the process does; no other thread exists yet.
    #[allow(unsafe_code)]
    unsafe {
        wasmop_host::purge_freed_memory_at_once()
    };
    let cli = Cli::parse();
    // The compile worker is a short-lived child of the host: no runtime, no logging.
    if let Command::CompileWorker { memory_bytes } = cli.command {
        return wasmop_host::plugin::compiler::worker_main(memory_bytes);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run(cli));
    runtime.shutdown_timeout(BLOCKING_WORK_GRACE);
    code
}

async fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Run(args) => match wasmop_host::telemetry::init(args.log_format) {
            Ok(()) => wasmop_host::run::run(*args).await,
            Err(err) => Err(err),
        },
        Command::Plugin(command) => wasmop_host::plugin_cli::run(command).await,
        Command::Rollout(command) => wasmop_host::rollout::cli::run(command).await,
        Command::Crds => wasmop_host::crd_install::crd_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(anyhow::Error::from),
        Command::CompileWorker { .. } => Err(anyhow::anyhow!("compile-worker runs before this")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // The chain of causes, without a backtrace: these are user-facing errors.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
