"""The job side with its nodes, in one object, as `tfdist coordinator` runs them: unit tests drive
registrations, heartbeats and silence (the node protocol, cluster/coordinator/nodes/events.py) and the jobs'
events (cluster/coordinator/core.py) through it, in-process, on a real store."""

from __future__ import annotations

from cluster.coordinator.core import CoordinatorCore
from cluster.coordinator.values import Settings
from cluster.engines.agents.user_first import UserFirstLock


class AgentCore(CoordinatorCore):
    def __init__(self, store, settings: Settings = Settings(), now: float = 0.0):
        super().__init__(store, settings, now, lock=UserFirstLock())  # the agents engine's (Engine.event_lock)
        self.handshake = self.nodes.handshake

    def register(self, record, running, leased, now, watched: bool = True) -> None:
        self.nodes.register(record, running, leased, now, watched)

    def heartbeat(self, report, now):
        return self.nodes.heartbeat(report, now)

    def check_agents(self, now: float) -> None:
        """The coordinator's watchdog round: the agents engine's watch, then the jobs' deadlines."""
        self.nodes.check_lost(now)
        self.check_deadlines(now)


def AgentsServer(*args, **kwargs):
    """A CoordinatorServer with the agents engine, as `tfdist coordinator` starts it (its agents register and
    heartbeat over gRPC; `server.core.nodes` takes them in-process)."""
    from cluster.coordinator.server import CoordinatorServer
    from cluster.engines import create_engine

    return CoordinatorServer(*args, engine=create_engine("agents"), **kwargs)
