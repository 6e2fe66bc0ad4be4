"""How a job's life goes on after its start: failures (end, or restart the whole gang under
max_restarts), preemption and resume, cancel, and tfdist's own records shipped with the metrics
(checkpoints, the preempted step). A mixin of CoordinatorCore: every method runs inside the core's
event (its lock and one SQLite transaction); the decisions themselves are cluster/coordinator/policy.py's."""

from __future__ import annotations

import dataclasses
import logging

from cluster.coordinator import policy
from cluster.coordinator.values import BadRequest
from cluster.shared.model import AllocState, Checkpoint, Job, JobState, LogLine, MetricRow, check_job_transition
from tfdist.metrics import CHECKPOINT_RECORD, PREEMPTED_RECORD, PREEMPTIBLE_RECORD

log = logging.getLogger("tfdist.coordinator")


class JobLifecycle:
    def _record(self, job: Job, row: MetricRow, now: float) -> None:
        """tfdist's own records, shipped beside the metrics: a checkpoint the chief finished writing, the step
        a preempted run stopped at. Each is idempotent (a retried batch applies once)."""
        if row.name == CHECKPOINT_RECORD and row.note:
            attempt = int(row.value)
            if self.store.record_checkpoint(job.id, Checkpoint(row.step, row.note, attempt, now)):
                self.store.update_job(job.id, now, f"checkpoint at step {row.step}: {row.note}")
        elif row.name == PREEMPTIBLE_RECORD and int(row.value) == job.attempt and not job.preemptible:
            self.store.update_job(job.id, now, preemptible=1)
        elif row.name == PREEMPTED_RECORD and int(row.value) == job.attempt and job.preempted_step is None:
            self.store.update_job(job.id, now, f"preempted: every worker stops and saves at step {row.step}",
                                  preempted_step=row.step)

    def cancel(self, job_ref: str, now: float) -> str:
        with self._event():
            job_id = self.resolve_job_id(job_ref)
            job = self.store.job(job_id)
            if not job.terminal:
                self._end(job_id, policy.Outcome(JobState.CANCELED, "canceled by the user", 130), now)
            return self.store.job(job_id).state.value

    def preempt(self, job_ref: str, now: float) -> str:
        """Asks the job's workers to stop at a common step, save and exit (the job then PAUSES). A queued
        job pauses at once. Refused while the job's chief has not shown that it checks (tfdist's Checkpoint
        callback or ctx.should_preempt() tell the coordinator at their first step): nothing would stop."""
        with self._event():
            job = self.store.job(self.resolve_job_id(job_ref))
            if job.state == JobState.QUEUED:
                self._transition(job, JobState.PAUSED, now, "preempted before it was placed")
            elif job.state.active and not job.preemptible:
                raise BadRequest(f"job {job.id} cannot be preempted: its workers do not check for preemption "
                                 "(tfdist.callbacks.Checkpoint, or ctx.should_preempt() in a custom loop) or have not "
                                 f"finished their first step yet. `tfdist cancel {job.id}` stops it")
            elif job.state.active and not job.preempt_requested:
                self.store.update_job(job.id, now, "preemption requested: the workers stop and save at a common step",
                                      preempt_requested=1)
                self._touched.add(job.id)
                self.allocs.touch(job.id)  # its nodes hear it at once
            elif job.terminal:
                raise BadRequest(f"job {job.id} already ended ({job.state.value}); nothing to preempt")
            return self.store.job(job.id).state.value

    def resume(self, job_ref: str, now: float) -> str:
        """A paused job runs again (a new attempt), from its latest checkpoint."""
        with self._event():
            job = self.store.job(self.resolve_job_id(job_ref))
            if job.state != JobState.PAUSED:
                raise BadRequest(f"job {job.id} is {job.state.value}, not PAUSED; only a paused job can be resumed")
            latest = self.store.latest_checkpoint(job.id)
            where = f"from the checkpoint at step {latest.step}" if latest else "from the start (no checkpoint)"
            self._requeue(job, now, f"resumed {where}", restart=False)
            return self.store.job(job.id).state.value

    def _fail(self, job_id: str, now: float, outcome: policy.Outcome) -> None:
        job = self.store.job(job_id)
        if job is None or job.terminal:
            return
        decision = policy.on_failure(outcome, job.restarts, job.spec.max_restarts)
        if decision.action == policy.FailureAction.RESTART and job.state.active:
            self._requeue(job, now, decision.message, restart=True)
        else:
            self._end(job_id, decision.outcome, now)

    def _pause(self, job: Job, now: float) -> None:
        """Every worker saved at the preempted step and exited: the job holds nothing until resumed."""
        self._release(job.id, now)
        self._transition(job, JobState.PAUSED, now, f"stopped and saved at step {job.preempted_step}; "
                                                    f"`tfdist resume {job.id}` continues from there",
                         message=f"paused at step {job.preempted_step}")
        self._schedule(now)

    def _requeue(self, job: Job, now: float, why: str, restart: bool) -> None:
        """The job's next run: its workers are stopped, and once every node let them go it is placed again
        (the same or other nodes) and starts from its latest checkpoint."""
        self._release(job.id, now)
        self.store.append_logs(job.id, [LogLine(-1, "stderr", f"tfdist: job {job.id}: {why}", now)])
        self._transition(job, JobState.QUEUED, now, why, attempt=job.attempt + 1,
                         restarts=job.restarts + (1 if restart else 0), preempt_requested=0, preempted_step=None,
                         preemptible=0,
                         message=why)
        self._schedule(now)

    def _release(self, job_id: str, now: float) -> None:
        """The job's nodes let go of it: its workers are stopped; a lost node holds nothing."""
        live = self.allocs.of_job(job_id)
        kept = [dataclasses.replace(a, state=AllocState.RELEASING) for a in live
                if a.agent in self.agents and not self.agents[a.agent].lost]
        self.allocs.replace(job_id, kept)
        self.waiting.pop(job_id, None)
        self._start_clock.pop(job_id, None)
        self._plans.pop(job_id, None)
        self._joined.pop(job_id, None)
        for watch in (self._progress, self._stalled, self._dump_to):
            watch.pop(job_id, None)

    def _end(self, job_id: str, outcome: policy.Outcome, now: float) -> None:
        job = self.store.job(job_id)
        if job is None or job.terminal:
            return
        live = self.allocs.of_job(job_id)
        recorded = {"placement": self._with_live(job.placement, live)} if live else {}
        self._transition(job, outcome.state, now, outcome.message, ended_at=now, message=outcome.message,
                         exit_code=outcome.exit_code, failed_rank=outcome.rank, **recorded)
        self._release(job_id, now)
        self._schedule(now)

    def _transition(self, job: Job, new: JobState, now: float, event: str, **fields) -> None:
        check_job_transition(job.state, new)
        self.store.update_job(job.id, now, f"{new.value}: {event}", state=new, **fields)
        log.info("job %s %s: %s", job.id, new.value, event)
        self._touched.add(job.id)
