//! Where components are compiled. The host compiles in a child process (`wasmop
//! compile-worker`), one at a time, under an address-space limit and a wall-clock timeout: a
//! component built to take Cranelift's time or memory (a "compile bomb": one enormous function,
//! a hundred thousand small ones) costs a failed load of that version, never the host, which
//! keeps serving every other App. The worker sends back wasmtime's serialized artifact, which
//! the host loads as it loads its own cache. The CLI and tests compile in process.

// Deserializing the worker's artifact is `unsafe` (see `load`).
#![allow(unsafe_code)]

use std::{
    io::{Read, Write},
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Command, ExitStatus, Stdio},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use wasmtime::{Config, Engine, OptLevel, component::Component};

use super::limits::MAX_COMPONENT_BYTES;

/// The largest artifact the host reads back: compiled code is a few times the component's size
/// (kvstore's 1.5 MB compiles to about 6 MB), and components are at most [`MAX_COMPONENT_BYTES`].
const MAX_ARTIFACT_BYTES: usize = 8 * MAX_COMPONENT_BYTES;
/// What the host keeps of the worker's stderr (its error message).
const MAX_STDERR_BYTES: usize = 4 << 10;

/// The bounds of one compile in the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// The worker's address-space limit (`RLIMIT_AS`), which caps what Cranelift can allocate.
    pub memory_bytes: u64,
    /// How long a compile may take before the worker is killed.
    pub timeout: Duration,
}

impl Default for CompileLimits {
    fn default() -> Self {
        Self {
            // kvstore (1.5 MB) compiles within 512 MiB of address space (150 MiB resident); the
            // rest is headroom.
            memory_bytes: 1 << 30,
            // kvstore compiles in about 1.5 s on a 2-core machine.
            timeout: Duration::from_secs(60),
        }
    }
}

/// Why a compile failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The component is not one wasmtime compiles (invalid, or over a limit): a property of
    /// these bytes, so remembered and not retried.
    #[error("{0}")]
    Refused(String),
    /// The host could not run a compile at all (no worker): nothing is known about the bytes.
    #[error("{0}")]
    Host(String),
}

/// The engine settings that decide how code is compiled, shared by the host's engine (which
/// adds its pooling allocator) and the compile worker's, so that what the worker compiles the
/// host can load.
pub(crate) fn compile_config() -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true);
    config
}

/// How a [`PluginEngine`](crate::plugin::engine::PluginEngine) compiles.
pub enum Compiler {
    /// In this process: where a person chose the component (the CLI, tests, benchmarks).
    InProcess,
    /// In `wasmop compile-worker` child processes, one at a time.
    Worker {
        /// The `wasmop` binary.
        exe: PathBuf,
        /// The bounds of each compile.
        limits: CompileLimits,
        /// Held while a worker runs: compiles are serialised (each already uses every core).
        slot: Mutex<()>,
    },
}

impl Compiler {
    /// Compiles in workers of the running binary.
    pub fn worker(limits: CompileLimits) -> std::io::Result<Self> {
        Ok(Self::Worker {
            exe: std::env::current_exe()?,
            limits,
            slot: Mutex::new(()),
        })
    }

    /// Compiles in workers of `exe` (tests, which are not the `wasmop` binary themselves).
    pub fn worker_at(exe: PathBuf, limits: CompileLimits) -> Self {
        Self::Worker {
            exe,
            limits,
            slot: Mutex::new(()),
        }
    }

    /// What a remembered failure was found under: a failure under other limits (a larger
    /// `--compile-memory`, a longer `--compile-timeout`) is not this one's.
    pub fn failure_tag(&self) -> String {
        match self {
            Self::InProcess => "in-process".into(),
            Self::Worker { limits, .. } => format!(
                "m{}-t{}",
                limits.memory_bytes >> 20,
                limits.timeout.as_secs()
            ),
        }
    }

    /// Compiles `bytes` for `engine`.
    pub fn compile(&self, engine: &Engine, bytes: &[u8]) -> Result<Component, CompileError> {
        match self {
            Self::InProcess => Component::new(engine, bytes)
                .map_err(|err| CompileError::Refused(format!("{err:#}"))),
            Self::Worker { exe, limits, slot } => {
                let _slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                let artifact = run_worker(exe, *limits, bytes)?;
                load(engine, &artifact)
            }
        }
    }
}

/// Loads an artifact the worker compiled.
fn load(engine: &Engine, artifact: &[u8]) -> Result<Component, CompileError> {
    // SAFETY: the artifact is what this binary's own compiler produced for this engine's
    // settings, a moment ago, from the component the host would otherwise compile in process:
    // it is trusted exactly as much as an in-process compile. wasmtime checks that it was
    // built by this wasmtime with compatible settings.
    unsafe { Component::deserialize(engine, artifact) }.map_err(|err| {
        CompileError::Host(format!("loading the compile worker's artifact: {err:#}"))
    })
}

/// Runs `exe compile-worker` on `bytes`; the artifact, or why there is none.
fn run_worker(exe: &PathBuf, limits: CompileLimits, bytes: &[u8]) -> Result<Vec<u8>, CompileError> {
    let mut child = Command::new(exe)
        .arg("compile-worker")
        .arg("--memory-bytes")
        .arg(limits.memory_bytes.to_string())
        // mimalloc reserves 1 GiB of address space up front, which the worker's limit counts;
        // without this, a 1 GiB limit leaves too little to start the compiler's threads.
        .env("MIMALLOC_ARENA_RESERVE", "64MiB")
        // Its own process group: a signal to the host's group (a terminal's Ctrl-C) is not a
        // verdict on the component.
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            CompileError::Host(format!(
                "starting the compile worker {}: {err}",
                exe.display()
            ))
        })?;
    let start = Instant::now();
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(CompileError::Host("the compile worker has no pipes".into()));
    };
    // The pipes are served on threads, so that a worker that stops reading or floods its output
    // cannot block the host; the deadline below ends them all.
    let input = bytes.to_vec();
    let writer = thread::spawn(move || {
        // A worker that dies early closes the pipe; its exit status says why.
        let _ = stdin.write_all(&input);
    });
    let reader = thread::spawn(move || read_capped(stdout, MAX_ARTIFACT_BYTES));
    let errors = thread::spawn(move || read_capped(stderr, MAX_STDERR_BYTES));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if start.elapsed() >= limits.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(CompileError::Refused(format!(
                    "compiling took longer than {:?}; the compiler was stopped",
                    limits.timeout
                )));
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(CompileError::Host(format!(
                    "waiting for the compile worker: {err}"
                )));
            }
        }
    };
    let _ = writer.join();
    let artifact = reader.join().ok().flatten();
    let stderr = errors.join().ok().flatten().unwrap_or_default();
    let status = status?;
    let said = String::from_utf8_lossy(&stderr).trim().to_string();
    // An artifact too large to read back is the component's doing, whatever the worker did
    // when its output was cut (a broken pipe).
    let Some(artifact) = artifact else {
        return Err(CompileError::Refused(format!(
            "the compiled artifact is over {MAX_ARTIFACT_BYTES} bytes"
        )));
    };
    if status.success() {
        return Ok(artifact);
    }
    Err(verdict(status, &said, limits))
}

/// What a worker's failure says about the component. Only what the component caused is
/// `Refused` (and so remembered): a compile error (exit 1), an allocation refused under the
/// worker's limit (the abort of Rust's allocation error handler) or a stack overflow. A kill
/// the host did not send (the pod's memory limit, an operator), a panic or the worker's own
/// failure (exit 2) say nothing about the bytes, and the next offer tries again.
fn verdict(status: ExitStatus, said: &str, limits: CompileLimits) -> CompileError {
    use std::os::unix::process::ExitStatusExt;
    let limit = format!("its {} MiB memory limit", limits.memory_bytes >> 20);
    match (status.code(), status.signal()) {
        (Some(1), _) if said.is_empty() => {
            CompileError::Refused(format!("the compiler failed ({status})"))
        }
        (Some(1), _) => CompileError::Refused(said.to_string()),
        (_, Some(6)) => CompileError::Refused(format!("the compiler ran out of {limit}")),
        (_, Some(11)) => {
            CompileError::Refused(format!("the compiler overflowed its stack within {limit}"))
        }
        (_, Some(signal)) => CompileError::Host(format!(
            "the compile worker was killed (signal {signal}) by something other than the host; \
             it is tried again later"
        )),
        _ => CompileError::Host(format!("the compile worker failed ({status}): {said}")),
    }
}

/// Reads `from` to its end, keeping at most `cap` bytes; `None` if there was more.
fn read_capped(from: impl Read, cap: usize) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let read = from.take(cap as u64 + 1).read_to_end(&mut bytes);
    (read.is_ok() && bytes.len() <= cap).then_some(bytes)
}

/// `wasmop compile-worker`: limits its own address space to `memory_bytes`, reads a component
/// from stdin, compiles it for the host's engine settings and writes the artifact to stdout.
/// Exits 1 with the reason on stderr when the component does not compile.
pub fn worker_main(memory_bytes: u64) -> std::process::ExitCode {
    use std::process::ExitCode;
    let limit = rustix::process::Rlimit {
        current: Some(memory_bytes),
        maximum: Some(memory_bytes),
    };
    if let Err(err) = rustix::process::setrlimit(rustix::process::Resource::As, limit) {
        eprintln!("setting the compile worker's memory limit: {err}");
        return ExitCode::from(2);
    }
    // Should the pod run short of memory, the worker is the process to kill, not the host;
    // and the host's own threads (plugin calls with deadlines) come first for the CPU. Both
    // only lower the worker's standing, which needs no privilege; a failure is harmless.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let _ = rustix::process::setpriority_process(None, 10);
    let Some(bytes) = read_capped(std::io::stdin().lock(), MAX_COMPONENT_BYTES) else {
        eprintln!("the component is over {MAX_COMPONENT_BYTES} bytes");
        return ExitCode::FAILURE;
    };
    let engine = match Engine::new(&compile_config()) {
        Ok(engine) => engine,
        Err(err) => {
            eprintln!("building the compile engine: {err:#}");
            return ExitCode::from(2);
        }
    };
    match engine.precompile_component(&bytes) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("writing the artifact: {err}");
                ExitCode::from(2)
            }
        },
        Err(err) => {
            let message = format!("{err:#}");
            eprintln!("{}", message.chars().take(2000).collect::<String>());
            ExitCode::FAILURE
        }
    }
}
