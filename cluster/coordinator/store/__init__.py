"""The coordinator's state: one interface (`StateStore`, base.py), kept in SQLite (`SqliteStore`, what a
coordinator runs on) or in dicts (`MemoryStore`); tests/unit/test_store.py holds them both to one contract."""

from cluster.coordinator.store.base import StateReader, StateStore
from cluster.coordinator.store.memory import MemoryReader, MemoryStore
from cluster.coordinator.store.sqlite import SqliteReader, SqliteStore

__all__ = ["MemoryReader", "MemoryStore", "SqliteReader", "SqliteStore", "StateReader", "StateStore"]
