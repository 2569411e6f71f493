#!/usr/bin/env python3
"""Says what backs a host's resident memory, from a /proc/PID/smaps copy.

    WASMOP_BENCH_SMAPS=DIR tests/bench/run.sh ...   # the bench saves DIR/<variant>-<N>.smaps
    tests/bench/smaps_breakdown.py DIR/*.smaps

Each mapping's Rss is put in one class by its shape (Linux, wasmtime 48, mimalloc 3 on x86_64):
- wasmtime pool: anonymous mappings of 2 GiB or more, which only the pooling allocator makes
  (each instance slot's linear memory with its guard, carved from one reservation of hundreds of
  GiB); their resident pages are plugin instances' memories kept warm between calls;
- plugins' memory images: wasmtime's memfd copies of the components' initial memories, which
  the slots map copy-on-write;
- compiled plugins' code: anonymous executable mappings (wasmtime copies a component's compiled
  code into memory it then makes executable);
- thread stacks: read-write anonymous mappings right after a one-page (or larger) no-access guard
  mapping, as glibc's pthread_create lays them out;
- the binary: file mappings of the wasmop executable (code and read-only data);
- malloc: everything else anonymous ([heap], mimalloc's 1 GiB arenas, glibc's arenas).
"""

import os
import sys

GIB = 1 << 30


def mappings(path):
    current = None
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and not fields[0].endswith(":"):
                if current:
                    yield current
                start, end = (int(x, 16) for x in fields[0].split("-"))
                current = {
                    "start": start,
                    "size": end - start,
                    "perms": fields[1],
                    "inode": fields[4],
                    "name": fields[5] if len(fields) > 5 else "",
                    "rss": 0,
                    "anon": 0,
                }
            elif fields[0] == "Rss:":
                current["rss"] = int(fields[1]) * 1024
            elif fields[0] == "Anonymous:":
                current["anon"] = int(fields[1]) * 1024
    if current:
        yield current


def classify(maps):
    totals = {}
    previous = None
    for m in maps:
        name = m["name"]
        if m["inode"] != "0" and name:
            if os.path.basename(name).startswith("wasmop"):
                key = "the binary"
            elif "memfd:wasm" in name:
                key = "plugins' memory images"
            else:
                key = "shared libraries and other files"
        elif m["size"] >= 2 * GIB:
            key = "wasmtime pool"
        elif "x" in m["perms"]:
            key = "compiled plugins' code"
        elif name in ("[stack]",) or (
            previous is not None
            and previous["perms"].startswith("---")
            and previous["start"] + previous["size"] == m["start"]
            and m["perms"].startswith("rw")
            and m["size"] <= 16 << 20
        ):
            key = "thread stacks"
        elif name.startswith("[") and name not in ("[heap]",):
            key = "kernel mappings"
        else:
            key = "malloc"
        totals[key] = totals.get(key, 0) + m["rss"]
        previous = m
    return totals


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: smaps_breakdown.py FILE.smaps ...", file=sys.stderr)
        sys.exit(2)
    tables = {path: classify(mappings(path)) for path in sys.argv[1:]}
    keys = sorted(
        {k for t in tables.values() for k in t},
        key=lambda k: -max(t.get(k, 0) for t in tables.values()),
    )
    names = [os.path.basename(p).removesuffix(".smaps") for p in tables]
    print("| resident MiB | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in keys:
        if max(t.get(k, 0) for t in tables.values()) < (1 << 20) / 20:
            continue
        cells = [f"{t.get(k, 0) / (1 << 20):.1f}" for t in tables.values()]
        print(f"| {k} | " + " | ".join(cells) + " |")
    totals = [f"{sum(t.values()) / (1 << 20):.1f}" for t in tables.values()]
    print("| **total** | " + " | ".join(totals) + " |")


if __name__ == "__main__":
    main()
