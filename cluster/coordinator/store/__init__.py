"""The coordinator's state: one interface (`StateStore`, base.py), kept in SQLite (`SqliteStore`, what a
coordinator runs on) or in dicts (`MemoryStore`); tests/unit/test_store.py holds them both to one contract."""

from cluster.coordinator.store.base import StateReader, StateStore
from cluster.coordinator.store.memory import MemoryReader, MemoryStore
from cluster.coordinator.store.sqlite import SqliteReader, SqliteStore

Store = SqliteStore  # the name callers knew before there were two


def Reader(store: StateStore) -> StateReader:  # noqa: N802 -- called as the class it was before there were two
    """The store's reader for log followers: `store.reader()`."""
    return store.reader()


__all__ = ["MemoryReader", "MemoryStore", "Reader", "SqliteReader", "SqliteStore", "StateReader", "StateStore",
           "Store"]
