"""A volume laid out as a kubelet's atomic writer lays out a Secret's, ConfigMap's or projected volume's keys
(kubernetes pkg/volume/util/atomic_writer.go): the files in a timestamped folder `..2026_11_29_03_00_00.123`,
`..data -> ..2026_...`, and one link per key (`credential.json -> ..data/credential.json`); the files with the
volume's mode, owner root, group fsGroup when the pod sets one. Used by the test kubelet for the Secret volumes
it mounts and by the unit tests of what reads them."""

from __future__ import annotations

import datetime
import os
from typing import Mapping


def lay_out(root: str, files: Mapping[str, bytes], mode: int = 0o644, gid: int | None = None) -> str:
    """Writes `files` (key -> content) into `root` as the atomic writer does; returns the timestamped folder.
    Runs as root to give the files root's ownership (and `gid`'s group)."""
    os.makedirs(root, exist_ok=True)
    stamp = "..%s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y_%m_%d_%H_%M_%S.%f")
    folder = os.path.join(root, stamp)
    os.mkdir(folder, 0o755)
    for key, content in files.items():
        path = os.path.join(folder, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
        os.chmod(path, mode)
        if gid is not None:
            os.chown(path, 0, gid)
    os.symlink(stamp, os.path.join(root, "..data_tmp"))
    os.rename(os.path.join(root, "..data_tmp"), os.path.join(root, "..data"))
    for key in files:
        top = key.split("/")[0]
        if not os.path.lexists(os.path.join(root, top)):
            os.symlink(os.path.join("..data", top), os.path.join(root, top))
    if gid is not None:
        os.chown(root, 0, gid)
        os.chmod(root, 0o3777)  # what a real kubelet's Secret tmpfs shows (FACTS.md)
    return folder
