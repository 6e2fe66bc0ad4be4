"""What the coordinator shows: jobs, agents and log pages, as typed views for the servicers.

One job's and the agents' views read under the coordinator's lock (they are quick). Job listings and log
following never do: they read through their own SQLite connection (a reader), listings a bounded page at
a time, and followers wait on the job's ChangeBoard, so neither can hold up heartbeats.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterable

from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.store import StateReader
from cluster.coordinator.values import BadRequest
from cluster.shared.model import AgentRecord, Allocation, Checkpoint, Job, JobState, LogLine, MetricRow, WorkerExit

PAGE_JOBS = 500  # jobs in one ListJobs page at most (and by default)
PAGE_BYTES = 4 * 1024 * 1024  # a page stops growing past this (half of gRPC's message limit)


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
    liveness: str = "heartbeats"  # or "beacons": what proves it alive (its last sign of life: last_heartbeat)


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
    """Every job, in summary (tests; the servicer pages with `jobs_page`)."""
    with core.lock:
        return [JobView(j, (), waiting_reason=core.waiting.get(j.id, "")) for j in core.store.jobs()]


@dataclasses.dataclass(frozen=True)
class JobsPage:
    views: tuple[JobView, ...]  # newest first
    next_token: str  # where the next page starts ("": this is the last)
    total: int  # jobs matching, over every page


def page_states(states: Iterable[str]) -> tuple[JobState, ...] | None:
    """A request's state names as JobStates (none: every state)."""
    try:
        return tuple(JobState(s) for s in states) or None
    except ValueError:
        raise BadRequest(f"unknown job state in {list(states)}; expected some of "
                         f"{', '.join(s.value for s in JobState)}") from None


def page_start(token: str) -> int | None:
    """The job number a page token says to continue below (None: from the newest)."""
    if not token:
        return None
    if not token.isdigit() or len(token) > 18:
        raise BadRequest(f"page_token {token[:40]!r} is not one this coordinator gave; start again with none")
    return int(token)


def jobs_page(core: CoordinatorCore, reader: StateReader, states: Iterable[str], token: str, page_size: int,
              summary: bool) -> JobsPage:
    """One page of jobs, newest first, without the coordinator's lock. A summary leaves out what a table
    does not show (exits, metrics, checkpoint, placement), and reads nothing beyond the job rows."""
    wanted = page_states(states)
    limit = min(page_size, PAGE_JOBS) if page_size > 0 else PAGE_JOBS
    jobs, next_before = reader.jobs_page(wanted, page_start(token), limit)
    views = tuple(JobView(j, (), waiting_reason=core.waiting.get(j.id, "")) if summary else _full_view(core, j)
                  for j in jobs)
    return JobsPage(views, "" if next_before is None else str(next_before), reader.count_jobs(wanted))


def _full_view(core: CoordinatorCore, job: Job) -> JobView:
    """As `job_view`, from the store's own lock (one short read at a time), not the coordinator's."""
    live = {a.agent: a for a in core.allocs.of_job(job.id)}
    return JobView(job, tuple(live.get(a.agent, a) for a in job.placement),
                   tuple(core.store.exits(job.id, job.attempt)), core.waiting.get(job.id, ""),
                   tuple(core.store.latest_metrics(job.id)), core.store.latest_checkpoint(job.id))


def agents_view(core: CoordinatorCore) -> list[AgentView]:
    with core.lock:
        views = []
        for a in sorted(core.agents.values(), key=lambda a: a.name):
            held = core.allocs.on_agent(a.name)
            taken = {g for x in held for g in x.gpus}
            untaken = [g.index for g in a.record.gpus if g.index not in taken]
            # What work outside tfdist holds (another namespace's coordinator, other workloads) is not free
            # either; which of its GPUs it holds is not known, only how many: the last ones are shown taken.
            elsewhere = min(a.held_elsewhere, len(untaken)) if a.record.gpus else 0
            views.append(AgentView(
                record=a.record, free_slots=max(0, a.record.slots - sum(x.slots for x in held) - a.held_elsewhere),
                state="LOST" if a.lost else "ALIVE", last_heartbeat=a.last_heartbeat,
                jobs=tuple(sorted({x.job_id for x in held})),
                free_gpus=tuple(untaken[:len(untaken) - elsewhere]),
                liveness="beacons" if a.beaconing and not a.lost else "heartbeats"))
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
