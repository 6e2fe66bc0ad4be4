"""Typed values the coordinator core works with: its settings, what it knows of each agent, the work
a heartbeat answers. No logic beyond that."""

from __future__ import annotations

import dataclasses
import threading
from typing import Iterable

from cluster.shared.model import AgentRecord
from cluster.shared.work import PROBE_TIMEOUT, ProbeTask, StartTask, Work  # noqa: F401 (re-exported)
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

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def busy(self) -> bool:
        return bool(self.running or self.leased)


@dataclasses.dataclass(frozen=True)
class Settings:
    lost_after: float = 6.0  # seconds without a heartbeat before a node is declared lost
    stop_grace: float = 5.0  # a canceled job's workers: SIGTERM, then SIGKILL this much later
    failure_grace: float = 1.0  # a failed job's survivors: their collectives are broken anyway
    heartbeat_interval: float = 1.0  # the shortest; large clusters get longer ones
    max_heartbeats_per_s: float = 250.0  # what the coordinator asks of all agents together
    port_range: tuple[int, int] = (29500, 29999)
    subnet: str | None = None
    startup_timeout: float = 300.0  # for jobs that do not set their own
    stack_dump_grace: float = 3.0  # step watchdog: from asking for stacks to failing the job
    probe_timeout: float = PROBE_TIMEOUT


class ChangeBoard:
    """A version per key (a job, an agent), bumped when the key's state changed, and long polls that
    wait for it to move: log followers wait on a job's, agents' WaitForWork on their own. It has a lock
    of its own: a waiter never takes the coordinator's lock."""

    def __init__(self):
        self._cond = threading.Condition()
        self._versions: dict[str, int] = {}
        self._closed = False

    def close(self) -> None:
        """Every waiter returns now (the server is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def version(self, key: str) -> int:
        with self._cond:
            return self._versions.get(key, 0)

    def bump(self, keys: Iterable[str]) -> None:
        with self._cond:
            for k in keys:
                self._versions[k] = self._versions.get(k, 0) + 1
            self._cond.notify_all()

    def wait(self, key: str, seen: int, timeout: float) -> int:
        """Returns the key's version once it differs from `seen`, or after `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._versions.get(key, 0) != seen, timeout)
            return self._versions.get(key, 0)
