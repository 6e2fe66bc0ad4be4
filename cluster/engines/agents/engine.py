"""The agents engine (the package's docstring says what it is): the node protocol's AgentService with its
beacons on the coordinator's server; silent agents are found lost on each tick."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cluster.coordinator.engine import EngineBase, EngineHost, EventLock, Front

if TYPE_CHECKING:  # imported by serve(): a coordinator with another engine never loads it
    from cluster.engines.agents.beacons import BeaconService


SWITCH_INTERVAL = 0.0005  # seconds a thread keeps the GIL before handing it over (Python's default: 0.005)


class AgentsEngine(EngineBase):
    name = "agents"

    def __init__(self) -> None:
        self.host: EngineHost | None = None
        self.beacons: BeaconService | None = None

    def event_lock(self) -> EventLock:
        """Users' actions before its agents' heartbeats (user_first.py)."""
        from cluster.engines.agents.user_first import UserFirstLock

        return UserFirstLock()

    def serve(self, front: Front) -> None:
        """The node protocol's AgentService on the coordinator's server, and liveness beacons on its port
        number (UDP)."""
        from cluster.engines.agents.beacons import BeaconService

        # Hundreds of heartbeat threads share the GIL with a submit: hand it over sooner than Python's
        # default 5 ms, or each of a submit's GIL re-acquisitions waits behind them (this process's
        # interpreter: the agents engine's coordinator is a daemon of its own).
        sys.setswitchinterval(SWITCH_INTERVAL)
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
