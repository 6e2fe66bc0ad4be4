"""Experiments in the stores: one row (SQLite) or value (memory) each, its searcher's state as JSON beside it,
written in the transaction of the event that changed it. Shared by both stores and their readers."""

from __future__ import annotations

import json
import sqlite3
from typing import Callable

from cluster.shared.jobspec import JobSpec
from cluster.shared.model import Experiment, ExperimentState

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, spec TEXT NOT NULL, state TEXT NOT NULL, owner TEXT NOT NULL,
  created_at REAL NOT NULL, ended_at REAL, message TEXT NOT NULL DEFAULT '', search TEXT NOT NULL,
  held TEXT NOT NULL DEFAULT '[]');
"""
UPSERT = ("INSERT INTO experiments(id, seq, spec, state, owner, created_at, ended_at, message, search, held) "
          "VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET state=excluded.state, "
          "ended_at=excluded.ended_at, message=excluded.message, search=excluded.search, held=excluded.held")

Query = Callable[[str, tuple], list[sqlite3.Row]]


def upsert_args(e: Experiment) -> tuple:
    return (e.id, e.seq, e.spec.to_json(), e.state.value, e.owner, e.created_at, e.ended_at, e.message,
            json.dumps(e.search, sort_keys=True), json.dumps(list(e.held), sort_keys=True))


def from_row(row: sqlite3.Row) -> Experiment | None:
    """None for a row this release cannot read (skipped, as unreadable jobs are)."""
    try:
        return Experiment(row["id"], row["seq"], JobSpec.from_dict(json.loads(row["spec"])),
                          ExperimentState(row["state"]), row["created_at"], row["owner"], row["ended_at"],
                          row["message"], json.loads(row["search"]), tuple(json.loads(row["held"])))
    except (ValueError, KeyError, TypeError):
        return None


def one(query: Query, column: str, value: object) -> Experiment | None:
    rows = query(f"SELECT * FROM experiments WHERE {column}=?", (value,))
    return from_row(rows[0]) if rows else None


def every(query: Query) -> list[Experiment]:
    return [e for e in (from_row(r) for r in query("SELECT * FROM experiments ORDER BY seq", ())) if e is not None]


def next_seq(query: Query) -> int:
    return query("SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM experiments", ())[0]["n"]


class SqliteExperiments:
    """The SQLite store's experiments (mixed into SqliteStore: it uses the store's `_write` and `_all`)."""

    def put_experiment(self, experiment: Experiment) -> None:
        self._write([(UPSERT, upsert_args(experiment))])  # type: ignore[attr-defined]

    def experiment(self, ref: str | int) -> Experiment | None:
        return one(self._all, "seq" if isinstance(ref, int) else "id", ref)  # type: ignore[attr-defined]

    def experiments(self) -> list[Experiment]:
        return every(self._all)  # type: ignore[attr-defined]

    def next_experiment_seq(self) -> int:
        return next_seq(self._all)  # type: ignore[attr-defined]
