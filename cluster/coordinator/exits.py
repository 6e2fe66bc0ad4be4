"""What a worker's exit means: how it is recorded, whether the job goes on without it, and what
the job's exits together decide (fail, pause at a preemption, end). Pure; the core applies it."""

from __future__ import annotations

import dataclasses
import enum
from typing import Sequence

from cluster.coordinator import policy
from cluster.shared.model import Job, JobState, WorkerExit, describe_exit
from cluster.shared.modes import JobPlan

LAST_LINES_KEPT = 20


@dataclasses.dataclass(frozen=True)
class ExitReport:
    recorded: WorkerExit  # as stored: stamped with the reporting agent and the time it arrived
    history: bool  # a worker of an earlier run (stopped for a restart): stored, decides nothing
    event: str = ""  # the job's event, when the job goes on without the rank


def read_exit(agent: str, exit_: WorkerExit, job: Job, plan: JobPlan | None, now: float) -> ExitReport:
    """A failed expendable rank of the current run (a parameter-server worker) is tolerated."""
    current = exit_.attempt == job.attempt and job.state.active
    tolerated = exit_.exit_code != 0 and current and plan is not None and exit_.rank in plan.expendable
    recorded = dataclasses.replace(exit_, agent=agent, time=now, tolerated=tolerated,
                                   last_lines=tuple(exit_.last_lines[-LAST_LINES_KEPT:]))
    event = f"rank {exit_.rank} on node {agent} {describe_exit(exit_.exit_code)}; the job goes on without it" \
        if tolerated else ""
    return ExitReport(recorded, history=exit_.attempt != job.attempt, event=event)


class JobAction(str, enum.Enum):
    FAIL = "FAIL"  # a failure: policy.on_failure decides between ending and restarting
    PAUSE = "PAUSE"  # every worker stopped at the preempted step: the job holds nothing until resumed
    END = "END"  # the job's outcome (it succeeded)


@dataclasses.dataclass(frozen=True)
class JobDecision:
    action: JobAction
    outcome: policy.Outcome


def decide(job: Job | None, plan: JobPlan | None, exits: Sequence[WorkerExit]) -> JobDecision | None:
    """The job's decision once the current run's exits decide it (the rule of its mode), else None."""
    if job is None or not job.state.active or plan is None:
        return None
    outcome = policy.job_outcome(plan.success, plan.size, exits, plan.expendable)
    if outcome is None:
        return None
    if outcome.state == JobState.FAILED:
        return JobDecision(JobAction.FAIL, outcome)
    if job.preempted_step is not None:
        return JobDecision(JobAction.PAUSE, outcome)
    return JobDecision(JobAction.END, outcome)
