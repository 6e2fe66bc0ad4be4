"""OCI images for the real node, built here (no registry is reachable): a layer is an uncompressed tar, the
image an OCI layout (oci-layout, index.json, blobs/sha256/...) packed as one tar that `ctr images import`
reads. Two images: the pause image (a static C binary, tests/kubernetes/node/pause.c) that containerd runs as
each pod's sandbox, and a small test image (Debian's essential set and python3-minimal, from mmdebstrap).
Both are kept in the node cache (~/.cache/tfdist/node/images), named by a hash of their recipe, so they are
built once per recipe.

    archive = python_image(cache)            # (path, name): load it with RealNode.load_image(path, name)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PAUSE_SOURCE = os.path.join(HERE, "pause.c")
WRITER_VERSION = "1"  # part of every recipe hash: a change to how archives are written rebuilds them
PAUSE_NAME = "localhost/tfdist-pause"
PYTHON_NAME = "localhost/tfdist-node-python"
MMDEBSTRAP = ["mmdebstrap", "--variant=essential", "--include=python3-minimal", "--mode=root", "bookworm"]
MIRROR = "http://deb.debian.org/debian"


def cache_dir() -> str:
    """The node's cache: $TFDIST_NODE_CACHE or ~/.cache/tfdist/node, 0700, the user's own and not a link."""
    base = os.environ.get("TFDIST_NODE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfdist", "node")
    os.makedirs(base, mode=0o700, exist_ok=True)
    info = os.lstat(base)
    if os.path.islink(base) or info.st_uid != os.getuid():
        raise RuntimeError(f"{base} is a link or not yours: remove it or set TFDIST_NODE_CACHE")
    return base


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    out.addfile(info, io.BytesIO(data))


def write_oci_archive(path: str, layers: list[str], name: str, tag: str, config: dict) -> None:
    """An OCI layout tar at `path` holding one linux/amd64 image of `layers` (uncompressed tars, bottom first)
    with the runtime `config` (Entrypoint, Cmd, Env, WorkingDir...), named `name:tag`."""
    diff_ids = [_sha256_file(layer) for layer in layers]
    image_config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diff_ids]},
    }, sort_keys=True).encode()
    config_digest = hashlib.sha256(image_config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": f"sha256:{config_digest}",
                   "size": len(image_config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{d}",
                    "size": os.path.getsize(layer)} for d, layer in zip(diff_ids, layers)],
    }, sort_keys=True).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{manifest_digest}",
        "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": f"{name}:{tag}", "org.opencontainers.image.ref.name": tag}}],
    }, sort_keys=True).encode()
    partial = path + ".partial"
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as out:
        _add_bytes(out, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(out, "index.json", index)
        _add_bytes(out, f"blobs/sha256/{config_digest}", image_config)
        _add_bytes(out, f"blobs/sha256/{manifest_digest}", manifest)
        for digest, layer in zip(diff_ids, layers):
            info = out.gettarinfo(layer, arcname=f"blobs/sha256/{digest}")
            info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, 0, "", ""
            with open(layer, "rb") as f:
                out.addfile(info, f)
    os.replace(partial, path)


def _recipe_key(*parts: str) -> str:
    return hashlib.sha256("\0".join((WRITER_VERSION, *parts)).encode()).hexdigest()[:16]


def _cached(cache: str, repository: str, kind: str, key: str) -> tuple[str, str, str]:
    """(image name, the cache's image folder (made 0700), the archive's path) of one built recipe."""
    images = os.path.join(cache, "images")
    os.makedirs(images, mode=0o700, exist_ok=True)
    return f"{repository}:{key}", images, os.path.join(images, f"{kind}-{key}.tar")


def pause_image(cache: str) -> tuple[str, str]:
    """(archive path, image name) of the pause image, built once per pause.c."""
    with open(PAUSE_SOURCE, "rb") as f:
        source = f.read()
    key = _recipe_key("pause", hashlib.sha256(source).hexdigest())
    name, images, archive = _cached(cache, PAUSE_NAME, "pause", key)
    if os.path.exists(archive):
        return archive, name
    with tempfile.TemporaryDirectory(dir=images) as work:
        binary = os.path.join(work, "pause")
        subprocess.run(["gcc", "-static", "-Os", "-s", "-o", binary, PAUSE_SOURCE], check=True, timeout=120,
                       capture_output=True)
        layer = os.path.join(work, "layer.tar")
        with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as out:
            info = out.gettarinfo(binary, arcname="pause")
            info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, 0, "", ""
            with open(binary, "rb") as f:
                out.addfile(info, f)
        write_oci_archive(archive, [layer], PAUSE_NAME, key, {"Entrypoint": ["/pause"]})
    return archive, name


def python_image(cache: str, timeout: float = 600) -> tuple[str, str]:
    """(archive path, image name) of the test image: bookworm's essential packages and python3-minimal
    (python3 with the core modules: socket, signal, os; no json or http), built once per recipe (~16 s of
    mmdebstrap, 160 MB). Device nodes are left out (a container gets its own /dev)."""
    key = _recipe_key("python", *MMDEBSTRAP, MIRROR)
    name, images, archive = _cached(cache, PYTHON_NAME, "python", key)
    if os.path.exists(archive):
        return archive, name
    if not shutil.which("mmdebstrap"):
        raise RuntimeError("the real node's test image needs mmdebstrap (Debian's package)")
    with tempfile.TemporaryDirectory(dir=images) as work:
        rootfs = os.path.join(work, "rootfs.tar")
        done = subprocess.run([*MMDEBSTRAP, rootfs, MIRROR], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"mmdebstrap failed ({done.returncode}):\n{done.stderr[-3000:]}")
        layer = os.path.join(work, "layer.tar")
        with tarfile.open(rootfs) as source, tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as out:
            for member in source:
                if member.ischr() or member.isblk() or member.isfifo():
                    continue
                out.addfile(member, source.extractfile(member) if member.isfile() else None)
        os.unlink(rootfs)
        write_oci_archive(archive, [layer], PYTHON_NAME, key,
                          {"Cmd": ["python3"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                                       "PYTHONUNBUFFERED=1"], "WorkingDir": "/"})
    return archive, name
