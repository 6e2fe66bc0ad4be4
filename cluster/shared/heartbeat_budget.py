"""How often a node heartbeats: the coordinator's heartbeat budget, shared by the agents engine (each agent's
interval: cluster/engines/agents/liveness.py) and the job side (how long a restarted coordinator waits for
every known node to come back: cluster/coordinator/nodes/events.py)."""

from __future__ import annotations

from typing import Protocol


class Budget(Protocol):
    @property
    def heartbeat_interval(self) -> float:  # seconds: the shortest
        ...

    @property
    def max_heartbeats_per_s(self) -> float:  # all nodes together
        ...

    @property
    def lost_after(self) -> float:  # seconds of silence after which a node is lost
        ...


def heartbeat_interval(alive: int, budget: Budget, beacons: bool = False) -> float:
    """Agents heartbeat every `heartbeat_interval` seconds, stretched so that all `alive` of them together
    send at most `max_heartbeats_per_s` (a Python gRPC server spends about 0.65 ms of CPU per call). An
    agent whose heartbeats prove it alive never goes so long that fewer than three fit in `lost_after`;
    one whose beacons do (`beacons`) heartbeats only to report and fetch work, which pokes bring forward."""
    wanted = max(budget.heartbeat_interval, alive / budget.max_heartbeats_per_s)
    if beacons:
        return wanted
    return min(wanted, max(budget.heartbeat_interval, budget.lost_after / 3))
