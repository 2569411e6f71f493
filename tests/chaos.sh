#!/usr/bin/env bash
# The chaos soak: M minutes of seeded random App creates, changes and deletes, plugin swaps to
# good and broken versions, host kill -9s, kube-apiserver restarts and registry outages against
# the real local control plane; then the faults stop and the invariants are checked (see
# tests/e2e/chaos.rs). Prints a summary and exits non-zero on any violation, with the seed.
#
#   tests/chaos.sh                        10 minutes, a seed from the clock
#   tests/chaos.sh --minutes 60           longer
#   tests/chaos.sh --minutes 10 --seed S  replays the schedule of a run (not its timing)
#
# tests/run.sh runs the same test for 2.5 minutes with seed 46 as its last step.
#
# It stops and starts parts of the shared local cluster: run nothing else against it meanwhile.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
source tests/local-only.sh

minutes=10
seed=""
while (($#)); do
  case "$1" in
  --minutes) minutes="${2:?--minutes needs a number}"; shift 2 ;;
  --seed) seed="${2:?--seed needs a number}"; shift 2 ;;
  *) echo "usage: $0 [--minutes M] [--seed S]" >&2; exit 2 ;;
  esac
done
[[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "--minutes: not a number: $minutes" >&2; exit 2; }
[[ -z "$seed" || "$seed" =~ ^[0-9]+$ ]] || { echo "--seed: not a number: $seed" >&2; exit 2; }

deploy/local/setup.sh rust packages wasm-tools control-plane
# kvstore v1 and v2 (the good versions a swap moves between), hello, and a broken one.
KVSTORE_BUILD=v2 plugins/build.sh kvstore >/dev/null
cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/kvstore.wasm" "$CARGO_TARGET_DIR/wasm32-wasip2/release/kvstore-v2.wasm"
plugins/build.sh >/dev/null
cargo build --locked --release --target wasm32-wasip2 -p wrong-world-plugin
cargo build --locked -p wasmop-host

# Leave a cluster that was already running as it was; stop one this run started.
if ! deploy/local/cluster.sh status >/dev/null 2>&1; then
  trap 'deploy/local/cluster.sh down' EXIT
fi
deploy/local/cluster.sh up

WASMOP_CHAOS_MINUTES="$minutes" WASMOP_CHAOS_SEED="$seed" \
  cargo test --locked -p wasmop-e2e chaos::soak -- --ignored --exact --nocapture
