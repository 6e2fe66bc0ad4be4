"""Typed values the coordinator core works with: its settings, what it knows of each agent and of each
active job in memory (a job's run: run_state.py), the work a heartbeat answers. No logic beyond that."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Callable, Generic, Iterable, Protocol, TypeVar

from cluster.shared.model import AgentRecord
from cluster.shared.work import PROBE_TIMEOUT
from tfdist.errors import NotFoundError, UserError


class NotFound(NotFoundError):
    pass


class BadRequest(UserError):
    pass


@dataclasses.dataclass
class AgentLive:
    record: AgentRecord
    last_heartbeat: float
    lost: bool = False
    running: dict = dataclasses.field(default_factory=dict)  # job id -> ranks that joined
    attempts: dict = dataclasses.field(default_factory=dict)  # job id -> which run of it the agent runs
    leased: set = dataclasses.field(default_factory=set)  # jobs whose ports it holds
    beaconing: bool = False  # a beacon of its arrived since it registered: its heartbeats need not prove it alive
    watched: bool = True  # declared lost when silent; False: an engine's node, whose engine answers for it
    # Slots that work outside tfdist holds now (other pods on a Kubernetes node): not free, but the node keeps
    # its size (a job of that size waits for it rather than being refused); set by its engine.
    held_elsewhere: int = 0

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def busy(self) -> bool:
        return bool(self.running or self.leased)


@dataclasses.dataclass(frozen=True)
class Settings:
    lost_after: float = 6.0  # seconds without a heartbeat or beacon before a node is declared lost
    stop_grace: float = 5.0  # a canceled job's workers: SIGTERM, then SIGKILL this much later
    failure_grace: float = 1.0  # a failed job's survivors: their collectives are broken anyway
    heartbeat_interval: float = 1.0  # the shortest; large clusters get longer ones
    max_heartbeats_per_s: float = 250.0  # what the coordinator asks of all agents together
    port_range: tuple[int, int] = (29500, 29999)
    subnet: str | None = None
    startup_timeout: float = 300.0  # for jobs that do not set their own
    stack_dump_grace: float = 3.0  # step watchdog: from asking for stacks to failing the job
    probe_timeout: float = PROBE_TIMEOUT
    # Each job run's key-value store secret is HMAC(store_key, "job_id/attempt"): the same after a
    # coordinator restart (the daemon derives it from its credentials' secret), unknown to anyone else.
    store_key: bytes = b""
    # Retention (cluster/coordinator/store/retention.py): a finished job is kept while it is among the newest
    # `retention_jobs` finished jobs and ended within `retention_days` (0 turns either limit off).
    retention_jobs: int = 10_000
    retention_days: float = 30.0
    # Lines one job's log keeps (0: no limit): past it, later output is dropped and the log says so once.
    max_log_lines: int = 500_000
    # The first job number it gives, and the first experiment number (a local launch's: after the user's
    # earlier local runs, so that their ids stay apart: run N's job is N-XXXX, its experiment eN-XXXX;
    # cluster/client/local_runs.py).
    first_job_seq: int = 1
    # The last job number it may give (0: no limit): a local run's reserved block ends there, and the next local
    # run's begins after it. A job past it is refused rather than given a number another run holds.
    last_job_seq: int = 0
    counting: bool = True  # Prometheus counters for /metrics (False: a local launch's, which nobody scrapes)


K = TypeVar("K")
K_contra = TypeVar("K_contra", contravariant=True)
V_co = TypeVar("V_co", covariant=True)
V = TypeVar("V")


class Reads(Protocol[K_contra, V_co]):
    """What the pure deciders read a table through: `.get` only (a dict, or a Lookup)."""

    def get(self, key: K_contra, /) -> V_co | None: ...


class Lookup(Generic[K, V]):
    """A `.get`-only view whose values are computed on first use (from the store, which the pure
    deciders must not see): they ask only for the keys they need, as the code before them did."""

    def __init__(self, compute: Callable[[K], V | None]):
        self._compute = compute
        self._seen: dict = {}

    def get(self, key: K, default: V | None = None) -> V | None:
        if key not in self._seen:
            self._seen[key] = self._compute(key)
        value = self._seen[key]
        return default if value is None else value

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None


class ChangeBoard:
    """A version per key (a job, an agent), bumped when the key's state changed, and long polls that
    wait for it to move: log followers wait on a job's, agents' WaitForWork on their own. It has a lock
    of its own: a waiter never takes the coordinator's lock.

    Versions come from one counter, so a key's never repeats, and it starts at the clock in microseconds,
    so a restarted coordinator's are above its predecessor's (an agent's beacons carry the version it has
    seen, and it takes only pokes above it). The board keeps the `limit` keys bumped last (jobs come and
    go: 100,000 of them must not grow it; None: every key, for the agents, whose pokes rely on it). A key
    it forgot reads 0, which differs from any version a waiter saw: the waiter wakes once, reads, and
    waits again."""

    def __init__(self, limit: int | None = 8_192):
        self._cond = threading.Condition()
        self._versions: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._counter = time.time_ns() // 1000
        self._limit = limit
        self._closed = False
        self.listeners: list[Callable[[Iterable[str]], None]] = []  # told of each bump, outside the lock

    def close(self) -> None:
        """Every waiter returns now (the server is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def version(self, key: str) -> int:
        with self._cond:
            return self._versions.get(key, 0)

    def bump(self, keys: Iterable[str]) -> None:
        self.announce(self.advance(keys))

    def advance(self, keys: Iterable[str]) -> list[str]:
        """The keys' versions move (the coordinator does it under its lock, so versions follow its events'
        order); waiters and listeners hear of it at `announce`."""
        with self._cond:
            keys = list(keys)
            for k in keys:
                self._counter += 1
                self._versions[k] = self._counter
                self._versions.move_to_end(k)
            while self._limit is not None and len(self._versions) > self._limit:
                self._versions.popitem(last=False)
        return keys

    def announce(self, keys: list[str]) -> None:
        with self._cond:
            self._cond.notify_all()
        for listener in self.listeners:  # after the commit: a failing listener must not fail the event
            try:
                listener(keys)
            except Exception:
                logging.getLogger("tfdist.coordinator").exception("a change listener failed")

    def wait(self, key: str, seen: int, timeout: float) -> int:
        """Returns the key's version once it differs from `seen`, or after `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._versions.get(key, 0) != seen, timeout)
            return self._versions.get(key, 0)
