"""A run's pods judged (cluster/engines/kubernetes/gangs.py), as a table of the API's Pod JSON: all Running,
still starting within the bound, not started in time (placed again), broken for good (failed), and a pod of a
started gang that ended or vanished (lost)."""

import pytest

from cluster.engines.kubernetes.gangs import Verdict, judge, why_pending

NAMES = {"n1": "job-a0-n0", "n2": "job-a0-n1"}


def pod(phase="Pending", node="n1", scheduled=None, waiting=None, terminated=None, deleting=False, target=None,
        reason=None):
    status = {"phase": phase, "conditions": [], "containerStatuses": []}
    if target:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": target})
    if reason:
        status["reason"] = reason
    if scheduled is not None:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": scheduled})
    if waiting:
        status["containerStatuses"].append({"name": "tfdist-worker", "state": {"waiting": {"reason": waiting}}})
    if terminated is not None:
        status["containerStatuses"].append({"name": "tfdist-worker", "state": {"terminated": {
            "exitCode": terminated, "reason": "Error"}}})
    meta = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node if scheduled is None else None}, "status": status}


RUNNING = pod("Running")


@pytest.mark.parametrize("pods, seen, age, verdict, said", [
    ({"n1": RUNNING, "n2": RUNNING}, [], 1, Verdict.RUNNING, ""),
    ({"n1": RUNNING, "n2": pod()}, [], 10, Verdict.STARTING, ""),
    ({"n1": RUNNING, "n2": None}, [], 10, Verdict.STARTING, ""),  # not seen yet by the watch
    ({"n1": RUNNING, "n2": pod(scheduled="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")}, [], 61,
     Verdict.NOT_STARTED, "1 of the gang's 2 pods were not running within 60s (job-a0-n1 on n2: not scheduled: 0/4 "
                          "nodes are available: 4 Insufficient nvidia.com/gpu.)"),
    # issue 45, Measured 8: a pull error is tried again within the pull bound, and a long pull is no
    # reason to tear the gang down at the start bound
    ({"n1": RUNNING, "n2": pod(waiting="ErrImagePull")}, [], 5, Verdict.STARTING, ""),
    ({"n1": RUNNING, "n2": pod(waiting="ImagePullBackOff")}, [], 300, Verdict.STARTING, ""),
    ({"n1": RUNNING, "n2": pod(waiting="ContainerCreating")}, [], 300, Verdict.STARTING, ""),
    ({"n1": RUNNING, "n2": pod(waiting="ImagePullBackOff")}, [], 601, Verdict.BROKEN,
     "pod job-a0-n1 on node n2 was still getting its image or volumes ready after 600s (ImagePullBackOff)"),
    ({"n1": RUNNING, "n2": pod(waiting="InvalidImageName")}, [], 5, Verdict.BROKEN,
     "pod job-a0-n1 on node n2 cannot start: InvalidImageName"),
    # a pulling pod beside one the scheduler did not bind: the start bound holds for the gang
    ({"n1": pod(waiting="ContainerCreating"), "n2": pod(scheduled="0/2 nodes are available")}, [], 61,
     Verdict.NOT_STARTED, "2 of the gang's 2 pods were not running within 60s"),
    ({"n1": RUNNING, "n2": pod("Failed", terminated=137)}, ["n1", "n2"], 100, Verdict.LOST,
     "its pod job-a0-n1 ended (Failed, exit code 137 (Error))"),
    ({"n1": RUNNING, "n2": None}, ["n1", "n2"], 100, Verdict.LOST, "its pod job-a0-n1 was deleted"),
    # issue 45, Measured 7: evictions, the scheduler's preemption and deletions are disruptions, not losses
    ({"n1": RUNNING, "n2": pod("Running", deleting=True)}, ["n1", "n2"], 100, Verdict.DISRUPTED,
     "pod job-a0-n1 on node n2 was taken back by the cluster (deleted)"),
    ({"n1": RUNNING, "n2": pod("Running", deleting=True, target="EvictionByEvictionAPI")}, ["n1", "n2"], 100,
     Verdict.DISRUPTED, "(DisruptionTarget: EvictionByEvictionAPI)"),
    ({"n1": RUNNING, "n2": pod("Running", target="PreemptionByScheduler")}, ["n1", "n2"], 100,
     Verdict.DISRUPTED, "(DisruptionTarget: PreemptionByScheduler)"),
    ({"n1": RUNNING, "n2": pod("Failed", reason="Evicted", terminated=137)}, ["n1", "n2"], 100,
     Verdict.DISRUPTED, "(Evicted)"),
])
def test_a_gangs_verdict(pods, seen, age, verdict, said):
    judged = judge(pods, NAMES, seen, age, 60)
    assert judged.verdict == verdict
    assert said in judged.why
    assert judged.node == ("n2" if verdict in (Verdict.LOST, Verdict.BROKEN, Verdict.DISRUPTED) else "")


def test_why_a_pod_waits_names_the_schedulers_message_or_its_containers_reason():
    assert why_pending(pod(scheduled="0/2 nodes are available")) == ("not scheduled: 0/2 nodes are available", False)
    assert why_pending(pod(waiting="ContainerCreating")) == ("container waiting: ContainerCreating", False)
    assert why_pending(pod(waiting="InvalidImageName")) == ("InvalidImageName", True)


def test_an_init_container_that_cannot_start_breaks_the_gang_at_once():
    broken = pod()
    broken["status"]["initContainerStatuses"] = [{"name": "fetch", "state": {"waiting": {
        "reason": "CreateContainerConfigError", "message": 'secret "s3" not found'}}}]
    assert why_pending(broken) == ('CreateContainerConfigError: secret "s3" not found', True)
    judged = judge({"n1": RUNNING, "n2": broken}, NAMES, [], 5, 60)
    assert judged.verdict == Verdict.BROKEN and judged.node == "n2"
