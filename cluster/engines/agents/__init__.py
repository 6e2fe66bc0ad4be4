"""The agents engine: `tfdist agent` on each node registers with the coordinator and heartbeats over the node
protocol's AgentService (cluster/coordinator/nodes/: its work, the verbs lease and check ports, probe peers,
start and stop runs, travels with each heartbeat's answer); its exits, output and metrics come back over the
same service. A Slurm allocation runs the same agents through srun.

This engine's own (engine.py): UDP beacons (beacons.py), which prove an agent alive between rare heartbeats,
and the pokes that wake an agent when its work changed; the coordinator's lock, which lets users' actions go
before agents' reports (user_first.py); the interpreter's switch interval for its heartbeat threads. The
10,000-agent measurement (docs/benchmarks.md) needs all of them. It has no options: its agents say what
they have when they register."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cluster.engines import EngineKind

if TYPE_CHECKING:
    from cluster.engines.agents.engine import AgentsEngine


@dataclasses.dataclass(frozen=True)
class AgentsOptions:
    pass


def create(options: AgentsOptions) -> AgentsEngine:
    from cluster.engines.agents.engine import AgentsEngine

    return AgentsEngine()


KIND = EngineKind("agents", "`tfdist agent` on each node (Slurm runs agents through srun)",
                  AgentsOptions, create)
