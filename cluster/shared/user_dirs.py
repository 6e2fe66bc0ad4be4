"""Where tfdist keeps a user's own things on a machine: in directories only that user can create, never at a
fixed name in a directory every user shares.

A fixed name in /tmp (`/tmp/tfdist-ports-UID` once) hands availability to whoever creates it first: any local
user's `mkdir -m 777` stopped every launch and agent of the user it was named for (issue 30, Measured 2).
So each directory here sits under one the user alone can write to:

    runtime_dir()        $TFDIST_RUNTIME_DIR, else $XDG_RUNTIME_DIR/tfdist (the login's tmpfs, this machine's
                         alone), else ~/.tfdist/runtime: what local coordinators publish (cluster/shared/auth.py)
    machine_dir(what)    ~/.tfdist/machines/HOST/WHAT, whatever $TFDIST_RUNTIME_DIR says (two processes with
                         different runtime dirs must still lease ports apart): this machine's port leases
                         (cluster/agent/ports.py) and agents' records of their workers
                         (cluster/agent/leftovers.py). Not under $XDG_RUNTIME_DIR: an agent started from cron,
                         nohup or a service has none, and logind removes it at logout, and every
                         process of the user on the machine must share these. Per host, since a home directory
                         may be one and the same on every node (NFS): a lease or a process group means
                         something on one machine only.

A user with no home to write to (a system account: HOME=/nonexistent; a home mounted read-only, as in Bazel's
sandbox, where no lock file could be made and every port read busy) gets a fresh private directory of its own
instead (mkdtemp, once per process, said once in the log): its leases and records are then its process's
alone, but nothing another user made can stop it.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import tempfile
import threading

from tfdist.errors import UnsafePathError
from tfdist.private_files import private_dir

RUNTIME_ENV = "TFDIST_RUNTIME_DIR"
log = logging.getLogger("tfdist")
_fallback_lock = threading.Lock()
_fallback: dict[str, str] = {}  # machine_dir(what) -> the fresh private directory used instead, this process


def runtime_dir() -> str:
    """This user's private directory for what local coordinators publish: $TFDIST_RUNTIME_DIR, else
    $XDG_RUNTIME_DIR/tfdist, else ~/.tfdist/runtime."""
    if os.environ.get(RUNTIME_ENV):
        return os.environ[RUNTIME_ENV]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "tfdist")
    return os.path.join(os.path.expanduser("~"), ".tfdist", "runtime")


def _host() -> str:
    return socket.gethostname().replace(os.sep, "_") or "localhost"


def _machines_root() -> str:
    """The user's own directory that machine directories live under (made private before anything in it)."""
    return os.path.join(os.path.expanduser("~"), ".tfdist")


def machine_dir_path(what: str) -> str:
    """Where machine_dir(what) is, without creating it (tfdist doctor shows it)."""
    return os.path.join(_machines_root(), "machines", _host(), what)


def machine_dir(what: str) -> str:
    """This user's private directory for `what` on this machine: created 0700 with its parents, or checked
    to be the user's own (UnsafePathError otherwise: only the user or root could have made it so). Where it
    cannot be created at all (no writable home), a fresh private directory for this process."""
    path = machine_dir_path(what)
    with _fallback_lock:
        if path in _fallback:
            return private_dir(_fallback[path])  # checked again: something may have removed it since
        try:
            private_dir(_machines_root())  # the user's own, so that no one else can make what lies under it
            made = private_dir(path)
            if not os.access(made, os.W_OK | os.X_OK):  # a read-only home (a sandbox): no lock could be made
                raise OSError(errno.EROFS, "not writable")
            return made
        except UnsafePathError:
            raise
        except OSError as e:
            try:
                fresh = _fallback[path] = tempfile.mkdtemp(prefix=f"tfdist-{what}-")  # 0700, a name nobody chose
            except OSError as again:
                raise UnsafePathError(f"cannot create {path} ({e.strerror or e}) nor a private directory in "
                                      f"{tempfile.gettempdir()} ({again.strerror or again}): set {RUNTIME_ENV} to a "
                                      "directory of your own") from None
            log.warning("cannot create %s (%s); using %s for this process. Set %s to a directory of your own so "
                        "tfdist's processes on this machine share it", path, e.strerror or e, fresh, RUNTIME_ENV)
            return fresh
