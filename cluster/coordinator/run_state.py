"""What the coordinator keeps in memory about each active job's run besides the store: one frozen value per
job (`RunState`), replaced whole by the job's state machine (job_machine.py), never edited in place.

These facts are derived (the launch plan) or not durable (who joined, step progress, the stall found; after
a restart every clock starts afresh). `Runs` holds them with a journal: the first time an event replaces a
job's value, the value before is kept, and a rolled-back event puts every one of them back, so a failed
event leaves no part of any run changed (the store's transaction is rolled back beside it)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Iterator, Mapping

from cluster.coordinator.policy import Outcome
from cluster.shared.modes import JobPlan

EMPTY: Mapping = MappingProxyType({})


def frozen(mapping: Mapping) -> Mapping:
    """A read-only copy (a RunState's mappings are never changed in place)."""
    return MappingProxyType(dict(mapping))


@dataclasses.dataclass(frozen=True)
class RunState:
    plan: JobPlan | None = None  # its launch plan, computed once per placement (a cache of placement + spec)
    start_clock: float | None = None  # when its start-up began; None: start-up not watched (done, or not placed)
    joined: frozenset[int] = frozenset()  # ranks that joined (their nodes say)
    joining: str = ""  # whom its start-up waits for (the start-up watchdog's words)
    held: str = ""  # what holds its nodes before they are up (its engine's words: an admission queue)
    # rank -> (last step, when it moved, on our clock)
    progress: Mapping[int, tuple[int, float]] = dataclasses.field(default_factory=lambda: EMPTY)
    left_training: frozenset[int] = frozenset()  # ranks that stopped reporting (their `fit` ended)
    stalled: tuple[Outcome, float] | None = None  # the step watchdog's stall: (outcome, when the job fails)
    dump_to: frozenset[str] = frozenset()  # nodes yet to be asked for their workers' stacks
    stacks_after: int = 0  # the job's log line when they were asked: the stacks come after it
    # node -> ports found busy there for this job
    excluded_ports: Mapping[str, frozenset[int]] = dataclasses.field(default_factory=lambda: EMPTY)
    disrupted: str = ""  # why its engine takes its nodes back (a drain, an eviction): it is placed again, unspent

    def replace(self, **changes) -> "RunState":
        return dataclasses.replace(self, **changes)

    @property
    def watched(self) -> bool:
        """The watchdogs look at it: its start-up is not over, or its ranks report progress."""
        return self.start_clock is not None or bool(self.progress) or self.stalled is not None


NOTHING = RunState()


class Runs:
    """Job id -> its RunState (NOTHING when none), the jobs whose followers to wake after the event (`touched`)
    and the last scheduling round's waiting reasons (`waiting`, job -> why it is not placed). Changed only
    inside the core's event, which calls `begin`, then `commit` or `rollback`."""

    def __init__(self):
        self._runs: dict[str, RunState] = {}
        self._dumping: set[str] = set()  # jobs with nodes yet to be asked for stacks (read on every heartbeat)
        self._before: dict[str, RunState] = {}  # this event's first replaced value of each job
        self._waiting_before: Mapping[str, str] | None = None
        self.waiting: Mapping[str, str] = {}
        self.touched: set[str] = set()

    def get(self, job_id: str) -> RunState:
        return self._runs.get(job_id, NOTHING)

    def put(self, job_id: str, run: RunState) -> None:
        if job_id not in self._before:
            self._before[job_id] = self._runs.get(job_id, NOTHING)
        self._set(job_id, run)

    def _set(self, job_id: str, run: RunState) -> None:
        if run == NOTHING:
            self._runs.pop(job_id, None)
        else:
            self._runs[job_id] = run
        if run.dump_to:
            self._dumping.add(job_id)
        else:
            self._dumping.discard(job_id)

    def dumping(self) -> list[str]:
        """Jobs whose stacks some node is yet to be asked for."""
        return list(self._dumping)

    def update(self, job_id: str, **changes) -> RunState:
        run = self.get(job_id).replace(**changes)
        self.put(job_id, run)
        return run

    def set_waiting(self, waiting: Mapping[str, str]) -> None:
        if self._waiting_before is None:
            self._waiting_before = self.waiting
        self.waiting = waiting

    def items(self) -> Iterator[tuple[str, RunState]]:
        """Every job with a run, as of now (a copy: the caller may replace runs as it goes)."""
        return iter(list(self._runs.items()))

    def reasons(self) -> Mapping[str, str]:
        """Job -> why it waits: a queued job for nodes (the scheduler's last word), a placed one for its nodes
        to start its workers or its ranks to join (the start-up watchdog's). Read by listings without the lock."""
        return WaitingReasons(self)

    def begin(self) -> None:
        self._before.clear()
        self._waiting_before = None
        self.touched.clear()

    def commit(self) -> set[str]:
        """The event's changes stay; returns the jobs it touched."""
        touched = set(self.touched)
        self.begin()
        return touched

    def rollback(self) -> None:
        """Every run the event replaced is as it was before the event."""
        for job_id, run in self._before.items():
            self._set(job_id, run)
        if self._waiting_before is not None:
            self.waiting = self._waiting_before
        self.begin()


class WaitingReasons(Mapping):
    """Runs.reasons(): looked up per job, never built whole (a listing asks for a page of jobs)."""

    def __init__(self, runs: Runs):
        self._runs = runs

    def __getitem__(self, job_id: str) -> str:
        run = self._runs.get(job_id)
        reason = self._runs.waiting.get(job_id) or run.held or run.joining
        if not reason:
            raise KeyError(job_id)
        return reason

    def __iter__(self) -> Iterator[str]:
        return iter([job_id for job_id in {*self._runs.waiting, *dict(self._runs.items())} if job_id in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)
