"""A gang's objects (cluster/engines/kubernetes/manifests.py) on the real control plane: pods pinned by
affinity are bound by kube-scheduler to their nodes and their GPUs counted (another workload then finds
those nodes full); the headless Service names each pod; deleting the job's Secret removes everything else
through Kubernetes' garbage collector."""

from __future__ import annotations

import pytest
from lightkube import codecs
from lightkube.resources.core_v1 import Namespace, Node, Pod, Secret, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from cluster.engines.kubernetes import manifests
from tests.kubernetes.cluster_helpers import fake_gpu_nodes, gone, gpu_pod, namespace, phase, unschedulable, wait_for

pytestmark = pytest.mark.timeout(180)


def test_a_pinned_gang_is_bound_counted_named_and_removed_with_its_secret(plane, admin):
    nodes = [f"gang-{i}" for i in range(3)]
    fake_gpu_nodes(admin, nodes)
    ns = namespace(admin, "gang-objects")
    job = "12-c0de"
    try:
        admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "ServiceAccount",  # the jobs' pods' account
                                       "metadata": {"name": "tfdist-job", "namespace": ns}}))
        created = admin.create(codecs.from_dict(manifests.secret(job, 0, ns, {"node-0.json": "{}", "node-1.json": "{}"})))
        owner = manifests.owner(created.to_dict())
        admin.create(codecs.from_dict(manifests.service(job, 0, ns, [2222], owner)))
        pods = [manifests.GangPod(job, attempt=0, node_rank=r, node=node, slots=8, gpus=8)
                for r, node in enumerate(("gang-2", "gang-0"))]
        for gang_pod in pods:
            admin.create(codecs.from_dict(manifests.pod(gang_pod, ns, image="tfdist-test", command=["true"],
                                                        env={}, owner_ref=owner)))
        names = [manifests.pod_name(p) for p in pods]
        wait_for("the gang's pods Running", lambda: all(phase(admin, n, ns) == "Running" for n in names))
        assert [admin.get(Pod, n, namespace=ns).spec.nodeName for n in names] == ["gang-2", "gang-0"]

        # The scheduler counted the gang's 16 GPUs: of two more 8-GPU pods, one fits (gang-1), one waits.
        for name in ("other-0", "other-1"):
            admin.create(gpu_pod(name, ns, 8))
        wait_for("one other workload bound, one unschedulable", lambda: sorted(
            "bound" if p.spec.nodeName else "waiting" if unschedulable(p) else "?"
            for p in (admin.get(Pod, n, namespace=ns) for n in ("other-0", "other-1"))) == ["bound", "waiting"])
        assert {admin.get(Pod, n, namespace=ns).spec.nodeName for n in ("other-0", "other-1")} == {"gang-1", None}

        # The headless Service publishes each pod under its hostname: the names TF_CONFIG uses.
        hostnames = wait_for("the Service's endpoints name both pods", lambda: sorted(
            e.hostname for s in admin.list(EndpointSlice, namespace=ns,
                                           labels={"kubernetes.io/service-name": manifests.gang_name(job, 0)})
            for e in (s.endpoints or ()) if e.hostname) == ["gang-0", "gang-2"])
        assert hostnames

        admin.delete(Secret, manifests.gang_name(job, 0), namespace=ns)
        wait_for("the job's pods and Service garbage-collected after its Secret", lambda: all(
            gone(admin, Pod, n, ns) for n in names) and gone(admin, Service, manifests.gang_name(job, 0), ns), timeout=90)
    finally:
        admin.delete(Namespace, ns)
        for name in nodes:
            admin.delete(Node, name)
