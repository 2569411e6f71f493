#!/usr/bin/env bash
# The user's journey on the local default, from a fresh clone:
#   a real control plane and OCI registry on loopback; kvstore built for wasm32-wasip2 and pushed
#   as <registry>/plugins/kvstore:1.0; the CRDs installed; the host started; an example App
#   applied and Ready; then a changed kvstore pushed to the same tag and swapped in live by the
#   same host process, with the swap time measured. Everything is left running.
#
#   deploy/local/demo.sh          run the journey (idempotent)
#   deploy/local/demo.sh stop     stop the host and the cluster
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
STATE="${WASMOP_LOCAL_STATE:-$ROOT/target/local}"
LISTEN="${WASMOP_LISTEN:-127.0.0.1:8080}"
POLL="${WASMOP_DEMO_POLL:-2s}"
PIDFILE="$STATE/pids/wasmop.pid"
NS=demo

say() { printf '\n==> %s\n' "$*"; }
host_running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
stop_host() {
  if host_running; then
    local pid; pid="$(cat "$PIDFILE")"
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    echo "stopped wasmop (pid $pid)"
  fi
  rm -f "$PIDFILE"
}
now_ms() { date +%s%3N; }

if [[ "${1:-}" == stop ]]; then
  stop_host
  deploy/local/cluster.sh down
  exit 0
fi

t0=$(now_ms)
say "installing what is missing (deploy/local/setup.sh; a cold first run builds for about 35 min on 2 cores)"
# Only what the demo uses: the test tools (cosign, the interop clients, the image's target) are
# tests/run.sh's to install.
deploy/local/setup.sh rust packages wasm-tools control-plane
say "cluster and registry"
deploy/local/cluster.sh up
source "$STATE/env"
REF="$WASMOP_REGISTRY/plugins/kvstore:1.0"
WASM="$CARGO_TARGET_DIR/wasm32-wasip2/release"

say "building the host and kvstore (cargo prints its progress; seconds when warm)"
cargo build --locked -p wasmop-host
WASMOP="$CARGO_TARGET_DIR/debug/wasmop"
KVSTORE_BUILD=v1 plugins/build.sh kvstore | grep -E '^(size|sha256|exports|ok)'
"$WASMOP" plugin inspect "$WASM/kvstore.wasm"
v1="sha256:$(sha256sum "$WASM/kvstore.wasm" | cut -d' ' -f1)"

say "pushing kvstore v1 to $REF"
"$WASMOP" plugin push "$WASM/kvstore.wasm" "$REF"

say "installing the CRDs and starting the host"
kubectl apply --server-side -k deploy/crds/ >/dev/null
stop_host
mkdir -p "$STATE/logs" "$STATE/pids"
# The local registry is on loopback, a private address the host reaches only when told.
setsid "$WASMOP" run --listen "$LISTEN" --poll-interval "$POLL" --cache-dir "$STATE/plugin-cache" \
  --allow-private-registries 127.0.0.0/8 \
  >>"$STATE/logs/wasmop.log" 2>&1 </dev/null &
echo $! >"$PIDFILE"
HOST_PID="$(cat "$PIDFILE")"
deadline=$((SECONDS + 60))
until curl -fsS "http://$LISTEN/readyz" >/dev/null 2>&1; do
  host_running || { tail -n 20 "$STATE/logs/wasmop.log"; echo "the host exited; log above" >&2; exit 1; }
  ((SECONDS < deadline)) || { echo "the host was not ready within 60s" >&2; exit 1; }
  sleep 0.2
done
echo "wasmop running, pid $HOST_PID, http://$LISTEN"

say "applying the example App (deploy/examples/kvstore.yaml) in namespace $NS"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
sed "s|127.0.0.1:15000|$WASMOP_REGISTRY|" deploy/examples/kvstore.yaml | kubectl -n "$NS" apply -f -
digest() { kubectl -n "$NS" get app cache -o jsonpath='{.status.plugin.digest}'; }
wait_digest() {
  local want="$1" since="$2"
  until [[ "$(digest)" == "$want" ]]; do
    (( $(now_ms) - since < 120000 )) || { echo "App cache never served $want" >&2; exit 1; }
    sleep 0.1
  done
}
wait_digest "$v1" "$(now_ms)"
kubectl -n "$NS" wait --for=condition=Available app/cache --timeout=120s
kubectl -n "$NS" get apps,sts,pods,svc,pdb

before="$(digest)"
say "building a changed kvstore (v2) and pushing it to the same tag"
KVSTORE_BUILD=v2 plugins/build.sh kvstore | grep -E '^(size|sha256)'
v2="sha256:$(sha256sum "$WASM/kvstore.wasm" | cut -d' ' -f1)"
"$WASMOP" plugin push "$WASM/kvstore.wasm" "$REF"
pushed=$(now_ms)
until [[ "$(digest)" == "$v2" ]]; do
  (( $(now_ms) - pushed < 60000 )) || { echo "no swap within 60s" >&2; exit 1; }
  sleep 0.1
done
swapped=$(now_ms)
kubectl -n "$NS" wait --for=condition=Available app/cache --timeout=60s >/dev/null
until [[ "$(kubectl -n "$NS" get configmap cache-config -o jsonpath='{.metadata.annotations.kvstore\.wasmop\.dev/build}')" == v2 ]]; do
  (( $(now_ms) - pushed < 60000 )) || { echo "objects did not follow v2" >&2; exit 1; }
  sleep 0.1
done
followed=$(now_ms)

say "swapped live"
echo "status.plugin.digest: $before -> $(digest)"
kubectl -n "$NS" get events --field-selector reason=PluginSwapped -o custom-columns=FIRST:.eventTime,COUNT:.series.count,REASON:.reason,FIRST-NOTE:.message 2>/dev/null ||
  kubectl -n "$NS" get events | grep PluginSwapped | tail -n 3
host_running && [[ "$(cat "$PIDFILE")" == "$HOST_PID" ]] && echo "same host process: pid $HOST_PID"
echo "swap: $((swapped - pushed)) ms after the push (poll interval $POLL); objects on v2 after $((followed - pushed)) ms"

cat <<EOT

Demo done in $(( ($(now_ms) - t0) / 1000 ))s; everything is still running.
  look:      source $STATE/env && kubectl -n $NS get apps,sts,pods,svc,pdb
  plugins:   curl -s http://$LISTEN/debug/plugins
  host log:  $STATE/logs/wasmop.log
  stop all:  deploy/local/demo.sh stop
EOT
