#!/usr/bin/env python3
"""Writes the wasmop host's container image as an OCI image layout, byte for byte reproducible.

    layout.py --binary wasmop --out DIR --tag 0.1.0 --version 0.1.0 --revision SHA \
              --source URL --created EPOCH

One gzip layer, in the shape of distroless/static: the static binary at /usr/local/bin/wasmop,
/etc/passwd and /etc/group naming root and nonroot (65532), the CA bundle of the machine's
Debian ca-certificates (registries over TLS), /tmp, and nonroot's home. The config runs as
65532:65532 and carries the org.opencontainers.image labels; the manifest carries them as
annotations. Every timestamp is --created (SOURCE_DATE_EPOCH) and every owner fixed, so the same
binary and CA bundle give the same digests.

Written with Python's standard library rather than umoci or skopeo: an image of one layer needs
nothing more, and the bytes are then ours to pin.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
NONROOT = 65532


def blob(out, data, media_type, annotations=None):
    """Stores `data` under blobs/sha256 and returns its descriptor."""
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    descriptor = {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}
    if annotations:
        descriptor["annotations"] = annotations
    return descriptor


def layer(binary, created):
    """The root filesystem as an uncompressed tar, entries in a fixed order and owners fixed."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name, mode, data=None, uid=0, kind=tarfile.REGTYPE):
            info = tarfile.TarInfo(name)
            info.mode, info.mtime, info.uid, info.gid = mode, created, uid, uid
            info.uname = info.gname = "nonroot" if uid else "root"
            info.type = kind
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)

        for d in ["etc", "etc/ssl", "etc/ssl/certs", "home", "usr", "usr/local", "usr/local/bin"]:
            add(d, 0o755, kind=tarfile.DIRTYPE)
        add("home/nonroot", 0o700, uid=NONROOT, kind=tarfile.DIRTYPE)
        add("tmp", 0o1777, kind=tarfile.DIRTYPE)
        add("etc/passwd", 0o644,
            b"root:x:0:0:root:/root:/sbin/nologin\n"
            b"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
        add("etc/group", 0o644, b"root:x:0:\nnonroot:x:65532:\n")
        with open(CA_BUNDLE, "rb") as f:
            add("etc/ssl/certs/ca-certificates.crt", 0o644, f.read())
        with open(binary, "rb") as f:
            add("usr/local/bin/wasmop", 0o755, f.read())
    return raw.getvalue()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--created", type=int, required=True, help="seconds since the epoch")
    a = p.parse_args()

    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(os.path.join(a.out, "blobs", "sha256"))
    created_text = datetime.datetime.fromtimestamp(a.created, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")

    tar = layer(a.binary, a.created)
    compressed = io.BytesIO()
    # mtime=0 and no file name in the gzip header: the same tar gives the same bytes.
    with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(tar)
    layer_desc = blob(a.out, compressed.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip")

    labels = {
        "org.opencontainers.image.title": "wasmop",
        "org.opencontainers.image.description":
            "Kubernetes operator host whose domain logic lives in sandboxed Wasm components",
        "org.opencontainers.image.source": a.source,
        "org.opencontainers.image.version": a.version,
        "org.opencontainers.image.revision": a.revision,
        "org.opencontainers.image.created": created_text,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    config = {
        "created": created_text,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Entrypoint": ["/usr/local/bin/wasmop"],
            "Cmd": ["run"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", f"SSL_CERT_FILE={CA_BUNDLE}"],
            "WorkingDir": "/home/nonroot",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": created_text, "created_by": "deploy/image/build.sh"}],
    }
    config_desc = blob(a.out, json.dumps(config, sort_keys=True, separators=(",", ":")).encode(),
                       "application/vnd.oci.image.config.v1+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
        "annotations": labels,
    }
    manifest_desc = blob(a.out, json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode(),
                         "application/vnd.oci.image.manifest.v1+json",
                         {"org.opencontainers.image.ref.name": a.tag})
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    with open(os.path.join(a.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": [manifest_desc]}, f, sort_keys=True)
    print(json.dumps({"manifest": manifest_desc["digest"], "layer_bytes": layer_desc["size"],
                      "binary_bytes": os.path.getsize(a.binary)}))


if __name__ == "__main__":
    main()
