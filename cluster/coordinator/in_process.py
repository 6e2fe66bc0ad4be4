"""A local launch's client of the coordinator in its own process: the calls `tfdist launch` makes (submit,
follow, cancel, preempt, resume, list), answered by the core with the same checks and the same messages as
the gRPC servicers (request_checks, answers.py), as the user who started the launch. No channel, no TLS, no
thread hand-off on the way to the workers' start; other terminals still reach the launch over gRPC."""

from __future__ import annotations

import time

from cluster.coordinator import answers, request_checks, views
from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.experiments import views as experiment_views
from cluster.shared import jobspec
from cluster.shared.job_pages import JobList, walk_pages
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

class InProcessClient:
    address = "this process"

    def __init__(self, core: CoordinatorCore, owner: str, clock=time.time):
        self.core, self.owner, self.clock = core, owner, clock
        self.follower = views.LogFollower(core)

    def submit(self, spec: pb.JobSpec, retry_for: float = 0.0) -> str:
        """`retry_for`: nothing to retry in-process (the Client's signature)."""
        request_checks.check("SubmitJob", pb.SubmitJobRequest(spec=spec))
        with self.core.lock.user_action():
            return self.core.submit(jobspec.from_pb(spec), self.clock(), owner=self.owner)[0]

    def job(self, job_id: str) -> pb.Job:
        return answers.job_answer(self.core, job_id, self.clock())

    def jobs(self, states=(), limit: int = 0, summary: bool = False) -> JobList:
        return walk_pages(self._page, states, limit, summary, "this launch's coordinator")

    def _page(self, request: pb.ListJobsRequest) -> pb.ListJobsResponse:
        request_checks.check("ListJobs", request)
        return answers.jobs_answer(self.core, self.follower.reader, request.states, request.page_token,
                                   request.page_size, request.summary)

    def logs(self, job_id: str, after_seq: int = 0, rank: int = -1, limit: int = 1000,
             wait: float = 0.0) -> pb.GetLogsResponse:
        limit, wait = answers.log_bounds(limit, wait)  # as GetLogs bounds them
        lines, ended = self.follower.logs(job_id, after_seq, rank, limit, wait)
        return answers.logs_answer(lines, ended)

    def metrics(self, job_id: str, name: str = "") -> pb.GetMetricsResponse:
        job_id, rows = views.metrics_view(self.core, job_id, name or None)
        return pb.GetMetricsResponse(job_id=job_id, metrics=[
            pb.Metric(rank=m.rank, step=m.step, name=m.name, value=m.value, time=m.time) for m in rows])

    def cancel(self, job_id: str) -> str:
        return self.core.cancel(job_id, self.clock())

    def preempt(self, job_id: str) -> str:
        return self.core.preempt(job_id, self.clock())

    def resume(self, job_id: str) -> str:
        return self.core.resume(job_id, self.clock())

    def experiment(self, ref: str) -> pb.Experiment:
        reader = self.follower.reader
        return experiment_views.experiment_answer(reader, experiment_views.find(reader, ref),
                                                  checkpoint_of=self.follower.reader.latest_checkpoint)

    def experiments(self) -> list[pb.Experiment]:
        return list(experiment_views.experiments_answer(self.follower.reader).experiments)

    def close(self) -> None:
        """Nothing to close: the launch closes its coordinator."""
