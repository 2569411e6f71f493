#!/usr/bin/env bash
# The main job on the local default: a real control plane and OCI registry on loopback, and the
# wasmop host running against them.
#
#   deploy/local/demo.sh          start (idempotent) and leave everything running
#   deploy/local/demo.sh stop     stop the host and the cluster
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
STATE="${WASMOP_LOCAL_STATE:-$ROOT/target/local}"
LISTEN="${WASMOP_LISTEN:-127.0.0.1:8080}"
PIDFILE="$STATE/pids/wasmop.pid"

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

if [[ "${1:-}" == stop ]]; then
  stop_host
  deploy/local/cluster.sh down
  exit 0
fi

t0=$SECONDS
say "cluster and registry"
deploy/local/cluster.sh up
source "$STATE/env"

say "building the host"
cargo build --locked -p wasmop-host
bin="$CARGO_TARGET_DIR/debug/wasmop"

say "starting the host"
stop_host
mkdir -p "$STATE/logs" "$STATE/pids"
setsid "$bin" run --listen "$LISTEN" >>"$STATE/logs/wasmop.log" 2>&1 </dev/null &
echo $! >"$PIDFILE"
deadline=$((SECONDS + 60))
until curl -fsS "http://$LISTEN/readyz" >/dev/null 2>&1; do
  host_running || { tail -n 20 "$STATE/logs/wasmop.log"; echo "the host exited; log above" >&2; exit 1; }
  ((SECONDS < deadline)) || { echo "the host was not ready within 60s" >&2; exit 1; }
  sleep 0.2
done

say "what runs"
deploy/local/cluster.sh status
echo "wasmop                   running (pid $(cat "$PIDFILE")), http://$LISTEN/readyz: $(curl -fsS "http://$LISTEN/readyz")"
kubectl get crd apps.wasmop.dev
kubectl get nodes

cat <<EOT

Ready in $((SECONDS - t0))s.
  use it:    source $STATE/env && kubectl get apps -A
  host log:  $STATE/logs/wasmop.log
  stop all:  deploy/local/demo.sh stop
EOT
