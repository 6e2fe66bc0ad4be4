"""How each agent proves it is alive, and how often it heartbeats: with beacons (cluster/engines/agents/
beacons.py) a heartbeat only reports and fetches work, so it can come rarely; without them (`--no-beacons`,
UDP blocked) heartbeats are the sign of life and come at least three times per `lost_after`."""

from __future__ import annotations

from typing import Callable, Mapping

from cluster.coordinator.nodes import reconcile
from cluster.coordinator.engine import EventLock
from cluster.coordinator.values import AgentLive, Settings


class Liveness:
    """`agents`: the core's live view (read, and `last_heartbeat`/`beaconing` written); `live_count()`: how
    many agents are alive; `lock`: the core's (taken only when an agent starts or stops beaconing)."""

    def __init__(self, agents: Mapping[str, AgentLive], live_count: Callable[[], int], settings: Settings,
                 lock: EventLock):
        self.agents, self.live_count, self.settings, self.lock = agents, live_count, settings, lock
        self.beaconing: set[str] = set()  # live agents whose beacons prove them alive
        self.update()

    def interval(self, agent: str = "") -> float:
        """`agent`'s heartbeat interval: long when its beacons prove it alive, else short enough to."""
        live = self.agents.get(agent)
        return self._beacon_interval if live is not None and live.beaconing else self._heartbeat_interval

    def update(self) -> None:
        """After an agent joined, was lost, or started beaconing: each kind's share of the heartbeat budget."""
        beaconing = len(self.beaconing)
        self._heartbeat_interval = reconcile.heartbeat_interval(self.live_count() - beaconing, self.settings)
        self._beacon_interval = reconcile.heartbeat_interval(beaconing, self.settings, beacons=True)

    def gone(self, name: str) -> None:
        """Under the lock: `name` registered again (it beacons anew) or was lost."""
        self.beaconing.discard(name)
        self.update()

    def seen(self, name: str, now: float) -> bool:
        """A beacon from `name`: it is alive now. False if it is not counted alive (lost, unknown): it must
        heartbeat, and so learn that it registers again. No lock: an attribute write, as an idle heartbeat."""
        agent = self.agents.get(name)
        if agent is None or agent.lost:
            return False
        agent.last_heartbeat = max(agent.last_heartbeat, now)
        if not agent.beaconing:  # its first beacon (since it registered, or since this coordinator started)
            with self.lock:
                if not agent.lost and self.agents.get(name) is agent:
                    agent.beaconing = True
                    self.beaconing.add(name)
                    self.update()
        return True
