"""Runs handed to an engine that places gangs itself (cluster/coordinator/handover.py), pure: each queued run
handed over once (again only for its next run), the engine's word as the waiting reason, and what a placement
must hold before the job side takes it. With real processes: tests/integration/test_engine_contract.py."""

from cluster.coordinator.handover import Handover, placement_problem
from cluster.coordinator.scheduler import PendingJob
from cluster.shared.model import JobState
from tests.specs import flat_spec


class Stored:
    def __init__(self, job_id, attempt=0, state=JobState.QUEUED, slots=4):
        self.id, self.attempt, self.state, self.spec = job_id, attempt, state, flat_spec(slots=slots)


def test_each_queued_run_is_handed_over_once_and_again_for_its_next_run():
    handed = []
    handover = Handover("kueue", handed.append)
    jobs = {"a": Stored("a"), "b": Stored("b")}
    queued = [PendingJob("a", 4, priority=5, nodes=("n1",)), PendingJob("b", 4)]
    assert handover.round(queued, ["b"], jobs.get) == {
        "a": "waiting for the kueue engine to place it", "b": "waiting for its earlier run's nodes to let it go"}
    assert [(r.job_id, r.attempt, r.slots, r.priority, r.nodes) for r in handed] == [("a", 0, 4, 5, ("n1",))]
    assert handover.waiting("a", 0, "ClusterQueue team-a: quota 0/4") and not handover.waiting("a", 1, "no")
    assert handover.round(queued, [], jobs.get)["a"] == "waiting for the kueue engine to place it: ClusterQueue " \
                                                        "team-a: quota 0/4"
    assert [r.job_id for r in handed] == ["a", "b"]
    jobs["a"] = Stored("a", attempt=1)  # restarted: its next run is handed over
    handover.round(queued, [], jobs.get)
    assert [(r.job_id, r.attempt) for r in handed] == [("a", 0), ("b", 0), ("a", 1)]
    handover.transition(jobs["b"], JobState.CANCELED)
    assert "b" not in handover.handed and not handover.waiting("b", 0, "late")


def test_a_placement_is_taken_only_for_the_run_handed_over_on_free_offered_nodes_of_its_size():
    handed = {"a": (0, "")}
    free = {"n1": 2, "n2": 2}
    job = Stored("a")
    assert placement_problem(job, 0, handed, [("n1", 2), ("n2", 2)], free) == ""
    assert placement_problem(job, 1, handed, [("n1", 2), ("n2", 2)], free) == \
        "job a (run 1) is not waiting for the engine's placement"
    assert placement_problem(Stored("a", state=JobState.STARTING), 0, handed, [("n1", 4)], free).startswith("job a")
    assert placement_problem(job, 0, handed, [("n1", 2), ("n1", 2)], free) == \
        "a placement names each node once, at least one: got ['n1', 'n1']"
    assert placement_problem(job, 0, handed, [("n3", 4)], free) == "node n3 is not offered (or was lost)"
    assert placement_problem(job, 0, handed, [("n1", 4)], free) == "node n1 has 2 free slot(s), not 4"
    assert placement_problem(job, 0, handed, [("n1", 2)], free) == "the placement has 2 slot(s); job a needs 4"
