#!/usr/bin/env bash
# Builds the plugins as wasm32-wasip2 components and checks what they export.
#
#   plugins/build.sh              every plugin under plugins/
#   plugins/build.sh kvstore ...  only these
#
# For each plugin: a release build of that one package, `wasm-tools validate`,
# then `wasm-tools component wit` to compare the component's exports with
# plugins/<name>/expected-exports.txt (exactly: a missing or an extra export
# fails) and to refuse imports that would give a plugin ambient authority
# (filesystem, sockets, clocks, random, http). Prints path, size and sha256.
# Exits non-zero if any plugin fails.
#
# One package per cargo invocation, so nothing one plugin's dependencies
# switch on (Cargo feature unification) leaks into another's component.
#
# Whole-program LTO with one codegen unit: inlining across the plugin, the SDK, serde_json and
# k8s-openapi makes kvstore's calls 12-18% faster (plan 89 -> 73 us, the per-call floor of a
# metadata call 14.6 -> 11.9 us, measured) for a 7% larger file. It is set here, not in the root
# Cargo.toml, because a profile's LTO cannot be scoped to packages: every release build of the
# host would then run fat LTO over wasmtime and kube too (not measured; not wanted for now).
#
# Bulk memory stays on, as the target has it: built without it (`-Ctarget-feature=-bulk-memory,
# -bulk-memory-opt`), memcpy becomes a loop in Wasm instead of wasmtime's memory.copy builtin
# (616 memory.copy in kvstore fell to 9), and plan calls were 4% slower (plugin_bench --compare, 45.4 against 47.3 us). SIMD
# stays off: with `+simd128` they were 2-3% slower (45.0 against 45.8 us, 45.4 against 46.7).
#
# Dependencies at opt-level "s", like the plugins themselves (the root Cargo.toml says why and
# what it costs); set here because a profile cannot scope "*" to the plugins' builds.
#
# Stripping: the root Cargo.toml sets `strip = true` for release, but its
# per-package overrides (opt-level) make Cargo fall back to
# strip=debuginfo for exactly these packages, leaving a name section that is
# a third of the file. `--config ...strip=true` restores it per package.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
TARGET=wasm32-wasip2
# The wasm32-wasip2 target and the pinned wasm-tools; a no-op in about a second when present.
deploy/local/setup.sh rust wasm-tools
# shellcheck source=/dev/null
source "${WASMOP_LOCAL_STATE:-$ROOT/target/local}/tools.env"
FORBIDDEN_IMPORTS='^wasi:(filesystem|sockets|clocks|random|http)/'
# Every plugin must be servable from a ConfigMap (spec.plugin.configMap), whose data and
# binaryData are capped at 1 MiB (1,048,576 bytes) together, keys and values; the object's
# metadata does not count (host/src/plugin/limits.rs, CONFIGMAP_MAX_BYTES). This leaves 8 KiB
# for the key and anything beside it. (It was 1,000,000 until the configuration schema of
# wasmop:plugin@0.2.0 took kvstore from 935 KB to 1,026 KB: schemars' derived code.)
MAX_BYTES=1040000

if [[ $# -gt 0 ]]; then
  plugins=("$@")
else
  plugins=()
  for manifest in plugins/*/Cargo.toml; do
    plugins+=("$(basename "$(dirname "$manifest")")")
  done
fi

failed=0
for name in "${plugins[@]}"; do
  dir="plugins/$name"
  expected_file="$dir/expected-exports.txt"
  if [[ ! -f "$dir/Cargo.toml" || ! -f "$expected_file" ]]; then
    echo "error: $dir needs a Cargo.toml and an expected-exports.txt" >&2
    failed=1
    continue
  fi

  echo "==> building $name" >&2
  # `cargo rustc --crate-type cdylib`: the manifests also list `rlib` (native code links the
  # plugins: the scale benchmark), and cargo runs LTO only when every crate type allows it.
  cargo rustc --release --target "$TARGET" -p "$name" --crate-type cdylib \
    --config "profile.release.package.$name.strip=true" \
    --config 'profile.release.lto="fat"' --config profile.release.codegen-units=1 \
    --config 'profile.release.package."*".opt-level="s"'
  wasm="$CARGO_TARGET_DIR/$TARGET/release/${name//-/_}.wasm"

  "$WASM_TOOLS" validate "$wasm"
  wit="$("$WASM_TOOLS" component wit "$wasm")"
  world="$(sed -n '/^world root {/,/^}/p' <<<"$wit")"
  exports="$(sed -n 's/^ *export \([^ ;]*\);$/\1/p' <<<"$world" | sort)"
  imports="$(sed -n 's/^ *import \([^ ;]*\);$/\1/p' <<<"$world" | sort)"
  expected="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$expected_file" | sort)"

  echo "plugin:  $name"
  echo "path:    $wasm"
  echo "size:    $(stat -c %s "$wasm") bytes"
  echo "sha256:  $(sha256sum "$wasm" | cut -d' ' -f1)"
  echo "exports: $(tr '\n' ' ' <<<"$exports")"
  echo "imports: $(tr '\n' ' ' <<<"$imports")"

  if (($(stat -c %s "$wasm") > MAX_BYTES)); then
    echo "FAIL: $name is over $MAX_BYTES bytes: it would not fit a ConfigMap (1 MiB with its metadata)"
    failed=1
  fi
  if [[ "$exports" != "$expected" ]]; then
    echo "FAIL: $name exports differ from $expected_file (< expected, > actual):"
    diff <(echo "$expected") <(echo "$exports") || true
    failed=1
  elif forbidden="$(grep -E "$FORBIDDEN_IMPORTS" <<<"$imports")"; then
    echo "FAIL: $name imports ambient authority: $(tr '\n' ' ' <<<"$forbidden")"
    failed=1
  else
    echo "ok:      exports match $expected_file"
  fi
  echo
done

exit "$failed"
