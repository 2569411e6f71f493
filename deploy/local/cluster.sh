#!/usr/bin/env bash
# A real local control plane and OCI registry on loopback, for development, the demo and the tests.
#
#   deploy/local/cluster.sh up [--nodes K]
#                                    install what is missing (deploy/local/setup.sh), start everything;
#                                    K fake nodes of 110 pods each (default 3, or $WASMOP_NODES)
#   deploy/local/cluster.sh down     stop the processes this script started (by pid), keep their data
#   deploy/local/cluster.sh status   show what runs and whether the API server is ready
#   deploy/local/cluster.sh reset    down, then delete the cluster's data
#   deploy/local/cluster.sh kill|stop|start|restart NAME
#                                    one component (etcd, kube-apiserver, registry, ...): SIGKILL,
#                                    SIGTERM, start again, or SIGKILL then start; for fault tests
#
# The control plane is etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built from
# the Go module proxy at the versions pinned in deploy/local/tools/*/go.mod, plus kwok, which plays
# the kubelet for three fake nodes so that Pods become Running and Ready, and Ready again when
# their node is back from NotReady (its Stages: deploy/local/kwok-stages.yaml).
# PersistentVolumeClaims bind through the controller-manager's hostPath provisioner (default
# StorageClass "standard").
# The registry is Debian's docker-registry with its own config and storage.
#
# The API server writes an audit log (target/local/logs/audit.log) of the requests of the
# benchmark's identities only (users wasmop-bench-*, see tests/bench/run.sh), so that a benchmark
# can count what each variant asked of the API server; everyone else's requests are not logged.
#
# Everything listens on 127.0.0.1 only. State (kubeconfig, env file, pids, logs, data) lives under
# target/local/ in the checkout; build caches and binaries live under $WASMOP_CACHE
# (default ~/.cache/wasmop) so that fresh clones and CI reuse them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${WASMOP_LOCAL_STATE:-$ROOT/target/local}"

ETCD_PORT="${WASMOP_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${WASMOP_ETCD_PEER_PORT:-12380}"
APISERVER_PORT="${WASMOP_APISERVER_PORT:-16443}"
REGISTRY_PORT="${WASMOP_REGISTRY_PORT:-15000}"
NODES="${WASMOP_NODES:-3}"

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok registry)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }


# ---------------------------------------------------------------------------------------------
# binaries: deploy/local/setup.sh installs and builds them, and says where in tools.env

load_binaries() {
  "$ROOT/deploy/local/setup.sh" packages control-plane
  # shellcheck source=/dev/null
  source "$STATE/tools.env"
}

# ---------------------------------------------------------------------------------------------
# certificates and kubeconfig

gen_pki() {
  local pki="$STATE/pki"
  [[ -f "$pki/admin.crt" ]] && return
  log "generating certificates in $pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=wasmop-local-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    cat >apiserver.ext <<EOF
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EOF
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=wasmop-local-admin" \
      -keyout admin.key -out admin.csr 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext
  )
}

write_kubeconfig() {
  local pki="$STATE/pki"
  cat >"$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: wasmop-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $pki/ca.crt
users:
- name: wasmop-local-admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: wasmop-local
  context: {cluster: wasmop-local, user: wasmop-local-admin}
current-context: wasmop-local
EOF
  cat >"$STATE/env" <<EOF
# Written by deploy/local/cluster.sh; source it to talk to the local cluster and registry.
export KUBECONFIG=$STATE/kubeconfig
export WASMOP_APISERVER=https://127.0.0.1:$APISERVER_PORT
export WASMOP_REGISTRY=127.0.0.1:$REGISTRY_PORT
export WASMOP_ETCD=http://127.0.0.1:$ETCD_PORT
export WASMOP_KUBECTL=$K8S_BIN/kubectl
export PATH=$K8S_BIN:\$PATH
EOF
}

# ---------------------------------------------------------------------------------------------
# processes

pidfile() { echo "$STATE/pids/$1.pid"; }

# A pid counts as ours only while it still runs the binary we started, so a recycled pid is
# never signalled.
running() {
  local pf; pf="$(pidfile "$1")"
  [[ -f "$pf" ]] || return 1
  local pid exe; read -r pid exe <"$pf"
  [[ -n "$pid" && -d "/proc/$pid" ]] || return 1
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$exe" ]]
}

# The loopback port each component listens on (none for those that bind port 0).
port_of() {
  case "$1" in
  etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
  kube-apiserver) echo "$APISERVER_PORT" ;;
  registry) echo "$REGISTRY_PORT" ;;
  esac
}

start() {
  local name="$1" exe="$2"; shift 2
  if running "$name"; then return; fi
  local port
  for port in $(port_of "$name"); do
    # Something answering there is not ours (ours would be `running`): say so rather than start
    # a second server that dies on bind and leaves a confusing log.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "$name cannot start: 127.0.0.1:$port is already taken by another process (find it with 'ss -ltnp sport = :$port'; stop it, or set WASMOP_*_PORT as the README says)"
    fi
  done
  mkdir -p "$STATE/pids" "$STATE/logs"
  log "starting $name"
  setsid "$exe" "$@" >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo "$! $(readlink -f "$exe")" >"$(pidfile "$name")"
}

wait_for() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready after ${timeout}s; see $STATE/logs/"
    sleep 0.2
  done
}

kubectl_local() { "$K8S_BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

start_etcd() {
  start etcd "$ETCD_BIN/etcd" --name local --data-dir "$STATE/data/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
    --unsafe-no-fsync --quota-backend-bytes 2147483648 --log-level warn
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
}

write_audit_policy() {
  cat >"$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [wasmop-bench-wasm, wasmop-bench-native, wasmop-bench-bare, wasmop-bench-baseline]
- level: None
EOF
}

start_apiserver() {
  local pki="$STATE/pki"
  write_audit_policy
  # The endpoint reconciler would try to publish 127.0.0.1 as the "kubernetes" Service endpoint,
  # which the API rejects as loopback; nothing in this cluster reaches the API through it.
  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$APISERVER_PORT" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC --allow-privileged \
    --endpoint-reconciler-type none --enable-priority-and-fairness=false --profiling=false \
    --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 1 --audit-log-mode blocking
  wait_for kube-apiserver 60 curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz"
}

start_controllers() {
  local pki="$STATE/pki"
  start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig "$STATE/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false --use-service-account-credentials=false \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --enable-hostpath-provisioner --controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller' \
    --concurrent-statefulset-syncs 10 --profiling=false
  start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig "$STATE/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false --profiling=false
  start kwok "$KWOK_BIN/kwok" --kubeconfig "$STATE/kubeconfig" --config "$ROOT/deploy/local/kwok-stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-label-selector type=kwok \
    --cidr 10.244.0.0/16 --node-ip 10.0.0.1 --server-address 127.0.0.1:0
}

ensure_cluster_objects() {
  local i nodes=""
  for ((i = 0; i < NODES; i++)); do
    nodes+="
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
  annotations: {node.alpha.kubernetes.io/ttl: '0', kwok.x-k8s.io/node: fake}
status:
  allocatable: {cpu: '32', memory: 256Gi, pods: '110'}
  capacity: {cpu: '32', memory: 256Gi, pods: '110'}"
  done
  kubectl_local apply --server-side --field-manager wasmop-local -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
$nodes
EOF
  wait_for "$NODES Ready nodes" 60 bash -c \
    "[[ \$('$K8S_BIN/kubectl' --kubeconfig '$STATE/kubeconfig' get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}' | grep -c True) -ge $NODES ]]"
}

start_registry() {
  mkdir -p "$STATE/data/registry"
  cat >"$STATE/registry.yml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $STATE/data/registry}
  delete: {enabled: true}
http:
  addr: 127.0.0.1:$REGISTRY_PORT
  headers: {X-Content-Type-Options: [nosniff]}
EOF
  start registry /usr/bin/docker-registry serve "$STATE/registry.yml"
  wait_for registry 30 curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/"
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_up() {
  local t0=$SECONDS
  load_binaries
  mkdir -p "$STATE"
  gen_pki
  write_kubeconfig
  start_registry
  start_etcd
  start_apiserver
  start_controllers
  ensure_cluster_objects
  log "up in $((SECONDS - t0))s: API https://127.0.0.1:$APISERVER_PORT, registry 127.0.0.1:$REGISTRY_PORT"
  log "source $STATE/env to use them"
}

# stop_one NAME SIGNAL: signals the process `start` recorded for NAME and waits for it to go.
stop_one() {
  local name="$1" signal="$2"
  if running "$name"; then
    local pid; read -r pid _ <"$(pidfile "$name")"
    log "stopping $name (pid $pid, SIG$signal)"
    kill "-$signal" "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while running "$name" && ((SECONDS < deadline)); do sleep 0.1; done
    running "$name" && kill -9 "$pid" 2>/dev/null || true
    while running "$name"; do sleep 0.1; done
  fi
  rm -f "$(pidfile "$name")"
}

cmd_down() {
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop_one "${COMPONENTS[i]}" TERM; done
}

# One component at a time, for fault tests: `kill` is SIGKILL (a crash), `stop` is SIGTERM (a
# graceful stop), `start` starts it again with its usual flags and waits until it serves.
component() {
  local what="$1" name="${2:-}"
  [[ " ${COMPONENTS[*]} " == *" $name "* ]] || die "usage: $0 $what ${COMPONENTS[*]// /|}"
  case "$what" in
  kill) stop_one "$name" KILL ;;
  stop) stop_one "$name" TERM ;;
  start)
    load_binaries
    [[ -f "$STATE/pki/admin.crt" ]] || die "no cluster in $STATE: run '$0 up' first"
    case "$name" in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    registry) start_registry ;;
    *) start_controllers ;; # idempotent: only the stopped ones start
    esac ;;
  restart) component kill "$name"; component start "$name" ;;
  esac
}

cmd_status() {
  local name ok=0
  for name in "${COMPONENTS[@]}"; do
    if running "$name"; then
      printf '%-24s running (pid %s)\n' "$name" "$(cut -d' ' -f1 <"$(pidfile "$name")")"
    else
      printf '%-24s stopped\n' "$name"; ok=1
    fi
  done
  if [[ -f "$STATE/pki/admin.crt" ]] && curl -fsS --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" \
    --key "$STATE/pki/admin.key" "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1; then
    echo "kube-apiserver ready at https://127.0.0.1:$APISERVER_PORT"
  else
    echo "kube-apiserver not ready"; ok=1
  fi
  return $ok
}

case "${1:-}" in
up)
  shift
  while (($#)); do
    case "$1" in
    --nodes) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--nodes takes a positive number"; NODES="$2"; shift 2 ;;
    *) die "up: unknown argument $1 (usage: $0 up [--nodes K])" ;;
    esac
  done
  cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
reset) cmd_down; rm -rf "$STATE"; log "removed $STATE" ;;
kill | stop | start | restart) component "$@" ;;
*) echo "usage: $0 up [--nodes K]|down|status|reset|kill NAME|stop NAME|start NAME|restart NAME" >&2; exit 2 ;;
esac
