"""The agents engine: `tfdist agent` on each node registers with the coordinator and heartbeats; its work
(lease and check ports, probe peers, start and stop runs) travels with the heartbeat's answer, woken by pokes
or the long poll, and its exits, output and metrics come back over the AgentService RPCs. A Slurm allocation
runs the same agents through srun.

    nodes.py         the agents' events on the job side: register, heartbeat, silence (AgentNodes)
    reconcile.py     what a node's report or silence means (pure); its heartbeat interval
    work.py          what a node must do now, from the durable state (pure)
    port_checks.py   what a port check's or a peer probe's answer means (pure); handshake.py applies it
    liveness.py      heartbeats or beacons: which proves each agent alive, and how often it heartbeats
    beacons.py       the UDP beacons and the pokes that wake an agent when its work changed
    service.py       the AgentService gRPC servicer; certificates.py signs agents' /metrics certificates
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cluster.coordinator.engine import EngineHost, EngineOptions, Front
from cluster.engines.agents.nodes import AgentNodes

if TYPE_CHECKING:  # imported by serve(): the local engine speaks the nodes' protocol without the network's parts
    from cluster.engines.agents.beacons import BeaconService


class AgentsEngine:
    name = "agents"

    def __init__(self) -> None:
        self.nodes: AgentNodes | None = None
        self.beacons: BeaconService | None = None

    def _nodes(self, host: EngineHost) -> AgentNodes:
        if self.nodes is None:
            self.nodes = AgentNodes(host, time.time())
        return self.nodes

    def serve(self, front: Front) -> None:
        """The AgentService on the coordinator's server, and liveness beacons on its port number (UDP)."""
        from cluster.engines.agents.beacons import BeaconService
        from cluster.engines.agents.service import AgentServicer, add_to_server

        nodes = self._nodes(front.host)
        self.beacons = BeaconService(front.address, front.port, nodes.liveness.seen, front.host.agent_board.version,
                                     secret=front.authority.derived_key("liveness beacons"),
                                     known=front.host.agents.__contains__)
        front.host.on_work_changed(self.beacons.poke)
        add_to_server(AgentServicer(front.host, nodes, front.gate, beacons=self.beacons), front.server)

    def attach(self, host: EngineHost) -> None:
        """Nodes join when their agents register; the beacons start listening."""
        self._nodes(host)
        if self.beacons is not None:
            self.beacons.start()

    def tick(self, now: float) -> None:
        if self.nodes is not None:
            self.nodes.check_lost(now)

    def close(self, timeout: float) -> None:
        """The beacons stop; agents and their workers outlive the coordinator."""
        if self.beacons is not None:
            self.beacons.stop()


def create(options: EngineOptions) -> AgentsEngine:
    return AgentsEngine()
