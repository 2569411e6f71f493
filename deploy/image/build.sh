#!/usr/bin/env bash
# Builds the host's container image without a container engine: a static (musl) `wasmop`,
# written with deploy/image/layout.py as an OCI image layout (one layer: the binary, passwd and
# group with the nonroot user 65532, the CA bundle, /tmp).
#
#   deploy/image/build.sh [OUT]     OUT defaults to target/image/oci; prints the manifest digest,
#                                   the sizes and the build time
#
# Reproducible for the same binary and CA bundle: every timestamp is SOURCE_DATE_EPOCH (default:
# the commit time of HEAD) and every owner fixed. The CA bundle is the build machine's (Debian's
# ca-certificates), and the binary is reproducible only on a machine with the same paths and
# toolchain, so two machines may differ. deploy/local/image.sh pushes the result to the local
# registry.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source deploy/local/env.sh
deploy/local/setup.sh image
OUT="${1:-$ROOT/target/image/oci}"
TARGET=x86_64-unknown-linux-musl

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ "$revision" != unknown && -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  revision+="-dirty"
fi
created="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"

t0=$SECONDS
# musl-gcc compiles the C of aws-lc (rustls' crypto) and mimalloc for the static target.
CC_x86_64_unknown_linux_musl=musl-gcc cargo build --locked --release --target "$TARGET" \
  -p wasmop-host --bin wasmop
binary="$CARGO_TARGET_DIR/$TARGET/release/wasmop"
# A static binary has no program interpreter; anything else would not start on an empty base.
# (Read first: in a pipeline, a failing readelf would pass the check.)
headers="$(readelf -l "$binary")"
if grep -q 'Requesting program interpreter' <<<"$headers"; then
  echo "error: $binary is dynamically linked" >&2
  exit 1
fi
"$binary" --version >/dev/null

summary="$(python3 deploy/image/layout.py --binary "$binary" --out "$OUT" --tag "$version" \
  --version "$version" --revision "$revision" --created "$created" \
  --source https://github.com/wasmop/wasmop)"
echo "image: $OUT ($summary)"
echo "image build: $((SECONDS - t0)) s"
