"""What the coordinator shows: jobs, agents and log pages, as typed views for the servicers.

Job and agent views read under the coordinator's lock (they are quick). Log
following never does: it reads through its own SQLite connection and waits
on the job's ChangeBoard, so any number of followers cannot hold up heartbeats.
"""

from __future__ import annotations

import dataclasses
import time

from cluster.coordinator.core import CoordinatorCore
from cluster.shared.model import AgentRecord, Allocation, Checkpoint, Job, LogLine, MetricRow, WorkerExit


@dataclasses.dataclass(frozen=True)
class JobView:
    job: Job
    placement: tuple[Allocation, ...]  # as placed, with live states where the job still holds nodes
    exits: tuple[WorkerExit, ...] = ()  # of the current run
    waiting_reason: str = ""
    latest_metrics: tuple[MetricRow, ...] = ()
    latest_checkpoint: Checkpoint | None = None


@dataclasses.dataclass(frozen=True)
class AgentView:
    record: AgentRecord  # name, slots, addresses, GPUs
    free_slots: int
    state: str  # ALIVE, LOST
    last_heartbeat: float
    jobs: tuple[str, ...]
    free_gpus: tuple[int, ...]


def job_view(core: CoordinatorCore, job_ref: str) -> JobView:
    with core.lock:
        job = core.store.job(core.resolve_job_id(job_ref))
        live = {a.agent: a for a in core.allocs.of_job(job.id)}
        placement = tuple(live.get(a.agent, a) for a in job.placement)
        return JobView(job, placement, tuple(core.store.exits(job.id, job.attempt)), core.waiting.get(job.id, ""),
                       tuple(core.store.latest_metrics(job.id)), core.store.latest_checkpoint(job.id))


def metrics_view(core: CoordinatorCore, job_ref: str, name: str | None) -> tuple[str, list]:
    """(job id, its metric rows in step order): the history `tfdist metrics` prints."""
    with core.lock:
        job_id = core.resolve_job_id(job_ref)
        return job_id, core.store.metrics(job_id, name)


def jobs_view(core: CoordinatorCore) -> list[JobView]:
    with core.lock:
        return [JobView(j, (), waiting_reason=core.waiting.get(j.id, "")) for j in core.store.jobs()]


def agents_view(core: CoordinatorCore) -> list[AgentView]:
    with core.lock:
        views = []
        for a in sorted(core.agents.values(), key=lambda a: a.name):
            held = core.allocs.on_agent(a.name)
            taken = {g for x in held for g in x.gpus}
            views.append(AgentView(
                record=a.record, free_slots=a.record.slots - sum(x.slots for x in held),
                state="LOST" if a.lost else "ALIVE", last_heartbeat=a.last_heartbeat,
                jobs=tuple(sorted({x.job_id for x in held})),
                free_gpus=tuple(g.index for g in a.record.gpus if g.index not in taken)))
        return views


class LogFollower:
    """Pages of a job's log lines; with `wait`, holds the call until there are new lines or the job
    ended. Takes neither the coordinator's lock nor the store's."""

    def __init__(self, core: CoordinatorCore):
        self.core = core
        self.reader = core.store.reader()

    def logs(self, job_ref: str, after_seq: int, rank: int, limit: int, wait: float = 0.0,
             clock=time.monotonic) -> tuple[list[LogLine], bool]:
        job_id = self.core.resolve_job_id(job_ref, self.reader)
        deadline = clock() + wait
        while True:
            version = self.core.board.version(job_id)
            ended = self.reader.ended(job_id)
            lines = self.reader.logs(job_id, after_seq, rank, limit)
            left = deadline - clock()
            if lines or ended or left <= 0:
                return lines, ended and len(lines) < limit
            self.core.board.wait(job_id, version, min(left, 1.0))
