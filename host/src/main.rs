//! The `wasmop` binary: parses the command line and hands over to the library.

use std::process::ExitCode;

use clap::Parser;
use wasmop_host::cli::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => match wasmop_host::telemetry::init(args.log_format) {
            Ok(()) => wasmop_host::run::run(args).await,
            Err(err) => Err(err),
        },
        Command::Plugin(command) => wasmop_host::plugin_cli::run(command).await,
        Command::Crds => wasmop_host::app::crd_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(anyhow::Error::from),
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
