"""What a Kubernetes cluster offers tfdist (cluster/engines/kubernetes/offers.py), as a table over Node and Pod
objects shaped as the API serves them."""

from fractions import Fraction

import pytest

from cluster.engines.kubernetes.offers import NodeOffer, node_offers, pod_requests, quantity


def node(name, gpus=0, cpu="8", ready="True", cordoned=False, taints=(), labels=None):
    allocatable = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": cordoned, "taints": list(taints)},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]}}


def pod(node_name, gpus=0, cpu=None, phase="Running", tfdist=False, init_gpus=0, namespace="", memory=None):
    resources = {"requests": {}, "limits": {}}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    if cpu:
        resources["requests"]["cpu"] = cpu
    if memory:
        resources["requests"]["memory"] = memory
    spec = {"nodeName": node_name, "containers": [{"name": "c", "resources": resources}]}
    if init_gpus:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    labels = {"app.kubernetes.io/managed-by": "tfdist", "tfdist.io/job": "tfdist-7"} if tfdist else {}
    return {"metadata": {"name": "p", "labels": labels, "namespace": namespace}, "spec": spec,
            "status": {"phase": phase}}


@pytest.mark.parametrize("text, value", [("2", 2), ("500m", Fraction(1, 2)), ("1Gi", 2**30), ("1k", 1000),
                                         ("1.5", Fraction(3, 2)), ("1e3", 1000), (" 8 ", 8)])
def test_quantities(text, value):
    assert quantity(text) == value


def test_an_init_container_counts_when_it_asks_for_more_than_the_containers_together():
    assert pod_requests(pod("a", gpus=2, init_gpus=4))["nvidia.com/gpu"] == 4
    assert pod_requests(pod("a", gpus=4, init_gpus=2))["nvidia.com/gpu"] == 4


@pytest.mark.parametrize("nodes, pods, kwargs, expected", [
    # whole GPU nodes
    ([node("g1", gpus=8), node("g2", gpus=8)], [], {}, [NodeOffer("g1", 8, 8), NodeOffer("g2", 8, 8)]),
    # other workloads' GPUs are taken (the node keeps its size: a job of that size waits for it); tfdist's own
    # pods are its own allocations; ended pods hold nothing
    ([node("g1", gpus=8)], [pod("g1", gpus=2), pod("g1", gpus=8, tfdist=True), pod("g1", gpus=4, phase="Succeeded")],
     {}, [NodeOffer("g1", 8, 8, taken=2)]),
    ([node("g1", gpus=8)], [pod("g1", gpus=8)], {}, [NodeOffer("g1", 8, 8, taken=8)]),
    # a CPU node: its whole CPUs, at most cpu_slots; others' requests taken
    ([node("c1", cpu="8")], [pod("c1", cpu="2500m")], {}, [NodeOffer("c1", 8, 0, taken=3)]),
    ([node("c1", cpu="8")], [], {"cpu_slots": 2}, [NodeOffer("c1", 2, 0)]),
    ([node("c1", cpu="8")], [pod("c1", cpu="7")], {"cpu_slots": 2}, [NodeOffer("c1", 2, 0, taken=1)]),
    ([node("c1", cpu="1")], [pod("c1", cpu="1")], {}, [NodeOffer("c1", 1, 0, taken=1)]),
    ([node("c1", cpu="500m")], [], {}, [NodeOffer("c1", 0, 0, "no allocatable GPU or whole CPU")]),
    # not offered: cordoned, not Ready, an untolerated taint
    ([node("g1", gpus=8, cordoned=True)], [], {}, [NodeOffer("g1", 8, 8, "cordoned")]),
    ([node("g1", gpus=8, ready="Unknown")], [], {}, [NodeOffer("g1", 8, 8, "not Ready")]),
    ([node("g1", gpus=8, taints=[{"key": "gpu", "value": "a100", "effect": "NoSchedule"}])], [], {},
     [NodeOffer("g1", 8, 8, "tainted gpu=a100:NoSchedule (not tolerated)")]),
    # tolerated taints, and a PreferNoSchedule taint, do not stop it
    ([node("g1", gpus=8, taints=[{"key": "gpu", "value": "a100", "effect": "NoSchedule"}])], [],
     {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]},
     [NodeOffer("g1", 8, 8)]),
    ([node("g1", gpus=8, taints=[{"key": "gpu", "effect": "NoExecute"}])], [],
     {"tolerations": [{"operator": "Exists"}]}, [NodeOffer("g1", 8, 8)]),
    ([node("g1", gpus=8, taints=[{"key": "soft", "effect": "PreferNoSchedule"}])], [], {}, [NodeOffer("g1", 8, 8)]),
    ([node("g1", gpus=8, taints=[{"key": "gpu", "effect": "NoSchedule"}])], [],
     {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]},
     [NodeOffer("g1", 8, 8, "tainted gpu:NoSchedule (not tolerated)")]),
])
def test_node_offers(nodes, pods, kwargs, expected):
    offers = node_offers(nodes, pods, **kwargs)
    assert offers == expected
    assert [o.offered for o in offers] == [not o.why_not and o.slots > 0 for o in expected]


GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_a_gpu_pool_tainted_as_gke_taints_it_is_offered_with_the_default_toleration():
    """Issue 45, Measured 5: GPU nodes tainted nvidia.com/gpu=present:NoSchedule were never offered."""
    from cluster.engines.kubernetes.offers import tolerations_of

    nodes = [node("g1", gpus=8, taints=[GKE_GPU_TAINT])]
    assert node_offers(nodes, [])[0].why_not == "tainted nvidia.com/gpu=present:NoSchedule (not tolerated)"
    assert node_offers(nodes, [], tolerations=tolerations_of(["nvidia.com/gpu"])) == [NodeOffer("g1", 8, 8)]
    assert tolerations_of(["nvidia.com/gpu"]) == [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def test_control_plane_nodes_are_not_offered_unless_asked():
    nodes = [node("cp", cpu="4", labels={"node-role.kubernetes.io/control-plane": ""}), node("w", cpu="4")]
    offers = node_offers(nodes, [])
    assert [o.offered for o in offers] == [False, True]
    assert offers[0].why_not == "a control-plane node (node-role.kubernetes.io/control-plane): not offered to jobs"
    assert all(o.offered for o in node_offers(nodes, [], system=True))


def test_another_coordinators_pods_are_other_workloads_and_its_own_namespaces_are_its_own():
    """Issue 45, Measured 10: two coordinators (namespaces a and b) double-booked a node's GPUs, each leaving
    every tfdist-labelled pod out of what is taken."""
    nodes = [node("g1", gpus=8)]
    pods = [pod("g1", gpus=8, tfdist=True, namespace="a")]
    assert node_offers(nodes, pods, namespace="a") == [NodeOffer("g1", 8, 8, taken=0)]
    assert node_offers(nodes, pods, namespace="b") == [NodeOffer("g1", 8, 8, taken=8)]
    assert node_offers(nodes, pods, namespace="b")[0].free == 0


def test_what_other_workloads_leave_of_a_nodes_cpu_and_memory_is_known():
    offer, = node_offers([node("g1", gpus=8, cpu="16")], [pod("g1", cpu="1500m", memory="2Gi")])
    assert offer.free_cpu == Fraction(29, 2) and offer.free_memory == 30 * 2**30


def test_gpu_and_cpu_nodes_are_never_offered_together():
    """Issue 45, Measured 5: a 24-slot job mixed a 16-CPU pod with an 8-GPU pod."""
    nodes = [node("c1", cpu="16"), node("g1", gpus=8)]
    assert [(o.name, o.offered) for o in node_offers(nodes, [])] == [("c1", False), ("g1", True)]
    assert "a CPU node: this coordinator offers GPU nodes" in node_offers(nodes, [])[0].why_not
    assert [(o.name, o.offered) for o in node_offers(nodes, [], kind="cpu")] == [("c1", True), ("g1", False)]
    # "auto" goes by the cluster's nodes, not their state now: the GPU pool cordoned for a drain (or tainted
    # and not tolerated) does not turn the coordinator to the CPU nodes (a review found a drained GPU job
    # placed again on a CPU node)
    cordoned = [node("c1", cpu="16"), node("g1", gpus=8, cordoned=True)]
    assert [(o.name, o.offered) for o in node_offers(cordoned, [])] == [("c1", False), ("g1", False)]
    tainted = [node("c1", cpu="16"), node("g1", gpus=8, taints=[GKE_GPU_TAINT])]
    assert [(o.name, o.offered) for o in node_offers(tainted, [], kind="cpu")] == [("c1", True), ("g1", False)]


def test_the_coordinators_own_pod_is_another_workload_on_its_node():
    """Only a job's pods are the coordinator's own allocations; its Deployment's pod asks like any other."""
    coordinator = pod("c1", cpu="1")
    coordinator["metadata"].update(namespace="ml", labels={"app.kubernetes.io/managed-by": "tfdist"})
    assert node_offers([node("c1", cpu="8")], [coordinator], namespace="ml") == [NodeOffer("c1", 8, 0, taken=1)]
