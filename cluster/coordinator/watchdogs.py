"""The coordinator's two watchdogs, as pure decisions over a job's state and `now`: a start-up that
takes too long, and a running job whose ranks stopped making progress (the step watchdog)."""

from __future__ import annotations

import dataclasses
from typing import Collection, Mapping, Sequence

from cluster.coordinator import policy
from cluster.shared.model import Allocation, Job, JobState
from cluster.shared.modes import JobPlan, SuccessRule


@dataclasses.dataclass(frozen=True)
class StartupCheck:
    done: bool = False  # every rank joined (or the job ended): stop watching its start-up
    outcome: policy.Outcome | None = None  # overdue: the job fails with this


def startup(job: Job | None, plan: JobPlan | None, joined: Collection[int], exited: Collection[int],
            allocations: Sequence[Allocation], clock: float, now: float, default_timeout: float) -> StartupCheck:
    """`clock`: when the job's start-up began (or the coordinator did); `joined`, `exited`: ranks of its
    current run that joined or already exited (an exit proves the rank joined)."""
    if job is None or not job.state.active or plan is None:
        return StartupCheck(done=True)
    joined = set(joined) | set(exited)
    if job.state == JobState.RUNNING and (plan.size <= 1 or joined >= set(range(plan.size))):
        return StartupCheck(done=True)
    timeout = job.spec.startup_timeout or default_timeout
    return StartupCheck(outcome=policy.startup_overdue(plan.size, allocations, joined, clock, now, timeout))


@dataclasses.dataclass(frozen=True)
class ProgressCheck:
    outcome: policy.Outcome | None = None
    fail_now: bool = False  # the stacks had their time to ship: the job fails with `outcome`
    fail_at: float = 0.0  # a new stall: ask every node for its workers' stacks, fail the job at this time


def progress(job: Job | None, plan: JobPlan | None, reported: Mapping[int, tuple[int, float]],
             stalled: tuple[policy.Outcome, float] | None, now: float, stack_dump_grace: float) -> ProgressCheck:
    """The step watchdog: a rank without progress past the job's step_timeout gets every rank's stacks
    dumped into the job's logs, and the job fails `stack_dump_grace` seconds later (time for them to
    ship). `reported`: rank -> (step, when reported); `stalled`: the stall already found, if any."""
    if stalled is not None:
        outcome, fail_at = stalled
        return ProgressCheck(outcome, fail_now=True) if now >= fail_at else ProgressCheck()
    if job is None or job.state != JobState.RUNNING or plan is None or not job.spec.step_timeout:
        return ProgressCheck()
    # Ranks that run the training loop: all of them, or in parameter-server mode the chief alone.
    trainers = [0] if plan.success is SuccessRule.CHIEF else [p.rank for p in plan.processes]
    outcome = policy.stalled(reported, trainers, now, job.spec.step_timeout)
    if outcome is None:
        return ProgressCheck()
    return ProgressCheck(outcome, fail_at=now + stack_dump_grace)
