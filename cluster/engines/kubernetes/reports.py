"""What the Kubernetes engine tells the job side about a run, each as one of the host's events: a run that
did not start (placed again after a backoff, bounded by run_objects.Retries), a disruption (the cluster takes a
node back), a failure. The job machine decides what follows. Each is also said as a Kubernetes Event on the
run's pods (pod_events.py), for `kubectl describe pod`."""

from __future__ import annotations

import logging
from typing import Callable

from cluster.coordinator.engine import CouldNotStart, Disrupted, EngineHost, GangEvent, GangFailed
from cluster.engines.kubernetes import pod_events, run_objects
from cluster.engines.kubernetes.gangs import Gang

log = logging.getLogger("tfdist.kubernetes")


class RunReports:
    def __init__(self, host: Callable[[], EngineHost], retries: run_objects.Retries,
                 say: Callable[[str, str, str], None] = lambda job_id, reason, message: None):
        """`say(job id, reason, message)`: an Event on the job's pods."""
        self._host, self.retries, self._say = host, retries, say

    def _handle(self, job_id: str, event: GangEvent) -> None:
        self._host().gang_event(job_id, event)

    def fail(self, job_id: str, why: str, restartable: bool) -> None:
        self._handle(job_id, GangFailed(why, restartable))
        self._say(job_id, pod_events.FAILED, f"job {job_id} failed: {why}")

    def not_started_again(self, job_id: str, why: str) -> None:
        """Its run did not start (pods refused, not bound in time, its node cordoned first): placed again after a
        backoff, at most MAX_NOT_STARTED times in a row; then it fails saying why."""
        tries, most = self.retries.failed(job_id), run_objects.MAX_NOT_STARTED
        if tries >= most:
            self.fail(job_id, f"its pods did not start in {tries} placements in a row; the last: {why}",
                      restartable=False)
            return
        self._handle(job_id, CouldNotStart(f"{why} (placement {tries} of at most {most})"))
        self._say(job_id, pod_events.NOT_STARTED, f"job {job_id}: its gang did not start: {why}; placed again "
                  f"(placement {tries} of at most {most})")

    def disrupted(self, gang: Gang, why: str) -> None:
        """The cluster takes a node of the run back: the job stops at a common step and is placed again (once)."""
        if gang.disrupted or gang.tearing_down:
            return
        gang.disrupted = True
        log.info("kubernetes: job %s run %d: %s", gang.job_id, gang.attempt, why)
        self._handle(gang.job_id, Disrupted(why))
        self._say(gang.job_id, pod_events.PREEMPTING, f"job {gang.job_id}: {why}; every worker stops at one step "
                  "with a checkpoint, and the job is placed again from it (no restart spent)")
