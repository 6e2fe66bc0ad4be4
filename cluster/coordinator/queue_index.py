"""The queued jobs in scheduling order, in memory: what a scheduling round walks.

Reading them from the store for every round cost a deep queue's whole length per submission (each job
decoded from its row: 50 ms a submission with 1,000 queued, 160 ms with 3,000). The index holds what the
scheduler needs of each (id, slots, priority, submission order), sorted as the scheduler walks them; it
follows every transition into and out of QUEUED (JobLifecycle.transition, the core's submit) and is
rebuilt from the store when an event rolls back.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Iterator

from cluster.coordinator.scheduler import PendingJob


def order(job: PendingJob) -> tuple[int, int, str]:
    """Higher priority first, then submission order (the scheduler's queue policy)."""
    return (-job.priority, job.seq, job.id)


class QueueIndex:
    def __init__(self, jobs: Iterable[PendingJob] = ()):
        self._keys: list[tuple[int, int, str]] = []
        self._jobs: list[PendingJob] = []  # in the order of _keys
        self._by_id: dict[str, PendingJob] = {}
        self.load(jobs)

    def load(self, jobs: Iterable[PendingJob]) -> None:
        pairs = sorted(((order(j), j) for j in jobs), key=lambda pair: pair[0])
        self._keys = [k for k, _ in pairs]
        self._jobs = [j for _, j in pairs]
        self._by_id = {j.id: j for j in self._jobs}

    def add(self, job: PendingJob) -> None:
        if job.id in self._by_id:
            self.remove(job.id)
        key = order(job)
        at = bisect.bisect_right(self._keys, key)  # a new submission: at the end of its priority, O(1) there
        self._keys.insert(at, key)
        self._jobs.insert(at, job)
        self._by_id[job.id] = job

    def remove(self, job_id: str) -> None:
        job = self._by_id.pop(job_id, None)
        if job is None:
            return
        at = bisect.bisect_left(self._keys, order(job))
        del self._keys[at]
        del self._jobs[at]

    def get(self, job_id: str) -> PendingJob | None:
        return self._by_id.get(job_id)

    def jobs(self) -> list[PendingJob]:
        """Every queued job in scheduling order (the index's own list: read it, do not change it)."""
        return self._jobs

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._by_id

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[PendingJob]:
        return iter(self._jobs)


@dataclasses.dataclass(frozen=True)
class Round:
    """What a scheduling round left: the versions of the allocations and of the nodes it saw, whether it
    settled (no free slot left outside the reserved nodes) and the priority of the job the reserved nodes
    are kept for (None: none)."""
    allocs_version: int
    agents_version: int
    settled: bool
    reserver_priority: int | None

    def places_nothing_more(self, allocs_version: int, agents_version: int, submitted: PendingJob) -> bool:
        """Whether a round now would leave `submitted` (queued since) waiting like the rest: nothing freed or
        joined since this one, which settled, and the job does not outrank the one the kept nodes wait for."""
        return (self.settled and (allocs_version, agents_version) == (self.allocs_version, self.agents_version)
                and (self.reserver_priority is None or submitted.priority <= self.reserver_priority))
