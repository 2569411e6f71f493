//! `wasmop-webhook-bench`: what the admission and conversion webhooks (issue 41) cost a request,
//! against the local control plane, side by side with the same request without them.
//!
//! Two kinds `Greeting` of the same schema, the CRD `wasmop plugin crd` prints for hello
//! (versions `v1alpha1` and `v1`, stored as `v1`), each of its own group: one bound to hello
//! by a `PluginBinding`, served by a `wasmop run --webhook-listen 127.0.0.1:0` of the binary
//! given (`--wasmop`), which registers a validating webhook for it and sets its CRD's conversion
//! to the host; the other plain, with no binding. Then, each variant interleaved with the others:
//! 1. N server-side dry-run creates each: of the plain kind, of the bound kind admitted by the
//!    plugin, and of the bound kind refused by it (`9lives`, not a DNS-1035 label);
//! 2. M instances of the bound kind created as `v1` and Ready, then R rounds of reads of them
//!    at `v1` (the storage version) and at `v1alpha1`: a LIST of the namespace, and a GET of
//!    each. The host's `/metrics`, read around each, say how many objects the API server sent
//!    it to convert: the reviews per read tell which reads paid for a conversion, and the
//!    reviews during the creates which were paid for when the objects were written.
//!
//! It prints a markdown table and writes it to `bench/results/<date>-<HHMM>-webhooks.md`, then
//! deletes what it made, after a failure too. It needs the local cluster up
//! (`deploy/local/cluster.sh up`) and hello built (`plugins/build.sh`); nothing else on the
//! cluster is touched.

mod local;
mod measure;
mod report;
mod setup;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use crate::{
    local::{Local, repo_root},
    setup::{Fixture, HostOptions, Names},
};

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "wasmop-webhook-bench",
    about = "What a plugin's admission and conversion webhooks add to a request, against the \
             local cluster"
)]
struct Args {
    /// The `wasmop` binary to measure (a release build for figures worth keeping).
    #[arg(long)]
    wasmop: PathBuf,
    /// The commit `--wasmop` was built from, for the report [default: the repository's HEAD,
    /// marked when tracked files differ from it].
    #[arg(long)]
    commit: Option<String>,
    /// hello's component [default: $CARGO_TARGET_DIR/wasm32-wasip2/release/hello.wasm].
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// N: timed dry-run creates per variant (plain, admitted, refused).
    #[arg(short = 'n', long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    creates: u32,
    /// M: instances of the bound kind the reads read. Each instance of the bound kind runs a Pod on
    /// the local cluster's fake nodes (110 Pods each) until the run ends.
    #[arg(short = 'm', long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    objects: u32,
    /// R: rounds of timed reads, each a LIST at v1 and at v1alpha1 and a GET of every instance
    /// at v1 and at v1alpha1.
    #[arg(short = 'r', long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    lists: u32,
    /// Untimed dry-run creates per variant before the timed ones (connections, the plugin's
    /// first instances).
    #[arg(long, default_value_t = 20)]
    warmup: u32,
    /// Where the markdown goes [default: bench/results of the repository].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// hello's component where `plugins/build.sh` puts it.
fn default_plugin() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("wasm32-wasip2/release/hello.wasm")
}

/// `arg` with a leading `$HOME` written `~`, for a command line that does not name the user.
fn home_as_tilde(arg: String) -> String {
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && arg.starts_with(&home) => {
            format!("~{}", &arg[home.len()..])
        }
        _ => arg,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let plugin = args.plugin.clone().unwrap_or_else(default_plugin);
    let wasmop = std::path::absolute(&args.wasmop)?;
    anyhow::ensure!(wasmop.is_file(), "{} is not a file", wasmop.display());
    let run = report::Run {
        started: k8s_openapi::jiff::Timestamp::now(),
        command: std::env::args()
            .map(home_as_tilde)
            .collect::<Vec<_>>()
            .join(" "),
        commit: args
            .commit
            .clone()
            .unwrap_or_else(|| report::commit(&repo_root())),
        wasmop: wasmop.display().to_string(),
        creates: args.creates as usize,
        objects: args.objects as usize,
        lists: args.lists as usize,
        warmup: args.warmup as usize,
    };

    let local = Local::discover()?;
    let client = local.client().await?;
    let mut fixture = Fixture::new(Names::fresh());
    eprintln!(
        "[webhook-bench] namespace {}, groups {} (bound) and {} (plain)",
        fixture.names.namespace, fixture.names.hooked_group, fixture.names.plain_group
    );
    let options = HostOptions {
        binary: &wasmop,
        plugin: &plugin,
    };
    let measured = async {
        fixture.set_up(&local, &client, &options).await?;
        let host = fixture.host.as_ref().context("the host is not running")?;
        eprintln!("[webhook-bench] host log: {}", host.log.display());
        eprintln!(
            "[webhook-bench] admission: {} creates per variant",
            run.creates
        );
        let admission =
            measure::admission(&fixture.names, &client, host, run.creates, run.warmup).await?;
        eprintln!(
            "[webhook-bench] conversion: {} objects per kind, {} rounds of reads",
            run.objects, run.lists
        );
        let conversion =
            measure::conversion(&fixture.names, &client, host, run.objects, run.lists).await?;
        anyhow::Ok((admission, conversion))
    }
    .await;
    if let (Err(_), Some(host)) = (&measured, &fixture.host) {
        eprintln!(
            "[webhook-bench] failed; the host's log: {}",
            host.log.display()
        );
    }
    eprintln!("[webhook-bench] cleaning up");
    fixture.cleanup(&local, &client).await;
    let (admission, conversion) = measured?;

    let text = report::markdown(&run, &admission, &conversion);
    println!("{text}");
    let dir = args
        .out
        .unwrap_or_else(|| repo_root().join("bench/results"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join(format!(
        "{}-webhooks.md",
        run.started.strftime("%Y-%m-%d-%H%M")
    ));
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    eprintln!("[webhook-bench] wrote {}", file.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    #[test]
    fn defaults_are_n_300_m_100_r_20() -> anyhow::Result<()> {
        let args = Args::try_parse_from(["wasmop-webhook-bench", "--wasmop", "/bin/true"])?;
        assert_eq!((args.creates, args.objects, args.lists), (300, 100, 20));
        assert!(
            Args::try_parse_from(["wasmop-webhook-bench", "--wasmop", "w", "-n", "0"]).is_err()
        );
        assert!(Args::try_parse_from(["wasmop-webhook-bench"]).is_err());
        Ok(())
    }
}
