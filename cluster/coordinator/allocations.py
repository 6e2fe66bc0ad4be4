"""The allocations of active jobs (which slots, GPUs and ports of which node a job holds).

Read on every heartbeat, so kept in memory, indexed by job and by agent, and
written through to the store inside the caller's transaction. If that
transaction rolls back, `reload()` brings the cache back to what was committed.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from cluster.shared.model import Allocation, AllocState, check_alloc_transition
from cluster.coordinator.store import StateStore
from tfdist.errors import InternalError


class AllocationTable:
    def __init__(self, store: StateStore):
        self._store = store
        self._by_job: dict[str, tuple[Allocation, ...]] = {}
        self._by_agent: dict[str, dict[str, Allocation]] = {}
        self.changed: set[str] = set()  # agents whose allocations changed in this event: new work for them
        self.version = 0  # bumped on every change: a scheduling round knows whether capacity moved
        # told which agents' allocations changed (None: all of them, after a reload)
        self.listeners: list[Callable[[Iterable[str] | None], None]] = []
        self.reload()

    def reload(self) -> None:
        by_job: dict[str, list[Allocation]] = {}
        for a in self._store.allocations():
            by_job.setdefault(a.job_id, []).append(a)
        self._by_job = {job: tuple(sorted(allocs, key=lambda a: a.node_rank)) for job, allocs in by_job.items()}
        self.changed = set()
        self.version += 1
        self._by_agent = {}
        for allocs in self._by_job.values():
            self._index(allocs)
        for listener in self.listeners:
            listener(None)

    def of_job(self, job_id: str) -> tuple[Allocation, ...]:
        return self._by_job.get(job_id, ())

    def jobs(self) -> list[str]:
        """The jobs holding anything."""
        return list(self._by_job)

    def all(self) -> list[Allocation]:
        """Every allocation; safe to call while an event changes the table (a listing reads without the lock:
        the dict's values are copied in one step, not iterated while they change)."""
        return [a for allocs in list(self._by_job.values()) for a in allocs]

    def on_agent(self, agent: str) -> list[Allocation]:
        return list(self._by_agent.get(agent, {}).values())

    def get(self, job_id: str, agent: str) -> Allocation | None:
        return self._by_agent.get(agent, {}).get(job_id)

    def used_slots(self) -> dict[str, int]:
        return {agent: sum(a.slots for a in allocs.values()) for agent, allocs in self._by_agent.items()}

    def held_gpus(self, agent: str) -> list[int]:
        return [g for a in self.on_agent(agent) for g in a.gpus]

    def replace(self, job_id: str, allocs) -> None:
        """The job's allocations become `allocs` (empty: it holds nothing any more)."""
        allocs = tuple(sorted(allocs, key=lambda a: a.node_rank))
        self._store.set_allocations(job_id, allocs)
        old = self.of_job(job_id)
        touched = {a.agent for a in (*old, *allocs)}
        self.changed.update(touched)
        for a in old:  # the index changes where the job is, not everywhere: O(the job's nodes)
            held = self._by_agent.get(a.agent)
            if held is not None:
                held.pop(job_id, None)
                if not held:
                    del self._by_agent[a.agent]
        if allocs:
            self._by_job[job_id] = allocs
            self._index(allocs)
        else:
            self._by_job.pop(job_id, None)
        self.version += 1
        for listener in self.listeners:
            listener(touched)

    def update(self, job_id: str, agent: str, **changes) -> Allocation:
        """Changes one allocation (its state through the lifecycle table)."""
        current = self.get(job_id, agent)
        if current is None:
            raise InternalError(f"job {job_id} holds nothing on {agent}: no allocation to update")
        if "state" in changes:
            check_alloc_transition(current.state, changes["state"])
        new = dataclasses.replace(current, **changes)
        self.replace(job_id, [new if a.agent == agent else a for a in self.of_job(job_id)])
        return new

    def touch(self, job_id: str) -> None:
        """The job's nodes have new work although its allocations did not change (a preemption)."""
        self.changed.update(a.agent for a in self.of_job(job_id))

    def set_state(self, job_id: str, state: AllocState) -> None:
        """Every allocation of the job to `state`."""
        for a in self.of_job(job_id):
            check_alloc_transition(a.state, state)
        self.replace(job_id, [dataclasses.replace(a, state=state) for a in self.of_job(job_id)])

    def _index(self, allocs: tuple[Allocation, ...]) -> None:
        for a in allocs:
            self._by_agent.setdefault(a.agent, {})[a.job_id] = a
