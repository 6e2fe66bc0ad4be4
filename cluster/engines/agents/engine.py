"""The agents engine (the package's docstring says what it is): its AgentService, their liveness (beacons where
they reach the coordinator, heartbeat intervals from the budget) and the long poll on the coordinator's
server; silent agents are found lost on each tick."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cluster.coordinator.engine import EngineBase, EngineHost, EventLock, Front
from tfdist.errors import InternalError

if TYPE_CHECKING:  # imported by serve(): a coordinator with another engine never loads them
    from cluster.engines.agents.beacons import BeaconService
    from cluster.engines.agents.liveness import Liveness
    from cluster.engines.agents.long_poll import LongPoll

SWITCH_INTERVAL = 0.0005  # seconds a thread keeps the GIL before handing it over (Python's default: 0.005)


class AgentsEngine(EngineBase):
    name = "agents"

    def __init__(self, beacons: bool = True) -> None:
        """`beacons`: serve UDP liveness beacons (False: its agents heartbeat, as a Kubernetes pod's do)."""
        self.serves_beacons = beacons
        self.host: EngineHost | None = None
        self.beacons: BeaconService | None = None
        self.liveness: Liveness | None = None
        self.long_poll: LongPoll | None = None

    def event_lock(self) -> EventLock:
        """Users' actions before its agents' heartbeats (user_first.py)."""
        from cluster.engines.agents.user_first import UserFirstLock

        return UserFirstLock()

    def serve(self, front: Front) -> None:
        """The AgentService on the coordinator's server, its long poll, and liveness beacons on its port
        number (UDP)."""
        from cluster.engines.agents.beacons import BeaconService
        from cluster.engines.agents.liveness import Liveness
        from cluster.engines.agents.long_poll import LongPoll
        from cluster.engines.agents.service import AgentServicer, add_to_server

        if self.liveness is not None:
            raise InternalError("the agents engine serves one coordinator, once")
        # Hundreds of heartbeat threads share the GIL with a submit: hand it over sooner than Python's
        # default 5 ms, or each of a submit's GIL re-acquisitions waits behind them (this process's
        # interpreter: the agents engine's coordinator is a daemon of its own).
        sys.setswitchinterval(SWITCH_INTERVAL)
        host = front.host
        self.liveness, self.long_poll = Liveness(host), LongPoll(host)
        servicer = AgentServicer(front, self.liveness, self.long_poll)
        if self.serves_beacons:
            self.beacons = servicer.beacons = BeaconService(
                front.address, front.port, servicer.beacon_seen, host.work_version,
                secret=front.authority.derived_key("liveness beacons"), known=lambda name: host.node(name) is not None)
            host.on_work_changed(self.beacons.poke)
        add_to_server(servicer, front.server)

    def attach(self, host: EngineHost) -> None:
        """Nodes join when their agents register; the beacons start listening."""
        self.host = host
        if self.beacons is not None:
            self.beacons.start()
        if self.liveness is not None:
            self.liveness.update()  # the nodes the coordinator knows from before its restart

    def tick(self, now: float) -> None:
        if self.host is None:
            return
        lost = self.host.check_silent(now)
        if lost and self.liveness is not None:
            for name in lost:
                self.liveness.gone(name)
            self.liveness.update()

    def close(self, timeout: float) -> None:
        """Held long polls answer and the beacons stop; agents and their workers outlive the coordinator."""
        if self.long_poll is not None:
            self.long_poll.close()
        if self.beacons is not None:
            self.beacons.stop()
