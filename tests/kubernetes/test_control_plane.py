"""The test cluster is a real one (issue 32): RBAC refuses an identity nobody bound, and the scheduler's
accounting of `nvidia.com/gpu` is Kubernetes' own, which is why plain pods half-place a gang (Measured 1):
the case the Kubernetes engine must never reproduce."""

from __future__ import annotations

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.core_v1 import Namespace, Node, Pod

from tests.kubernetes.cluster_helpers import fake_gpu_nodes, gpu_pod, namespace, phase, unschedulable, wait_for

pytestmark = pytest.mark.timeout(180)


def test_rbac_refuses_an_identity_nobody_bound(plane, admin):
    stranger = Client(KubeConfig.from_file(plane.kubeconfig("stranger")))
    with pytest.raises(ApiError) as refused:
        list(stranger.list(Pod, namespace="default"))  # lightkube lists lazily
    assert refused.value.status.code == 403
    assert admin.get(Namespace, "default").metadata.name == "default"  # the admin, through the same server


def test_the_default_scheduler_half_places_a_gang_as_measured(plane, admin):
    """4 nodes of 8 GPUs, each held by another workload; a two-pod job of 8 GPUs a pod waits; as soon as one
    node frees up, the scheduler binds one of its pods there and leaves the other Pending: half a gang
    holding 8 GPUs (issue 32, Measured 1, again on this release)."""
    nodes = [f"half-{i}" for i in range(4)]
    fake_gpu_nodes(admin, nodes)
    ns = namespace(admin, "measured-1")
    try:
        for i in range(4):
            admin.create(gpu_pod(f"other-{i}", ns, 8))
        wait_for("the other workloads Running", lambda: all(phase(admin, f"other-{i}", ns) == "Running" for i in range(4)))
        for name in ("gang-0", "gang-1"):
            admin.create(gpu_pod(name, ns, 8, {"job": "gang"}))
        wait_for("both gang pods found unschedulable",
                 lambda: all(unschedulable(admin.get(Pod, n, namespace=ns)) for n in ("gang-0", "gang-1")))
        freed = admin.get(Pod, "other-0", namespace=ns).spec.nodeName
        admin.delete(Pod, "other-0", namespace=ns, grace_period=0)
        bound = wait_for("one gang pod bound to the freed node",
                         lambda: [p for p in admin.list(Pod, namespace=ns, labels={"job": "gang"}) if p.spec.nodeName])
        assert len(bound) == 1 and bound[0].spec.nodeName == freed
        other = "gang-1" if bound[0].metadata.name == "gang-0" else "gang-0"
        wait_for(f"{bound[0].metadata.name} Running", lambda: phase(admin, bound[0].metadata.name, ns) == "Running")
        left = admin.get(Pod, other, namespace=ns)
        assert left.status.phase == "Pending" and not left.spec.nodeName and unschedulable(left)
    finally:
        admin.delete(Namespace, ns)
        for name in nodes:
            admin.delete(Node, name)
