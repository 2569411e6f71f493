"""What a heaptrack profile's live heap is, by owner: the caches, the App store, the plugins...

    heaptrack_print -f heaptrack.wasmop.PID.zst --flamegraph-cost-type leaked -F stacks.txt
    python3 tests/bench/heap_breakdown.py stacks.txt

Each stack ("f1;f2;...;fn bytes", what was live when the process ended) goes to the first
owner whose pattern it matches, in the order below; under each, the deepest wasmop, kube or
wasmtime frame of the largest stacks.
"""
import collections
import re
import sys

cats = [
  ("host caches (JSON)", r"wasmop_host::controller::cache|controller::reflect::shape"),
  ("App store (kube reflector)", r"reflector::store::Writer|reflector::store"),
  ("policy view caches", r"wasmop_host::policy::view"),
  ("kube controller/scheduler", r"kube_runtime::controller|kube_runtime::scheduler|kube_runtime::utils"),
  ("watch decode (kube watcher)", r"kube_runtime::watcher|kube_client::client::Client::request_events|serde_json::de"),
  ("wasmtime", r"wasmtime|cranelift"),
  ("plugin registry/runtime", r"wasmop_host::plugin"),
  ("reconcile", r"wasmop_host::reconcile"),
  ("metrics", r"prometheus_client"),
  ("tracing/logging", r"tracing"),
  ("http/tls", r"hyper|h2::|rustls|aws_lc|tower"),
  ("tokio runtime", r"tokio::runtime|tokio::"),
]
tot = collections.Counter(); top = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    line=line.rstrip()
    if not line: continue
    stack, _, n = line.rpartition(' ')
    n=int(n)
    frames = stack.split(';')
    cat="other"
    for name, pat in cats:
        if re.search(pat, stack):
            cat=name; break
    tot[cat]+=n
    # the deepest wasmop/kube frame as a hint
    hint = next((f for f in reversed(frames) if re.search(r"wasmop|kube_runtime|kube_client|wasmtime", f)), frames[-1] if frames else "?")
    top[cat][hint[:140]]+=n
all_=sum(tot.values())
print(f"total {all_/2**20:.1f} MiB")
for c,n in tot.most_common():
    print(f"{n/2**20:8.2f} MiB  {c}")
    for h,m in top[c].most_common(4):
        print(f"           {m/2**20:6.2f}  {h}")
