"""Issue 49, Measured 2, on the real control plane with KWOK's fake GPU nodes: a pool (label
pool=autoscaled) that has no node yet and may grow to 2 nodes of 8 GPUs. A two-node job is admitted (not
refused), waits naming the autoscaler, and leaves a pending placeholder pod per missing node, unschedulable
for the real kube-scheduler; the test plays the cluster autoscaler (it adds a KWOK node per pending
placeholder), the scheduler binds the placeholders there, tfdist deletes them and places the job's gang on
the new nodes. Canceled, nothing of it is left."""

from __future__ import annotations

import sys
import uuid

import pytest
from lightkube.resources.core_v1 import Node, Pod

from tests.conftest import LocalCluster
from tests.kubernetes.cluster_helpers import coordinator_rights, fake_gpu_nodes, remove_rights, wait_for

pytestmark = pytest.mark.timeout(300)
NS = "tfdist-autoscaled"
POOL = {"pool": "autoscaled"}


def _pods(admin, placeholder: bool) -> list[Pod]:
    return [p for p in admin.list(Pod, namespace=NS) if (p.metadata.labels or {}).get("tfdist.io/job") and
            bool((p.metadata.labels or {}).get("tfdist.io/placeholder")) == placeholder and
            p.metadata.deletionTimestamp is None]


def test_a_job_waits_for_the_autoscaled_pool_to_grow_and_runs_on_the_nodes_it_asked_for(plane, admin, tmp_path):
    kubeconfig, objects = coordinator_rights(plane, admin, NS)
    added: list[str] = []
    cluster = None
    try:
        cluster = LocalCluster(tmp_path, uuid.uuid4().hex, coordinator_args=[
            "--engine", "kubernetes", "--namespace", NS, "--kubeconfig", kubeconfig, "--image", "tfdist-test",
            "--node-selector", "pool=autoscaled", "--pool-max-nodes", "2", "--pool-node-slots", "8"])
        job = cluster.cli("launch", "--detach", "--slots", "16", "--distribution", "mwms", "--", sys.executable,
                          "-c", "pass")
        assert job.returncode == 0, job.stderr  # admitted: it fits once the pool grew
        job_id = job.stdout.strip()
        shown = cluster.job(job_id)
        assert shown["state"] == "QUEUED" and "may add up to 2 nodes of 8 slots" in shown["waiting_reason"], shown
        pending = wait_for("a pending placeholder per missing node",
                           lambda: (found := _pods(admin, True)) and len(found) == 2 and
                           all(not p.spec.nodeName for p in found) and found, timeout=60)
        assert all(p.spec.nodeSelector == POOL for p in pending)
        added[:] = ["autoscaled-0", "autoscaled-1"]  # the autoscaler's answer: a pool node per pending pod
        fake_gpu_nodes(admin, added, labels=POOL)
        gang = wait_for("the job's gang bound to the new nodes", lambda: (found := _pods(admin, False)) and
                        len(found) == 2 and all(p.spec.nodeName for p in found) and found, timeout=120)
        assert sorted(p.spec.nodeName for p in gang) == added
        assert not _pods(admin, True)  # the placeholders went as they found their nodes
        assert cluster.cli("cancel", job_id).returncode == 0
        wait_for("the canceled job's pods deleted", lambda: not _pods(admin, False) and not _pods(admin, True),
                 timeout=60)
    finally:
        if cluster is not None:
            cluster.close()
        remove_rights(admin, objects)
        for name in added:
            admin.delete(Node, name)
