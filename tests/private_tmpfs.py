"""A small real disk for tests that fill one: a tmpfs mounted in a mount namespace of its own (unshare; the
suite runs as root, as CI does), so nothing outside the test sees the mount and it goes with the namespace.
A keeper process holds the namespace until closed; processes run inside it through nsenter, and the test
reaches its files through /proc/KEEPER/root."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

from tests.conftest import cli_env

# Mounts a tmpfs at argv[1] of argv[2] bytes in this (new) mount namespace, says so, then holds the namespace
# until stdin closes.
KEEPER = ("import subprocess, sys; subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={sys.argv[2]},mode=0700', "
          "'tmpfs', sys.argv[1]], check=True); print('mounted', flush=True); sys.stdin.read()")


class PrivateTmpfs:
    def __init__(self, mount: str, size: str, marker: str):
        self.mount = mount
        os.makedirs(mount, exist_ok=True)
        self.keeper = subprocess.Popen(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", KEEPER,
                                        mount, size], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env=cli_env(marker))
        assert self.keeper.stdout.readline() == "mounted\n", "the tmpfs was not mounted (the test needs root)"

    def inside(self, argv: list[str]) -> list[str]:
        """argv run inside the namespace, where the tmpfs is mounted."""
        return ["nsenter", "--target", str(self.keeper.pid), "--mount", "--", *argv]

    def seen(self, path: str) -> str:
        """Where this process sees a path of the namespace."""
        return f"/proc/{self.keeper.pid}/root{path}"

    def fill(self, name: str = "filler") -> str:
        """Writes a file until the tmpfs has no room left; returns its path (as seen from here)."""
        filler = self.seen(os.path.join(self.mount, name))
        with open(filler, "wb", buffering=0) as f:
            while True:
                try:
                    f.write(b"\0" * 65536)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    return filler

    def close(self) -> None:
        self.keeper.stdin.close()
        self.keeper.wait(timeout=30)
