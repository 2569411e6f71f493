#!/usr/bin/env bash
# The one installer: everything the README's two commands need, installed if missing, idempotent.
#
#   deploy/local/setup.sh                 every part
#   deploy/local/setup.sh rust wasm-tools only these parts (rust, packages, wasm-tools, cargo-deny,
#                                         control-plane, cosign, interop, image)
#
# Parts:
#   rust           the pinned toolchain's components and the wasm32-wasip2 target. rustup applies
#                  `targets` in rust-toolchain.toml only when it installs the toolchain itself, so
#                  on a machine image that ships the toolchain the target must be added here.
#   packages       Debian's docker-registry (the local OCI registry), openssl, curl; Go >= 1.26 is
#                  the machine's own (Debian's golang-go is too old for these modules).
#   wasm-tools     the pinned wasm-tools, which checks plugin components, built from crates.io.
#   cargo-deny     the pinned cargo-deny, which tests/run.sh runs on the dependency graph against
#                  deny.toml (licenses, bans, sources), built from crates.io.
#   control-plane  etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok,
#                  built from the Go module proxy at the versions pinned in deploy/local/tools/.
#   cosign         sigstore's cosign, which the signature tests sign plugins with, built the same
#                  way (deploy/local/tools/cosign).
#   interop        the clients the interop and packaging tests drive: oras and helm (v4) from the
#                  Go module proxy (deploy/local/tools/{oras,helm}), the Bytecode Alliance's wkg
#                  from crates.io, and Debian's apache2-utils (htpasswd, for the basic-auth
#                  registry).
#   image          what deploy/image/build.sh needs for the host's static binary and its image:
#                  the x86_64-unknown-linux-musl target, Debian's musl-tools (musl-gcc, for the C
#                  in aws-lc and mimalloc) and ca-certificates (the bundle the image carries).
#
# Binaries and build caches live under $WASMOP_CACHE (default ~/.cache/wasmop), outside the
# checkout, so fresh clones reuse them. Where they are is written to $STATE/tools.env (default
# target/local/tools.env), which cluster.sh and plugins/build.sh source. A warm run takes about a
# second. Build output goes to $WASMOP_CACHE/logs/; a failure prints one line naming the step and
# what to do, and the log to read.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" # rustup reads rust-toolchain.toml from here
source deploy/local/env.sh
TOOLS="$ROOT/deploy/local/tools"
STATE="${WASMOP_LOCAL_STATE:-$ROOT/target/local}"
LOGS="$WASMOP_CACHE/logs"
TOOLS_ROOT="${WASMOP_TOOLS_ROOT:-$WASMOP_CACHE/tools}"

K8S_VERSION="v1.36.3"
WASM_TOOLS_VERSION="1.262.0" # the wit-component/wasmparser generation (0.262) of wit-bindgen 0.63
WKG_VERSION="0.16.1"
CARGO_DENY_VERSION="0.20.2" # needs rustc >= 1.88
WASM_TARGET=wasm32-wasip2
IMAGE_TARGET=x86_64-unknown-linux-musl

say() { printf '[setup] %s\n' "$*" >&2; }
# fail STEP ADVICE [LOG]: one line saying what failed and what to do, then the log's last error.
fail() {
  say "error: $1 failed: $2"
  if [[ -n "${3:-}" && -f "$3" ]]; then
    local hint; hint="$(grep -m1 -iE 'error|refused|denied|forbidden|403|404|timeout|no such' "$3" || tail -n1 "$3")"
    say "  first error in $3: ${hint:0:300}"
  fi
  exit 1
}
# logged NAME CMD...: runs CMD with its output in $LOGS/NAME.log; returns its status.
logged() {
  local name="$1"; shift
  mkdir -p "$LOGS"
  "$@" >"$LOGS/$name.log" 2>&1
}

# apt_install PART PACKAGE...: installs the Debian packages, failing with PART named.
apt_install() {
  local part="$1"; shift
  say "installing Debian packages: $*"
  logged apt-update apt-get update -qq ||
    fail "$part: apt-get update" "check that Debian's package mirrors are reachable (and that this runs as root)" "$LOGS/apt-update.log"
  DEBIAN_FRONTEND=noninteractive logged apt-install apt-get install -y -qq "$@" ||
    fail "$part: apt-get install $*" "install them by hand or fix apt's sources" "$LOGS/apt-install.log"
}

# ---------------------------------------------------------------------------------------------

part_rust() {
  command -v rustup >/dev/null || fail "rust" "rustup is not installed; install it, then run this again"
  local toolchain
  toolchain="$(rustup show active-toolchain 2>/dev/null | cut -d' ' -f1)" ||
    fail "rust" "rustup cannot resolve the toolchain pinned in rust-toolchain.toml"
  # Both are no-ops when present, and neither is applied by rustup to a toolchain it did not
  # install itself, so they are said every time.
  logged rustup-components rustup component add --toolchain "$toolchain" rustfmt clippy ||
    fail "rust: adding rustfmt and clippy to $toolchain" "check that rustup's dist server is reachable" "$LOGS/rustup-components.log"
  if ! rustup target list --toolchain "$toolchain" --installed | grep -qx "$WASM_TARGET"; then
    say "adding the $WASM_TARGET target to $toolchain"
  fi
  logged rustup-target rustup target add --toolchain "$toolchain" "$WASM_TARGET" ||
    fail "rust: adding the $WASM_TARGET target to $toolchain" "check that rustup's dist server is reachable" "$LOGS/rustup-target.log"
}

part_packages() {
  local missing=()
  [[ -x /usr/bin/docker-registry ]] || missing+=(docker-registry)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  # The fault tests move the host's clock with it (faults::a_clock_jump_...).
  dpkg -s libfaketime >/dev/null 2>&1 || missing+=(libfaketime)
  ((${#missing[@]} == 0)) || apt_install packages "${missing[@]}"
  command -v go >/dev/null || fail "packages" "go is not installed; Go >= 1.26 is needed to build the control plane"
  local gov; gov="$(go env GOVERSION)"; gov="${gov#go}"
  [[ "$(printf '%s\n1.26\n' "$gov" | sort -V | head -n1)" == 1.26 ]] ||
    fail "packages" "go $gov is too old; Go >= 1.26 is needed to build the control plane"
}

part_wasm_tools() {
  local bin="$TOOLS_ROOT/bin/wasm-tools"
  if [[ "$("$bin" --version 2>/dev/null | awk '{print $2}')" != "$WASM_TOOLS_VERSION" ]]; then
    say "building wasm-tools $WASM_TOOLS_VERSION from crates.io into $TOOLS_ROOT (about 4 min cold; log $LOGS/wasm-tools.log)"
    # Only the subcommands used: a full default build takes several times longer on 2 cores. A
    # private target dir keeps this build off the workspace's CARGO_TARGET_DIR lock.
    logged wasm-tools env -u CARGO_TARGET_DIR cargo install --locked --root "$TOOLS_ROOT" \
      --target-dir "$TOOLS_ROOT/build" --no-default-features \
      --features component,validate,print,metadata,objdump,strip \
      wasm-tools --version "$WASM_TOOLS_VERSION" ||
      fail "wasm-tools: cargo install wasm-tools@$WASM_TOOLS_VERSION" "check that crates.io is reachable" "$LOGS/wasm-tools.log"
    rm -rf "$TOOLS_ROOT/build"
    [[ "$("$bin" --version 2>/dev/null | awk '{print $2}')" == "$WASM_TOOLS_VERSION" ]] ||
      fail "wasm-tools" "$bin is not wasm-tools $WASM_TOOLS_VERSION after the install" "$LOGS/wasm-tools.log"
  fi
  WASM_TOOLS="$bin"
}

part_cargo_deny() {
  local bin="$TOOLS_ROOT/bin/cargo-deny"
  if [[ "$("$bin" --version 2>/dev/null | awk '{print $2}')" != "$CARGO_DENY_VERSION" ]]; then
    say "building cargo-deny $CARGO_DENY_VERSION from crates.io into $TOOLS_ROOT (minutes cold; log $LOGS/cargo-deny.log)"
    logged cargo-deny env -u CARGO_TARGET_DIR cargo install --locked --root "$TOOLS_ROOT" \
      --target-dir "$TOOLS_ROOT/build-cargo-deny" cargo-deny --version "$CARGO_DENY_VERSION" ||
      fail "cargo-deny: cargo install cargo-deny@$CARGO_DENY_VERSION" "check that crates.io is reachable" "$LOGS/cargo-deny.log"
    rm -rf "$TOOLS_ROOT/build-cargo-deny"
    [[ "$("$bin" --version 2>/dev/null | awk '{print $2}')" == "$CARGO_DENY_VERSION" ]] ||
      fail "cargo-deny" "$bin is not cargo-deny $CARGO_DENY_VERSION after the install" "$LOGS/cargo-deny.log"
  fi
  CARGO_DENY="$bin"
}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

# The directory holding one tool module's binaries, named by a hash of everything that decides
# them, so a change of pin or flags builds afresh and an unchanged one is reused.
bin_dir() {
  local module="$1" stamp
  stamp="$( (cat "$TOOLS/$module/go.mod" "$TOOLS/$module/go.sum"; go version; echo "$2") | sha256sum | cut -c1-16)"
  echo "$WASMOP_CACHE/bin/$module-$stamp"
}

# build_module VAR MODULE LDFLAGS OUTPUT=PACKAGE... builds each PACKAGE of the wrapper module
# MODULE into a binary named OUTPUT, once per pin, and sets VAR to their directory.
build_module() {
  local var="$1" module="$2" ldflags="$3"; shift 3
  local dir; dir="$(bin_dir "$module" "$ldflags $*")"
  local spec missing=0
  for spec in "$@"; do [[ -x "$dir/${spec%%=*}" ]] || missing=1; done
  if ((missing)); then
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    for spec in "$@"; do
      local t0=$SECONDS
      say "building ${spec%%=*} from the Go module proxy (cold: minutes; log $LOGS/go-${spec%%=*}.log)"
      (cd "$TOOLS/$module" && logged "go-${spec%%=*}" go build -trimpath -ldflags "$ldflags" -o "$dir.tmp/${spec%%=*}" "${spec#*=}") ||
        fail "$module: go build ${spec#*=}" "check that the Go module proxy is reachable and GOPROXY is set as the machine has it" "$LOGS/go-${spec%%=*}.log"
      say "  built ${spec%%=*} in $((SECONDS - t0))s"
    done
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  printf -v "$var" '%s' "$dir"
}

part_control_plane() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local v="k8s.io/component-base/version"
  local k8s_ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
  k8s_ld+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  local k=k8s.io/kubernetes/cmd
  build_module K8S_BIN kubernetes "$k8s_ld" kube-apiserver=$k/kube-apiserver \
    kube-controller-manager=$k/kube-controller-manager kube-scheduler=$k/kube-scheduler kubectl=$k/kubectl
  build_module ETCD_BIN etcd "-s -w" etcd=go.etcd.io/etcd/server/v3
  build_module KWOK_BIN kwok "-s -w" kwok=sigs.k8s.io/kwok/cmd/kwok kwokctl=sigs.k8s.io/kwok/cmd/kwokctl
}

part_cosign() {
  build_module COSIGN_BIN cosign "-s -w" cosign=github.com/sigstore/cosign/v2/cmd/cosign
}

part_image() {
  local toolchain
  toolchain="$(rustup show active-toolchain 2>/dev/null | cut -d' ' -f1)" ||
    fail "image" "rustup cannot resolve the toolchain pinned in rust-toolchain.toml"
  logged rustup-musl rustup target add --toolchain "$toolchain" "$IMAGE_TARGET" ||
    fail "image: adding the $IMAGE_TARGET target to $toolchain" "check that rustup's dist server is reachable" "$LOGS/rustup-musl.log"
  local missing=()
  command -v musl-gcc >/dev/null || missing+=(musl-tools)
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
  ((${#missing[@]} == 0)) || apt_install image "${missing[@]}"
}

part_interop() {
  build_module ORAS_BIN oras "-s -w" oras=oras.land/oras/cmd/oras
  build_module HELM_BIN helm "-s -w" helm=helm.sh/helm/v4/cmd/helm
  # htpasswd, for the basic-auth registry of the interop tests.
  command -v htpasswd >/dev/null || apt_install interop apache2-utils
  local bin="$TOOLS_ROOT/bin/wkg"
  if [[ "$("$bin" --version 2>/dev/null | awk '{print $2}')" != "$WKG_VERSION" ]]; then
    say "building wkg $WKG_VERSION from crates.io into $TOOLS_ROOT (minutes cold; log $LOGS/wkg.log)"
    logged wkg env -u CARGO_TARGET_DIR cargo install --locked --root "$TOOLS_ROOT" \
      --target-dir "$TOOLS_ROOT/build-wkg" wkg --version "$WKG_VERSION" ||
      fail "interop: cargo install wkg@$WKG_VERSION" "check that crates.io is reachable" "$LOGS/wkg.log"
    rm -rf "$TOOLS_ROOT/build-wkg"
  fi
  WKG="$bin"
}

# ---------------------------------------------------------------------------------------------

parts=("$@")
((${#parts[@]})) || parts=(rust packages wasm-tools cargo-deny control-plane cosign interop image)
t0=$SECONDS
for part in "${parts[@]}"; do
  case "$part" in
  rust) part_rust ;;
  packages) part_packages ;;
  wasm-tools) part_wasm_tools ;;
  cargo-deny) part_cargo_deny ;;
  control-plane) part_packages; part_control_plane ;;
  cosign) part_packages; part_cosign ;;
  interop) part_packages; part_interop ;;
  image) part_image ;;
  *) echo "usage: $0 [rust|packages|wasm-tools|cargo-deny|control-plane|cosign|interop|image]..." >&2; exit 2 ;;
  esac
done

# Merge what this run found into tools.env, keeping what other parts wrote before.
mkdir -p "$STATE"
env_file="$STATE/tools.env"
touch "$env_file"
update() { [[ -n "${2:-}" ]] || return 0; grep -v "^export $1=" "$env_file" >"$env_file.tmp" || true; echo "export $1=$2" >>"$env_file.tmp"; mv "$env_file.tmp" "$env_file"; }
update WASM_TOOLS "${WASM_TOOLS:-}"
update K8S_BIN "${K8S_BIN:-}"
update ETCD_BIN "${ETCD_BIN:-}"
update KWOK_BIN "${KWOK_BIN:-}"
update COSIGN_BIN "${COSIGN_BIN:-}"
update ORAS_BIN "${ORAS_BIN:-}"
update HELM_BIN "${HELM_BIN:-}"
update WKG "${WKG:-}"
update CARGO_DENY "${CARGO_DENY:-}"
((SECONDS - t0 < 10)) || say "setup (${parts[*]}) done in $((SECONDS - t0))s"
