#!/usr/bin/env bash
# wasmop at scale, side by side with a bare applier, against the local control plane. A command
# of its own (minutes to an hour), not part of tests/run.sh.
#
#   tests/bench/run.sh                         N = 100 and 1,000 hello Apps (plus N/10 kvstore)
#   tests/bench/run.sh --quick                 N = 100 and small scenarios: a development loop
#   tests/bench/run.sh --apps 100,1000,5000    any counts; other flags: wasmop-bench --help
#   tests/bench/run.sh --apps 0 --variants wasm --plugins 0 --bound-kinds 10 --bound-instances 200
#                                              the bound-kinds scenario alone (a few minutes)
#   WASMOP_BENCH_HEAP=DIR tests/bench/run.sh --variants wasm ...
#                                              heap profiles of the wasm hosts (heaptrack) in DIR
#   WASMOP_BENCH_BASELINE=REV tests/bench/run.sh --variants bare,wasm,baseline ...
#                                              the host of commit REV beside this tree's
#   WASMOP_BENCH_ALLOCATOR=system tests/bench/run.sh ...
#                                              the wasm host with glibc's malloc, not mimalloc
#
# It builds the release host, the same host with the plugins linked natively
# (--features native-plugins), the plugins and the benchmark; starts the local cluster with
# enough fake nodes for the Pods; makes one API server identity per variant (client
# certificates wasmop-bench-{wasm,native,bare}, whose requests the API server's audit log
# records); then runs target/release/wasmop-bench, which writes bench/results/<date>-<HHMM>.{json,md}
# and two SVG plots.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
source tests/local-only.sh

# The largest N decides how many 110-Pod nodes kwok needs: one Pod per hello App, three per
# kvstore App, and room to spare; the bound-kinds scenario has its instances and as many
# kvstore Apps up at once, one Pod each, and one more instance.
max=1000
bound=200
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ "${args[i]}" == --quick ]]; then
    max=100
    bound=20
  elif [[ "${args[i]}" == --apps ]]; then
    max="$(tr ',' '\n' <<<"${args[i + 1]:-}" | sort -n | tail -1)"
  elif [[ "${args[i]}" == --apps=* ]]; then
    max="$(tr ',' '\n' <<<"${args[i]#--apps=}" | sort -n | tail -1)"
  elif [[ "${args[i]}" == --bound-instances ]]; then
    bound="${args[i + 1]:-0}"
  elif [[ "${args[i]}" == --bound-instances=* ]]; then
    bound="${args[i]#--bound-instances=}"
  fi
done
pods=$((${max:-0} + ${max:-0} * 3 / 10))
if ((2 * ${bound:-0} + 1 > pods)); then
  pods=$((2 * ${bound:-0} + 1))
fi
nodes=$((pods / 100 + 3))

deploy/local/setup.sh
echo "==> building (release): wasmop, wasmop with native plugins, the plugins, wasmop-bench"
plugins/build.sh >/dev/null
# WASMOP_BENCH_BASELINE=REV: the host of commit REV too, as the variant `baseline` (run it with
# --variants ...,baseline), built first: the shared target dir keeps both builds' artifacts (the
# crates' paths differ), and release/wasmop is this tree's once the build below has run.
if [[ -n "${WASMOP_BENCH_BASELINE:-}" ]]; then
  baseline_src="$CARGO_TARGET_DIR/bench-baseline-src"
  baseline_commit="$(git -C "$ROOT" rev-parse "$WASMOP_BENCH_BASELINE^{commit}")"
  # Extracted again only for another commit: new files' times would rebuild the same one.
  if [[ "$(cat "$baseline_src.commit" 2>/dev/null)" != "$baseline_commit" ]]; then
    rm -rf "$baseline_src"
    mkdir -p "$baseline_src"
    git -C "$ROOT" archive "$baseline_commit" | tar -x -C "$baseline_src"
    echo "$baseline_commit" >"$baseline_src.commit"
  fi
  cargo build --locked --release --manifest-path "$baseline_src/Cargo.toml" -p wasmop-host
  cp "$CARGO_TARGET_DIR/release/wasmop" "$CARGO_TARGET_DIR/release/wasmop-baseline"
  export WASMOP_BASELINE_BIN="$CARGO_TARGET_DIR/release/wasmop-baseline"
  WASMOP_BENCH_BASELINE_REV="$(git -C "$ROOT" rev-parse --short "$baseline_commit")"
  export WASMOP_BENCH_BASELINE_REV
fi
if [[ " $* " != *" --variants "* || " $* " == *native* ]]; then
  cargo build --locked --release -p wasmop-host --features native-plugins
  cp "$CARGO_TARGET_DIR/release/wasmop" "$CARGO_TARGET_DIR/release/wasmop-native"
fi
cargo build --locked --release -p wasmop-host -p wasmop-bench
# WASMOP_BENCH_ALLOCATOR=system: the wasm variant is the host built with glibc's malloc instead
# of mimalloc (what mimalloc keeps resident, side by side with a run without it).
# WASMOP_BENCH_HEAP=DIR: every wasm-variant host, built so, runs under heaptrack
# (tests/bench/heaptracked; heaptrack sees only malloc), one profile per process in DIR. The
# host then runs several times slower: its figures are the profile's, not the benchmark's.
# The profiled host is the debug build: a release build has no symbols to name an allocation's
# place by (strip = true), and keeping them would rebuild every dependency. Its data structures,
# and so the live heap the profile shows, are the release build's.
if [[ -n "${WASMOP_BENCH_HEAP:-}" ]]; then
  if ! dpkg -s heaptrack zstd >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq heaptrack zstd
  fi
  mkdir -p "$WASMOP_BENCH_HEAP"
  WASMOP_BENCH_HEAP="$(cd "$WASMOP_BENCH_HEAP" && pwd)"
  export WASMOP_BENCH_HEAP
  export WASMOP_BENCH_HOST_WRAPPER="$ROOT/tests/bench/heaptracked"
  cargo build --locked -p wasmop-host --features system-allocator
  cp "$CARGO_TARGET_DIR/debug/wasmop" "$CARGO_TARGET_DIR/debug/wasmop-system-allocator"
  cargo build --locked -p wasmop-host
elif [[ "${WASMOP_BENCH_ALLOCATOR:-}" == system ]]; then
  cargo build --locked --release -p wasmop-host --features system-allocator
  cp "$CARGO_TARGET_DIR/release/wasmop" "$CARGO_TARGET_DIR/release/wasmop-system-allocator"
  # The plain build again, so that release/wasmop is the one a release ships.
  cargo build --locked --release -p wasmop-host
fi

echo "==> the local cluster with $nodes nodes"
deploy/local/cluster.sh up --nodes "$nodes"
source "$WASMOP_LOCAL_STATE/env"
# The bare variant creates Apps before any host has installed the CRDs.
"$WASMOP_KUBECTL" apply --server-side -k deploy/crds/ >/dev/null

# One client certificate per variant, signed by the local CA, in system:masters like the
# admin: the host's own RBAC is not what is measured; the names tell the audit log apart.
bench="$WASMOP_LOCAL_STATE/bench"
mkdir -p "$bench"
pki="$WASMOP_LOCAL_STATE/pki"
for who in wasm native bare baseline; do
  user="wasmop-bench-$who"
  if [[ ! -f "$bench/$who.crt" ]]; then
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=$user" \
      -keyout "$bench/$who.key" -out "$bench/$who.csr" 2>/dev/null
    openssl x509 -req -in "$bench/$who.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 3650 -extfile <(printf 'extendedKeyUsage=clientAuth\n') -out "$bench/$who.crt" 2>/dev/null
    rm -f "$bench/$who.csr"
  fi
  sed -e "s|client-certificate: .*|client-certificate: $bench/$who.crt|" \
    -e "s|client-key: .*|client-key: $bench/$who.key|" "$KUBECONFIG" >"$bench/$who.kubeconfig"
done
[[ -f "$bench/cache.key" ]] || openssl rand -hex 32 >"$bench/cache.key"

export WASMOP_BIN="$CARGO_TARGET_DIR/release/wasmop"
if [[ -n "${WASMOP_BENCH_HEAP:-}" ]]; then
  export WASMOP_BIN="$CARGO_TARGET_DIR/debug/wasmop-system-allocator"
elif [[ "${WASMOP_BENCH_ALLOCATOR:-}" == system ]]; then
  export WASMOP_BIN="$CARGO_TARGET_DIR/release/wasmop-system-allocator"
fi
[[ -x "$CARGO_TARGET_DIR/release/wasmop-native" ]] && export WASMOP_NATIVE_BIN="$CARGO_TARGET_DIR/release/wasmop-native"
export WASMOP_BENCH_DIR="$bench"
export WASMOP_AUDIT_LOG="$WASMOP_LOCAL_STATE/logs/audit.log"
exec "$CARGO_TARGET_DIR/release/wasmop-bench" "$@"
