"""Retention in SQLite (the rule is retention.py's): the statements that prune finished jobs, run inside the
store's transaction. A job's row and its small records go in one step (`prune_finished`); its logs and
metrics, which may be millions of rows, are queued in `pruned` and deleted a bounded batch at a time
(`purge_output`), so no transaction holds the store for long and a crash in between loses nothing."""

from __future__ import annotations

import sqlite3

from cluster.coordinator.store.sqlite_rows import TERMINAL

_MARKS = ",".join("?" * len(TERMINAL))


def prune_finished(db: sqlite3.Connection, now: float, keep_jobs: int, keep_seconds: float, max_jobs: int) -> list[str]:
    """Up to `max_jobs` finished jobs past the rule, oldest first, that hold no node: their rows go, their
    output is queued. Returns their ids."""
    older, args = [], []
    if keep_jobs > 0:
        kept = db.execute(f"SELECT seq FROM jobs WHERE state IN ({_MARKS}) ORDER BY seq DESC LIMIT 1 OFFSET ?",
                          (*TERMINAL, keep_jobs - 1)).fetchone()
        if kept:
            older, args = ["seq < ?"], [kept["seq"]]
    if keep_seconds > 0:
        older, args = [*older, "ended_at < ?"], [*args, now - keep_seconds]
    if not older:
        return []
    found = db.execute(f"SELECT id, seq FROM jobs WHERE state IN ({_MARKS}) AND ({' OR '.join(older)}) AND id NOT IN "
                       "(SELECT job_id FROM allocations) ORDER BY seq LIMIT ?", (*TERMINAL, *args, max_jobs)).fetchall()
    ids = [(r["id"],) for r in found]
    for table, column in (("jobs", "id"), ("events", "job_id"), ("exits", "job_id"), ("checkpoints", "job_id"),
                          ("shipped", "job_id")):
        db.executemany(f"DELETE FROM {table} WHERE {column}=?", ids)
    db.executemany("INSERT OR IGNORE INTO pruned(job_id) VALUES (?)", ids)
    if found:  # job numbers are never given again (next_job_seq reads the floor)
        db.execute("INSERT INTO meta(key, value) VALUES ('seq_floor', ?) ON CONFLICT(key) DO UPDATE SET "
                   "value=MAX(value, excluded.value)", (max(r["seq"] for r in found),))
    return [i for i, in ids]


PURGE_JOBS = 500  # pruned jobs whose output one transaction may finish


def purge_output(db: sqlite3.Connection, max_rows: int) -> int:
    """Deletes up to `max_rows` log and metric rows of pruned jobs, in the order they were queued, and takes
    each job whose rows are all gone off the queue (at most PURGE_JOBS of them: one job a transaction could
    not keep up with 500 jobs/s ending). Returns rows deleted plus jobs finished (0: nothing is queued)."""
    done = 0
    for row in db.execute("SELECT job_id FROM pruned LIMIT ?", (PURGE_JOBS,)).fetchall():
        for table in ("logs", "metrics"):
            done += db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE job_id=? LIMIT ?)",
                               (row["job_id"], max_rows - done)).rowcount
            if done >= max_rows:
                return done
        db.execute("DELETE FROM pruned WHERE job_id=?", (row["job_id"],))
        done += 1
    return done
