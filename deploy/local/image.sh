#!/usr/bin/env bash
# Builds the host's image (deploy/image/build.sh) and pushes it to the local registry as
# $WASMOP_REGISTRY/wasmop/wasmop:<version>, the image deploy/local/kustomization.yaml installs.
#
#   deploy/local/image.sh          build, push, print the pushed reference and digest
#
# Pushed with oras from the OCI image layout (`oras cp --from-oci-layout`); the registry must be
# up (deploy/local/cluster.sh up).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
STATE="${WASMOP_LOCAL_STATE:-$ROOT/target/local}"
deploy/local/setup.sh interop
# shellcheck source=/dev/null
source "$STATE/tools.env"
# shellcheck source=/dev/null
source "$STATE/env"

deploy/image/build.sh "$ROOT/target/image/oci"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
reference="$WASMOP_REGISTRY/wasmop/wasmop:$version"
"$ORAS_BIN/oras" cp --to-plain-http --from-oci-layout "$ROOT/target/image/oci:$version" "$reference" >/dev/null
digest="$("$ORAS_BIN/oras" resolve --plain-http "$reference")"
echo "pushed: $reference@$digest"
