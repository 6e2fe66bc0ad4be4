"""Issue 32's Measured 1 under tfdist, on the real scheduler with KWOK's fake GPU nodes: 4 nodes of 8 GPUs
held by another workload, a two-node job of 8 GPUs a node waits; one node freed leaves it waiting with no pod
at all (never half a gang); a second node freed and both of its pods are created together, bound by the
scheduler (which counts their GPUs) to the nodes tfdist chose. Canceled, nothing of it is left.

Issue 49, Measured 5: the freed nodes are seen through watches (the coordinator lists the nodes and every
namespace's pods once, at its start), and `kubectl describe pod` shows why each pod was made and deleted."""

from __future__ import annotations

import re
import sys
import uuid

import pytest
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod

from tests.conftest import LocalCluster
from tests.kubernetes.cluster_helpers import (coordinator_rights, fake_gpu_nodes, gpu_pod, namespace, phase,
                                              remove_rights, wait_for)

pytestmark = pytest.mark.timeout(300)
NS = "tfdist-gangs"


def _ours(admin) -> list[Pod]:
    return [p for p in admin.list(Pod, namespace=NS) if (p.metadata.labels or {}).get("tfdist.io/job")]


def _said(admin, pod: str) -> list[str]:
    """The reasons of tfdist's Events on the pod (what `kubectl describe pod` lists), sorted."""
    return sorted(e.reason for e in admin.list(Event, namespace=NS, fields={"involvedObject.name": pod})
                  if e.source and e.source.component == "tfdist-coordinator")


def test_a_gang_is_never_half_placed_when_one_node_frees_up(plane, admin, tmp_path):
    nodes = [f"gang-{i}" for i in range(4)]
    fake_gpu_nodes(admin, nodes)
    others = namespace(admin, "other-workload")
    kubeconfig, objects = coordinator_rights(plane, admin, NS)
    cluster = None
    try:
        for i in range(4):  # 8 GPUs each: one on every node
            admin.create(gpu_pod(f"other-{i}", others, 8))
        wait_for("the other workload Running", lambda: all(phase(admin, f"other-{i}", others) == "Running"
                                                             for i in range(4)))
        cluster = LocalCluster(tmp_path, uuid.uuid4().hex, coordinator_args=[
            "--engine", "kubernetes", "--namespace", NS, "--kubeconfig", kubeconfig, "--image", "tfdist-test",
            "--node-selector", "type=kwok"])
        job = cluster.cli("launch", "--detach", "--slots", "16", "--distribution", "mwms", "--", sys.executable, "-c",
                          "pass")
        assert job.returncode == 0, job.stderr
        job_id = job.stdout.strip()
        assert cluster.job(job_id)["state"] == "QUEUED"
        samples: list[int] = []

        def offered(*names):
            alive = {a["name"]: a for a in cluster.listed_agents() if a["state"] == "ALIVE"}
            samples.append(len(_ours(admin)))
            return all(n in alive for n in names)

        freed = [admin.get(Pod, f"other-{i}", namespace=others).spec.nodeName for i in (0, 1)]
        admin.delete(Pod, "other-0", namespace=others, grace_period=0)
        cluster.wait_for(lambda: offered(freed[0]), "the freed node offered", timeout=60)
        assert cluster.job(job_id)["state"] == "QUEUED" and not _ours(admin)  # one node: not half a gang
        admin.delete(Pod, "other-1", namespace=others, grace_period=0)
        cluster.wait_for(lambda: len(_ours(admin)) == 2 and all(p.spec.nodeName for p in _ours(admin)),
                         "both of the gang's pods created and bound", timeout=60)
        pods = _ours(admin)
        assert sorted(p.spec.nodeName for p in pods) == sorted(freed)
        assert all(p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8" for p in pods)
        assert set(samples) <= {0, 2}, samples  # never one pod alone
        names = [p.metadata.name for p in pods]
        cluster.wait_for(lambda: all(_said(admin, n) == ["GangPlaced"] for n in names), "an Event on each pod")
        assert cluster.cli("cancel", job_id).returncode == 0
        cluster.wait_for(lambda: not _ours(admin), "the canceled job's pods deleted", timeout=60)
        cluster.wait_for(lambda: all(_said(admin, n) == ["GangPlaced", "GangTornDown"] for n in names),
                         "an Event on each pod: torn down")
        cluster.close()
        said = (tmp_path / "coordinator.log").read_text()
        assert "API calls made: " in said, said[-3000:]
        calls = dict(re.findall(r"(\w+ [\w ()]+?)=(\d+)", re.findall(r"API calls made: (.*?);", said)[-1]))
        assert calls["list Node"] == "1" and calls["list Pod (all namespaces)"] == "1", calls  # then watched
        cluster = None
    finally:
        if cluster is not None:
            cluster.close()
        remove_rights(admin, objects)
        admin.delete(Namespace, others)
        for name in nodes:
            admin.delete(Node, name)
