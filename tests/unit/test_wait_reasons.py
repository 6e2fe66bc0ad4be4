"""Why a job waits (issue 18, Must 5 and 9): the reasons name the jobs holding the needed nodes, the nodes
kept for an earlier job, the LOST nodes and what would let the job start; a placed job's reason says who
has not joined and for how long. Pure: typed values in, one bounded line out."""

from cluster.coordinator import policy, watchdogs
from cluster.coordinator.scheduler import Node, PendingJob, schedule
from cluster.coordinator.wait_reasons import Holder, LostNode, Surroundings, ago, queued, starting
from cluster.shared.config import ExperimentConfig
from cluster.shared.model import Allocation, AllocState, Job, JobSpec, JobState
from cluster.shared.modes import JobPlan, ProcessPlan, SuccessRule
from cluster.shared.work import RankProgress, RunningJob

NAMES = {"3-ab12": "train", "4-cd34": "eval"}


def around(holders=None, lost=()):
    return Surroundings({node: tuple(h) for node, h in (holders or {}).items()}, tuple(lost), NAMES)


def test_a_queued_job_names_the_job_holding_its_nodes():
    """Measured: `waiting for whole idle nodes totalling 2 slots; idle now: none`, naming nobody."""
    nodes = [Node("a1", 1, 0), Node("a2", 1, 0)]
    held = around({"a1": [Holder("3-ab12")], "a2": [Holder("3-ab12")]})
    assert schedule(nodes, [PendingJob("5-ff00", 2)], held).waiting == {"5-ff00": (
        "waiting for whole idle nodes totalling 2 slots; idle now: none; job 3-ab12 (train) holds a1 and a2; "
        "it starts when those nodes are free")}


def test_a_lost_node_is_named_with_what_would_let_the_job_start():
    """Measured: after a2 was lost, `idle now: a1` without a word about a2."""
    reason = schedule([Node("a1", 1, 1)], [PendingJob("5-ff00", 2)], around(lost=[LostNode("a2", 1, 47.0)])).waiting
    assert reason == {"5-ff00": "waiting for whole idle nodes totalling 2 slots; idle now: a1; a2 is LOST (no "
                                "heartbeat for 40 s); it starts when a2 is back (or lower --slots)"}


def test_a_job_larger_than_the_cluster_says_how_to_fix_it():
    assert queued("j", 4, [Node("a1", 1, 1), Node("a2", 1, 1)], around()) == \
        "needs 4 slots but the cluster has 2 in all: lower --slots or add nodes"
    assert queued("j", 3, [Node("a1", 2, 2), Node("a2", 2, 2)], around()) == \
        "needs 3 slots but no set of whole nodes sums to it (a job larger than one node takes whole nodes): lower " \
        "--slots or add nodes"


def test_a_small_job_names_the_most_free_node_and_who_holds_the_others():
    held = around({"a": [Holder("3-ab12")], "b": [Holder("4-cd34", releasing=True), Holder("9-9999")]})
    assert queued("j", 4, [Node("a", 8, 3), Node("b", 8, 1)], held) == (
        "waiting for 4 slots free on one node; the most free is 3 on a; job 3-ab12 (train) holds a; job 4-cd34 "
        "(eval) is stopping its workers on b; job 9-9999 holds b; it starts when one of those nodes has 4 free")


def test_nodes_kept_for_an_earlier_job_are_named():
    nodes = [Node("a", 8, 2), Node("b", 8, 8)]
    d = schedule(nodes, [PendingJob("big", 16, seq=1), PendingJob("small", 2, seq=2)], around({"a": [Holder("3-ab12")]}))
    assert d.waiting == {
        "big": "waiting for whole idle nodes totalling 16 slots; idle now: b; job 3-ab12 (train) holds a; it starts "
               "when that node is free",
        "small": "waiting for 2 slots free on one node; a and b are kept for earlier job big; it starts after that job"}


def test_a_reason_stays_one_bounded_line_on_a_big_cluster():
    nodes = [Node(f"node-{i:04d}", 8, 0) for i in range(2000)]
    holders = {n.name: [Holder(f"{i}-abcd")] for i, n in enumerate(nodes)}
    lost = [LostNode(f"lost-{i}", 8, 30.0 + i) for i in range(500)]
    reason = queued("j", 64, nodes, around(holders, lost))
    assert "\n" not in reason and len(reason) < 400, reason
    assert "job 0-abcd holds node-0000; job 1-abcd holds node-0001; job 2-abcd holds node-0002; 1997 more jobs " \
           "hold others" in reason
    assert "lost-0, lost-1, lost-10 and 497 more are LOST (no heartbeat for 30 s or more)" in reason
    assert len(queued("j", 64, nodes, Surroundings({"node-0000": (Holder("1-ab"),)}, (), {"1-ab": "x" * 300}))) < 300


def test_durations_are_coarse_so_a_reason_changes_rarely():
    assert [ago(s) for s in (0, 6.5, 9.9, 10, 47, 60, 119, 3599, 7300)] == \
        ["0 s", "6 s", "9 s", "10 s", "40 s", "1 min", "1 min", "59 min", "2 h"]


def allocs(*states):
    return tuple(Allocation("1-ab", f"a{i + 1}", i, 1, "10.0.0.1", (29500,), state=s) for i, s in enumerate(states))


def test_a_placed_job_says_which_ranks_have_not_joined_and_for_how_long():
    """Measured: a rank hung before tfdist.init() showed nothing until the startup timeout."""
    started = allocs(AllocState.STARTED, AllocState.STARTED)
    nodes = {0: "a1", 1: "a2"}
    assert starting(2, started, nodes, {0}, 41.0, 300.0) == \
        "1 of 2 ranks joined; waiting for rank 1 (node a2) for 40 s (startup timeout 300 s)"
    assert starting(2, started, nodes, {0}, 9.0, 300.0) == ""  # every start waits a few seconds: no word yet
    assert starting(2, started, nodes, {0}, 6.0, 12.0) == \
        "1 of 2 ranks joined; waiting for rank 1 (node a2) (startup timeout 12 s)"  # half a short timeout
    assert starting(5, started, {r: "a1" for r in range(5)}, (), 75.0, 300.0) == (
        "0 of 5 ranks joined; waiting for ranks 0 (node a1), 1 (node a1), 2 (node a1) and 2 more for 1 min "
        "(startup timeout 300 s)")
    assert starting(2, started, nodes, {0, 1}, 41.0, 300.0) == ""
    assert starting(1, started[:1], nodes, (), 41.0, 300.0) == ""
    assert starting(2, allocs(AllocState.STARTED, AllocState.LEASED), nodes, (), 12.0, 60.0) == \
        "waiting for node a2: checking that its peers reach it for 10 s (startup timeout 60 s)"


def test_the_startup_watchdog_gives_the_reason_until_it_fails_the_job():
    config = ExperimentConfig(name="t", entrypoint=("x",), slots_per_trial=4, hyperparameters={"global_batch_size": 8})
    job = Job("1-ab", 1, JobSpec(config), JobState.RUNNING, 0.0)
    plan = JobPlan(tuple(ProcessPlan(r, r // 2, r % 2, 2, 29500 + r % 2, (), 1, {}) for r in range(4)),
                   SuccessRule.ALL_RANKS)
    started = tuple(Allocation("1-ab", f"a{i + 1}", i, 2, "10.0.0.1", (29500, 29501), state=AllocState.STARTED)
                    for i in range(2))
    assert watchdogs.startup(job, plan, {0, 1}, (), started, 0.0, 5.0, 300.0).waiting == ""
    check = watchdogs.startup(job, plan, {0, 1}, (), started, 0.0, 20.0, 300.0)
    assert check.outcome is None and check.waiting == \
        "2 of 4 ranks joined; waiting for ranks 2 (node a2) and 3 (node a2) for 20 s (startup timeout 300 s)"
    assert watchdogs.startup(job, plan, {0, 1}, (), started, 0.0, 301.0, 300.0).waiting == ""


def test_the_step_watchdog_names_the_rank_behind_and_its_node():
    """A synchronous job stops everywhere when one rank is stuck: the others wait one step later."""
    nodes = {0: "a1", 1: "a2"}
    stall = policy.stalled({0: (12, 100.0), 1: (11, 101.0)}, [0, 1], 200.0, 60.0, nodes)
    assert stall.rank == 1 and stall.message.startswith(
        "rank 1 on node a2 made no progress for 99s (after step 11; the step watchdog allows 60s)")
    assert policy.stalled({0: (12, 100.0)}, [0, 1], 200.0, 60.0, nodes).message.startswith(
        "rank 1 on node a2 made no progress for 100s (before its first step")
    assert policy.stalled({0: (12, 100.0), 1: (11, 150.0)}, [0, 1], 200.0, 60.0, nodes).rank == 0  # 1 is not late
    assert policy.stalled({0: (12, 100.0)}, [0], 200.0, 60.0, nodes).rank == 0


def test_a_rank_that_stops_reporting_left_training_and_is_not_watched():
    seen, left = {}, set()
    watchdogs.note_progress(seen, left, RunningJob("1-ab", (0, 1), progress=(RankProgress(0, 5, 1.0),
                                                                             RankProgress(1, 5, 2.0))), 100.0)
    assert seen == {0: (5, 99.0), 1: (5, 98.0)} and left == set()
    watchdogs.note_progress(seen, left, RunningJob("1-ab", (0, 1), progress=(RankProgress(0, 9, 0.0),)), 110.0)
    assert seen == {0: (9, 110.0)} and left == {1}  # rank 1's fit ended: its progress file is gone
    watchdogs.note_progress(seen, left, RunningJob("1-ab", (1,), progress=(RankProgress(1, 10, 0.0),)), 120.0)
    assert seen == {0: (9, 110.0), 1: (10, 120.0)} and left == set()
