"""The gang scheduler, pure: placements, whole nodes, all-or-nothing, queue policy, feasibility."""

import pytest

from cluster.coordinator.scheduler import (Assignment, InfeasibleJob, Node, PendingJob, achievable_sizes, check_feasible,
                               schedule)


def nodes(*spec):
    """nodes(("a", 8, 8), ...) -> [Node(name, slots, free)]"""
    return [Node(*s) for s in spec]


def test_small_job_goes_to_the_tightest_node():
    d = schedule(nodes(("a", 8, 8), ("b", 8, 3), ("c", 8, 5)), [PendingJob("j", 3)])
    assert d.assignments == (Assignment("j", (("b", 3),)),) and d.waiting == {}


def test_two_small_jobs_pack_one_node():
    d = schedule(nodes(("a", 4, 4), ("b", 4, 4)), [PendingJob("j1", 2, seq=1), PendingJob("j2", 2, seq=2)])
    assert [a.nodes for a in d.assignments] == [(("a", 2),), (("a", 2),)]


def test_large_job_takes_whole_idle_nodes_only():
    d = schedule(nodes(("a", 8, 8), ("b", 8, 7), ("c", 8, 8)), [PendingJob("big", 16)])
    assert d.assignments == (Assignment("big", (("a", 8), ("c", 8))),)


def test_all_or_nothing():
    d = schedule(nodes(("a", 8, 8), ("b", 8, 7)), [PendingJob("big", 16)])
    assert d.assignments == ()
    assert d.waiting == {"big": "waiting for whole idle nodes totalling 16 slots; idle now: a"}


def test_heterogeneous_exact_sum():
    d = schedule(nodes(("a", 8, 8), ("b", 4, 4), ("c", 2, 2)), [PendingJob("j", 10)])
    assert d.assignments == (Assignment("j", (("a", 8), ("c", 2))),)
    d = schedule(nodes(("a", 8, 8), ("b", 4, 4), ("c", 2, 2)), [PendingJob("j", 9)])
    assert d.assignments == ()


def test_priority_then_fifo():
    pending = [PendingJob("old", 8, priority=0, seq=1), PendingJob("urgent", 8, priority=5, seq=3),
               PendingJob("older", 8, priority=0, seq=0)]
    d = schedule(nodes(("a", 8, 8), ("b", 8, 8)), pending)
    assert [a.job_id for a in d.assignments] == ["urgent", "older"]
    assert "old" in d.waiting


def test_large_job_is_not_starved_by_later_small_jobs():
    # a is busy with 6 slots; b idle. "big" needs a and b; the small jobs behind it must not take b.
    cluster = nodes(("a", 8, 2), ("b", 8, 8))
    pending = [PendingJob("big", 16, seq=1), PendingJob("s1", 2, seq=2), PendingJob("s2", 4, seq=3)]
    d = schedule(cluster, pending)
    assert d.assignments == ()
    assert d.waiting["big"] == "waiting for whole idle nodes totalling 16 slots; idle now: b"
    assert d.waiting["s1"] == "waiting for 2 slots free on one node; a and b are kept for earlier job big; it starts " \
                              "after that job"
    # Once a drains, big starts.
    d = schedule(nodes(("a", 8, 8), ("b", 8, 8)), pending)
    assert [a.job_id for a in d.assignments] == ["big"]


def test_backfill_onto_nodes_not_reserved():
    cluster = nodes(("a", 8, 2), ("b", 8, 8), ("c", 8, 8))
    pending = [PendingJob("wide", 24, seq=1), PendingJob("small", 4, seq=2)]
    d = schedule(cluster, pending)
    assert d.assignments == ()  # all three nodes are held for "wide"
    cluster = nodes(("a", 8, 2), ("b", 8, 8), ("c", 8, 8), ("d", 4, 4))
    d = schedule(cluster, [PendingJob("wide", 24, seq=1), PendingJob("small", 4, seq=2)])
    assert d.assignments == (Assignment("small", (("d", 4),)),)


def test_waiting_reason_for_small_job():
    d = schedule(nodes(("a", 8, 3), ("b", 8, 1)), [PendingJob("j", 4)])
    assert d.waiting == {"j": "waiting for 4 slots free on one node; the most free is 3 on a"}


def test_feasibility_names_the_nearest_sizes():
    with pytest.raises(InfeasibleJob) as err:
        check_feasible(12, nodes(("a", 8, 8), ("b", 8, 0)))
    assert str(err.value) == (
        "slots_per_trial=12 can never be scheduled on this cluster (2 nodes of 8 slots): a job larger than one "
        "node takes whole nodes, so its slots must be a sum of whole nodes. Sizes that fit: 1-8, 16. "
        "Nearest: 8 or 16.")
    with pytest.raises(InfeasibleJob, match=r"Sizes that fit: 1-3, 4, 5, 7\. Nearest: 7\.$"):
        check_feasible(9, nodes(("a", 2, 2), ("b", 2, 2), ("c", 3, 3)))
    with pytest.raises(InfeasibleJob, match="no agents are registered"):
        check_feasible(1, [])
    check_feasible(16, nodes(("a", 8, 0), ("b", 8, 0)))  # busy nodes still count: it can run later
    check_feasible(3, nodes(("a", 4, 0)))


def test_achievable_sizes():
    assert achievable_sizes([8, 8, 8]) == (8, {16, 24})
    assert achievable_sizes([]) == (0, set())


# ---------------------------------------------------------------- the coordinator's persistent index

from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st  # noqa: E402

# Hypothesis' too_slow check times the drawing of inputs: on a loaded 2-core CI machine one draw once took 49 s
# (the process starved), and a property test must not fail on how busy the machine is.
UNDER_LOAD = [HealthCheck.too_slow]

from cluster.coordinator.capacity import NodeIndex  # noqa: E402

clusters = st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.integers(0, 8)), min_size=1, max_size=12)
queues = st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8, 12, 16, 24]), st.integers(0, 2)), max_size=12)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=UNDER_LOAD)
@given(clusters, queues)
def test_a_round_over_the_index_decides_as_one_over_the_list_and_leaves_the_index_as_it_was(cluster, queue):
    nodes = [Node(f"n{i:02d}", size, min(free, size)) for i, (size, free) in enumerate(cluster)]
    pending = [PendingJob(f"j{i}", slots, priority, i) for i, (slots, priority) in enumerate(queue)]
    index = NodeIndex(reversed(nodes))  # the order nodes arrive in does not matter
    before = (dict(index.nodes), {k: list(v) for k, v in index.by_free.items()},
              {k: list(v) for k, v in index.idle_by_size.items()}, index.free_total)
    by_list, by_index = schedule(nodes, pending), schedule(index, pending)
    assert by_index.assignments == by_list.assignments
    assert dict(by_index.waiting) == dict(by_list.waiting)
    assert (by_index.settled, by_index.reserver_priority) == (by_list.settled, by_list.reserver_priority)
    after = (dict(index.nodes), {k: list(v) for k, v in index.by_free.items()},
             {k: list(v) for k, v in index.idle_by_size.items()}, index.free_total)
    assert after == before  # the round changed its own copies of the buckets, not the index's


class NotWalked(dict):
    """A table of nodes that may be read by name but not walked or copied whole."""

    def _walked(self, *args):
        raise AssertionError("a submission's round walked every node of the cluster")

    __iter__ = keys = values = items = copy = _walked


def test_a_round_reads_the_nodes_it_places_on_and_walks_none_of_the_others():
    index = NodeIndex([Node(f"n{i:05d}", 8, 8) for i in range(10_000)])
    index.nodes = NotWalked(index.nodes)
    decision = schedule(index, [PendingJob("j0", 3), PendingJob("j1", 16)])
    assert decision.assignments == (Assignment("j0", (("n00000", 3),)), Assignment("j1", (("n00001", 8), ("n00002", 8))))
    assert index.nodes["n00000"].free_slots == 8  # the round's changes are its own


def test_a_rounds_view_for_reasons_shows_a_node_changed_since_as_it_is_now():
    index = NodeIndex([Node("a", 8, 8), Node("b", 8, 8)])
    cap = index.capacity()
    cap.take("a", 8)  # the round placed a job there; the index is as it was
    assert sorted(cap.nodes_now(), key=lambda n: n.name) == [Node("a", 8, 0), Node("b", 8, 8)]
    index.put(Node("a", 4, 0))  # then a re-registered smaller (no new round)
    assert sorted(cap.nodes_now(), key=lambda n: n.name) == [Node("a", 4, 0), Node("b", 8, 8)]


def test_the_index_follows_a_node_through_its_changes():
    index = NodeIndex([Node("a", 8, 8), Node("b", 8, 8)])
    index.put(Node("a", 8, 2))  # a job took 6 slots
    assert index.by_free == {8: ["b"], 2: ["a"]} and index.idle_by_size == {8: ["b"]} and index.free_total == 10
    index.put(Node("c", 4, 4))
    index.remove("b")  # lost
    assert sorted(index.nodes) == ["a", "c"] and index.sizes == {8: 1, 4: 1} and index.free_total == 6
    assert schedule(index, [PendingJob("j", 3)]).assignments == (Assignment("j", (("c", 3),)),)


def test_slots_other_workloads_hold_are_not_free_but_the_node_keeps_its_size():
    """AgentLive.held_elsewhere (a Kubernetes node's GPUs other pods hold): the node is not idle, so no gang
    goes there, yet its size still counts, so a job that fits it waits instead of being refused."""
    from cluster.coordinator.allocations import AllocationTable
    from cluster.coordinator.capacity import LiveNodes
    from cluster.coordinator.store.memory import MemoryStore
    from cluster.coordinator.values import AgentLive
    from cluster.shared.model import AgentRecord

    agents = {n: AgentLive(AgentRecord(n, 8, ()), 0.0) for n in ("g1", "g2")}
    agents["g2"].held_elsewhere = 8
    live = LiveNodes(agents, AllocationTable(MemoryStore()))
    assert {n.name: n.free_slots for n in live.index.nodes.values()} == {"g1": 8, "g2": 0}
    from cluster.coordinator.scheduler import check_feasible_sizes

    check_feasible_sizes(16, live.index.sizes)  # both nodes count: 16 slots fit once g2 is free
    agents["g2"].held_elsewhere = 0
    live.refresh(["g2"])
    assert live.index.nodes["g2"].free_slots == 8
