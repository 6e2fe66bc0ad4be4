"""The SQLite store's reader: log followers and listings read the last commit on a connection of their own."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any, Iterable

from cluster.coordinator.store import experiment_rows, sqlite_rows as rows_lib
from cluster.coordinator.store.base import StateReader
from cluster.coordinator.store.sqlite_rows import one_job, read_logs
from cluster.shared.model import Checkpoint, Experiment, Job, JobState, LogLine


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA busy_timeout=10000")
    return db


class SqliteReader(StateReader):
    """Read-only access for log followers: one connection per thread, never the writer's lock, so a
    follower never waits behind (or holds up) the coordinator's transactions. A ":memory:" store has
    no second connection: there the store's own is used (and its lock)."""

    def __init__(self, store: Any):  # the SqliteStore: its path, its bad rows, its own connection for ":memory:"
        self._store = store
        self._local = threading.local()

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        if self._store.path == ":memory:":
            return self._store._all(sql, args)
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = _connect(self._store.path)
        return db.execute(sql, args).fetchall()

    def job(self, job_id: str) -> Job | None:
        return one_job(self._query, self._store.bad, "id", job_id)

    def job_by_seq(self, seq: int) -> Job | None:
        return one_job(self._query, self._store.bad, "seq", seq)

    def ended(self, job_id: str) -> bool:
        """Ended or paused, and no node holds the job any more: its agents shipped every line first."""
        return rows_lib.ended(self._query, job_id)

    def jobs_page(self, states: Iterable[JobState] | None = None, before_seq: int | None = None,
                  limit: int = 500) -> tuple[list[Job], int | None]:
        return rows_lib.jobs_page(self._query, self._store.bad, states, before_seq, limit)

    def count_jobs(self, states: Iterable[JobState] | None = None) -> int:
        return rows_lib.count_jobs(self._query, states)

    def logs(self, job_id: str, after_seq: int, rank: int, limit: int) -> list[LogLine]:
        return read_logs(self._query, job_id, after_seq, rank, limit)

    def experiment(self, ref: str | int) -> Experiment | None:
        return experiment_rows.one(self._query, "seq" if isinstance(ref, int) else "id", ref)

    def experiments(self) -> list[Experiment]:
        return experiment_rows.every(self._query)

    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        return rows_lib.latest_checkpoint(self._query, job_id)
