"""The SQLite store's tables.

A state file tfdist made carries APPLICATION_ID in its header (`PRAGMA application_id`), what tells it from
another program's SQLite database, and SCHEMA_VERSION (`PRAGMA user_version`). No release had another layout,
so there is nothing to migrate: a file of another version (a development build's) is refused in one line
(state_file.check_ours), never half-read."""

from __future__ import annotations

import sqlite3

from cluster.coordinator.store import experiment_rows

APPLICATION_ID = 0x74664453  # "tfDS": a tfdist coordinator's state
SCHEMA_VERSION = 2  # PRAGMA user_version of every state file tfdist 0.1 writes

SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
  name TEXT PRIMARY KEY, slots INTEGER NOT NULL, gpu INTEGER NOT NULL, addresses TEXT NOT NULL,
  registered_at REAL NOT NULL, gpus TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
  priority INTEGER NOT NULL, slots INTEGER NOT NULL, submitted_at REAL NOT NULL,
  started_at REAL, ended_at REAL, message TEXT NOT NULL DEFAULT '', exit_code INTEGER,
  placement TEXT NOT NULL DEFAULT '[]', submission_id TEXT, failed_rank INTEGER, owner TEXT NOT NULL DEFAULT '',
  attempt INTEGER NOT NULL DEFAULT 0, restarts INTEGER NOT NULL DEFAULT 0, preempt_requested INTEGER NOT NULL DEFAULT 0,
  preempted_step INTEGER, preemptible INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS allocations (
  job_id TEXT NOT NULL, agent TEXT NOT NULL, node_rank INTEGER NOT NULL, slots INTEGER NOT NULL,
  address TEXT NOT NULL, ports TEXT NOT NULL, state TEXT NOT NULL, gpus TEXT NOT NULL DEFAULT '[]',
  PRIMARY KEY (job_id, agent));
CREATE TABLE IF NOT EXISTS exits (
  job_id TEXT NOT NULL, rank INTEGER NOT NULL, agent TEXT NOT NULL, exit_code INTEGER NOT NULL,
  last_lines TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL DEFAULT '', tolerated INTEGER NOT NULL DEFAULT 0,
  attempt INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job_id, attempt, rank));
CREATE TABLE IF NOT EXISTS checkpoints (
  job_id TEXT NOT NULL, step INTEGER NOT NULL, path TEXT NOT NULL, attempt INTEGER NOT NULL, time REAL NOT NULL,
  PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT, time REAL NOT NULL, message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
  job_id TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
  time REAL NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_id, name, step);
CREATE TABLE IF NOT EXISTS logs (
  job_id TEXT NOT NULL, seq INTEGER NOT NULL, rank INTEGER NOT NULL, stream TEXT NOT NULL,
  text TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (job_id, seq));
CREATE TABLE IF NOT EXISTS shipped (
  job_id TEXT NOT NULL, source TEXT NOT NULL, kind TEXT NOT NULL, last_seq INTEGER NOT NULL,
  PRIMARY KEY (job_id, source, kind));
CREATE TABLE IF NOT EXISTS pruned (job_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
""" + experiment_rows.SCHEMA
# Every table a tfdist state file holds (sqlite_sequence: SQLite's own, for AUTOINCREMENT).
TABLES = frozenset({"agents", "jobs", "allocations", "exits", "checkpoints", "events", "metrics", "logs", "shipped",
                    "pruned", "meta", "sqlite_sequence", "experiments"})
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS jobs_submission ON jobs(submission_id)
  WHERE submission_id IS NOT NULL AND submission_id != '';
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs(seq);
CREATE INDEX IF NOT EXISTS jobs_state_seq ON jobs(state, seq);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
"""


def create_schema(db: sqlite3.Connection) -> None:
    """The tables and indexes (those missing: a no-op on a file that has them), and the file's marks."""
    db.executescript(SCHEMA)
    db.executescript(INDEXES)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
