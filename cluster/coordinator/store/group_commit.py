"""Group commit for the SQLite store: many durable answers, few fsyncs.

A durable event commits at once with synchronous=NORMAL (its pages are in the write-ahead log, not yet on
disk) and then waits here, after the coordinator's lock is let go. The first waiter fsyncs the log for
every commit made so far; those who arrive meanwhile wait for it, and one of them syncs what came after.
So a thousand durable submissions a second cost a few hundred fsyncs, and no event waits on another's
fsync to take the lock. A commit is on disk before its caller is answered, as with synchronous=FULL.
"""

from __future__ import annotations

import os
import threading
from typing import Callable


class GroupCommit:
    def __init__(self, path: str, committed: Callable[[], int], on_error: Callable[[OSError], Exception]):
        self.path = path  # the database file; its log is path + "-wal"
        self._committed = committed  # commits made so far (the store's counter)
        self._on_error = on_error  # what an fsync's OSError becomes (a full disk: ResourceExhaustedError)
        self._synced = 0  # commits known to be on disk
        self._syncing = False  # a thread is in fsync for everyone waiting
        self._cond = threading.Condition()

    @property
    def synced(self) -> int:
        return self._synced

    def sync(self, through: int) -> None:
        """Returns once every commit up to mark `through` is on disk."""
        with self._cond:
            while self._synced < through:
                if self._syncing:  # another caller's fsync is under way: it may cover this one too
                    self._cond.wait()
                    continue
                self._syncing = True
                covered = self._committed()  # every one of them is in the log already
                self._cond.release()
                try:
                    self._fsync_log()
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self._cond.notify_all()
                self._synced = max(self._synced, covered)

    def _fsync_log(self) -> None:
        """fsync of the write-ahead log (what synchronous=FULL does at every commit); of the database file
        itself when there is no log (a checkpoint synced what it moved there)."""
        for path in (self.path + "-wal", self.path):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            except OSError as e:
                raise self._on_error(e) from None
            finally:
                os.close(fd)
            return
