"""What a base image holds that the build needs, read from its OCI layout without running anything: its
config's environment, the Python on its PATH, the site directory of that Python, /etc/passwd and /etc/group.
`read_files` walks the layers' tars (whiteouts applied); `choose_python` decides from what it found (pure)."""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import tarfile

from cluster.client.image.plan import DEFAULT_PATH, Python
from cluster.client.usage import UsageError

_PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")
_VERSIONED = re.compile(r"python(3\.\d+)")
_SITE = re.compile(r"(.*/lib/python3(\.\d+)?/(site|dist)-packages)/?")
WANTED_FILES = ("etc/passwd", "etc/group")


@dataclasses.dataclass
class BaseFiles:
    """The base's filesystem as far as the build cares: paths (no leading /) -> symlink target or "" for a
    file or directory, for the pythons on PATH and the site directories; the contents of WANTED_FILES."""

    env: list[str]
    entries: dict[str, str]
    contents: dict[str, bytes]


def manifest_digest(layout: str, tag: str) -> str | None:
    """The digest of `tag`'s manifest in the OCI layout directory `layout`, None when it has no such tag."""
    try:
        with open(os.path.join(layout, "index.json")) as f:
            index = json.load(f)
    except FileNotFoundError:
        return None
    for entry in (index.get("manifests") or ()):
        if entry.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return entry["digest"]
    return None


def manifest(layout: str, tag: str) -> tuple[dict, dict]:
    """The manifest and config of `tag` (which must exist) in the OCI layout directory `layout`."""
    doc = _blob_json(layout, manifest_digest(layout, tag) or "")
    return doc, _blob_json(layout, doc["config"]["digest"])


def blob_path(layout: str, digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return os.path.join(layout, "blobs", algorithm, hexdigest)


def _blob_json(layout: str, digest: str) -> dict:
    with open(blob_path(layout, digest)) as f:
        return json.load(f)


def read_files(layout: str, tag: str) -> BaseFiles:
    doc, config = manifest(layout, tag)
    env = list(config.get("config", {}).get("Env") or [])
    path_dirs = [d.strip("/") for d in _env_path(env).split(":") if d.startswith("/")]
    found = BaseFiles(env, {}, {})
    for layer in doc.get("layers", ()):
        if "zstd" in layer.get("mediaType", ""):
            raise UsageError(f"the base image's layer {layer['digest']} is zstd-compressed, which this build cannot "
                             "read: convert the base with `skopeo copy --dest-compress-format gzip ...`")
        with tarfile.open(blob_path(layout, layer["digest"]), "r:*") as tar:
            for member in tar:
                _apply(found, tar, member, path_dirs)
    return found


def _env_path(env: list[str]) -> str:
    return next((item[5:] for item in env if item.startswith("PATH=")), DEFAULT_PATH)


def _apply(found: BaseFiles, tar: tarfile.TarFile, member: tarfile.TarInfo, path_dirs: list[str]) -> None:
    name = posixpath.normpath("/" + member.name).lstrip("/")  # ./usr/bin/python3, usr/bin/python3: one name
    directory, base = posixpath.split(name)
    if base == ".wh..wh..opq":
        for path in [p for p in found.entries if p.startswith(directory + "/")]:
            del found.entries[path]
        return
    if base.startswith(".wh."):
        gone = posixpath.join(directory, base[4:])
        for path in [p for p in found.entries if p == gone or p.startswith(gone + "/")]:
            del found.entries[path]
        found.contents.pop(gone, None)
        return
    if name in WANTED_FILES and member.isfile():
        data = tar.extractfile(member)
        found.contents[name] = data.read(1 << 20) if data else b""
    elif (directory in path_dirs and _PYTHON_NAME.fullmatch(base)) or (member.isdir() and _SITE.fullmatch(name)):
        found.entries[name] = member.linkname if member.issym() else ""
    elif member.islnk() and directory in path_dirs and _PYTHON_NAME.fullmatch(base):
        found.entries[name] = ""


def choose_python(files: BaseFiles, base: str) -> Python:
    """The first python3 (else python) on the base's PATH, its version from the name it resolves to (python3 ->
    python3.11), and the site directory of its prefix; one line naming the base when there is none."""
    path_env = _env_path(files.env)
    for directory in [d.strip("/") for d in path_env.split(":") if d.startswith("/")]:
        for name in ("python3", "python"):
            path = posixpath.join(directory, name)
            if path not in files.entries:
                continue
            version = _version(files, path)
            if version is None:
                raise UsageError(f"the base {base} has /{path}, but not which Python 3 it is (no python3.N it links "
                                 "to, none beside it): use a base whose python3 links to python3.N, or --base default")
            if tuple(int(p) for p in version.split(".")) < (3, 10):
                raise UsageError(f"the base {base}'s /{path} is Python {version}; tfdist needs 3.10 or newer: use "
                                 "a newer base, or --base default")
            prefix = posixpath.dirname(directory)
            site = _site_dir(files, prefix, version)
            if site is None:
                raise UsageError(f"the base {base}'s /{path} (Python {version}) has no site-packages or "
                                 f"dist-packages under /{prefix}/lib: tfdist cannot add its packages to it")
            python_on_path = any(posixpath.join(d.strip("/"), "python") in files.entries
                                 for d in path_env.split(":") if d.startswith("/"))
            return Python("/" + path, version, "/" + site, python_on_path)
    raise UsageError(f"the base {base} has no python3 on its PATH ({path_env}): tfdist runs in the image's own "
                     "Python; use a base with Python 3.10+ (a TensorFlow image has one), or --base default")


def _version(files: BaseFiles, path: str) -> str | None:
    seen = 0
    while seen < 8:  # python3 -> python3.11, or /usr/bin/python3 -> /usr/local/bin/python3.11 ...
        match = _VERSIONED.fullmatch(posixpath.basename(path))
        if match:
            return match.group(1)
        target = files.entries.get(path, "")
        if not target:
            break
        path = posixpath.normpath(target.lstrip("/") if target.startswith("/") else
                                  posixpath.join(posixpath.dirname(path), target))
        seen += 1
    siblings = sorted({m.group(1) for p in files.entries if posixpath.dirname(p) == posixpath.dirname(path)
                       for m in [_VERSIONED.fullmatch(posixpath.basename(p))] if m})
    return siblings[0] if len(siblings) == 1 else None


def _site_dir(files: BaseFiles, prefix: str, version: str) -> str | None:
    for candidate in (f"{prefix}/lib/python{version}/site-packages", f"{prefix}/lib/python3/dist-packages",
                      f"{prefix}/local/lib/python{version}/dist-packages"):
        if candidate.lstrip("/") in files.entries:
            return candidate.lstrip("/")
    return None
