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

import sys
import uuid

from tests.conftest import LocalCluster
from tests.kubernetes.cluster_helpers import coordinator_rights, fake_gpu_nodes, remove_rights, wait_for
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


@pytest.fixture(scope="module")
def kueue(plane, admin):
    running = Kueue(plane, admin, binary()).start()
    yield running
    running.stop()


def queues(admin, namespace: str, name: str) -> None:
    """A ResourceFlavor, a ClusterQueue `name` of 16 GPUs and its LocalQueue `name` in `namespace`."""
    for obj in ({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}},
                {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                     "coveredResources": ["nvidia.com/gpu", "cpu", "memory"], "flavors": [{"name": name, "resources": [
                         {"name": "nvidia.com/gpu", "nominalQuota": 16}, {"name": "cpu", "nominalQuota": 1000},
                         {"name": "memory", "nominalQuota": "10Ti"}]}]}]}},
                {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": name}}):
        admin.create(codecs.from_dict(obj))


def remove(admin, namespace: str, name: str) -> None:
    """The namespace's pods (Kueue's finalizers taken off: KWOK's pods never end as a kubelet's do) and the
    queues, while Kueue runs."""
    from lightkube import ApiError

    for pod in admin.list(Pod, namespace=namespace):
        try:
            admin.patch(Pod, pod.metadata.name, {"metadata": {"finalizers": None}}, namespace=namespace)
            admin.delete(Pod, pod.metadata.name, namespace=namespace, grace_period=0)
        except ApiError as e:
            if e.status.code != 404:  # gone as its finalizer went
                raise
    wait_for("the namespace's pods gone", lambda: not list(admin.list(Pod, namespace=namespace)), timeout=60)
    for resource, scope in ((LocalQueue, namespace), (ClusterQueue, None), (ResourceFlavor, None)):
        admin.delete(resource, name, namespace=scope)
    wait_for("Kueue's objects gone", lambda: not [q for q in admin.list(ClusterQueue) if q.metadata.name == name],
             timeout=60)


def test_kueue_gates_a_pod_group_admits_it_under_its_quota_and_keeps_the_next_waiting(kueue, admin):
    fake_gpu_nodes(admin, NODES, labels={"pool": "kueue"})
    try:
        admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": NS, "labels": dict(OPT_IN)}}))
        queues(admin, NS, "team-a")
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
    finally:
        remove(admin, NS, "team-a")
        admin.delete(Namespace, NS)
        for name in NODES:
            admin.delete(Node, name)


def _waiting(admin, namespace: str = NS) -> str | None:
    """The message of a pending Workload's QuotaReserved=False condition (None while there is none)."""
    for workload in admin.list(Workload, namespace=namespace):
        for condition in (workload.status or {}).get("conditions") or ():
            if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
                return condition.get("message") or condition.get("reason")
    return None


TFDIST_NS = "kueue-tfdist"
TFDIST_NODES = [f"kueue-tfdist-{i}" for i in range(4)]


def test_tfdist_s_gangs_are_kueue_pod_groups_admitted_under_its_quota_and_held_not_looped(kueue, admin, plane,
                                                                                           tmp_path):
    """Issue 49, Measured 1: without Kueue's labels tfdist's GPUs escaped the quota; with Kueue gating every
    pod of the namespace, a gang never ran within its start bound and was placed again every 120 s. With
    --kueue-queue the first job's gang is admitted within the ClusterQueue's 16 GPUs; the second, placed by
    tfdist on two other free nodes, is held by Kueue's gate (its start bound, 5 s, does not run while it is)
    and admitted, the same pods, once the first is canceled."""
    fake_gpu_nodes(admin, TFDIST_NODES, labels={"pool": "kueue-tfdist"})
    kubeconfig, objects = coordinator_rights(plane, admin, TFDIST_NS)
    admin.patch(Namespace, TFDIST_NS, {"metadata": {"labels": dict(OPT_IN)}})
    cluster = None
    try:
        queues(admin, TFDIST_NS, "tfdist-team")
        cluster = LocalCluster(tmp_path, uuid.uuid4().hex, coordinator_args=[
            "--engine", "kubernetes", "--namespace", TFDIST_NS, "--kubeconfig", kubeconfig, "--image", "tfdist-test",
            "--node-selector", "pool=kueue-tfdist", "--kueue-queue", "tfdist-team", "--pod-start-timeout", "5"])
        cluster.wait_for(lambda: sum(a["state"] == "ALIVE" for a in cluster.listed_agents()) == 4, "4 nodes offered")

        def launch() -> str:
            job = cluster.cli("launch", "--detach", "--slots", "16", "--distribution", "mwms", "--", sys.executable,
                              "-c", "pass")
            assert job.returncode == 0, job.stderr
            return job.stdout.strip()

        def gang(job_id: str) -> list[Pod]:
            return [p for p in admin.list(Pod, namespace=TFDIST_NS) if p.metadata.deletionTimestamp is None and
                    (p.metadata.annotations or {}).get("tfdist.io/job-id") == job_id]

        first = launch()
        wait_for("the first gang admitted and Running", lambda: len(gang(first)) == 2 and all(
            not gated(p) and p.status.phase == "Running" for p in gang(first)), timeout=120)
        second = launch()
        held = wait_for("the second gang held by Kueue's gate", lambda: len(found := gang(second)) == 2 and
                        all(gated(p) for p in found) and found, timeout=60)
        reason = wait_for("Kueue saying why it waits", lambda: _waiting(admin, TFDIST_NS), timeout=60)
        assert "insufficient" in reason.lower() or "quota" in reason.lower(), reason
        uids = sorted(p.metadata.uid for p in held)
        assert cluster.cli("cancel", first).returncode == 0
        for pod in gang(first) + [p for p in admin.list(Pod, namespace=TFDIST_NS)
                                  if (p.metadata.annotations or {}).get("tfdist.io/job-id") == first]:
            admin.patch(Pod.Status, pod.metadata.name, {"status": {"phase": "Failed"}}, namespace=TFDIST_NS)  # as a
            # kubelet ends a deleted pod's containers (KWOK's pods never end)
        wait_for("the second gang admitted, the same pods, Running", lambda: len(found := gang(second)) == 2 and
                 all(not gated(p) and p.status.phase == "Running" for p in found) and
                 sorted(p.metadata.uid for p in found) == uids, timeout=120)
        assert cluster.job(second)["attempt"] == 0  # never torn down and placed again while held
        assert cluster.cli("cancel", second).returncode == 0
    finally:
        if cluster is not None:
            cluster.close()
        remove(admin, TFDIST_NS, "tfdist-team")
        remove_rights(admin, objects)
        for name in TFDIST_NODES:
            admin.delete(Node, name)
