//! What the runtime test binaries share: the compiled test components and the process's peak
//! memory. Each binary that measures its peak RSS is its own process, so the peak is its own.

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod bombs;

/// Where `tests/run.sh` and `plugins/build.sh` put the components.
pub fn wasm_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("wasm32-wasip2/release");
    }
    // target/debug/deps/runtime-xxxx -> target
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors()
        .nth(3)
        .expect("inside a cargo target directory")
        .join("wasm32-wasip2/release")
}

/// The bytes of one compiled component, `file` in [`wasm_dir`].
pub fn component(file: &str) -> Vec<u8> {
    let path = wasm_dir().join(file);
    std::fs::read(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; build the test components with tests/run.sh or plugins/build.sh",
            path.display()
        )
    })
}

/// Starts the peak resident set over from the current one (Linux's `clear_refs` value 5), so a
/// test measures its own peak and not one an earlier test in the binary left behind.
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("/proc/self/clear_refs");
}

/// The process's peak resident set (`VmHWM`), in bytes.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kib * 1024
}
