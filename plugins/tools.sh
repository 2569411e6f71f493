#!/usr/bin/env bash
# Installs the pinned wasm-tools used to inspect plugin components, once.
#
# wasm-tools 1.262.x is the release built on the same wit-component/wasmparser
# generation (0.262) that wit-bindgen 0.63 uses, so it reads exactly what our
# guest bindings emit; it needs Rust >= 1.88, and the repo pins 1.95.
#
# Idempotent: when the exact version is already installed under the cache
# root nothing is built. Prints the absolute path of the binary on stdout
# (progress goes to stderr), so callers can do WASM_TOOLS=$(plugins/tools.sh).
set -euo pipefail

# From the repo root, so rustup picks the pinned toolchain (rust-toolchain.toml).
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WASM_TOOLS_VERSION="1.262.0"
TOOLS_ROOT="${WASMOP_TOOLS_ROOT:-$HOME/.cache/wasmop/tools}"
BIN="$TOOLS_ROOT/bin/wasm-tools"

installed_version() {
  [[ -x "$BIN" ]] || return 1
  "$BIN" --version 2>/dev/null | awk '{print $2}'
}

if [[ "$(installed_version || true)" != "$WASM_TOOLS_VERSION" ]]; then
  echo "installing wasm-tools $WASM_TOOLS_VERSION into $TOOLS_ROOT" >&2
  # Only the subcommands we use: a full default build takes several times
  # longer on a 2-core machine. A private target dir keeps this build off the
  # workspace's shared CARGO_TARGET_DIR lock.
  env -u CARGO_TARGET_DIR cargo install --locked --quiet \
    --root "$TOOLS_ROOT" \
    --target-dir "$TOOLS_ROOT/build" \
    --no-default-features \
    --features component,validate,print,metadata,objdump,strip \
    wasm-tools --version "$WASM_TOOLS_VERSION" >&2
  rm -rf "$TOOLS_ROOT/build"
  got="$(installed_version || true)"
  if [[ "$got" != "$WASM_TOOLS_VERSION" ]]; then
    echo "error: expected wasm-tools $WASM_TOOLS_VERSION at $BIN, found '${got:-nothing}'" >&2
    exit 1
  fi
fi

echo "$BIN"
