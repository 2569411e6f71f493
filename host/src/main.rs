//! The `wasmop` binary: parses the command line and hands over to the library.

use clap::Parser;
use wasmop_host::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            wasmop_host::telemetry::init(args.log_format)?;
            wasmop_host::run::run(args).await
        }
        Command::Plugin(command) => wasmop_host::plugin_cli::run(command).await,
        Command::Crds => {
            print!("{}", wasmop_host::app::crd_yaml()?);
            Ok(())
        }
    }
}
