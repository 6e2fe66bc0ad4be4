"""The allocations of active jobs (which slots and ports of which node a job holds).

Read on every heartbeat, so kept in memory, indexed by job and by agent, and
written through to SQLite on every change. Readers get copies.
"""

from __future__ import annotations

from cluster.store import Store


class AllocationTable:
    def __init__(self, store: Store):
        self._store = store
        self._by_job: dict[str, list[dict]] = {}
        self._by_agent: dict[str, dict[str, dict]] = {}
        for a in store.allocations():
            self._by_job.setdefault(a["job_id"], []).append(a)
        self._reindex()

    def of_job(self, job_id: str) -> list[dict]:
        return [dict(a) for a in self._by_job.get(job_id, [])]

    def all(self) -> list[dict]:
        return [dict(a) for allocs in self._by_job.values() for a in allocs]

    def on_agent(self, agent: str) -> list[dict]:
        return [dict(a) for a in self._by_agent.get(agent, {}).values()]

    def get(self, job_id: str, agent: str) -> dict | None:
        a = self._by_agent.get(agent, {}).get(job_id)
        return dict(a) if a is not None else None

    def used_slots(self) -> dict[str, int]:
        return {agent: sum(a["slots"] for a in allocs.values()) for agent, allocs in self._by_agent.items()}

    def replace(self, job_id: str, allocs: list[dict]) -> None:
        """The job's allocations become `allocs` (empty: it holds nothing any more)."""
        self._store.set_allocations(job_id, allocs)
        if allocs:
            self._by_job[job_id] = [dict(a, job_id=job_id) for a in allocs]
        else:
            self._by_job.pop(job_id, None)
        self._reindex()

    def set_state(self, job_id: str, agent: str, state: str) -> None:
        self._store.set_allocation_state(job_id, agent, state)
        for a in self._by_job.get(job_id, []):
            if a["agent"] == agent:
                a["state"] = state

    def _reindex(self) -> None:
        self._by_agent = {}
        for job_id, allocs in self._by_job.items():
            for a in allocs:
                self._by_agent.setdefault(a["agent"], {})[job_id] = a
