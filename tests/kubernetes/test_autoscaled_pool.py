"""Issue 49, Measured 2, on the real control plane with KWOK's fake GPU nodes: a pool (label
pool=autoscaled) that may grow to 3 nodes of 8 GPUs. With no node yet, a two-node job is admitted (not
refused), waits naming the autoscaler, and leaves a pending placeholder pod per missing node, unschedulable
for the real kube-scheduler; the test plays the cluster autoscaler (it adds a KWOK node per pending
placeholder), the scheduler binds the placeholders there, tfdist deletes them and places the job's gang on
the new nodes. With an idle node in the pool, a two-node job asks for one node only, and its placeholder is
never bound to the idle node. Canceled, nothing of it is left."""

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


def _unschedulable(pod: Pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in (pod.status.conditions or ()) if pod.status)


def test_a_job_waits_for_the_autoscaled_pool_to_grow_and_runs_on_the_nodes_it_asked_for(plane, admin, tmp_path):
    kubeconfig, objects = coordinator_rights(plane, admin, NS)
    added: list[str] = []
    cluster = None
    try:
        cluster = LocalCluster(tmp_path, uuid.uuid4().hex, coordinator_args=[
            "--engine", "kubernetes", "--namespace", NS, "--kubeconfig", kubeconfig, "--image", "tfdist-test",
            "--node-selector", "pool=autoscaled", "--pool-max-nodes", "3", "--pool-node-slots", "8"])

        def launch() -> str:
            job = cluster.cli("launch", "--detach", "--slots", "16", "--distribution", "mwms", "--", sys.executable,
                              "-c", "pass")
            assert job.returncode == 0, job.stderr  # admitted: it fits once the pool grew
            return job.stdout.strip()

        def grow(*names: str) -> None:  # the autoscaler's answer: a node of the pool for each pending pod
            added.extend(names)
            fake_gpu_nodes(admin, list(names), labels=POOL)

        def gang_on(nodes: list[str]) -> None:
            gang = wait_for("the job's gang bound", lambda: (found := _pods(admin, False)) and len(found) == 2 and
                            all(p.spec.nodeName for p in found) and found, timeout=120)
            assert sorted(p.spec.nodeName for p in gang) == nodes
            wait_for("no placeholder left", lambda: not _pods(admin, True), timeout=60)

        job_id = launch()
        shown = cluster.job(job_id)
        assert shown["state"] == "QUEUED" and "may add up to 3 nodes of 8 slots" in shown["waiting_reason"], shown
        pending = wait_for("a pending placeholder per missing node", lambda: (found := _pods(admin, True)) and
                           len(found) == 2 and all(_unschedulable(p) for p in found) and found, timeout=60)
        assert all(p.spec.nodeSelector == POOL for p in pending)
        grow("autoscaled-0", "autoscaled-1")
        gang_on(["autoscaled-0", "autoscaled-1"])
        assert cluster.cli("cancel", job_id).returncode == 0
        wait_for("the canceled job's pods deleted", lambda: not _pods(admin, False), timeout=60)
        cluster.wait_for(lambda: sum(a["state"] == "ALIVE" and a["free_slots"] == 8 for a in cluster.listed_agents())
                         == 2, "both nodes idle again")

        # The pool now has two idle nodes and room for one more: a job of three nodes asks for one.
        job = cluster.cli("launch", "--detach", "--slots", "24", "--distribution", "mwms", "--", sys.executable,
                          "-c", "pass")
        assert job.returncode == 0, job.stderr
        job_id = job.stdout.strip()
        wait_for("one placeholder, the scheduler finding no node for it (the idle ones are not its)",
                 lambda: len(found := _pods(admin, True)) == 1 and _unschedulable(found[0]), timeout=60)
        grow("autoscaled-2")
        wait_for("the gang of three bound", lambda: len(found := _pods(admin, False)) == 3 and
                 all(p.spec.nodeName for p in found), timeout=120)
        assert cluster.cli("cancel", job_id).returncode == 0
        wait_for("the canceled job's pods deleted", lambda: not _pods(admin, False) and not _pods(admin, True),
                 timeout=60)
        cluster.close()
        cluster = None
        assert (tmp_path / "coordinator.log").read_text().count("found their nodes") <= 3  # no bind-delete loop
    finally:
        if cluster is not None:
            cluster.close()
        remove_rights(admin, objects)
        for name in added:
            admin.delete(Node, name)
