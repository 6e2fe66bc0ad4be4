"""A real Kueue on the suite's control plane (tests/kubernetes/kueue.py), before tfdist meets it: two KWOK
nodes of 8 GPUs, a ClusterQueue with a quota of 16 GPUs and a LocalQueue in a namespace that opts in. A pod
group of two pods (Kueue's plain-pod groups: its labels and total-count annotation) is gated by Kueue's
webhook, admitted under the quota and bound; a second group of the same size waits, gated, its Workload
saying why (the quota); once the first group's pods have ended the second is admitted. What issue 49's Must 1
builds on."""

from __future__ import annotations

import pytest
from lightkube import codecs
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Namespace, Node, Pod

from tests.kubernetes.cluster_helpers import fake_gpu_nodes, wait_for
from tests.kubernetes.kueue import OPT_IN, Kueue, binary

pytestmark = pytest.mark.timeout(300)
NS = "kueue-team-a"
NODES = ["kueue-0", "kueue-1"]
Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
LocalQueue = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues")
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues")
ResourceFlavor = create_global_resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors")


def group_pod(name: str, group: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/pod-group-name": group},
                         "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"}},
            "spec": {"nodeSelector": {"pool": "kueue"}, "automountServiceAccountToken": False,
                     "containers": [{"name": "worker", "image": "tfdist-test", "resources": {
                         "limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}}]}}


def gated(pod: Pod) -> bool:
    return any(g.name == "kueue.x-k8s.io/admission" for g in pod.spec.schedulingGates or ())


def pods(admin, group: str) -> list[Pod]:
    return [p for p in admin.list(Pod, namespace=NS, labels={"kueue.x-k8s.io/pod-group-name": group})
            if p.metadata.deletionTimestamp is None]


def test_kueue_gates_a_pod_group_admits_it_under_its_quota_and_keeps_the_next_waiting(plane, admin):
    fake_gpu_nodes(admin, NODES, labels={"pool": "kueue"})
    kueue = Kueue(plane, admin, binary()).start()
    try:
        admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": NS, "labels": dict(OPT_IN)}}))
        for obj in ({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}},
                    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-a"},
                     "spec": {"namespaceSelector": {}, "resourceGroups": [{
                         "coveredResources": ["nvidia.com/gpu"],
                         "flavors": [{"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}},
                    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": "team-a", "namespace": NS}, "spec": {"clusterQueue": "team-a"}}):
            admin.create(codecs.from_dict(obj))
        for i in range(2):
            admin.create(codecs.from_dict(group_pod(f"first-{i}", "first")))
        wait_for("the first group admitted, bound and Running", lambda: all(
            not gated(p) and p.spec.nodeName and p.status.phase == "Running" for p in pods(admin, "first"))
            and len(pods(admin, "first")) == 2, timeout=120)
        for i in range(2):
            admin.create(codecs.from_dict(group_pod(f"second-{i}", "second")))
        second = pods(admin, "second")
        assert len(second) == 2 and all(gated(p) and not p.spec.nodeName for p in second)
        reason = wait_for("the second group's Workload saying why it waits", lambda: _waiting(admin), timeout=60)
        assert "insufficient" in reason.lower() or "quota" in reason.lower(), reason
        for i in range(2):  # the first group's workers end (KWOK runs nothing: said as their kubelet would)
            admin.patch(Pod.Status, f"first-{i}", {"status": {"phase": "Succeeded"}}, namespace=NS)
        wait_for("the second group admitted once the first has ended", lambda: len(pods(admin, "second")) == 2 and all(
            not gated(p) and p.spec.nodeName for p in pods(admin, "second")), timeout=120)
    finally:  # Kueue's finalizers on its pods and kinds go while it runs: then it stops
        for pod in admin.list(Pod, namespace=NS):
            admin.patch(Pod, pod.metadata.name, {"metadata": {"finalizers": None}}, namespace=NS)
            admin.delete(Pod, pod.metadata.name, namespace=NS, grace_period=0)
        wait_for("the namespace's pods gone", lambda: not list(admin.list(Pod, namespace=NS)), timeout=60)
        for resource, name in ((LocalQueue, "team-a"), (ClusterQueue, "team-a"), (ResourceFlavor, "gpu")):
            admin.delete(resource, name, namespace=NS if resource is LocalQueue else None)
        wait_for("Kueue's objects gone", lambda: not list(admin.list(ClusterQueue)) and
                 not list(admin.list(ResourceFlavor)), timeout=60)
        kueue.stop()
        admin.delete(Namespace, NS)
        for name in NODES:
            admin.delete(Node, name)


def _waiting(admin) -> str | None:
    """The message of a pending Workload's QuotaReserved=False condition (None while there is none)."""
    for workload in admin.list(Workload, namespace=NS):
        for condition in (workload.status or {}).get("conditions") or ():
            if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
                return condition.get("message") or condition.get("reason")
    return None
