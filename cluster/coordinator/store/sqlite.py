"""The coordinator's state in SQLite: jobs, allocations, exits, events, logs, metrics, agents.

Every event the coordinator handles is applied in ONE transaction
(`with store.transaction():` around it; the write methods join it), so a
`kill -9` at any moment leaves either all of an event or none of it.
WAL journal: every commit survives a process crash; submissions are also
synced to disk before the RPC returns (synchronous=FULL), so they survive a
power loss too. Readers that must not wait for the writer (log followers)
use `reader()`, a connection of their own that sees the last commit.
Liveness (heartbeat times) is kept in memory: it is rebuilt when agents re-attach.
The contract is `StateStore`'s (base.py); the job spec is kept as `JobSpec.to_json()`.
The state directory is locked for the store's life and the file is checked before use (state_file.py);
rows that cannot be read are skipped and reported (sqlite_rows.py); a write the disk has no room for
raises ResourceExhaustedError and leaves nothing of its transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from typing import Any, Iterable, Iterator

from cluster.coordinator.store import experiment_rows, sqlite_rows as rows_lib
from cluster.coordinator.store.base import StateStore, already_shipped
from cluster.coordinator.store.group_commit import GroupCommit, sync_error
from cluster.coordinator.store.retention import Pruner, Retention
from cluster.coordinator.store.sqlite_rows import BadRows, alloc_to_json, one_job, read_logs, readable_jobs
from cluster.coordinator.store.sqlite_prune import prune_finished, purge_output
from cluster.coordinator.store.sqlite_reader import SqliteReader, _connect
from cluster.coordinator.store.sqlite_schema import create_schema
from cluster.coordinator.store.state_file import (StateDirLock, check_ours, create_state, describe_open_error,
                                                  disk_full, existing_state)
from cluster.shared.model import (AgentRecord, Address, Allocation, Checkpoint, Gpu, Job, JobSpec,
                                  JobState, LogLine, MetricRow, WorkerExit)
from tfdist.errors import ResourceExhaustedError

# The index on submission_id is partial (ids given only): its condition must be in the query for SQLite to use
# it, or every submission scans the whole jobs table.
SUBMISSION_QUERY = "SELECT * FROM jobs WHERE submission_id=? AND submission_id IS NOT NULL AND submission_id != ''"


class SqliteStore(experiment_rows.SqliteExperiments, StateStore):
    """One SQLite database. `path=":memory:"` gives the same store without a file (unit tests). With
    `retention`, a thread prunes finished jobs by its rule (retention.py) until `close()`."""

    def __init__(self, path: str, retention: Retention | None = None):
        self.path = path
        self.state_dir = os.path.dirname(os.path.abspath(path))
        self.bad = BadRows(path)
        self._lock = threading.RLock()
        self._depth = 0  # nesting of transaction() in the thread holding _lock
        self.commits = 0  # transactions committed so far (sync's marks)
        self._group = GroupCommit(path, lambda: self.commits, lambda e: sync_error(self.state_dir, e, disk_full(e))) \
            if path != ":memory:" else None
        self._dir_lock = StateDirLock(self.state_dir) if path != ":memory:" else None
        try:
            self._db = self._open()
        except BaseException:
            if self._dir_lock:
                self._dir_lock.release()
            raise
        self._pruner = Pruner(self, retention).start() if retention else None

    def _open(self) -> sqlite3.Connection:
        if self.path == ":memory:":
            db = _connect(self.path)
            create_schema(db)
            return db
        db = None
        try:
            if not existing_state(self.path):
                create_state(self.path, create_schema)
            db = _connect(self.path)
            check_ours(db, self.path)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            create_schema(db)  # a write: another program holding the file locked is found now, not at the first job
            return db
        except (sqlite3.Error, OSError) as e:
            if db is not None:
                db.close()
            if disk_full(e):
                raise self._full() from None
            if isinstance(e, sqlite3.DatabaseError):
                raise describe_open_error(self.path, e) from None
            raise
        except BaseException:
            if db is not None:
                db.close()
            raise


    def _full(self) -> ResourceExhaustedError:
        return ResourceExhaustedError(f"the coordinator's disk is full (state dir {self.state_dir}): free space; "
                                      "nothing was changed")

    def close(self) -> None:
        if self._pruner:
            self._pruner.stop()
        with self._lock:
            self._db.close()
        if self._dir_lock:
            self._dir_lock.release()

    def reader(self) -> SqliteReader:
        return SqliteReader(self)

    # ---------------------------------------------------------------- transactions
    @contextlib.contextmanager
    def transaction(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction; nested uses join the outermost, which commits (or rolls back) everything.
        `durable` on the outermost: the commit is synced to disk before returning (the coordinator
        opens submissions durable; a nested request cannot upgrade a transaction already begun).
        A write the disk has no room for (at any depth, or the commit) raises ResourceExhaustedError."""
        with self._lock:
            outer = self._depth == 0
            if outer:
                if durable:
                    self._db.execute("PRAGMA synchronous=FULL")
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._db
                if outer:
                    self._db.execute("COMMIT")
                    self.commits += 1
            except BaseException as e:
                if outer and self._db.in_transaction:  # SQLite may have rolled back by itself (a full disk)
                    self._db.execute("ROLLBACK")
                if disk_full(e):
                    raise self._full() from None
                raise
            finally:
                self._depth -= 1
                if outer and durable:
                    self._db.execute("PRAGMA synchronous=NORMAL")

    def sync(self, through: int | None = None) -> None:
        """As StateStore's: group commit (group_commit.py)."""
        if self._group is not None:
            self._group.sync(self.commits if through is None else through)

    def _write(self, statements: Iterable[tuple[str, tuple]], durable: bool = False) -> None:
        with self.transaction(durable) as db:
            for sql, args in statements:
                db.execute(sql, args)

    def _all(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ---------------------------------------------------------------- agents
    def upsert_agent(self, agent: AgentRecord, now: float) -> None:
        self._write([("INSERT INTO agents(name, slots, gpu, addresses, registered_at, gpus) VALUES (?,?,?,?,?,?) "
                      "ON CONFLICT(name) DO UPDATE SET slots=excluded.slots, gpu=excluded.gpu, "
                      "addresses=excluded.addresses, gpus=excluded.gpus",
                      (agent.name, agent.slots, int(agent.gpu),
                       json.dumps([{"ip": a.ip, "prefix_len": a.prefix_len, "interface": a.interface}
                                   for a in agent.addresses]), now,
                       json.dumps([{"index": g.index, "uuid": g.uuid, "name": g.name} for g in agent.gpus])))])

    def agents(self) -> list[AgentRecord]:
        found = []
        for r in self._all("SELECT * FROM agents ORDER BY name"):
            try:
                found.append(AgentRecord(name=r["name"], slots=r["slots"],
                                         addresses=tuple(Address(**a) for a in json.loads(r["addresses"])),
                                         gpus=tuple(Gpu(**g) for g in json.loads(r["gpus"] or "[]"))))
            except rows_lib.ROW_ERRORS as e:  # the agent registers again with what it is
                self.bad.report("agents", f"agent {r['name']}", e)
        return found

    # ---------------------------------------------------------------- jobs
    def next_job_seq(self) -> int:
        rows = self._all("SELECT MAX(COALESCE((SELECT MAX(seq) FROM jobs), 0), "
                         "COALESCE((SELECT value FROM meta WHERE key='seq_floor'), 0)) AS m")
        return rows[0]["m"] + 1

    def insert_job(self, job_id: str, seq: int, spec: JobSpec, now: float, event: str, owner: str = "") -> None:
        self._write([
            ("INSERT INTO jobs(id, seq, spec, state, priority, slots, submitted_at, submission_id, owner) "
             "VALUES (?,?,?,?,?,?,?,?,?)",
             (job_id, seq, spec.to_json(), JobState.QUEUED.value, spec.priority, spec.slots, now,
              spec.submission_id or None, owner)),
            ("INSERT INTO events(job_id, time, message) VALUES (?,?,?)", (job_id, now, event)),
        ], durable=True)

    def update_job(self, job_id: str, now: float, event: str | None = None, *,
                   placement: Iterable[Allocation] | None = None, **fields: Any) -> None:
        if placement is not None:
            fields["placement"] = json.dumps([alloc_to_json(a) for a in placement])
        if "state" in fields and isinstance(fields["state"], JobState):
            fields["state"] = fields["state"].value
        sets = ", ".join(f"{k}=?" for k in fields)
        statements = [(f"UPDATE jobs SET {sets} WHERE id=?", (*fields.values(), job_id))] if fields else []
        if event:
            statements.append(("INSERT INTO events(job_id, time, message) VALUES (?,?,?)", (job_id, now, event)))
        self._write(statements)

    def job(self, job_id: str) -> Job | None:
        return one_job(self._all, self.bad, "id", job_id)

    def job_by_seq(self, seq: int) -> Job | None:
        return one_job(self._all, self.bad, "seq", seq)

    def job_by_submission(self, submission_id: str) -> Job | None:
        found = submission_id and readable_jobs(self._all(SUBMISSION_QUERY, (submission_id,)), self.bad)
        return found[0] if found else None

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        if states is None:
            return readable_jobs(self._all("SELECT * FROM jobs ORDER BY seq"), self.bad)
        values = [s.value for s in states]
        marks = ",".join("?" * len(values))
        return readable_jobs(self._all(f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY seq", tuple(values)),
                             self.bad)

    def jobs_page(self, states: Iterable[JobState] | None = None, before_seq: int | None = None,
                  limit: int = 500) -> tuple[list[Job], int | None]:
        return rows_lib.jobs_page(self._all, self.bad, states, before_seq, limit)

    def count_jobs(self, states: Iterable[JobState] | None = None) -> int:
        return rows_lib.count_jobs(self._all, states)

    def prune_finished(self, now: float, keep_jobs: int, keep_seconds: float, max_jobs: int) -> list[str]:
        with self.transaction() as db:
            return prune_finished(db, now, keep_jobs, keep_seconds, max_jobs)

    def purge_output(self, max_rows: int) -> int:
        with self.transaction() as db:
            return purge_output(db, max_rows)

    def events(self, job_id: str) -> list[tuple[float, str]]:
        return [(r["time"], r["message"])
                for r in self._all("SELECT time, message FROM events WHERE job_id=? ORDER BY id", (job_id,))]

    # ---------------------------------------------------------------- allocations
    def set_allocations(self, job_id: str, allocations: Iterable[Allocation]) -> None:
        statements = [("DELETE FROM allocations WHERE job_id=?", (job_id,))]
        statements += [("INSERT INTO allocations(job_id, agent, node_rank, slots, address, ports, state, gpus) "
                        "VALUES (?,?,?,?,?,?,?,?)", (job_id, a.agent, a.node_rank, a.slots, a.address,
                                                     json.dumps(list(a.ports)), a.state.value,
                                                     json.dumps(list(a.gpus)))) for a in allocations]
        self._write(statements)

    def allocations(self, job_id: str | None = None) -> list[Allocation]:
        if job_id is None:
            rows = self._all("SELECT * FROM allocations ORDER BY job_id, node_rank")
        else:
            rows = self._all("SELECT * FROM allocations WHERE job_id=? ORDER BY node_rank", (job_id,))
        return rows_lib.readable_allocations(rows, self.bad)

    # ---------------------------------------------------------------- exits
    def record_exit(self, job_id: str, e: WorkerExit) -> bool:
        """Returns False if this rank's exit of this attempt was already recorded (a retried report)."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM exits WHERE job_id=? AND attempt=? AND rank=?",
                          (job_id, e.attempt, e.rank)).fetchall():
                return False
            db.execute("INSERT INTO exits(job_id, rank, agent, exit_code, last_lines, time, reason, tolerated, attempt) "
                       "VALUES (?,?,?,?,?,?,?,?,?)", (job_id, e.rank, e.agent, e.exit_code,
                                                      json.dumps(list(e.last_lines)), e.time, e.reason,
                                                      int(e.tolerated), e.attempt))
            return True

    def exits(self, job_id: str, attempt: int | None = None) -> list[WorkerExit]:
        """The job's exits: of one attempt, or (None) of every attempt."""
        where, args = ("job_id=?", (job_id,)) if attempt is None else ("job_id=? AND attempt=?", (job_id, attempt))
        return [WorkerExit(rank=r["rank"], agent=r["agent"], exit_code=r["exit_code"],
                           last_lines=rows_lib.last_lines(r, self.bad), time=r["time"], reason=r["reason"] or "",
                           tolerated=bool(r["tolerated"]), attempt=r["attempt"])
                for r in self._all(f"SELECT * FROM exits WHERE {where} ORDER BY attempt, time, rank", args)]

    # ---------------------------------------------------------------- checkpoints
    def record_checkpoint(self, job_id: str, c: Checkpoint) -> bool:
        """Returns False if this step's checkpoint was already recorded (a retried report)."""
        with self.transaction() as db:
            cursor = db.execute("INSERT OR IGNORE INTO checkpoints(job_id, step, path, attempt, time) VALUES "
                                "(?,?,?,?,?)", (job_id, c.step, c.path, c.attempt, c.time))
            return cursor.rowcount == 1

    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        return rows_lib.latest_checkpoint(self._all, job_id)

    # ---------------------------------------------------------------- shipped output
    def _fresh(self, db: sqlite3.Connection, job_id: str, source: str, kind: str, first_seq: int,
               count: int) -> int:
        """How many leading items of a batch numbered first_seq.. were stored before (a retried batch);
        records the batch as stored. Unnumbered batches (first_seq 0) are taken whole."""
        if not source or first_seq <= 0:
            return 0
        row = db.execute("SELECT last_seq FROM shipped WHERE job_id=? AND source=? AND kind=?",
                         (job_id, source, kind)).fetchone()
        last = row["last_seq"] if row else 0
        db.execute("INSERT INTO shipped(job_id, source, kind, last_seq) VALUES (?,?,?,?) ON CONFLICT(job_id, source, "
                   "kind) DO UPDATE SET last_seq=MAX(last_seq, excluded.last_seq)",
                   (job_id, source, kind, first_seq + count - 1))
        return already_shipped(last, first_seq, count)

    def append_metrics(self, job_id: str, rows: list[MetricRow], source: str = "", first_seq: int = 0) -> int:
        """Returns how many rows were new."""
        with self.transaction() as db:
            skip = self._fresh(db, job_id, source, "metrics", first_seq, len(rows))
            db.executemany("INSERT INTO metrics(job_id, rank, step, name, value, time) VALUES (?,?,?,?,?,?)",
                           [(job_id, m.rank, m.step, m.name, m.value, m.time) for m in rows[skip:]])
            return len(rows) - skip

    def metrics(self, job_id: str, name: str | None = None) -> list[MetricRow]:
        if name is None:
            rows = self._all("SELECT rank, step, name, value, time FROM metrics WHERE job_id=? ORDER BY step, rowid",
                             (job_id,))
        else:
            rows = self._all("SELECT rank, step, name, value, time FROM metrics WHERE job_id=? AND name=? "
                             "ORDER BY step, rowid", (job_id, name))
        return [MetricRow(**r) for r in rows]

    def latest_metrics(self, job_id: str) -> list[MetricRow]:
        """The newest row of every metric name (highest step, then the last reported)."""
        rows = self._all("SELECT rank, step, name, value, time FROM metrics m WHERE job_id=? AND rowid = ("
                         "SELECT rowid FROM metrics WHERE job_id=m.job_id AND name=m.name "
                         "ORDER BY step DESC, rowid DESC LIMIT 1) ORDER BY name", (job_id,))
        return [MetricRow(**r) for r in rows]

    # ---------------------------------------------------------------- logs
    def append_logs(self, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> int:
        """Numbers the lines per job in arrival order (their own seq is ignored). Returns how many were new."""
        with self.transaction() as db:
            skip = self._fresh(db, job_id, source, "logs", first_seq, len(lines))
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) AS m FROM logs WHERE job_id=?", (job_id,)).fetchone()["m"]
            rows = [(job_id, seq + i + 1, l.rank, l.stream, l.text, l.time) for i, l in enumerate(lines[skip:])]
            db.executemany("INSERT INTO logs(job_id, seq, rank, stream, text, time) VALUES (?,?,?,?,?,?)", rows)
            return len(rows)

    def logs(self, job_id: str, after_seq: int = 0, rank: int = -1, limit: int = 1000) -> list[LogLine]:
        return read_logs(self._all, job_id, after_seq, rank, limit)

    def log_count(self, job_id: str) -> int:
        return self._all("SELECT COALESCE(MAX(seq), 0) AS m FROM logs WHERE job_id=?", (job_id,))[0]["m"]
