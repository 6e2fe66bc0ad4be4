"""The engine contract suite's scenario that any engine passes whatever runs its workers
(tests/engines/scenarios.py: `placed_then_canceled`), for the Kubernetes engine on the real control plane with a
KWOK node (KWOK runs no process in a pod, so the scenarios that read workers' output and exits run on the real
node: test_real_node.py). The node carries a label and a taint of its own: this engine
offers it alone (never another module's KWOK nodes), and no other module's pods or engines take it."""

from __future__ import annotations


import pytest
from lightkube.models.core_v1 import NodeSpec, NodeStatus, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from cluster.agent.ports import lease_range
from cluster.coordinator.server import CoordinatorServer
from cluster.coordinator.values import Settings
from cluster.engines import create_engine
from cluster.engines.kubernetes.options import KubernetesOptions
from tests.engines import scenarios
from tests.kubernetes.cluster_helpers import KWOK_LABEL, coordinator_rights, ready, remove_rights, wait_for

pytestmark = pytest.mark.timeout(300)
NS = "tfdist-contract"
NODE = "contract-0"
TAINT = "tfdist-test/contract"


def test_the_kubernetes_engine_passes_the_contract_s_scenario_on_a_kwok_node(plane, admin, tmp_path):
    admin.create(Node(metadata=ObjectMeta(name=NODE, labels={**KWOK_LABEL, "tfdist-test": "contract"}),
                      spec=NodeSpec(taints=[Taint(key=TAINT, effect="NoSchedule")]),
                      status=NodeStatus(allocatable={"cpu": "32", "memory": "256Gi", "pods": "110",
                                                     "nvidia.com/gpu": "8"})))
    kubeconfig, objects = coordinator_rights(plane, admin, NS)
    server = None
    try:
        wait_for(f"node {NODE} Ready", lambda: ready(admin.get(Node, NODE)))
        engine = create_engine("kubernetes", KubernetesOptions(namespace=NS, kubeconfig=kubeconfig, image="tfdist-test",
                                                                node_selector="tfdist-test=contract", tolerate=(TAINT,)))
        server = CoordinatorServer(str(tmp_path / "state"), "127.0.0.1:0", settings=Settings(port_range=lease_range()),
                                   engine=engine).start()
        core = server.core
        wait_for("its node offered with its 8 GPUs", lambda: [(a.name, a.record.slots) for a in core.agents.values()
                                                              if not a.lost] == [(NODE, 8)])

        def pods() -> list[str]:
            return [p.metadata.name for p in admin.list(Pod, namespace=NS) if (p.metadata.labels or {}).get("tfdist.io/job")]

        scenarios.placed_then_canceled(scenarios.InProcess(core, ("python",), slots=8, gone=lambda: not pods()))
    finally:
        if server is not None:
            server.stop(grace=0, engine_timeout=10)
        remove_rights(admin, objects)
        admin.delete(Node, NODE)
