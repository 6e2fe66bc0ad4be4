"""The agents engine: `tfdist agent` on each node registers with the coordinator and heartbeats; its work
(lease and check ports, probe peers, start and stop runs) travels with the heartbeat's answer, woken by pokes
or the long poll, and its exits, output and metrics come back over the AgentService RPCs
(cluster/coordinator/agent_service.py). A Slurm allocation runs the same agents through srun.

The coordinator serves those RPCs whichever engine it runs, so attaching this engine starts nothing here:
the agents are remote processes that outlive a coordinator (their workers run on through its restart).
What still lives in cluster/coordinator/ for them (handshake.py, reconcile.py, leases.py, work.py, liveness.py,
beacons.py, user_first.py) moves into this package next (docs/roadmap.md)."""

from __future__ import annotations

from cluster.coordinator.engine import EngineHost, EngineOptions


class AgentsEngine:
    name = "agents"

    def attach(self, host: EngineHost) -> None:
        """Nothing to start: nodes join when their agents register."""

    def close(self, timeout: float) -> None:
        """Nothing to stop: agents and their workers outlive the coordinator."""


def create(options: EngineOptions) -> AgentsEngine:
    return AgentsEngine()
