"""Durable coordinator state in SQLite: jobs, allocations, exits, events, logs, agents.

WAL journal. Every commit survives a `kill -9` of the coordinator (a process
crash loses nothing committed in WAL mode); submissions are also synced to
disk before the RPC returns (synchronous=FULL), so they survive a power loss
too. Other transitions use synchronous=NORMAL: no fsync on the heartbeat path.
Liveness (heartbeat times) is kept in memory: it is rebuilt when agents re-attach.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from typing import Any, Iterable, Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
  name TEXT PRIMARY KEY, slots INTEGER NOT NULL, gpu INTEGER NOT NULL, addresses TEXT NOT NULL,
  registered_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
  priority INTEGER NOT NULL, slots INTEGER NOT NULL, submitted_at REAL NOT NULL,
  started_at REAL, ended_at REAL, message TEXT NOT NULL DEFAULT '', exit_code INTEGER,
  placement TEXT NOT NULL DEFAULT '[]');
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS allocations (
  job_id TEXT NOT NULL, agent TEXT NOT NULL, node_rank INTEGER NOT NULL, slots INTEGER NOT NULL,
  address TEXT NOT NULL, ports TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY (job_id, agent));
CREATE TABLE IF NOT EXISTS exits (
  job_id TEXT NOT NULL, rank INTEGER NOT NULL, agent TEXT NOT NULL, exit_code INTEGER NOT NULL,
  last_lines TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT, time REAL NOT NULL, message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
  job_id TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
  time REAL NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_id, name, step);
CREATE TABLE IF NOT EXISTS logs (
  job_id TEXT NOT NULL, seq INTEGER NOT NULL, rank INTEGER NOT NULL, stream TEXT NOT NULL,
  text TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (job_id, seq));
"""


class Store:
    """One SQLite database. `path=":memory:"` gives the same store without a file (unit tests)."""

    def __init__(self, path: str):
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()
        self._log_seq: dict[str, int] = {}

    def _migrate(self) -> None:
        """Columns added after the first release, added to older state files in place."""
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(jobs)")}
        if "placement" not in columns:
            self._db.execute("ALTER TABLE jobs ADD COLUMN placement TEXT NOT NULL DEFAULT '[]'")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction; `durable` also syncs it to disk before returning."""
        with self._lock:
            if durable:
                self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                if durable:
                    self._db.execute("PRAGMA synchronous=NORMAL")

    def _tx(self, statements: Iterable[tuple[str, tuple]], durable: bool = False) -> None:
        with self._transaction(durable) as db:
            for sql, args in statements:
                db.execute(sql, args)

    def _all(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ---------------------------------------------------------------- agents
    def upsert_agent(self, name: str, slots: int, gpu: bool, addresses: list[dict], now: float) -> None:
        self._tx([("INSERT INTO agents(name, slots, gpu, addresses, registered_at) VALUES (?,?,?,?,?) "
                   "ON CONFLICT(name) DO UPDATE SET slots=excluded.slots, gpu=excluded.gpu, "
                   "addresses=excluded.addresses", (name, slots, int(gpu), json.dumps(addresses), now))])

    def agents(self) -> list[dict]:
        return [dict(r, gpu=bool(r["gpu"]), addresses=json.loads(r["addresses"]))
                for r in self._all("SELECT * FROM agents ORDER BY name")]

    # ---------------------------------------------------------------- jobs
    def next_job_seq(self) -> int:
        rows = self._all("SELECT COALESCE(MAX(seq), 0) AS m FROM jobs")
        return rows[0]["m"] + 1

    def insert_job(self, job_id: str, seq: int, spec: dict, priority: int, slots: int, now: float,
                   event: str) -> None:
        self._tx([
            ("INSERT INTO jobs(id, seq, spec, state, priority, slots, submitted_at) VALUES (?,?,?,?,?,?,?)",
             (job_id, seq, json.dumps(spec), "QUEUED", priority, slots, now)),
            ("INSERT INTO events(job_id, time, message) VALUES (?,?,?)", (job_id, now, event)),
        ], durable=True)

    def update_job(self, job_id: str, now: float, event: str | None = None, **fields: Any) -> None:
        sets = ", ".join(f"{k}=?" for k in fields)
        statements = [(f"UPDATE jobs SET {sets} WHERE id=?", (*fields.values(), job_id))] if fields else []
        if event:
            statements.append(("INSERT INTO events(job_id, time, message) VALUES (?,?,?)", (job_id, now, event)))
        self._tx(statements)

    def job(self, job_id: str) -> dict | None:
        rows = self._all("SELECT * FROM jobs WHERE id=?", (job_id,))
        return self._job_row(rows[0]) if rows else None

    def job_by_seq(self, seq: int) -> dict | None:
        rows = self._all("SELECT * FROM jobs WHERE seq=?", (seq,))
        return self._job_row(rows[0]) if rows else None

    def jobs(self, states: Iterable[str] | None = None) -> list[dict]:
        if states is None:
            return [self._job_row(r) for r in self._all("SELECT * FROM jobs ORDER BY seq")]
        states = list(states)
        marks = ",".join("?" * len(states))
        return [self._job_row(r) for r in self._all(f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY seq",
                                                     tuple(states))]

    @staticmethod
    def _job_row(r: sqlite3.Row) -> dict:
        return dict(r, spec=json.loads(r["spec"]), placement=json.loads(r["placement"]))

    def events(self, job_id: str) -> list[dict]:
        return [dict(r) for r in self._all("SELECT time, message FROM events WHERE job_id=? ORDER BY id", (job_id,))]

    # ---------------------------------------------------------------- allocations
    def set_allocations(self, job_id: str, allocations: list[dict]) -> None:
        statements = [("DELETE FROM allocations WHERE job_id=?", (job_id,))]
        statements += [("INSERT INTO allocations(job_id, agent, node_rank, slots, address, ports, state) "
                        "VALUES (?,?,?,?,?,?,?)", (job_id, a["agent"], a["node_rank"], a["slots"], a["address"],
                                                   json.dumps(a["ports"]), a["state"])) for a in allocations]
        self._tx(statements)

    def set_allocation_state(self, job_id: str, agent: str, state: str) -> None:
        self._tx([("UPDATE allocations SET state=? WHERE job_id=? AND agent=?", (state, job_id, agent))])

    def allocations(self, job_id: str | None = None) -> list[dict]:
        if job_id is None:
            rows = self._all("SELECT * FROM allocations ORDER BY job_id, node_rank")
        else:
            rows = self._all("SELECT * FROM allocations WHERE job_id=? ORDER BY node_rank", (job_id,))
        return [dict(r, ports=json.loads(r["ports"])) for r in rows]

    # ---------------------------------------------------------------- exits
    def record_exit(self, job_id: str, rank: int, agent: str, exit_code: int, last_lines: list[str],
                    now: float) -> bool:
        """Returns False if this rank's exit was already recorded (a retried report)."""
        with self._lock:
            if self._all("SELECT 1 FROM exits WHERE job_id=? AND rank=?", (job_id, rank)):
                return False
            self._tx([("INSERT INTO exits(job_id, rank, agent, exit_code, last_lines, time) VALUES (?,?,?,?,?,?)",
                       (job_id, rank, agent, exit_code, json.dumps(last_lines), now))])
            return True

    def exits(self, job_id: str) -> list[dict]:
        return [dict(r, last_lines=json.loads(r["last_lines"]))
                for r in self._all("SELECT * FROM exits WHERE job_id=? ORDER BY time, rank", (job_id,))]

    # ---------------------------------------------------------------- metrics
    def append_metrics(self, job_id: str, rows: list[tuple[int, int, str, float, float]]) -> None:
        """rows: (rank, step, name, value, time)."""
        with self._transaction() as db:
            db.executemany("INSERT INTO metrics(job_id, rank, step, name, value, time) VALUES (?,?,?,?,?,?)",
                           [(job_id, *r) for r in rows])

    def metrics(self, job_id: str, name: str | None = None) -> list[dict]:
        if name is None:
            rows = self._all("SELECT rank, step, name, value, time FROM metrics WHERE job_id=? ORDER BY step, rowid",
                             (job_id,))
        else:
            rows = self._all("SELECT rank, step, name, value, time FROM metrics WHERE job_id=? AND name=? "
                             "ORDER BY step, rowid", (job_id, name))
        return [dict(r) for r in rows]

    def latest_metrics(self, job_id: str) -> list[dict]:
        """The newest row of every metric name (highest step, then the last reported)."""
        rows = self._all("SELECT rank, step, name, value, time FROM metrics m WHERE job_id=? AND rowid = ("
                         "SELECT rowid FROM metrics WHERE job_id=m.job_id AND name=m.name "
                         "ORDER BY step DESC, rowid DESC LIMIT 1) ORDER BY name", (job_id,))
        return [dict(r) for r in rows]

    # ---------------------------------------------------------------- logs
    def append_logs(self, job_id: str, lines: list[tuple[int, str, str, float]]) -> None:
        """lines: (rank, stream, text, time). Numbered per job in arrival order."""
        with self._lock:
            seq = self._log_seq.get(job_id)
            if seq is None:
                seq = self._all("SELECT COALESCE(MAX(seq), 0) AS m FROM logs WHERE job_id=?", (job_id,))[0]["m"]
            rows = []
            for rank, stream, text, t in lines:
                seq += 1
                rows.append((job_id, seq, rank, stream, text, t))
            with self._transaction() as db:
                db.executemany("INSERT INTO logs(job_id, seq, rank, stream, text, time) VALUES (?,?,?,?,?,?)", rows)
            self._log_seq[job_id] = seq

    def logs(self, job_id: str, after_seq: int = 0, rank: int = -1, limit: int = 1000) -> list[dict]:
        if rank >= 0:
            rows = self._all("SELECT * FROM logs WHERE job_id=? AND seq>? AND rank=? ORDER BY seq LIMIT ?",
                             (job_id, after_seq, rank, limit))
        else:
            rows = self._all("SELECT * FROM logs WHERE job_id=? AND seq>? ORDER BY seq LIMIT ?",
                             (job_id, after_seq, limit))
        return [dict(r) for r in rows]
