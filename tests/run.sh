#!/usr/bin/env bash
# Runs every test wasmop has: formatting, the dependency rules (deny.toml), clippy (warnings are
# errors, with and without the benchmark's native-plugins), the docs' links, unit tests, the
# plugin builds for wasm32-wasip2, the end-to-end tests against the real local cluster and
# registry, and a short chaos soak (tests/chaos.sh) against them.
#
#   tests/run.sh            everything
#   tests/run.sh e2e        only the end-to-end tests (cluster must be startable)
#
# Build caches live outside the checkout (see deploy/local/env.sh) so that fresh clones reuse them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
source tests/local-only.sh

# Each step says when it started, in minutes and seconds since the run did: which steps a
# 20-minute CI budget goes to.
step() { printf '\n==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# A failing test's message, not 50 frames of the test harness: CI keeps only the end of the
# output, and a backtrace once pushed the assertion that failed out of it. The message names its
# file and line either way; WASMOP_TEST_BACKTRACE=1 brings the frames back.
export RUST_BACKTRACE="${WASMOP_TEST_BACKTRACE:-0}"
only="${1:-all}"

# Incremental-compilation sessions pile up in the shared target dir (tens of GB over a few days
# of work on 2 cores); those untouched for a day are only disk.
find "$CARGO_TARGET_DIR"/*/incremental -mindepth 1 -maxdepth 1 -mtime +1 -exec rm -rf {} + 2>/dev/null || true
# So do test executables: each build of a test target leaves one of 600 MB under a new hash
# (12.5 GB of them once filled the disk); only the newest of each name is ever run again.
# On a new machine there is no target dir yet, and a failing find must not end the run (pipefail).
if [[ -d "$CARGO_TARGET_DIR/debug/deps" ]]; then
  find "$CARGO_TARGET_DIR"/debug/deps -maxdepth 1 -type f -executable \
    -regextype posix-extended -regex '.*-[0-9a-f]{16}' -printf '%T@ %p\n' |
    sort -rn | awk '{ name = $2; sub(/-[0-9a-f]+$/, "", name); if (seen[name]++) print $2 }' |
    xargs -r rm -f
fi

step "setup: what the README's commands need (deploy/local/setup.sh)"
deploy/local/setup.sh
rustup show active-toolchain
source "$WASMOP_LOCAL_STATE/tools.env" # CARGO_DENY, which setup.sh installed

if [[ "$only" == all ]]; then

  step "cargo fmt --check"
  cargo fmt --all -- --check

  step "cargo deny check bans licenses sources (deny.toml)"
  # Not advisories: the RustSec database is a git clone from GitHub, and CI reaches only package
  # registries. Duplicate versions are warnings; run without --hide-inclusion-graph to see which
  # dependencies bring each one in.
  "$CARGO_DENY" --locked check --hide-inclusion-graph bans licenses sources

  step "cargo clippy --all-targets -D warnings"
  cargo clippy --workspace --all-targets --locked -- -D warnings
  # The host with its plugins linked in natively (the benchmark's build, tests/bench/run.sh).
  cargo clippy -p wasmop-host --all-targets --locked --features native-plugins -- -D warnings

  step "cargo doc -D warnings: every intra-doc link resolves"
  # wasmop-core and wasmop-sdk as docs.rs would build them: their public docs link nothing private.
  RUSTDOCFLAGS='-D warnings' cargo doc --no-deps --locked -p wasmop-core -p wasmop-sdk
  # The other crates' docs are for their maintainers: private items included, and linking to them.
  RUSTDOCFLAGS='-D warnings -A rustdoc::private-intra-doc-links' cargo doc --no-deps --locked \
    --workspace --exclude wasmop-core --exclude wasmop-sdk --document-private-items \
    --features wasmop-host/native-plugins

  step "plugins for wasm32-wasip2"
  # A second kvstore build that plans differently, for the live-swap journey test.
  KVSTORE_BUILD=v2 plugins/build.sh kvstore >/dev/null
  cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/kvstore.wasm" "$CARGO_TARGET_DIR/wasm32-wasip2/release/kvstore-v2.wasm"
  plugins/build.sh
  # The hostile test guests of host/tests/runtime.rs (see host/tests/plugins/README.md).
  cargo build --locked --release --target wasm32-wasip2 -p fault-plugin -p wrong-world-plugin -p v0-1-plugin -p v0-2-plugin
  # The rollout tests' plugin, one build per variant (its code reads ROLLOUT_VARIANT at build
  # time), each a digest of its own.
  for variant in v1 v2 refuse degraded; do
    ROLLOUT_VARIANT=$variant cargo build -q --locked --release --target wasm32-wasip2 -p rollout-plugin
    cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/rollout_plugin.wasm" "$CARGO_TARGET_DIR/wasm32-wasip2/release/rollout-$variant.wasm"
  done

  step "unit and runtime tests"
  cargo test --workspace --locked --exclude wasmop-e2e

  step "the SDK as crates.io would get it: cargo package (with wasmop-core, which it depends on)"
  # Verification builds each packaged crate on its own, so the vendored WIT (sdk/wit/) must do.
  # Cargo verifies the SDK against wasmop-core from a local overlay registry, and takes a
  # registry crate of an unchanged version as unchanged: it reuses both its extracted source
  # and its compiled artifacts (seen: the SDK verified against a wasmop-core of an earlier
  # commit). So the overlay's extractions go, and the verification builds in a target dir of
  # its own from which every wasmop-core artifact goes; the third-party dependencies stay warm.
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/wasmop-{core,sdk}-*
  verify_target="$CARGO_TARGET_DIR/package-verify"
  if [[ -d "$verify_target" ]]; then
    find "$verify_target" -name '*wasmop*core*' -prune -exec rm -rf {} +
  fi
  CARGO_TARGET_DIR="$verify_target" cargo package -q -p wasmop-core -p wasmop-sdk

  step "wasmop plugin new: the scaffold builds and passes its tests as generated"
  scaffold="$(mktemp -d)/my-plugin"
  cargo run -q --locked -p wasmop-host -- plugin new my-plugin --dir "$scaffold"
  cp Cargo.lock "$scaffold/" # the workspace's versions, so the shared target dir is reused
  cargo test -q --manifest-path "$scaffold/Cargo.toml"
  cargo run -q --locked -p wasmop-host -- plugin build "$scaffold"
  rm -rf "$(dirname "$scaffold")"
fi

# Leave a cluster that was already running as it was; stop one this run started.
if ! deploy/local/cluster.sh status >/dev/null 2>&1; then
  trap 'deploy/local/cluster.sh down' EXIT
fi

if [[ "$only" == all ]]; then
  step "the README's first command: deploy/local/demo.sh, to the live swap"
  demo_log="$(mktemp)"
  if ! deploy/local/demo.sh 2>&1 | tee "$demo_log"; then
    echo "FAIL: deploy/local/demo.sh exited non-zero (output above)" >&2
    exit 1
  fi
  swap_line="$(grep -E '^swap: [0-9]+ ms after the push' "$demo_log")" ||
    { echo "FAIL: deploy/local/demo.sh printed no swap line" >&2; exit 1; }
  grep -q '^same host process: pid ' "$demo_log" ||
    { echo "FAIL: deploy/local/demo.sh did not swap within the same host process" >&2; exit 1; }
  echo "demo ok: $swap_line"
  rm -f "$demo_log"
  # `demo.sh stop` is what a user runs after the demo: it stops the host and the cluster. The
  # end-to-end tests below start the cluster again (seconds, with its data kept).
  deploy/local/demo.sh stop
  # The demo leaves its v2 build of kvstore in kvstore.wasm; the end-to-end tests need v1 there
  # (and kvstore-v2.wasm, built above, to differ from it).
  plugins/build.sh kvstore >/dev/null
fi

step "local cluster and registry"
deploy/local/cluster.sh up

step "the host's container image: deploy/local/image.sh (static musl build, OCI layout, pushed)"
# The deploy test installs it with `kubectl apply -k deploy/local/` and runs the binary out of it.
deploy/local/image.sh

step "end-to-end tests"
cargo build --locked -p wasmop-host
# Two at a time: every test starts its own host, and compiles share two cores. Two kinds of test
# run afterwards, one at a time: those that hold a swap to a latency bound (a 2 s ConfigMap swap
# includes a compile, which takes twice as long while another test compiles beside it: seen fail
# in CI), and the fault tests, which kill and restart the shared control plane.
timed=(journey:: plugin_sources::a_configmap_update_swaps_within_two_seconds)
cargo test --locked -p wasmop-e2e -- --test-threads 2 --skip faults:: "${timed[@]/#/--skip=}"
step "end-to-end tests with a latency bound, one at a time"
cargo test --locked -p wasmop-e2e -- --test-threads 1 --nocapture "${timed[@]}"
step "end-to-end fault tests: the host, kube-apiserver, etcd and kwok stopped (one at a time)"
cargo test --locked -p wasmop-e2e faults:: -- --test-threads 1 --nocapture

step "chaos soak, short: 2.5 minutes of seeded faults, then the invariants (tests/chaos.sh)"
# Last, on the same cluster: like the fault tests it restarts kube-apiserver and takes the
# registry down, so nothing may run beside it, and it needs no cluster of its own (its Apps live
# in a namespace of their own). A fixed seed, so that every run replays the same schedule of
# faults (not their timing); a failure prints the seed and the command to replay it at length.
# About 4 minutes: the faults, the convergence (30-60 s) and the checks; the 10- and 60-minute
# runs are tests/chaos.sh --minutes M, not part of this script.
soak_started=$SECONDS
WASMOP_CHAOS_MINUTES=2.5 WASMOP_CHAOS_SEED=46 \
  cargo test --locked -p wasmop-e2e chaos::soak -- --ignored --exact --nocapture
echo "chaos soak: $((SECONDS - soak_started)) s"
