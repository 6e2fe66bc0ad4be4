"""A job's state machine as a table: (the job, its run, an event) -> (its run after, the actions, in order).
Pure: no store, no lock, no clock; each row names what it checks."""

from __future__ import annotations

import dataclasses

import pytest

from cluster.coordinator import job_machine as m
from cluster.coordinator.policy import Outcome
from cluster.coordinator.run_state import NOTHING, RunState, Runs, frozen
from cluster.shared import modes
from cluster.shared.model import Allocation, AllocState, Checkpoint, Job, JobState, WorkerExit
from cluster.shared.model import LogLine as OutputLine
from cluster.shared.modes import NodePlacement, Placement
from cluster.shared.work import RankProgress, RunningJob
from tests.specs import flat_spec
from tfdist.errors import InternalError

JOB = "7-t"
NOW = 100.0


def job(state=JobState.RUNNING, mode="mwms", **fields) -> Job:
    config = {k: fields.pop(k) for k in ("max_restarts", "step_timeout") if k in fields}
    spec = flat_spec(slots=2, distribution_mode=mode, **config)
    return Job(JOB, 7, spec, state, 0.0, **fields)


def allocations(*states: AllocState, ports: int = 3) -> tuple[Allocation, ...]:
    """One slot per node, and ports enough for any mode's tasks (parameter servers, a chief) on it."""
    return tuple(Allocation(JOB, f"n{i}", i, 1, f"10.0.0.{i}", tuple(29500 + 10 * i + p for p in range(ports)),
                            state=s) for i, s in enumerate(states))


def plan(job_: Job, allocs=None):
    allocs = allocs or allocations(AllocState.STARTED, AllocState.STARTED)
    placement = Placement(JOB, tuple(NodePlacement(a.agent, a.address, a.slots, a.ports) for a in allocs))
    return modes.planner(job_.spec.distribution_mode).plan(placement, job_.spec.config, [() for _ in allocs])


def facts(job_: Job, allocs=None, exits=(), checkpoint=None, with_plan=True) -> m.Facts:
    allocs = allocations(AllocState.STARTED, AllocState.STARTED) if allocs is None else allocs
    return m.Facts(job_, allocs, plan(job_, allocs) if with_plan and allocs else None, lambda: exits,
                   lambda: checkpoint, startup_timeout=60.0, stack_dump_grace=3.0)


def kinds(step: m.Step) -> list[str]:
    return [type(a).__name__ for a in step.actions]


def state_set(step: m.Step) -> m.SetState:
    [action] = [a for a in step.actions if isinstance(a, m.SetState)]
    return action


def exit_(rank, code=0, time=50.0) -> WorkerExit:
    return WorkerExit(rank, f"n{rank}", code, time=time)


WATCHED = RunState(start_clock=10.0, joined=frozenset({0, 1}), progress=frozen({0: (5, 90.0)}),
                   dump_to=frozenset({"n1"}))

# (what the row checks, the job, its allocations, its run, the event, the exits) ->
# (the actions' kinds, the state set if any, the run after: a predicate)
TABLE = [
    ("placing holds the nodes, starts the start-up clock, STARTING",
     job(JobState.QUEUED), (), NOTHING, m.Placed(allocations(AllocState.LEASING, AllocState.LEASING)), (),
     ["Hold", "SetState"], JobState.STARTING, lambda r: r.start_clock == NOW and not r.joined),
    ("a placement that cannot be made concrete fails the job for good",
     job(JobState.QUEUED, max_restarts=3), (), NOTHING, m.PlacementFailed("no shared subnet"), (),
     ["SetState", "Release", "Schedule"], JobState.FAILED, lambda r: r == NOTHING),
    ("the last node starting its workers: RUNNING",
     job(JobState.STARTING), allocations(AllocState.STARTED, AllocState.STARTED), WATCHED, m.NodesStarted(), (),
     ["SetState"], JobState.RUNNING, lambda r: r == WATCHED),
    ("one node of two started: still STARTING, nothing to do",
     job(JobState.STARTING), allocations(AllocState.STARTED, AllocState.REACHABLE), WATCHED, m.NodesStarted(), (),
     [], None, lambda r: r == WATCHED),
    ("ranks joining add to the joined",
     job(), None, RunState(start_clock=10.0, joined=frozenset({0})), m.Joined(frozenset({1})), (),
     [], None, lambda r: r.joined == {0, 1}),
    ("progress moves a rank's clock",
     job(), None, NOTHING, m.Progress(RunningJob(JOB, (0, 1), progress=(RankProgress(0, 12, 1.0),))), (),
     [], None, lambda r: r.progress == {0: (12, NOW - 1.0)}),
    ("a rank that stops reporting left training",
     job(), None, RunState(progress=frozen({0: (5, 90.0), 1: (5, 90.0)})),
     m.Progress(RunningJob(JOB, (0, 1), progress=(RankProgress(0, 6, 0.0),))), (),
     [], None, lambda r: r.progress == {0: (6, NOW)} and r.left_training == {1}),
    ("every rank exiting 0 (all-ranks rule): SUCCEEDED, released, a round",
     job(), None, WATCHED, m.Exited(), (exit_(0), exit_(1)),
     ["SetState", "Release", "Schedule"], JobState.SUCCEEDED, lambda r: r == NOTHING),
    ("one of two exits: nothing decided yet",
     job(), None, WATCHED, m.Exited(), (exit_(0),), [], None, lambda r: r == WATCHED),
    ("a failed rank with restarts left: back to QUEUED, attempt + 1, said in the log",
     job(max_restarts=2), None, WATCHED, m.Exited(), (exit_(1, code=3),),
     ["Release", "LogLine", "SetState", "Schedule"], JobState.QUEUED, lambda r: r == NOTHING),
    ("a failed rank with no restarts left: FAILED with the worker's code",
     job(max_restarts=1, restarts=1), None, WATCHED, m.Exited(), (exit_(1, code=3),),
     ["SetState", "Release", "Schedule"], JobState.FAILED, lambda r: r == NOTHING),
    ("every rank stopped at the preempted step: PAUSED",
     job(preempted_step=40), None, WATCHED, m.Exited(), (exit_(0), exit_(1)),
     ["Release", "SetState", "Schedule"], JobState.PAUSED, lambda r: r == NOTHING),
    ("a lost node with restarts left: restart from the checkpoint",
     job(max_restarts=1), None, WATCHED, m.Failed(Outcome(JobState.FAILED, "node n1 was lost", 1)), (),
     ["Release", "LogLine", "SetState", "Schedule"], JobState.QUEUED, lambda r: r == NOTHING),
    ("a failure of a job that already ended changes nothing",
     job(JobState.CANCELED), (), NOTHING, m.Failed(Outcome(JobState.FAILED, "late", 1)), (),
     [], None, lambda r: r == NOTHING),
    ("ports found busy are excluded on that node, and the plan is made again",
     job(JobState.STARTING), None, RunState(plan=None, start_clock=10.0), m.PortsBusy("n1", frozenset({29501})), (),
     [], None, lambda r: r.excluded_ports == {"n1": {29501}} and r.start_clock == 10.0),
    ("the last node freeing the job: its plan and joined ranks go",
     job(JobState.SUCCEEDED), (), RunState(joined=frozenset({0}), excluded_ports=frozen({"n1": frozenset({1})})),
     m.Freed("n1"), (), [], None, lambda r: r == NOTHING),
    ("a canceled running job: CANCELED (exit 130), released",
     job(), None, WATCHED, m.Canceled(), (), ["SetState", "Release", "Schedule"], JobState.CANCELED,
     lambda r: r == NOTHING),
    ("canceling an ended job does nothing",
     job(JobState.SUCCEEDED), (), NOTHING, m.Canceled(), (), [], None, lambda r: r == NOTHING),
    ("preempting a queued job pauses it at once",
     job(JobState.QUEUED), (), NOTHING, m.PreemptRequested(), (), ["SetState"], JobState.PAUSED,
     lambda r: r == NOTHING),
    ("preempting a job whose chief checks: asked once, its nodes told",
     job(preemptible=True), None, WATCHED, m.PreemptRequested(), (), ["Note", "TellNodes"], None,
     lambda r: r == WATCHED),
    ("preempting again while asked: nothing more",
     job(preemptible=True, preempt_requested=True), None, WATCHED, m.PreemptRequested(), (), [], None,
     lambda r: r == WATCHED),
    ("resuming a paused job: QUEUED again, from its checkpoint, no restart counted",
     job(JobState.PAUSED), (), NOTHING, m.Resumed(), (), ["Release", "LogLine", "SetState", "Schedule"],
     JobState.QUEUED, lambda r: r == NOTHING),
    ("an engine could not bring the gang up (its pods not scheduled in time): QUEUED again, no restart spent",
     job(JobState.STARTING), allocations(AllocState.LEASING, AllocState.LEASING), WATCHED,
     m.NotStarted("1 of the gang's 2 pods were not running within 60s"), (),
     ["Release", "LogLine", "SetState", "Schedule"], JobState.QUEUED, lambda r: r == NOTHING),
    ("... but a gang that started meanwhile, or a job that ended, is left as it is",
     job(JobState.RUNNING), None, WATCHED, m.NotStarted("late"), (), [], None, lambda r: r == WATCHED),
    ("the start-up over its timeout, a node never started: fail, counted",
     job(JobState.STARTING), allocations(AllocState.STARTED, AllocState.LEASED), RunState(start_clock=NOW - 61),
     m.DeadlineCheck(), (), ["Count", "SetState", "Release", "Schedule"], JobState.FAILED, lambda r: r == NOTHING),
    ("the start-up in time: its waiting reason is kept, followers told",
     job(JobState.STARTING), allocations(AllocState.STARTED, AllocState.LEASED), RunState(start_clock=NOW - 20),
     m.DeadlineCheck(), (), [], None, lambda r: "waiting for node n1" in r.joining and r.start_clock == NOW - 20),
    ("every rank joined: the start-up watch ends",
     job(), None, RunState(start_clock=NOW - 5, joined=frozenset({0, 1}), joining="waiting"), m.DeadlineCheck(), (),
     [], None, lambda r: r.start_clock is None and r.joining == ""),
    ("a rank silent past step_timeout: stacks asked of every node, a warning, fail later",
     job(step_timeout=30), None, RunState(progress=frozen({0: (5, NOW - 31), 1: (9, NOW - 1)})), m.DeadlineCheck(),
     (), ["Warn", "Note", "Count"], None,
     lambda r: r.stalled is not None and r.stalled[1] == NOW + 3.0 and r.dump_to == {"n0", "n1"}),
    ("a stall found earlier, its grace over: the job fails, an event saying what the stacks tell (none came)",
     job(step_timeout=30), None, RunState(stalled=(Outcome(JobState.FAILED, "rank 0 stalled", 1, 0), NOW - 1)),
     m.DeadlineCheck(), (), ["Note", "SetState", "Release", "Schedule"], JobState.FAILED, lambda r: r == NOTHING),
    ("a node asked for stacks is not asked again",
     job(), None, WATCHED, m.StacksAsked("n1"), (), [], None, lambda r: r.dump_to == frozenset()),
    # issue 45, Measured 7: a drain, an eviction or the cluster's preemption is routine, not a failure
    ("a disruption of a run whose workers check: they stop and save at a common step",
     job(preemptible=True), None, WATCHED, m.Disrupted("node n1 is being drained"), (), ["Note", "TellNodes"], None,
     lambda r: r.disrupted == "node n1 is being drained"),
    ("a disruption of a run that cannot stop at a step: placed again at once, no restart spent",
     job(), None, WATCHED, m.Disrupted("pod p evicted"), (), ["Release", "LogLine", "SetState", "Schedule"],
     JobState.QUEUED, lambda r: r == NOTHING),
    ("a disrupted run's workers saved at the common step: placed again, not PAUSED",
     job(preempt_requested=True, preempted_step=12), None, WATCHED.replace(disrupted="node n1 is being drained"),
     m.Exited(), (exit_(0), exit_(1)), ["Release", "LogLine", "SetState", "Schedule"], JobState.QUEUED,
     lambda r: r == NOTHING),
    ("a disrupted run's workers killed before the common step: placed again, not failed",
     job(max_restarts=0), None, WATCHED.replace(disrupted="pod p evicted"), m.Exited(), (exit_(0, code=-9),),
     ["Release", "LogLine", "SetState", "Schedule"], JobState.QUEUED, lambda r: r == NOTHING),
    ("a disrupted run's node lost (its pod deleted): placed again, not failed",
     job(max_restarts=0), None, WATCHED.replace(disrupted="node n1 is being drained"),
     m.Failed(Outcome(JobState.FAILED, "node n1 was lost", 1)), (), ["Release", "LogLine", "SetState", "Schedule"],
     JobState.QUEUED, lambda r: r == NOTHING),
    ("a disruption while a user's preemption is under way: the pause the user asked for stays a pause",
     job(preemptible=True, preempt_requested=True), None, WATCHED, m.Disrupted("node n1 is being drained"), (), [],
     None, lambda r: r.disrupted == ""),
    ("the engine's nodes are up (its pods' images pulled): the start-up clock starts now",
     job(JobState.STARTING), None, RunState(start_clock=10.0), m.NodesReady(), (), [], None,
     lambda r: r.start_clock == NOW),
    ("the engine's nodes are held (Kueue's gate): the start-up clock waits, the engine's words are the reason",
     job(JobState.STARTING), None, RunState(start_clock=10.0), m.NodesHeld("waiting for Kueue"), (), [], None,
     lambda r: r.start_clock == NOW and r.held == "waiting for Kueue"),
    ("held no more once its nodes are up",
     job(JobState.STARTING), None, RunState(start_clock=10.0, held="waiting for Kueue"), m.NodesReady(), (), [],
     None, lambda r: r.start_clock == NOW and r.held == ""),
    ("a second disruption of the same run changes nothing",
     job(preemptible=True, preempt_requested=True), None, WATCHED.replace(disrupted="x"), m.Disrupted("y"), (), [],
     None, lambda r: r.disrupted == "x"),
    ("the coordinator restarted: clocks start now, recorded exits decide",
     job(), None, NOTHING, m.Adopted(), (exit_(0), exit_(1)), ["SetState", "Release", "Schedule"],
     JobState.SUCCEEDED, lambda r: r == NOTHING),
]


@pytest.mark.parametrize("what, job_, allocs, run, event, exits, actions, new_state, run_after", TABLE,
                         ids=[row[0] for row in TABLE])
def test_step(what, job_, allocs, run, event, exits, actions, new_state, run_after):
    result = m.step(facts(job_, allocs, exits), run, event, NOW)
    assert kinds(result) == actions
    if result.run.joining != run.joining:
        assert result.touched  # followers print a job's waiting reason as it changes
    if new_state is not None:
        assert state_set(result).state == new_state
    assert run_after(result.run), result.run


def test_a_restart_counts_and_a_resume_does_not():
    restarted = m.step(facts(job(max_restarts=2, attempt=3, restarts=1)), WATCHED,
                       m.Failed(Outcome(JobState.FAILED, "rank 1 exited with code 3", 3)), NOW)
    assert state_set(restarted).fields.items() >= {"attempt": 4, "restarts": 2, "preempt_requested": 0}.items()
    assert "restart 2 of 2" in state_set(restarted).event
    resumed = m.step(facts(job(JobState.PAUSED, attempt=3, restarts=1), (), checkpoint=Checkpoint(40, "/c", 3, 1.0)),
                     NOTHING, m.Resumed(), NOW)
    assert state_set(resumed).fields["attempt"] == 4 and state_set(resumed).fields["restarts"] == 1
    assert state_set(resumed).event == "resumed from the checkpoint at step 40"
    placed_again = m.step(facts(job(JobState.STARTING, attempt=3, restarts=1)), WATCHED, m.NotStarted("pods late"), NOW)
    assert state_set(placed_again).fields.items() >= {"attempt": 4, "restarts": 1}.items()


def test_a_stall_reads_the_stacks_that_came_after_it_and_names_the_rank_the_others_wait_for():
    """The log's line count is kept when the stacks are asked; at the grace's end the lines after it are read:
    the failure reason, the failed rank and an event of its own say which rank is behind and in what."""
    dumped = [OutputLine(0, "stderr", text, NOW) for text in (
        "Current thread 0x00007f00 (most recent call first):",
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4181 in all_reduce',
        '  File "/job/train.py", line 90 in main')] + [OutputLine(1, "stderr", text, NOW) for text in (
        "Current thread 0x00007f01 (most recent call first):", '  File "/job/train.py", line 17 in slow_step',
        '  File "/job/train.py", line 86 in main')]
    asked = []
    running = job(step_timeout=30)
    seen = dataclasses.replace(facts(running), log_count=lambda: 41)
    found = m.step(seen, RunState(progress=frozen({0: (3, NOW - 31), 1: (3, NOW - 31)})), m.DeadlineCheck(), NOW)
    assert found.run.stacks_after == 41
    later = dataclasses.replace(facts(running), logs_after=lambda seq: asked.append(seq) or dumped)
    ended = m.step(later, found.run, m.DeadlineCheck(), NOW + 3.0)
    assert asked == [41] and kinds(ended) == ["Note", "SetState", "Release", "Schedule"]
    said = ("from the stacks, rank 1 (node n1) is behind at step 3 (the others at step 3 too), in the user's code at "
            "train.py:17 in slow_step; rank 0 waits in the collective (torch.distributed all_reduce, from train.py:90)")
    assert ended.actions[0].event == f"step watchdog: {said}"
    assert state_set(ended).fields["message"].endswith(f"the other workers were stopped; {said}")
    assert state_set(ended).fields["failed_rank"] == 1  # its last lines are the ones shown


def test_an_ending_records_the_live_placement_and_the_root_cause():
    held = allocations(AllocState.STARTED, AllocState.STARTED)
    ended = m.step(facts(job(placement=allocations(AllocState.LEASING, AllocState.LEASING)), held,
                         (exit_(1, code=7, time=1.0), exit_(0, code=-15, time=2.0))), WATCHED, m.Exited(), NOW)
    fields = state_set(ended).fields
    assert fields["placement"] == list(held) and fields["exit_code"] == 7 and fields["failed_rank"] == 1
    assert fields["ended_at"] == NOW


def test_refusals_change_nothing_and_say_what_to_do():
    with pytest.raises(m.Refused, match="cannot be preempted.*tfdist cancel 7-t"):
        m.step(facts(job()), WATCHED, m.PreemptRequested(), NOW)
    with pytest.raises(m.Refused, match="already ended"):
        m.step(facts(job(JobState.FAILED), ()), NOTHING, m.PreemptRequested(), NOW)
    with pytest.raises(m.Refused, match="is RUNNING, not PAUSED"):
        m.step(facts(job()), WATCHED, m.Resumed(), NOW)


def test_a_parameter_server_job_ends_with_its_chief():
    ps = job(mode="ps")
    result = m.step(facts(ps), WATCHED, m.Exited(), NOW)  # nothing exited
    assert result.actions == ()
    done = m.step(m.Facts(ps, allocations(AllocState.STARTED, AllocState.STARTED), plan(ps), lambda: (exit_(0),)),
                  WATCHED, m.Exited(), NOW)
    assert state_set(done).state == JobState.SUCCEEDED


def test_every_event_is_handled_and_every_step_is_pure():
    """Each event type has its case (none falls through to the InternalError), and a step changes neither its
    inputs nor depends on anything but them: the same inputs give the same step."""
    seen = {type(row[4]) for row in TABLE}
    assert seen == set(m.Event.__args__), set(m.Event.__args__) - seen
    for row in TABLE:
        _, job_, allocs, run, event, exits, *_ = row
        copy = dataclasses.replace(run)
        assert m.step(facts(job_, allocs, exits), run, event, NOW) == m.step(facts(job_, allocs, exits), run, event,
                                                                            NOW)
        assert run == copy
    with pytest.raises(InternalError, match="not a job event"):
        m.step(facts(job()), NOTHING, object(), NOW)


def test_a_rolled_back_event_puts_every_run_back():
    runs = Runs()
    runs.begin()
    runs.put("a", WATCHED)
    runs.commit()
    runs.begin()
    runs.update("a", joined=frozenset({0, 1, 2}), start_clock=None)
    runs.put("b", RunState(start_clock=1.0))
    runs.put("a", NOTHING)
    runs.set_waiting({"c": "waits"})
    runs.touched.add("a")
    runs.rollback()
    assert dict(runs.items()) == {"a": WATCHED} and runs.waiting == {} and not runs.touched
    assert runs.reasons().get("a", "") == "" and dict(runs.reasons()) == {}


def test_a_disruption_spends_no_restart_and_says_why():
    placed_again = m.step(facts(job(max_restarts=0, attempt=2, restarts=0), checkpoint=Checkpoint(30, "/c", 2, 1.0)),
                          WATCHED, m.Disrupted("pod tfdist-7-a2-n1 was evicted (DisruptionTarget: EvictionByEvictionAPI)"),
                          NOW)
    fields = state_set(placed_again).fields
    assert fields["attempt"] == 3 and fields["restarts"] == 0
    assert state_set(placed_again).event == ("pod tfdist-7-a2-n1 was evicted (DisruptionTarget: EvictionByEvictionAPI): "
                                             "placed again from the checkpoint at step 30 (no restart spent)")
    saved = m.step(facts(job(preempt_requested=True, preempted_step=12), exits=(exit_(0), exit_(1))),
                   WATCHED.replace(disrupted="node n1 is being drained"), m.Exited(), NOW)
    assert state_set(saved).event == "node n1 is being drained: stopped and saved at step 12; placed again (no " \
                                     "restart spent)"
    assert state_set(saved).fields["restarts"] == 0
