"""What a Kubernetes cluster offers tfdist (cluster/engines/kubernetes/offers.py), as a table over Node and Pod
objects shaped as the API serves them."""

from fractions import Fraction

import pytest

from cluster.engines.kubernetes.offers import NodeOffer, node_offers, pod_requests, quantity


def node(name, gpus=0, cpu="8", ready="True", cordoned=False, taints=()):
    allocatable = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name},
            "spec": {"unschedulable": cordoned, "taints": list(taints)},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]}}


def pod(node_name, gpus=0, cpu=None, phase="Running", tfdist=False, init_gpus=0):
    resources = {"requests": {}, "limits": {}}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    if cpu:
        resources["requests"]["cpu"] = cpu
    spec = {"nodeName": node_name, "containers": [{"name": "c", "resources": resources}]}
    if init_gpus:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    labels = {"app.kubernetes.io/managed-by": "tfdist"} if tfdist else {}
    return {"metadata": {"name": "p", "labels": labels}, "spec": spec, "status": {"phase": phase}}


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
