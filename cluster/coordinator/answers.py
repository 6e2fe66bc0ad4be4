"""What the coordinator answers about jobs, as the wire's messages, without gRPC: the gRPC servicers
(server.py) send these, and a local launch's in-process client (in_process.py) reads the same values, so
a job looks the same to `tfdist launch`, `tfdist job` and another terminal."""

from __future__ import annotations

from typing import Sequence

from cluster.coordinator import views
from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.metrics import global_batch_size
from cluster.shared import diagnose_variant, jobspec
from cluster.shared.model import Allocation, JobState, LogLine
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb


def placement_to_pb(a: Allocation, holding: bool = True) -> pb.Placement:
    """`holding`: the job holds the node now; a job that does not (queued, paused, ended) shows where it ran,
    with no state (its recorded one, e.g. LEASING, is stale)."""
    return pb.Placement(agent=a.agent, node_rank=a.node_rank, slots=a.slots, address=a.address, ports=list(a.ports),
                        gpus=list(a.gpus), state=a.state.value if holding else "")


def job_to_pb(view: views.JobView, summary: bool = False) -> pb.Job:
    """A job for the wire, its environment values hidden (redact); `summary`: without what a table does not
    show (placement, exits, metrics, checkpoint)."""
    job = view.job
    if summary:
        view = views.JobView(job, (), waiting_reason=view.waiting_reason)
    return redact(pb.Job(
        id=job.id, spec=jobspec.to_pb(job.spec), state=job.state.value, submitted_at=job.submitted_at,
        started_at=job.started_at or 0, ended_at=job.ended_at or 0, waiting_reason=view.waiting_reason,
        message=job.message, exit_code=job.exit_code if job.exit_code is not None else -1,
        failed_rank=job.failed_rank if job.failed_rank is not None else -1,
        placement=[placement_to_pb(a, job.state in (JobState.STARTING, JobState.RUNNING)) for a in view.placement],
        exits=[pb.WorkerExit(rank=e.rank, agent=e.agent, exit_code=e.exit_code, last_lines=list(e.last_lines),
                             reason=e.reason, tolerated=e.tolerated, attempt=e.attempt) for e in view.exits],
        latest_metrics=[pb.Metric(rank=m.rank, step=m.step, name=m.name, value=m.value, time=m.time)
                        for m in view.latest_metrics],
        attempt=job.attempt, restarts=job.restarts, owner=job.owner,
        latest_checkpoint=pb.Checkpoint(step=view.latest_checkpoint.step, path=view.latest_checkpoint.path,
                                        attempt=view.latest_checkpoint.attempt, time=view.latest_checkpoint.time)
        if view.latest_checkpoint else pb.Checkpoint(step=-1)))


HIDDEN = diagnose_variant.HIDDEN


def redact(job: pb.Job) -> pb.Job:
    """Environment values never leave the coordinator toward users: names stay, values read "(hidden)"."""
    env = job.spec.config.environment_variables
    for key in list(env):
        env[key] = HIDDEN
    environment = job.spec.config.determined.fields.get("environment")  # Determined's by-device variables
    devices = environment.map_value.fields.get("environment_variables") if environment else None
    for kind in devices.map_value.fields.values() if devices else ():
        for value in kind.map_value.fields.values():
            value.string_value = HIDDEN
    return job




def job_answer(core: CoordinatorCore, job_ref: str, now: float) -> pb.Job:
    """GetJob's answer: the job, and a running one's throughput now."""
    job = job_to_pb(views.job_view(core, job_ref))
    if job.state == JobState.RUNNING.value:
        rate = core.throughput.steps_per_second(job.id, now)
        batch = global_batch_size(core.store.job(job.id))
        job.throughput.CopyFrom(pb.Throughput(steps_per_second=rate, examples_per_second=rate * batch, time=now))
    return job


def jobs_answer(core: CoordinatorCore, reader, states: Sequence[str], page_token: str, page_size: int,
                summary: bool) -> pb.ListJobsResponse:
    """A page of jobs, newest first, at most views.PAGE_JOBS of them and about views.PAGE_BYTES."""
    page = views.jobs_page(core, reader, states, page_token, page_size, summary)
    jobs, size = [], 0
    for view in page.views:
        job = job_to_pb(view, summary)
        size += job.ByteSize()
        if jobs and size > views.PAGE_BYTES:
            break
        jobs.append(job)
    cut = len(jobs) < len(page.views)  # the rest of this page comes with the next
    return pb.ListJobsResponse(jobs=jobs, total=page.total,
                               next_page_token=str(page.views[len(jobs) - 1].job.seq) if cut else page.next_token)


LOG_PAGE = 1000  # lines in a GetLogs page unless asked for fewer
MAX_LOG_PAGE = 5000  # ... or more, up to this
LONGEST_LOG_WAIT = 10.0  # seconds a GetLogs call may wait for new lines


def log_bounds(limit: int, wait: float) -> tuple[int, float]:
    """A logs request's page size and wait, within the coordinator's bounds (the servicer's and a local
    launch's alike)."""
    return min(limit or LOG_PAGE, MAX_LOG_PAGE), min(max(wait, 0.0), LONGEST_LOG_WAIT)


def logs_answer(lines: Sequence[LogLine], ended: bool) -> pb.GetLogsResponse:
    return pb.GetLogsResponse(job_ended=ended, lines=[
        pb.LogLine(seq=l.seq, rank=l.rank, stream=l.stream, text=l.text, time=l.time) for l in lines])
