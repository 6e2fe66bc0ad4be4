"""The agents engine (the package's docstring says what it is): the node protocol's AgentService with its
beacons on the coordinator's server; silent agents are found lost on each tick."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.coordinator.engine import EngineBase, EngineHost, Front

if TYPE_CHECKING:  # imported by serve(): a coordinator with another engine never loads it
    from cluster.engines.agents.beacons import BeaconService


class AgentsEngine(EngineBase):
    name = "agents"

    def __init__(self) -> None:
        self.host: EngineHost | None = None
        self.beacons: BeaconService | None = None

    def serve(self, front: Front) -> None:
        """The node protocol's AgentService on the coordinator's server, and liveness beacons on its port
        number (UDP)."""
        from cluster.engines.agents.beacons import BeaconService

        host = front.host
        self.beacons = BeaconService(front.address, front.port, host.node_seen, host.work_version,
                                     secret=front.authority.derived_key("liveness beacons"),
                                     known=lambda name: host.node(name) is not None)
        host.on_work_changed(self.beacons.poke)
        front.serve_agents(self.beacons)

    def attach(self, host: EngineHost) -> None:
        """Nodes join when their agents register; the beacons start listening."""
        self.host = host
        if self.beacons is not None:
            self.beacons.start()

    def tick(self, now: float) -> None:
        if self.host is not None:
            self.host.check_silent(now)

    def close(self, timeout: float) -> None:
        """The beacons stop; agents and their workers outlive the coordinator."""
        if self.beacons is not None:
            self.beacons.stop()
