"""The SQLite store's tables, and the migrations that bring state files of older releases up to them.

A state file tfdist made carries APPLICATION_ID in its header (`PRAGMA application_id`): what tells it from
another program's SQLite database. Files of releases before the mark have id 0 and only tables of TABLES:
they are migrated and marked."""

from __future__ import annotations

import sqlite3

APPLICATION_ID = 0x74664453  # "tfDS": a tfdist coordinator's state
SCHEMA_VERSION = 2  # PRAGMA user_version: 2 adds the owner, the retention tables and the seq indexes

SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
  name TEXT PRIMARY KEY, slots INTEGER NOT NULL, gpu INTEGER NOT NULL, addresses TEXT NOT NULL,
  registered_at REAL NOT NULL, gpus TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
  priority INTEGER NOT NULL, slots INTEGER NOT NULL, submitted_at REAL NOT NULL,
  started_at REAL, ended_at REAL, message TEXT NOT NULL DEFAULT '', exit_code INTEGER,
  placement TEXT NOT NULL DEFAULT '[]', submission_id TEXT, failed_rank INTEGER, owner TEXT NOT NULL DEFAULT '');
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
"""
# After the columns are migrated (an older file lacks `owner` until then).
INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs(seq);
CREATE INDEX IF NOT EXISTS jobs_state_seq ON jobs(state, seq);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
"""
# Every table a tfdist state file may hold (sqlite_sequence: SQLite's own, for AUTOINCREMENT; exits_v1: a
# migration that was interrupted).
TABLES = frozenset({"agents", "jobs", "allocations", "exits", "checkpoints", "events", "metrics", "logs", "shipped",
                    "pruned", "meta", "sqlite_sequence", "exits_v1"})

# Columns added after the first release: (table, column, declaration).
MIGRATIONS = (
    ("jobs", "placement", "TEXT NOT NULL DEFAULT '[]'"),
    ("jobs", "submission_id", "TEXT"),
    ("agents", "gpus", "TEXT NOT NULL DEFAULT '[]'"),
    ("allocations", "gpus", "TEXT NOT NULL DEFAULT '[]'"),
    ("exits", "reason", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "failed_rank", "INTEGER"),
    ("exits", "tolerated", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "attempt", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "restarts", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "preempt_requested", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "preempted_step", "INTEGER"),
    ("jobs", "preemptible", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "owner", "TEXT NOT NULL DEFAULT ''"),
)
# Allocation states of the first release, by what they meant.
OLD_ALLOC_STATES = {"PREPARING": "LEASING", "READY": "LEASED"}


def create_or_migrate(db: sqlite3.Connection) -> None:
    """The tables, and the columns and states added after the first release brought into older state
    files in place."""
    db.executescript(SCHEMA)
    for table, column, decl in MIGRATIONS:
        columns = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    _migrate_exits(db)
    for old, new in OLD_ALLOC_STATES.items():
        db.execute("UPDATE allocations SET state=? WHERE state=?", (new, old))
    db.execute("CREATE UNIQUE INDEX IF NOT EXISTS jobs_submission ON jobs(submission_id) "
               "WHERE submission_id IS NOT NULL AND submission_id != ''")
    db.executescript(INDEXES)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _migrate_exits(db: sqlite3.Connection) -> None:
    """Exits were keyed (job, rank) before restarts: rebuilt keyed (job, attempt, rank), rows kept."""
    columns = {r["name"]: r["pk"] for r in db.execute("PRAGMA table_info(exits)")}
    if columns.get("attempt"):
        return
    db.executescript(
        "BEGIN; ALTER TABLE exits RENAME TO exits_v1;"
        "CREATE TABLE exits (job_id TEXT NOT NULL, rank INTEGER NOT NULL, agent TEXT NOT NULL, "
        "exit_code INTEGER NOT NULL, last_lines TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL DEFAULT '',"
        " tolerated INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT 0, "
        "PRIMARY KEY (job_id, attempt, rank));"
        "INSERT INTO exits(job_id, rank, agent, exit_code, last_lines, time, reason, tolerated) "
        "SELECT job_id, rank, agent, exit_code, last_lines, time, reason, tolerated FROM exits_v1;"
        "DROP TABLE exits_v1; COMMIT;")
