"""Layer tars that are the same bytes for the same files: entries sorted by name, every mtime EPOCH, numeric
owners, modes normalised (what a umask of the builder's would change: group/other read, no group/other write).

Hand-written with the standard library's tarfile rather than GNU tar: GNU tar's --owner gives every entry one
owner, and the few that user 1000 must own (/workspace, its HOME) would need a chown on disk, which only root
can do; and its --sort/--mtime/--pax-option set is longer than this. umoci then adds the tar as a layer
(`umoci raw add-layer`: it gzips and names the blob) and mmdebstrap writes the Debian layer's tar itself."""

from __future__ import annotations

import dataclasses
import io
import os
import posixpath
import stat
import tarfile

from cluster.client.image.plan import EPOCH


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry of a layer: `path` absolute in the image; `kind` "dir", "file" or "symlink"; `data` a file's
    bytes, `source` a file on this machine to copy instead, `target` a symlink's."""

    path: str
    kind: str
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    source: str = ""
    target: str = ""


def tree_entries(root: str, dest: str, bytecode: bool) -> list[Entry]:
    """Every directory, file and symlink under `root`, as entries under `dest` in the image, owned by root;
    anything else (a socket, a device) is left out. `bytecode`: keep __pycache__ (a staging tree compiled for
    the image), else leave it out (this machine's own caches of a source tree)."""
    entries = []
    for directory, dirs, files in os.walk(root):
        links = [d for d in dirs if os.path.islink(os.path.join(directory, d))]
        dirs[:] = sorted(d for d in dirs if d not in links and (bytecode or d != "__pycache__"))
        relative = os.path.relpath(directory, root)
        here = posixpath.normpath(posixpath.join(dest, "" if relative == "." else relative.replace(os.sep, "/")))
        entries.append(Entry(here, "dir", 0o755))
        for name in sorted(files + links):
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                entries.append(Entry(posixpath.join(here, name), "symlink", 0o777, target=os.readlink(path)))
            elif stat.S_ISREG(st.st_mode) and (bytecode or not name.endswith((".pyc", ".pyo"))):
                entries.append(Entry(posixpath.join(here, name), "file", 0o755 if st.st_mode & 0o111 else 0o644,
                                     source=path))
    return entries


def with_parents(entries: list[Entry]) -> list[Entry]:
    """The entries, sorted by path, each path once (a later entry wins), with every missing parent directory
    as root's 0755 (a runtime would make them too, but with whatever mode it likes)."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
    for path in list(by_path):
        parent = posixpath.dirname(path)
        while parent not in ("/", "") and parent not in by_path:
            by_path[parent] = Entry(parent, "dir", 0o755)
            parent = posixpath.dirname(parent)
    return [by_path[p] for p in sorted(by_path)]


def write(path: str, entries: list[Entry]) -> None:
    """The layer tar at `path` (PAX format, as umoci and containerd write)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in with_parents(entries):
            info = tarfile.TarInfo(entry.path.lstrip("/"))
            info.mtime, info.uid, info.gid, info.mode = EPOCH, entry.uid, entry.gid, entry.mode
            info.uname = info.gname = ""
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
                tar.addfile(info)
            elif entry.source:
                info.size = os.path.getsize(entry.source)
                with open(entry.source, "rb") as f:
                    tar.addfile(info, f)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
