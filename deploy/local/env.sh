# Sourced by the project's scripts: stable cache locations outside the checkout, so that fresh
# clones, CI and later runs reuse earlier builds.
WASMOP_CACHE="${WASMOP_CACHE:-$HOME/.cache/wasmop}"
export WASMOP_CACHE
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WASMOP_CACHE/cargo-target}"
export GOCACHE="${GOCACHE:-$WASMOP_CACHE/go-build}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
