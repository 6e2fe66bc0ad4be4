"""The job store's keys and values with their byte and count caps (cluster/agent/job_store.py): written by
the store's loop for the workers' requests and by the agent's own thread (a preemption request), read by
both. No asyncio here: a run holds its values from the start, its loop comes up in the background."""

from __future__ import annotations

import re
import threading

from tfdist import store_scopes
from tfdist.errors import TfdistError

COLLECTIVES_SCOPE = store_scopes.COLLECTIVES
MAX_VALUE = 1 << 20  # bytes per value: Gloo puts addresses (tens of bytes); collectives carry small values
_RANK_KEY = re.compile(r"^(?:rank_)?(\d+)$")


class Refusal(TfdistError):
    """A request the store answers with an error: `limit` names what it hit."""

    def __init__(self, code: int, limit: str, detail: str):
        super().__init__(detail)
        self.code, self.limit, self.detail = code, limit, detail


class StoreValues:
    """The keys and values, with their byte and count caps; shared by the loop and the agent's thread."""

    def __init__(self, max_total: int, max_keys: int):
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], bytes] = {}
        self._bytes = 0
        self.max_total, self.max_keys = max_total, max_keys

    @staticmethod
    def _size(key: tuple[str, str], value: bytes) -> int:
        return len(key[0]) + len(key[1]) + len(value)

    def check_room(self, key: tuple[str, str], length: int) -> None:
        with self._lock:
            self._check(key, length)

    def _check(self, key: tuple[str, str], length: int) -> None:
        old = self._values.get(key)
        if old is None and len(self._values) >= self.max_keys:
            raise Refusal(507, "key-count", f"the job's store holds {len(self._values)} keys, its limit")
        grown = self._bytes - (self._size(key, old) if old is not None else 0) + self._size(key, b"") + length
        if grown > self.max_total:
            raise Refusal(507, "job-total", f"storing {length} bytes would bring the job's store to {grown} "
                                             f"bytes; its limit is {self.max_total}")

    def put(self, key: tuple[str, str], value: bytes, bounded: bool = True) -> None:
        with self._lock:
            if bounded:
                self._check(key, len(value))
            old = self._values.get(key)
            self._bytes += self._size(key, value) - (self._size(key, old) if old is not None else 0)
            self._values[key] = value

    def get(self, key: tuple[str, str]) -> bytes | None:
        with self._lock:
            return self._values.get(key)

    def delete(self, key: tuple[str, str]) -> None:
        with self._lock:
            old = self._values.pop(key, None)
            if old is not None:
                self._bytes -= self._size(key, old)

    def count(self) -> tuple[int, int]:
        with self._lock:
            return len(self._values), self._bytes

    def ranks_joined(self) -> set[int]:
        with self._lock:
            keys = [k for s, k in self._values if s == "global"]
        return {int(m.group(1)) for m in map(_RANK_KEY.match, keys) if m}
