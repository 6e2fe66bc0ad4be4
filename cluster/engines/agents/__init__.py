"""The agents engine: `tfdist agent` on each node registers with the coordinator and heartbeats over this
engine's AgentService (service.py; what a report means and the work it gets back, the verbs lease and check
ports, probe peers, start and stop runs, are the node protocol's: cluster/coordinator/nodes/); its exits,
output and metrics come back over the same service. A Slurm allocation runs the same agents through srun; the
Kubernetes engine runs this engine (without beacons) for its pods' agents.

This engine's own (engine.py): the agents' heartbeat intervals (liveness.py) and the WaitForWork long poll
(long_poll.py); UDP beacons (beacons.py), which prove an agent alive between rare heartbeats, and the pokes
that wake an agent when its work changed; /metrics certificates (certificates.py); the coordinator's lock,
which lets users' actions go before agents' reports (user_first.py); the interpreter's switch interval for
its heartbeat threads. The 10,000-agent measurement (docs/benchmarks.md) needs the beacons, pokes, lock and
switch interval. No flags: its agents say what they have when they register (`beacons` is for the
Kubernetes engine, whose pods send none)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cluster.engines import EngineKind

if TYPE_CHECKING:
    from cluster.engines.agents.engine import AgentsEngine


@dataclasses.dataclass(frozen=True)
class AgentsOptions:
    beacons: bool = True  # serve UDP liveness beacons (False: for agents that cannot send them, a pod's)


def create(options: AgentsOptions) -> AgentsEngine:
    from cluster.engines.agents.engine import AgentsEngine

    return AgentsEngine(beacons=options.beacons)


KIND = EngineKind("agents", "`tfdist agent` on each node (Slurm runs agents through srun)",
                  AgentsOptions, create)
