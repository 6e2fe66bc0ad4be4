"""The coordinator's two watchdogs, as pure decisions over a job's state and `now`: a start-up that
takes too long, and a running job whose ranks stopped making progress (the step watchdog), which then says
from the ranks' stacks which of them the others wait for (stack_reading.py)."""

from __future__ import annotations

import dataclasses
from typing import Collection, Mapping, Sequence

from cluster.coordinator import policy, stack_reading, wait_reasons
from cluster.shared.model import Allocation, Job, JobState, LogLine
from cluster.shared.modes import JobPlan, SuccessRule
from cluster.shared.work import RunningJob


@dataclasses.dataclass(frozen=True)
class StartupCheck:
    done: bool = False  # every rank joined (or the job ended): stop watching its start-up
    outcome: policy.Outcome | None = None  # overdue: the job fails with this
    waiting: str = ""  # else: who it waits for and how long (the job's waiting reason)


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
    outcome = policy.startup_overdue(plan.size, allocations, joined, clock, now, timeout)
    if outcome is not None:
        return StartupCheck(outcome=outcome)
    return StartupCheck(waiting=wait_reasons.starting(plan.size, allocations, node_of_rank(plan, allocations), joined,
                                                      now - clock, timeout))


def node_of_rank(plan: JobPlan, allocations: Sequence[Allocation]) -> dict[int, str]:
    """Rank -> the node it runs on."""
    agents = {a.node_rank: a.agent for a in allocations}
    return {p.rank: agents[p.node_rank] for p in plan.processes if p.node_rank in agents}


@dataclasses.dataclass(frozen=True)
class ProgressCheck:
    outcome: policy.Outcome | None = None
    fail_now: bool = False  # the stacks had their time to ship: the job fails with `outcome`
    fail_at: float = 0.0  # a new stall: ask every node for its workers' stacks, fail the job at this time


def progress(job: Job | None, plan: JobPlan | None, reported: Mapping[int, tuple[int, float]],
             stalled: tuple[policy.Outcome, float] | None, now: float, stack_dump_grace: float,
             allocations: Sequence[Allocation] = (), gone: Collection[int] = ()) -> ProgressCheck:
    """The step watchdog: a rank without progress past the job's step_timeout gets every rank's stacks
    dumped into the job's logs, and the job fails `stack_dump_grace` seconds later (time for them to
    ship). `reported`: rank -> (step, when reported); `stalled`: the stall already found, if any; `gone`:
    ranks not watched (they left training: `fit` ended, or they exited)."""
    if stalled is not None:
        outcome, fail_at = stalled
        return ProgressCheck(outcome, fail_now=True) if now >= fail_at else ProgressCheck()
    if job is None or job.state != JobState.RUNNING or plan is None or not job.spec.step_timeout:
        return ProgressCheck()
    outcome = policy.stalled(reported, [r for r in trainers(plan) if r not in gone], now, job.spec.step_timeout,
                             node_of_rank(plan, allocations))
    if outcome is None:
        return ProgressCheck()
    return ProgressCheck(outcome, fail_at=now + stack_dump_grace)


def trainers(plan: JobPlan) -> list[int]:
    """Ranks that run the training loop: all of them, or in parameter-server mode the chief alone."""
    return [0] if plan.success is SuccessRule.CHIEF else [p.rank for p in plan.processes]


def culprit(outcome: policy.Outcome, plan: JobPlan, allocations: Sequence[Allocation],
            reported: Mapping[int, tuple[int, float]], gone: Collection[int], lines: Sequence[LogLine],
            stack_dump_grace: float) -> tuple[policy.Outcome, str]:
    """The stall's outcome once the stacks had their time to ship, saying which rank the others wait for and
    in what (and naming that rank for its last lines), and that clause alone (the job's event). `lines`: the
    job's log since the stacks were asked; `gone`: ranks not watched."""
    ranks = [r for r in trainers(plan) if r not in gone]
    if not ranks:
        return outcome, ""
    found = stack_reading.verdict(stack_reading.dumps(lines), {r: step for r, (step, _) in reported.items()},
                                  ranks, node_of_rank(plan, allocations), stack_dump_grace)
    rank, message = outcome.rank, outcome.message
    if found.rank is not None and found.rank != outcome.rank:  # the stacks name another rank than the clock did:
        head, silent, rest = message.partition(" made no progress")  # the opening names none, the clause one
        message, rank = (f"the job{silent}{rest}" if silent else message), found.rank
    return dataclasses.replace(outcome, message=f"{message}; {found.said}", rank=rank), found.said


def note_progress(seen: dict[int, tuple[int, float]], left: set[int], job: RunningJob, now: float) -> None:
    """Takes in a node's progress report for the job (in place): each reporting rank's step and when it
    moved, on the coordinator's clock. A rank of that node that reported before and no longer does left
    training (its `fit` ended, its progress file is gone): it is no longer watched until it reports again."""
    reported = {p.rank: (p.step, now - p.age) for p in job.progress}
    for rank in job.ranks:
        if rank in reported:
            seen[rank] = reported[rank]
            left.discard(rank)
        elif seen.pop(rank, None) is not None:
            left.add(rank)
