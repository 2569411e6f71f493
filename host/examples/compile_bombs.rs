//! How much a compile bomb costs the compiler when nothing bounds it: generates the bombs of
//! `tests/compile_bomb.rs` and compiles each in a `wasmop compile-worker` with a limit that
//! does not bind (default 16 GiB of address space, 300 s), printing the time and the worker's
//! peak resident memory (sampled every 5 ms), and kvstore for comparison.
//!
//! `cargo build -p wasmop-host && cargo run -p wasmop-host --example compile_bombs --
//! [WASMOP_BINARY] [MEMORY_MIB] [TIMEOUT_S]`

#[path = "../tests/support/bombs.rs"]
mod bombs;

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let exe = match args.next() {
        Some(path) => PathBuf::from(path),
        // target/debug/examples/compile_bombs -> target/debug/wasmop
        None => std::env::current_exe()?
            .parent()
            .and_then(|p| p.parent())
            .map(|p| p.join("wasmop"))
            .ok_or_else(|| anyhow::anyhow!("cannot find the wasmop binary; pass its path"))?,
    };
    let memory_mib: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(16 << 10);
    let timeout = Duration::from_secs(args.next().map(|a| a.parse()).transpose()?.unwrap_or(300));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let kvstore = std::fs::read(target.join("wasm32-wasip2/release/kvstore.wasm")).ok();
    let mut cases = vec![
        ("one enormous function", bombs::bomb(1, 20_000, 100_000)),
        ("100k small functions", bombs::bomb(100_000, 4, 4)),
    ];
    if let Some(kvstore) = kvstore {
        cases.insert(0, ("kvstore", kvstore));
    }
    println!(
        "worker {} with {memory_mib} MiB of address space and {timeout:?}",
        exe.display()
    );
    for (name, bytes) in cases {
        let (elapsed, peak, outcome) = compile(&exe, memory_mib << 20, timeout, &bytes)?;
        println!(
            "{name:<22} {:>9} bytes  {elapsed:>10.2?}  peak RSS {:>5} MiB  {outcome}",
            bytes.len(),
            peak >> 20
        );
    }
    Ok(())
}

/// Compiles `bytes` in a worker; how long it took, its peak RSS, and how it ended.
fn compile(
    exe: &PathBuf,
    memory: u64,
    timeout: Duration,
    bytes: &[u8],
) -> anyhow::Result<(Duration, u64, String)> {
    let mut child = Command::new(exe)
        .args(["compile-worker", "--memory-bytes", &memory.to_string()])
        .env("MIMALLOC_ARENA_RESERVE", "64MiB")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let start = Instant::now();
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(bytes)?;
    }
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        {
            peak = peak.max(kib * 1024);
        }
        if let Some(status) = child.try_wait()? {
            break status.to_string();
        }
        if start.elapsed() > timeout {
            child.kill()?;
            child.wait()?;
            break format!("stopped after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok((start.elapsed(), peak, status))
}
