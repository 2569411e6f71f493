# Sourced by the test scripts (tests/run.sh, tests/chaos.sh, tests/bench/run.sh) once ROOT is
# set: whatever the shell says, everything they run talks only to the local cluster that
# deploy/local/cluster.sh starts in $WASMOP_LOCAL_STATE (default target/local/). KUBECONFIG
# names that cluster's kubeconfig before the cluster is even up, so no tool can fall back to
# ~/.kube/config or to an in-cluster ServiceAccount; the registry comes from the same state.
# The end-to-end harness reads the state directory itself and refuses any other API server
# (tests/e2e/harness.rs, Local).
WASMOP_LOCAL_STATE="${WASMOP_LOCAL_STATE:-$ROOT/target/local}"
export WASMOP_LOCAL_STATE
export KUBECONFIG="$WASMOP_LOCAL_STATE/kubeconfig"
# In a Pod, client libraries use these before ~/.kube/config; the registry is the local one.
unset KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT WASMOP_REGISTRY
