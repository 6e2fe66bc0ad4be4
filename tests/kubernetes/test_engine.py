"""The Kubernetes engine end to end on the real control plane: `tfdist coordinator --engine kubernetes` with
exactly the shipped RBAC (its ServiceAccount's token), two nodes of test kubelets that run each pod's command
as processes in network namespaces of their own (tests/kubernetes/kubelet.py), and the same `tfdist launch`
as on agents. A job's pods are created together, are each their node's agent for the run, train with real
TensorFlow, and leave nothing behind."""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid

import numpy as np
import pytest
from lightkube import KubeConfig, Client, codecs
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, Secret, Service, ServiceAccountToken

from cluster.engines.kubernetes.rbac import COORDINATOR, rbac_objects
from tests.conftest import REPO, LocalCluster, cli_env, processes_with_marker, wait_for
from tests.kubernetes.kubelet import PodNetwork, TestKubelet

pytestmark = pytest.mark.timeout(600)
NS = "tfdist-engine"
NODES = ("train-1", "train-2")
TRAIN = os.path.join(REPO, "tests", "integration", "workers", "train_worker.py")


class Kube:
    """The coordinator on the pods' network, its kubelets and what the tests read of the API."""

    def __init__(self, admin: Client, cluster: LocalCluster, kubelets: list[TestKubelet], marker: str):
        self.admin, self.cluster, self.kubelets, self.marker = admin, cluster, kubelets, marker

    def objects(self) -> list[str]:
        """What tfdist has in its namespace (pods, Services, Secrets, but the ServiceAccount's own)."""
        found = []
        for resource in (Pod, Service, Secret):
            found += [f"{resource.__name__}/{o.metadata.name}" for o in self.admin.list(resource, namespace=NS)
                      if (o.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "tfdist" and
                      (o.metadata.labels or {}).get("tfdist.io/job")]
        return found

    def launch(self, *args, timeout=300):
        return self.cluster.cli("launch", *args, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def kube(plane, admin, tmp_path_factory):
    root = tmp_path_factory.mktemp("k8s-engine")
    marker = uuid.uuid4().hex
    objects = rbac_objects(NS)
    for obj in objects:
        admin.create(codecs.from_dict(obj))
    network = PodNetwork(str(root), subnet="198.19.7")
    kubelets: list[TestKubelet] = []
    cluster = None
    try:
        host = network.join_host()
        token = admin.create(ServiceAccountToken(metadata=ObjectMeta(namespace=NS),
                                                 spec=TokenRequestSpec(audiences=[], expirationSeconds=7200)),
                             name=COORDINATOR, namespace=NS).status.token
        kubeconfig = plane.kubeconfig(COORDINATOR, token=token)
        env = cli_env(marker)
        kubelets = [TestKubelet(admin, name, {"cpu": "1", "memory": "8Gi", "pods": "10"}, str(root), network=network,
                                env=env).start() for name in NODES]
        port = _free_port()
        os.environ["TFDIST_POD_AGENT_COMMAND"] = f"{sys.executable} -m cluster.client.cli"
        try:
            cluster = LocalCluster(root, marker, listen=f"{host}:{port}", coordinator_args=[
                "--engine", "kubernetes", "--namespace", NS, "--kubeconfig", kubeconfig, "--image", "tfdist-test",
                "--node-selector", "type=test-kubelet", "--pod-start-timeout", "60"])
        finally:
            del os.environ["TFDIST_POD_AGENT_COMMAND"]
        cluster.wait_for(lambda: {a["name"] for a in cluster.json("agents")["agents"] if a["state"] == "ALIVE"}
                         >= set(NODES), "the cluster's nodes offered")
        yield Kube(admin, cluster, kubelets, marker)
    finally:
        if cluster is not None:
            cluster.close()
        for kubelet in kubelets:
            kubelet.stop()
        network.remove()
        for obj in reversed(objects):
            kind = obj["kind"]
            if kind in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
                resource = type(codecs.from_dict(obj))
                admin.delete(resource, obj["metadata"]["name"])
        wait_for(lambda: not processes_with_marker(marker), "every process of the module to end", timeout=30)


def test_a_two_node_mwms_job_trains_through_pods_with_identical_weights_and_leaves_nothing(kube, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = kube.launch("--slots", "2", "--distribution", "mwms", "--", sys.executable, TRAIN, "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + json.dumps(kube.cluster.logs())[-6000:]
    assert "waiting for ranks 0 (node train-1) and 1 (node train-2)" in result.stderr or \
        "placed on train-1:1, train-2:1" in kube.cluster.cli("job", result.stderr.split("job ")[1].split()[0]).stdout
    first, second = (np.load(out / f"rank{r}.npz") for r in (0, 1))
    assert sorted(first.files) == sorted(second.files) and first.files
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])
    context = json.loads((out / "rank0.json").read_text())
    assert context["size"] == 2, context
    wait_for(lambda: not kube.objects(), "the job's pods, Service and Secret to be deleted", timeout=60,
             logs=kube.objects)
