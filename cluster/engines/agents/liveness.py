"""How each agent proves it is alive, and how often it heartbeats: with beacons (beacons.py) a heartbeat only
reports and fetches work, so it can come rarely; without them (`--no-beacons`, UDP blocked, a Kubernetes
pod's agent) heartbeats are the sign of life and come at least three times per `lost_after`. The budget they
share: cluster/shared/heartbeat_budget.py."""

from __future__ import annotations

import threading

from cluster.coordinator.engine import EngineHost
from cluster.shared.heartbeat_budget import heartbeat_interval


class Liveness:
    """The agents' heartbeat intervals, from how many nodes are alive (`host.node_count()`) and how many of
    them beacon. The job side keeps each node's last sign of life and whether its beacons prove it alive
    (host.node_seen, NodeView.beaconing: reset as it registers again, under the coordinator's lock)."""

    def __init__(self, host: EngineHost):
        self.host = host
        self._lock = threading.Lock()
        self.beaconing: set[str] = set()  # live agents whose beacons prove them alive (the budget's count)
        self.update()

    def interval(self, agent: str = "") -> float:
        """`agent`'s heartbeat interval: long when its beacons prove it alive, else short enough to."""
        node = self.host.node(agent)
        return self._beacon_interval if node is not None and node.beaconing else self._heartbeat_interval

    def update(self) -> None:
        """After an agent joined, was lost, or started beaconing: each kind's share of the heartbeat budget."""
        with self._lock:
            beaconing = len(self.beaconing)
            settings = self.host.settings
            self._heartbeat_interval = heartbeat_interval(self.host.node_count() - beaconing, settings)
            self._beacon_interval = heartbeat_interval(beaconing, settings, beacons=True)

    def gone(self, name: str) -> None:
        """`name` registers again (it beacons anew, once its beacons arrive) or was lost."""
        with self._lock:
            self.beaconing.discard(name)

    def seen(self, name: str, now: float) -> bool:
        """A beacon from `name`: it is alive now. False if it is not counted alive (lost, unknown): it must
        heartbeat, and so learn that it registers again."""
        if not self.host.node_seen(name, now, beacons=True):
            return False
        if name not in self.beaconing:  # its first beacon since it registered (or this coordinator started)
            with self._lock:
                self.beaconing.add(name)
            self.update()
        return True
