"""Group commit for the SQLite store: many durable answers, few fsyncs.

A durable event commits at once with synchronous=NORMAL (its pages are in the write-ahead log, not yet on
disk) and then waits here, after the coordinator's lock is let go. The first waiter fsyncs the log for
every commit made so far; those who arrive meanwhile wait for it, and one of them syncs what came after.
So a thousand durable submissions a second cost a few hundred fsyncs, and no event waits on another's
fsync to take the lock. A commit is on disk before its caller is answered, as with synchronous=FULL.

A failed fsync is final: the kernel may have dropped the log's dirty pages, and a second fsync could
succeed without them, so from then on every sync fails (the coordinator must be restarted, and reads its
state back from what is on disk). The log's directory is synced once per log file, as SQLite does.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from tfdist.errors import ResourceExhaustedError, TfdistError, UnavailableError


def sync_error(state_dir: str, e: OSError, full: bool) -> TfdistError:
    """A sync that failed after its transaction committed: the change is written, not confirmed on disk."""
    retry = "then retry (a submission with the same submission id is the same job)"
    if full:
        return ResourceExhaustedError(f"the coordinator's disk is full (state dir {state_dir}): what was just stored "
                                      f"could not be synced to disk; free space and restart the coordinator, {retry}")
    return UnavailableError(f"the coordinator could not sync its state to disk (state dir {state_dir}: "
                            f"{e.strerror or e}); check the disk and restart the coordinator, {retry}")


class GroupCommit:
    def __init__(self, path: str, committed: Callable[[], int], on_error: Callable[[OSError], Exception]):
        self.path = path  # the database file; its log is path + "-wal"
        self._committed = committed  # commits made so far (the store's counter)
        self._on_error = on_error  # what an fsync's OSError becomes (a full disk: ResourceExhaustedError)
        self._synced = 0  # commits known to be on disk
        self._syncing = False  # a thread is in fsync for everyone waiting
        self._failed: OSError | None = None  # the fsync that failed: every later sync fails with it
        self._log_inode: int | None = None  # the log file whose directory entry was synced
        self._cond = threading.Condition()

    @property
    def synced(self) -> int:
        return self._synced

    def sync(self, through: int) -> None:
        """Returns once every commit up to mark `through` is on disk."""
        with self._cond:
            while self._synced < through:
                if self._failed is not None:
                    raise self._on_error(self._failed)
                if self._syncing:  # another caller's fsync is under way: it may cover this one too
                    self._cond.wait()
                    continue
                self._syncing = True
                covered = self._committed()  # every one of them is in the log already
                self._cond.release()
                try:
                    self._fsync_log()
                except OSError as e:
                    self._failed = e
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self._cond.notify_all()
                if self._failed is None:
                    self._synced = max(self._synced, covered)

    def _fsync_log(self) -> None:
        """fsync of the write-ahead log (what synchronous=FULL does at every commit), and of its directory
        the first time for each log file; of the database file itself when there is no log (a checkpoint
        synced what it moved there)."""
        for path in (self.path + "-wal", self.path):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            if inode != self._log_inode:
                folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
                self._log_inode = inode
            return
