"""A job's life as one state machine: `step(facts, run, event, now)` takes what happened to a job and returns
its run as it is after that and what to do, in order. Pure (no store, no lock, no clock of its own): the
coordinator's JobLifecycle (lifecycle.py) reads the facts, applies the actions and keeps the new run, all in
one event, so it is tested as a table (tests/unit/test_job_machine.py), as Ray Train's controller step or
torch elastic's agent loop are.

The states are the store's `JobState` (QUEUED -> STARTING -> RUNNING -> SUCCEEDED/FAILED/CANCELED, PAUSED and
back to QUEUED for a restart or a resume; model.check_job_transition holds the allowed arrows). The decisions
inside are the pure rules beside it: a mode's success rule (exits.py), restart or end (policy.on_failure), the
two watchdogs (watchdogs.py). How a placed gang's nodes are chosen, reached and started is the engine's
business: the machine hears `Placed`, `NodesStarted` and `Joined` and says `Hold` and `Release`."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from cluster.coordinator import exits as exits_lib, policy, watchdogs
from cluster.coordinator.job_events import (  # noqa: F401 (the machine's vocabulary, re-exported)
    Adopted, Placed, PlacementFailed, NodesStarted, Joined, Progress, Exited, Failed, NotStarted, PortsBusy, Freed,
    Canceled, PreemptRequested, Resumed, Disrupted, NodesReady, NodesHeld, DeadlineCheck, StacksAsked, SetState, Note,
    LogLine,
    Hold, Release, TellNodes, Schedule, Count, Warn, Event, Action)
from cluster.coordinator.run_state import NOTHING, RunState, frozen
from cluster.coordinator.values import BadRequest as Refused  # the user's action does not apply to the job as it is
from cluster.shared.model import Allocation, AllocState, Checkpoint, Job, JobState, WorkerExit
from cluster.shared.model import LogLine as OutputLine
from cluster.shared.modes import JobPlan
from tfdist.errors import InternalError


@dataclasses.dataclass(frozen=True)
class Facts:
    """What a step may read of the job besides its run. `exits` and `latest_checkpoint` are asked for only
    by the events that need them (they are store reads)."""
    job: Job
    allocations: tuple[Allocation, ...] = ()  # the nodes it holds now, in node-rank order
    plan: JobPlan | None = None
    exits: Callable[[], Sequence[WorkerExit]] = tuple  # the current run's
    latest_checkpoint: Callable[[], Checkpoint | None] = lambda: None
    startup_timeout: float = 300.0  # the coordinator's, for jobs that set none
    stack_dump_grace: float = 3.0
    log_count: Callable[[], int] = lambda: 0  # the job's log lines so far (the step watchdog's stall reads it)
    logs_after: Callable[[int], Sequence[OutputLine]] = lambda seq: ()  # ... and its lines after one (the stacks)


@dataclasses.dataclass(frozen=True)
class Step:
    run: RunState
    actions: tuple[Action, ...] = ()
    touched: bool = False  # the job's followers hear of it (a waiting reason changed)


# ---------------------------------------------------------------- the machine
# Events that change the run alone: no job read.
RUN_ONLY = (Joined, Progress, PortsBusy, Freed, StacksAsked, NodesReady, NodesHeld)


def step(facts: Facts, run: RunState, event: Event, now: float) -> Step:
    """The job's run after `event`, and what to do, in order. Raises Refused for a user's action that does
    not apply (nothing changed)."""
    if isinstance(event, RUN_ONLY):
        return run_step(run, facts.allocations, event, now)
    job = facts.job
    match event:
        case Adopted():
            return decide_exits(facts, run.replace(start_clock=now), now)
        case Placed(allocations):
            placed = ", ".join(f"{a.agent}:{a.slots}" + (f" (GPUs {','.join(map(str, a.gpus))})" if a.gpus else "")
                               for a in allocations)
            return Step(RunState(start_clock=now, excluded_ports=run.excluded_ports),
                        (Hold(allocations), SetState(JobState.STARTING, f"placed on {placed}",
                                                     {"placement": list(allocations)})))
        case PlacementFailed(message):
            return end(facts, run, policy.Outcome(JobState.FAILED, message, 1, restartable=False), now)
        case NodesStarted():
            if job.state == JobState.STARTING and facts.allocations and \
                    all(a.state == AllocState.STARTED for a in facts.allocations):
                return Step(run, (SetState(JobState.RUNNING, "every node started its workers", {"started_at": now}),))
            return Step(run)
        case Exited():
            return decide_exits(facts, run, now)
        case Failed(outcome):
            return fail(facts, run, outcome, now)
        case NotStarted(why):
            if job.state != JobState.STARTING:  # it started meanwhile, or ended: nothing to place again
                return Step(run)
            return requeue(facts, run, why, restart=False)
        case Canceled(why):
            if job.terminal:
                return Step(run)
            return end(facts, run, policy.Outcome(JobState.CANCELED, why, 130), now)
        case PreemptRequested():
            return preempt(facts, run)
        case Disrupted(why):
            return disrupted(facts, run, why)
        case Resumed():
            if job.state != JobState.PAUSED:
                raise Refused(f"job {job.id} is {job.state.value}, not PAUSED; only a paused job can be resumed")
            latest = facts.latest_checkpoint()
            where = f"from the checkpoint at step {latest.step}" if latest else "from the start (no checkpoint)"
            return requeue(facts, run, f"resumed {where}", restart=False)
        case DeadlineCheck():
            return deadlines(facts, run, now)
    raise InternalError(f"not a job event: {event!r}")


def run_step(run: RunState, allocations: tuple[Allocation, ...], event: Event, now: float) -> Step:
    """A step of RUN_ONLY events, which need nothing of the job but its run and allocations (they come with
    every heartbeat of a running job: the store is not read for them)."""
    match event:
        case Joined(ranks):
            return Step(run.replace(joined=run.joined | ranks))
        case Progress(report):
            progress, left = dict(run.progress), set(run.left_training)
            watchdogs.note_progress(progress, left, report, now)
            return Step(run.replace(progress=frozen(progress), left_training=frozenset(left)))
        case PortsBusy(node, ports):
            excluded = dict(run.excluded_ports)
            excluded[node] = excluded.get(node, frozenset()) | ports
            return Step(run.replace(excluded_ports=frozen(excluded), plan=None))
        case Freed(node):
            if not allocations:  # the last node let it go: nothing of this run is kept or watched
                return Step(NOTHING, touched=True)
            excluded = frozen({n: p for n, p in run.excluded_ports.items() if n != node})
            return Step(run.replace(excluded_ports=excluded), touched=True)
        case StacksAsked(node):
            return Step(run.replace(dump_to=run.dump_to - {node}))
        case NodesReady():
            return Step(run.replace(start_clock=now, held="") if run.start_clock is not None else run,
                        touched=bool(run.held))
        case NodesHeld(why):  # its start-up clock waits with it; its waiting reason is the engine's
            if run.start_clock is None:
                return Step(run)
            return Step(run.replace(start_clock=now, held=why), touched=run.held != why)
    raise InternalError(f"not a run-only event: {event!r}")


def decide_exits(facts: Facts, run: RunState, now: float) -> Step:
    """What the current run's exits decide together (the rule of its mode), if anything yet."""
    job = facts.job
    if not job.state.active or facts.plan is None:
        return Step(run)
    decision = exits_lib.decide(job, facts.plan, facts.exits())
    if decision is None:
        return Step(run)
    if run.disrupted and decision.action in (exits_lib.JobAction.FAIL, exits_lib.JobAction.PAUSE):
        saved = f"stopped and saved at step {job.preempted_step}" if decision.action == exits_lib.JobAction.PAUSE \
            else "stopped before a common step"
        return requeue(facts, run, f"{run.disrupted}: {saved}; placed again (no restart spent)", restart=False)
    if decision.action == exits_lib.JobAction.FAIL:
        return fail(facts, run, decision.outcome, now)
    if decision.action == exits_lib.JobAction.PAUSE:
        return Step(released(run), (Release(), SetState(
            JobState.PAUSED, f"stopped and saved at step {job.preempted_step}; `tfdist resume {job.id}` continues "
                             "from there", {"message": f"paused at step {job.preempted_step}"}), Schedule()))
    return end(facts, run, decision.outcome, now)


def fail(facts: Facts, run: RunState, outcome: policy.Outcome, now: float) -> Step:
    """Restart the whole gang while restarts remain (and running it again can help), else end it."""
    job = facts.job
    if job.terminal:
        return Step(run)
    if run.disrupted and job.state.active:  # its node went as the disruption said: no failure of the job's
        return requeue(facts, run, f"{run.disrupted}: {outcome.message}; placed again (no restart spent)",
                       restart=False)
    decision = policy.on_failure(outcome, job.restarts, job.spec.max_restarts)
    if decision.action == policy.FailureAction.RESTART and job.state.active:
        return requeue(facts, run, decision.message, restart=True)
    return end(facts, run, decision.outcome, now)


def requeue(facts: Facts, run: RunState, why: str, restart: bool) -> Step:
    """The job's next run: its workers are stopped, and once every node let them go it is placed again (the
    same or other nodes) and starts from its latest checkpoint."""
    job = facts.job
    return Step(released(run), (Release(), LogLine(f"tfdist: job {job.id}: {why}"), SetState(
        JobState.QUEUED, why, {"attempt": job.attempt + 1, "restarts": job.restarts + (1 if restart else 0),
                               "preempt_requested": 0, "preempted_step": None, "preemptible": 0, "message": why}),
        Schedule()))


def end(facts: Facts, run: RunState, outcome: policy.Outcome, now: float) -> Step:
    job = facts.job
    if job.terminal:
        return Step(run)
    fields = {"ended_at": now, "message": outcome.message, "exit_code": outcome.exit_code,
              "failed_rank": outcome.rank}
    if facts.allocations:
        fields["placement"] = with_live(job.placement, facts.allocations)
    return Step(released(run), (SetState(outcome.state, outcome.message, fields), Release(), Schedule()))


def released(run: RunState) -> RunState:
    """Nothing of a released run is watched; the ports found busy stay excluded until each node frees it."""
    return RunState(excluded_ports=run.excluded_ports) if run.excluded_ports else NOTHING


def preempt(facts: Facts, run: RunState) -> Step:
    """Asks the job's workers to stop at a common step, save and exit (the job then PAUSES). A queued job
    pauses at once. Refused while the job's chief has not shown that it checks (tfdist's Checkpoint callback
    or ctx.should_preempt() tell the coordinator at their first step): nothing would stop."""
    job = facts.job
    if job.state == JobState.QUEUED:
        return Step(run, (SetState(JobState.PAUSED, "preempted before it was placed"),))
    if job.state.active and not job.preemptible:
        raise Refused(f"job {job.id} cannot be preempted: its workers do not check for preemption "
                      "(tfdist.callbacks.Checkpoint, or ctx.should_preempt() in a custom loop) or have not "
                      f"finished their first step yet. `tfdist cancel {job.id}` stops it")
    if job.state.active and not job.preempt_requested:
        return Step(run, (Note("preemption requested: the workers stop and save at a common step",
                               {"preempt_requested": 1}), TellNodes()), touched=True)
    if job.terminal:
        raise Refused(f"job {job.id} already ended ({job.state.value}); nothing to preempt")
    return Step(run)


def disrupted(facts: Facts, run: RunState, why: str) -> Step:
    """A routine disruption of its nodes: a running run whose workers check for preemption stops at a common
    step with a checkpoint (their exits then requeue it: decide_exits); any other active run is placed again
    at once, from its latest checkpoint. Neither spends a restart."""
    job = facts.job
    if not job.state.active or job.state == JobState.QUEUED or run.disrupted or job.preempt_requested:
        return Step(run)  # (a pause a user asked for stays a pause)
    if job.state == JobState.RUNNING and job.preemptible:
        changes = () if job.preempt_requested else (
            Note(f"{why}: the workers stop and save at a common step, then the job is placed again",
                 {"preempt_requested": 1}), TellNodes())
        return Step(run.replace(disrupted=why), changes, touched=True)
    latest = facts.latest_checkpoint()
    where = f"from the checkpoint at step {latest.step}" if latest else "from the start (no checkpoint)"
    return requeue(facts, run, f"{why}: placed again {where} (no restart spent)", restart=False)


def deadlines(facts: Facts, run: RunState, now: float) -> Step:
    """The start-up watchdog (until every rank joined), then the step watchdog (a stall: stacks, then fail)."""
    touched = False
    if run.start_clock is not None:
        job, plan = facts.job, facts.plan
        exited = {e.rank for e in facts.exits()} if job.state.active and plan else set()
        check = watchdogs.startup(job, plan, run.joined, exited, facts.allocations, run.start_clock, now,
                                  facts.startup_timeout)  # the job's own, if it set one, wins there
        if check.outcome is not None:
            failed = fail(facts, run, check.outcome, now)
            return dataclasses.replace(failed, actions=(Count("startup_timeouts"), *failed.actions))
        if check.done:
            touched, run = bool(run.joining), run.replace(start_clock=None, joining="")
        elif run.joining != check.waiting:  # followers print it (STARTING, or RUNNING until all joined)
            touched, run = True, run.replace(joining=check.waiting)
    return progress_deadline(facts, run, now, touched)


def progress_deadline(facts: Facts, run: RunState, now: float, touched: bool = False) -> Step:
    if not run.progress and run.stalled is None:
        return Step(run, touched=touched)
    job, plan = facts.job, facts.plan
    check = watchdogs.progress(job, plan, run.progress, run.stalled, now, facts.stack_dump_grace, facts.allocations,
                               run.left_training)
    if check.outcome is not None and run.stalled is None and (exited := {e.rank for e in facts.exits()}):
        # A rank that exited is not stalled (read only now: exits are rarely needed here).
        check = watchdogs.progress(job, plan, run.progress, None, now, facts.stack_dump_grace, facts.allocations,
                                   run.left_training | exited)
    if check.fail_now:
        return stalled(facts, run, check.outcome, now)
    if check.outcome is not None:
        said = check.outcome.message.split(";")[0]
        return Step(run.replace(stalled=(check.outcome, check.fail_at), stacks_after=facts.log_count(),
                                dump_to=frozenset(a.agent for a in facts.allocations)),
                    (Warn(f"job {job.id}: {check.outcome.message}"), Note(f"{said}; dumping every rank's stacks"),
                     Count("stalls")), touched=True)
    return Step(run, touched=touched)


def stalled(facts: Facts, run: RunState, outcome: policy.Outcome, now: float) -> Step:
    """A stall's stacks had their time to ship: the job fails saying which rank the others wait for, and in
    what (read from those stacks and the ranks' steps), in its reason and as an event of its own."""
    if facts.plan is None:
        return fail(facts, run, outcome, now)
    gone = run.left_training | {e.rank for e in facts.exits()}
    outcome, said = watchdogs.culprit(outcome, facts.plan, facts.allocations, run.progress, gone,
                                      facts.logs_after(run.stacks_after), facts.stack_dump_grace)
    failed = fail(facts, run, outcome, now)
    if not said or not failed.actions:
        return failed
    return dataclasses.replace(failed, actions=(Note(f"step watchdog: {said}"), *failed.actions))


def with_live(placement: Sequence[Allocation], live: Sequence[Allocation]) -> list[Allocation]:
    """The job's placement as recorded, with the live allocations' states and ports where it holds nodes."""
    by_agent = {a.agent: a for a in live}
    return [by_agent.get(a.agent, a) for a in placement]
