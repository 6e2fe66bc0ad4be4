"""A job pinned to named nodes (a `tfdist diagnose` variant runs where its baseline ran: config.diagnose.nodes,
issue 47 Must 1): the scheduler places it only there, on the tightest of them when it fits one, else on exactly
all of them once each is idle; while it waits it keeps its own nodes (if it is the first blocked), and its
reason names the nodes it waits for and who holds them; a node not registered makes it wait, not fail. Pure:
the scheduler's and the reasons' functions over typed values; the coordinator's queue reads the nodes from
the job's config."""

from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from cluster.coordinator.capacity import NodeIndex
from cluster.coordinator.lifecycle import pending
from cluster.coordinator.scheduler import Assignment, Node, PendingJob, schedule
from cluster.coordinator.wait_reasons import Holder, LostNode, Surroundings
from cluster.shared.config import ExperimentConfig
from cluster.shared.model import Job, JobSpec, JobState

WHY = "(a diagnose variant runs where its baseline ran)"
NAMES = {"7-ab12": "train", "8-cd34": "eval"}


def nodes(*spec):
    """nodes(("a", 8, 8), ...) -> [Node(name, slots, free)]"""
    return [Node(*s) for s in spec]


def around(holders=None, lost=()):
    return Surroundings({node: tuple(h) for node, h in (holders or {}).items()}, tuple(lost), NAMES)


def test_a_small_pinned_job_takes_the_tightest_of_its_nodes_not_the_clusters():
    cluster = nodes(("a1", 8, 8), ("a2", 8, 3), ("a3", 8, 5), ("a4", 8, 6))
    assert schedule(cluster, [PendingJob("j", 3)]).assignments == (Assignment("j", (("a2", 3),)),)  # unpinned
    d = schedule(cluster, [PendingJob("j", 3, nodes=("a1", "a3", "a4"))])
    assert d.assignments == (Assignment("j", (("a3", 3),)),) and d.waiting == {}
    assert schedule(cluster, [PendingJob("j", 3, nodes=("a1",))]).assignments == (Assignment("j", (("a1", 3),)),)


def test_a_bigger_pinned_job_takes_exactly_its_nodes_in_their_order():
    cluster = nodes(("a1", 4, 4), ("a2", 4, 4), ("a3", 8, 8))
    assert schedule(cluster, [PendingJob("j", 8)]).assignments == (Assignment("j", (("a3", 8),)),)  # unpinned
    d = schedule(cluster, [PendingJob("j", 8, nodes=("a2", "a1"))])
    assert d.assignments == (Assignment("j", (("a2", 4), ("a1", 4))),)  # node_rank 0 stays the baseline's


def test_a_bigger_pinned_job_waits_for_every_one_of_its_nodes_to_be_idle():
    cluster = nodes(("a1", 4, 4), ("a2", 4, 1), ("a3", 4, 4), ("a4", 4, 4))
    held = around({"a2": [Holder("7-ab12")]})
    d = schedule(cluster, [PendingJob("j", 8, nodes=("a1", "a2"))], held)
    assert d.assignments == ()  # a3 and a4 would do, but they are not its nodes
    assert d.waiting == {"j": f"waiting for its nodes a1 and a2 to be idle {WHY}; busy: a2 (job 7-ab12 (train))"}


def test_a_pinned_job_waits_for_its_node_while_other_nodes_are_idle():
    cluster = nodes(("a1", 2, 0), ("a2", 2, 2), ("a3", 2, 2))
    held = around({"a1": [Holder("7-ab12"), Holder("8-cd34", releasing=True)]})
    d = schedule(cluster, [PendingJob("j", 1, nodes=("a1",))], held)
    assert d.assignments == () and d.waiting == {
        "j": f"waiting for 1 slot free on its node a1 {WHY}; busy: a1 (job 7-ab12 (train), job 8-cd34 (eval) "
             "stopping its workers)"}


def test_a_pinned_job_that_waits_keeps_its_own_nodes_from_backfill():
    cluster = nodes(("a1", 4, 4), ("a2", 4, 2), ("a3", 4, 4))
    queue = [PendingJob("pinned", 8, seq=1, nodes=("a1", "a2")), PendingJob("small", 2, seq=2),
             PendingJob("wide", 8, seq=3)]
    d = schedule(cluster, queue, around({"a2": [Holder("7-ab12")]}))
    # The reservation an unpinned job of 8 would get is a1 and a3 (the emptiest); the pinned one keeps a1 and a2,
    # so the small job backfills onto a3, not a1.
    assert d.assignments == (Assignment("small", (("a3", 2),)),)
    assert d.waiting["pinned"] == f"waiting for its nodes a1 and a2 to be idle {WHY}; busy: a2 (job 7-ab12 (train))"
    assert "a1 and a2 are kept for earlier job pinned" in d.waiting["wide"]
    assert d.reserver_priority == 0


def test_a_small_pinned_job_that_waits_keeps_the_emptiest_of_its_nodes():
    cluster = nodes(("a1", 4, 1), ("a2", 4, 2), ("a3", 4, 4))
    d = schedule(cluster, [PendingJob("pinned", 3, seq=1, nodes=("a1", "a2")), PendingJob("small", 2, seq=2)])
    assert d.assignments == (Assignment("small", (("a3", 2),)),)  # a2, the emptiest of its nodes, is kept
    assert d.waiting["pinned"] == f"waiting for 3 slots free on one of its nodes a1 and a2 {WHY}; busy: a1 (other " \
                                  "workloads), a2 (other workloads)"


def test_a_pinned_job_does_not_take_nodes_kept_for_an_earlier_job():
    cluster = nodes(("a1", 4, 4), ("a2", 4, 1))
    d = schedule(cluster, [PendingJob("big", 8, seq=1), PendingJob("pinned", 2, seq=2, nodes=("a1",))])
    assert d.assignments == ()
    assert d.waiting["pinned"] == f"waiting for 2 slots free on its node a1 {WHY}; a1 is kept for earlier job big"


def test_a_pinned_node_not_registered_makes_the_job_wait_and_says_so():
    cluster = nodes(("a1", 4, 4), ("a3", 4, 4))
    d = schedule(cluster, [PendingJob("j", 8, nodes=("a1", "a2"))])
    assert d.assignments == () and d.waiting == {
        "j": f"waiting for its nodes a1 and a2 to be idle {WHY}; a2 is not registered (an agent may be restarting: "
             "it starts once it is back)"}
    d = schedule(cluster, [PendingJob("j", 1, nodes=("gone",))], around(lost=[LostNode("gone", 4, 47.0)]))
    assert d.waiting == {"j": f"waiting for its node gone {WHY}; gone is LOST (no heartbeat for 40 s)"}
    # Once it registers, the job starts there.
    assert schedule(cluster + nodes(("a2", 4, 4)), [PendingJob("j", 8, nodes=("a1", "a2"))]).assignments == \
        (Assignment("j", (("a1", 4), ("a2", 4))),)


def test_pinned_nodes_whose_slots_changed_say_so():
    d = schedule(nodes(("a1", 4, 4), ("a2", 2, 2), ("a3", 8, 8)), [PendingJob("j", 8, nodes=("a1", "a2"))])
    assert d.assignments == () and d.waiting == {
        "j": f"waiting for its nodes a1 and a2 to be idle {WHY}; they have 6 slots in all, not 8: they changed "
             "since its baseline ran"}


def test_a_blocked_pinned_job_does_not_stop_bigger_unpinned_ones_being_tried():
    """In a uniform cluster, unpinned jobs at least as big as a blocked whole-node job are not tried (they
    would not fit either); a pinned job blocked on its own nodes says nothing about the others."""
    cluster = nodes(("a1", 4, 0), ("a2", 4, 4), ("a3", 4, 4), ("a4", 4, 4), ("a5", 4, 4))
    d = schedule(cluster, [PendingJob("pinned", 8, seq=1, nodes=("a1", "a2")), PendingJob("wide", 12, seq=2)])
    assert d.assignments == (Assignment("wide", (("a3", 4), ("a4", 4), ("a5", 4))),)
    assert set(d.waiting) == {"pinned"}


def test_the_reason_of_a_job_pinned_to_many_nodes_stays_one_bounded_line():
    cluster = [Node(f"node-{i:04d}", 8, 0) for i in range(2000)]
    holders = {n.name: [Holder(f"{i}-abcd")] for i, n in enumerate(cluster)}
    pinned = tuple(n.name for n in cluster) + tuple(f"gone-{i}" for i in range(50))
    reason = schedule(cluster, [PendingJob("j", 16_400, nodes=pinned)], around(holders)).waiting["j"]
    assert "\n" not in reason and len(reason) < 500, reason
    assert reason.startswith(f"waiting for its nodes node-0000, node-0001, node-0002 and 2047 more to be idle {WHY}; "
                             "busy: node-0000 (job 0-abcd), node-0001 (job 1-abcd), node-0002 (job 2-abcd) and 1997 "
                             "more; gone-0, gone-1, gone-2 and 47 more are not registered")


def test_the_coordinators_queue_reads_the_nodes_from_the_jobs_config():
    config = ExperimentConfig(name="t", entrypoint=("x",), slots_per_trial=2, hyperparameters={"global_batch_size": 8},
                              diagnose={"variant": "baseline", "steps": 3, "warmup": 1, "run": "", "nodes": ["a2"]})
    assert pending(Job("1-ab", 1, JobSpec(config), JobState.QUEUED, 0.0)) == PendingJob("1-ab", 2, 0, 1, ("a2",))
    plain = ExperimentConfig(name="t", entrypoint=("x",), slots_per_trial=2, hyperparameters={"global_batch_size": 8})
    assert pending(Job("2-ab", 2, JobSpec(plain), JobState.QUEUED, 0.0)).nodes == ()


# ---------------------------------------------------------------- properties

UNDER_LOAD = [HealthCheck.too_slow]  # as tests/unit/test_scheduler.py: a loaded machine is no failure
clusters = st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.integers(0, 8)), min_size=1, max_size=10)
queues = st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8, 12, 16]), st.integers(0, 2),
                            st.lists(st.integers(0, 11), max_size=4, unique=True)), max_size=10)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=UNDER_LOAD)
@given(clusters, queues)
def test_pinned_jobs_land_only_on_their_nodes_and_nothing_is_overcommitted(cluster, queue):
    """Pins may name nodes that are not registered (n10, n11 here, for clusters of fewer nodes)."""
    live = [Node(f"n{i:02d}", size, min(free, size)) for i, (size, free) in enumerate(cluster)]
    jobs = [PendingJob(f"j{i}", slots, priority, i, tuple(f"n{k:02d}" for k in pins))
            for i, (slots, priority, pins) in enumerate(queue)]
    decision = schedule(live, jobs)
    by_index = schedule(NodeIndex(reversed(live)), jobs)  # the coordinator's index decides the same
    assert by_index.assignments == decision.assignments and dict(by_index.waiting) == dict(decision.waiting)
    size = {n.name: n.slots for n in live}
    free = {n.name: n.free_slots for n in live}
    job_of = {j.id: j for j in jobs}
    for assignment in decision.assignments:
        job = job_of[assignment.job_id]
        names = [name for name, _ in assignment.nodes]
        assert sum(used for _, used in assignment.nodes) == job.slots
        if job.nodes:
            assert set(names) <= set(job.nodes)
            if len(names) > 1 or job.slots > max(size[n] for n in job.nodes if n in size):
                assert names == list(job.nodes)  # exactly its nodes, each taken whole while idle
                assert all(free[n] == size[n] == used for n, used in assignment.nodes)
        for name, used in assignment.nodes:
            free[name] -= used
    assert all(f >= 0 for f in free.values())
    for job_id, reason in decision.waiting.items():  # every waiting pinned job names its nodes
        if job_of[job_id].nodes:
            assert reason.startswith("waiting for") and WHY in reason and "\n" not in reason
