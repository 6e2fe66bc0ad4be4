"""The coordinator's state directory and its SQLite file: one coordinator per directory, private to its
user, and a file that is tfdist's own state or refused with one line saying what to do.

- The lock: `coordinator.lock` in the state directory, held with flock(2) for the store's life, says the
  holder's pid and host; a second coordinator on the directory is refused naming them. The kernel lets go
  of the lock when the holder exits, kill -9 included: a stale lock file never blocks a restart.
- Private: the directory is `private_dir`'s (0700, the user's own, not a symlink); the state file is
  created 0600 and its -wal and -shm, which SQLite creates with the database's mode, follow it. A file of
  an older release (0644) is tightened.
- Brand-new versus lost: tfdist makes a new state file whole (schema and mark in a temporary file, then a
  rename), so an empty file, a file that is not SQLite, a file shorter than its own header says, and an
  SQLite database of another program are never a fresh start: each is refused, naming the file and the fix.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sqlite3
import stat
import time
from typing import Callable

from cluster.coordinator.store.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION, TABLES, tables
from tfdist.errors import UnsafePathError, UserError
from tfdist.private_files import FILE_MODE, open_private, private_dir

LOCK_NAME = "coordinator.lock"
PROBE_WAIT = 1.0  # seconds a lock held for a moment by one asking who holds it may take to be let go
SQLITE_MAGIC = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-shm")
SQLITE_FULL = 13  # "database or disk is full" (the primary code; extended codes add high bits)
SQLITE_BUSY, SQLITE_LOCKED = 5, 6
_FIX = "restore it from a backup, or move it away to start with no jobs (the jobs it held are then gone)"


class StateInUseError(UserError):
    """Another coordinator holds the state directory."""


class UnreadableStateError(UserError):
    """The state file is not a tfdist state this coordinator can read: nothing was started."""


class StateDirLock:
    """The held lock of one state directory (see the module's docstring); `release()` lets it go."""

    def __init__(self, state_dir: str):
        self.state_dir = private_dir(state_dir)
        self.path = os.path.join(state_dir, LOCK_NAME)
        fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
        try:
            _check_own_file(self.path, os.fstat(fd))
            try:
                _lock_past_probes(fd)
            except BlockingIOError:
                raise StateInUseError(f"state dir {state_dir} is in use by {_holder(fd)}; stop it first "
                                      "(or give this coordinator another --state-dir)") from None
            except OSError as e:  # ENOLCK, EOPNOTSUPP: a network filesystem without a lock service
                raise UnreadableStateError(f"cannot lock state dir {state_dir} ({e.strerror}): its filesystem does "
                                           "not support locks, which keep it to one coordinator (SQLite needs them "
                                           "too); choose a --state-dir on a local disk") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n", 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def _lock_past_probes(fd: int) -> None:
    """The lock, exclusive. Who asks whether a run's state is held (local_runs.LocalRun.holder) takes it shared
    for a moment: a lock refused at that moment is asked again, within PROBE_WAIT; a holder that keeps it is
    answered with BlockingIOError."""
    deadline = time.monotonic() + PROBE_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _holder(fd: int) -> str:
    try:
        said = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"the coordinator pid {int(said['pid'])} on host {said['host']}"
    except (ValueError, KeyError, TypeError, OSError):  # the holder is between taking the lock and writing it
        return "another coordinator"


def _check_own_file(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableStateError(f"{path} is not a regular file; tfdist keeps its state there: move it away")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); tfdist will not "
                              "use it: remove it (as its owner or root), or choose another --state-dir")


def existing_state(path: str) -> bool:
    """False when there is no state file yet (a new one is made); True for a file that may be tfdist's state
    (SQLite, as long as its header says, the user's own: tightened to 0600 with its -wal and -shm).
    Anything else raises UnreadableStateError or UnsafePathError naming the file and the fix."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"state file {path} is a symlink; tfdist does not follow symlinks it did not make: "
                              "replace it with the file itself")
    if stat.S_ISDIR(st.st_mode):
        raise UnreadableStateError(f"state file {path} is a directory, not tfdist's state; move it away, or "
                                   "choose another --state-dir")
    _check_own_file(path, st)
    if st.st_size == 0:
        raise UnreadableStateError(f"state file {path} is empty (0 bytes): tfdist writes a new state file whole, so "
                                   f"this one lost its content; {_FIX}")
    fd = open_private(path)
    try:
        header = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if not header.startswith(SQLITE_MAGIC):
        raise UnreadableStateError(f"state file {path} is not an SQLite database (it starts with {header[:16]!r}), "
                                   f"so not tfdist's state; {_FIX}")
    expected = _size_in_header(header)
    wal = f"{path}-wal"
    wal_pages = os.path.exists(wal) and os.lstat(wal).st_size > 0  # a crash left pages the file may lack yet
    if len(header) < 100 or (expected and st.st_size < expected and not wal_pages):
        raise UnreadableStateError(f"state file {path} is truncated: {st.st_size} bytes where its header says "
                                   f"{expected}; {_FIX}")
    for name in (path, *(path + side for side in SIDE_FILES)):
        _tighten(name)
    return True


def _size_in_header(header: bytes) -> int:
    """The database size an SQLite header states (0 where it does not state one that is valid)."""
    if len(header) < 100:
        return 0
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]  # the page count is valid only while these two agree
    return page_size * pages if valid else 0


def _tighten(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    _check_own_file(path, st)
    if stat.S_IMODE(st.st_mode) != FILE_MODE:
        os.chmod(path, FILE_MODE)


def create_state(path: str, make: Callable[[sqlite3.Connection], None]) -> None:
    """A new state file made whole: created 0600 under a temporary name, `make` writes its schema, then the
    rename gives it its name. A crash before the rename leaves no state file (the next start makes it again)."""
    tmp = f"{path}.new"
    for leftover in (tmp, f"{tmp}-journal"):
        try:
            _check_own_file(leftover, os.lstat(leftover))
            os.unlink(leftover)
        except FileNotFoundError:
            pass
    fd = open_private(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            # Under its temporary name nothing needs each statement on disk (a crash leaves no state file):
            # one fsync of the whole file before the rename, not one per table (~80 of them: 26 ms here, and
            # 80-400 ms on a laptop's disk, in every local launch).
            db.execute("PRAGMA synchronous=OFF")
            db.execute("PRAGMA journal_mode=MEMORY")
            make(db)
        finally:
            db.close()
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the new name survives a power loss
    finally:
        os.close(dir_fd)


def describe_open_error(path: str, e: sqlite3.DatabaseError) -> UnreadableStateError:
    """SQLite's own refusal of a file that passed the header checks (corrupt pages, a WAL that does not fit;
    or another program holding it locked)."""
    if (getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED):
        return UnreadableStateError(f"state file {path} is locked by another program ({e}); stop it, then start "
                                    "the coordinator again")
    return UnreadableStateError(f"state file {path} cannot be read ({e}); {_FIX}")


def disk_full(e: BaseException) -> bool:
    if isinstance(e, sqlite3.Error):
        return (getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF == SQLITE_FULL
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def check_ours(db: sqlite3.Connection, path: str) -> None:
    """Refuses an SQLite database another program made, or one of another tfdist schema version (nothing is
    migrated); read before anything is written to it."""
    app = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    found = tables(db)
    if app == APPLICATION_ID and version == SCHEMA_VERSION:
        return
    if app == APPLICATION_ID or (app == 0 and found and found <= TABLES):  # a development build's, before the mark
        raise UnreadableStateError(f"state file {path} was written by another version of tfdist (schema "
                                   f"{version}, this one reads {SCHEMA_VERSION}); move it away to start with no "
                                   "jobs, or run the tfdist that wrote it")
    what = f"application id {app:#x}" if app else f"tables {', '.join(sorted(found)) or 'none'}"
    raise UnreadableStateError(f"state file {path} is an SQLite database of another program ({what}), not tfdist's "
                               "state; move it away, or choose another --state-dir")
